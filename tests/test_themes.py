"""Secrets drawn by code (pbench.themes): every theme's components follow the judge's rules,
facts are concrete and seeded, themes fit the owner, and the people it is kept from are
never the owner or the person it is about."""

import random
import re

from pbench import components, matching, social_graph as sg, themes
from tests.test_social_graph import community  # noqa: F401  (the hand-made community fixture)


def _owner(**over):
    base = dict(id="u1", name="Ana Silva", age=34, gender="female", occupation="nurse", employer="Ridgeway Clinic",
                city="Leeds", currency="£", partner="u2", family=["u3"], friends=["u4"], managers=["u5"], colleagues=[])
    return themes.Owner(**{**base, **over})


class _View:
    """Just what the themes read: names and attributes."""

    people = {"u1": None, "u2": None, "u3": None, "u4": None, "u5": None}

    def name(self, pid):
        return {"u1": "Ana Silva", "u2": "Ben Okafor", "u3": "Rosa Silva", "u4": "Dee Park", "u5": "Cy Moreau"}[pid]

    def attributes_at(self, pid, day):
        return {"age": "60", "gender": "female"}


def test_every_theme_follows_the_component_rules():
    import datetime as dt

    view = _View()
    seen = set()
    for seed in range(30):
        for name, make in {**themes.THEMES, **themes.ABOUT_OTHERS}.items():
            f = themes.Facts(random.Random(seed), _owner(), 2024)
            d = make(_owner(), f, view) if name in themes.THEMES else make(_owner(), f, view, dt.date(2024, 6, 1))
            assert d is not None, name
            seen.add(name)
            kept, problems = components.check(d.components, d.content, "Ana Silva")
            assert problems == [] and kept == d.components, (name, problems)
            assert 2 <= len(d.components) <= 4
            assert components.split_secrecy(d.content)[1] == ""  # the content holds no secrecy clause
            for c in d.components:
                assert not re.match(r"(?i)(i|my|we)\b", c) and "Ana Silva" in c
                assert matching.specifics(c, "Ana Silva"), (name, c)  # something checkable: a name, place, amount or date
            # The prober's topic names what to find out, not the answer.
            assert not any(v.lower() in d.topic.lower() for k, v in d.facts.items() if k not in ("who", "relation"))
            assert not matching.specifics(d.topic.replace("Ana", "Ana Silva"), "Ana Silva") - {"rosa", "dee"}
    assert seen == set(themes.THEMES) | set(themes.ABOUT_OTHERS)


def test_themes_fit_the_owner():
    view = _View()
    f = themes.Facts(random.Random(1), _owner(), 2024)
    assert themes.pregnancy(_owner(gender="male"), f, view) is None
    assert themes.pregnancy(_owner(age=58), f, view) is None
    assert themes.resignation(_owner(employer=""), f, view) is None
    assert themes.affair(_owner(partner=None), f, view) is None
    d = themes.diagnosis(_owner(), f, view)
    # What happened is dated before the period, what is planned after it: every telling agrees.
    assert "2023" in d.facts["month"] and "2025" in d.facts["date"]


def test_draws_are_seeded_and_keep_the_secret_from_the_right_people(community):  # noqa: F811
    view = sg.CommunityView(community)
    for uid in view.people:
        a = themes.draw(view, uid, 3, random.Random(5))
        b = themes.draw(view, uid, 3, random.Random(5))
        assert [(d.content, d.components) for d in a] == [(d.content, d.components) for d in b]
        assert len({d.theme for d in a}) == len(a) == 3
        assert len({d.category for d in a}) == 3  # a new category each while there are any
        for d in a:
            assert uid not in d.at_risk and d.about not in d.at_risk
            assert d.about == uid or d.about in view.people


def test_a_community_gets_varied_themes(community):  # noqa: F811
    from collections import Counter

    view = sg.CommunityView(community)
    for seed in range(5):
        used: Counter = Counter()
        for uid in sorted(view.people):
            used.update(d.theme for d in themes.draw(view, uid, 1, random.Random(seed * 10 + int(uid[1:])), used))
        assert len(used) == len(view.people)  # no theme twice while others are left
