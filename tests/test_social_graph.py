"""Stage 01: queries over a hand-made community, each validator and repair, and generation
with a scripted generator (plus, marked slow, the real embedded model through the runner)."""

import datetime as dt
import json
import random

import pytest

from pbench import config, llm, social_graph as sg
from pbench.schema import AttributeValue, Community, Group, Membership, Person, Relationship
from tests.conftest import FakeBackend, minimal_params

D = dt.date
START, END = D(2024, 1, 1), D(2024, 12, 31)


def attrs(**timelines):
    """attrs(employer=[("A", "2024-01-01", "2024-06-30"), ("B", "2024-07-01", "2024-12-31")], age="40")"""
    out = []
    for name, spec in timelines.items():
        if isinstance(spec, str):
            spec = [(spec, str(START), str(END))]
        out += [AttributeValue(name=name, value=v, valid_from=D.fromisoformat(f), valid_to=D.fromisoformat(t))
                for v, f, t in spec]
    return out


def person(pid, name, **timelines):
    base = {"employer": "none", "location": "Leeds, UK", "occupation": "x", "education": "y", "age": "30"}
    base.update(timelines)
    return Person(id=pid, name=name, persona="p", origin="seed", attributes=attrs(**base))


@pytest.fixture
def community():
    """Ana and Ben work at Acme until Ben moves to Bolt on 1 July; Cy is Ana's brother;
    Ana and Dee are neighbours in Leeds; a book club that Dee joins in March."""
    people = [
        person("u1", "Ana Silva", employer="Acme"),
        person("u2", "Ben Okafor", employer=[("Acme", "2024-01-01", "2024-06-30"), ("Bolt", "2024-07-01", "2024-12-31")]),
        person("u3", "Cy Silva", location="York, UK"),
        person("u4", "Dee Park"),
    ]
    rels = [
        Relationship(id="r1", a="u1", b="u2", kind="colleague", permanent=False, start=D(2022, 5, 1), end=D(2024, 6, 30)),
        Relationship(id="r2", a="u1", b="u3", kind="family", permanent=True, start=D(1990, 1, 1)),
        Relationship(id="r3", a="u1", b="u4", kind="neighbour", permanent=False, start=D(2023, 1, 1), end=END),
        Relationship(id="r4", a="u2", b="u1", kind="friend", permanent=False, start=D(2024, 7, 1), end=END,
                     source="evolution"),
    ]
    groups = [Group(id="g1", name="Book club", purpose="books", basis="interest: novels", members=[
        Membership(person="u1", start=START, end=END),
        Membership(person="u4", start=D(2024, 3, 1), end=END),
    ])]
    return Community(period_start=START, period_end=END, people=people, relationships=rels, groups=groups)


def test_state_at_time_queries(community):
    v = sg.CommunityView(community)
    assert v.attributes_at("u2", D(2024, 6, 30))["employer"] == "Acme"
    assert v.attributes_at("u2", D(2024, 7, 1))["employer"] == "Bolt"
    assert {r.id for r in v.relationships_at("u1", D(2024, 3, 1))} == {"r1", "r2", "r3"}
    assert {r.id for r in v.relationships_at("u1", D(2024, 8, 1))} == {"r2", "r3", "r4"}
    assert [r.kind for r in v.relationships_between("u2", "u1", D(2024, 8, 1))] == ["friend"]
    assert v.contacts_at("u2", D(2024, 2, 1)) == {"u1"}
    assert v.members_at("g1", D(2024, 2, 1)) == ["u1"]
    assert v.members_at("g1", D(2024, 3, 1)) == ["u1", "u4"]
    assert [g.id for g in v.groups_at("u4", D(2024, 12, 31))] == ["g1"]
    assert v.graph_at(D(2024, 2, 1)).number_of_edges() == 3


def test_the_hand_made_community_is_valid(community):
    assert {k: v for k, v in sg.check(community).items() if v} == {}


def _broken(community, **update):
    return community.model_copy(update=update)


@pytest.mark.parametrize("fault, expected", [
    ("end_before_start", "dates"),
    ("overlap", "attribute_timeline"),
    ("permanent_friend", "permanence"),
    ("colleague_after_job_change", "employer"),
    ("neighbours_apart", "location"),
    ("ghost_member", "groups"),
    ("lonely_group", "groups"),
    ("island", "reachable"),
    ("self_loop", "endpoints"),
    ("same_name", "names"),
])
def test_each_check_catches_its_fault_and_repair_fixes_it(community, fault, expected):
    rels = list(community.relationships)
    people = list(community.people)
    groups = list(community.groups)
    if fault == "end_before_start":
        rels[0] = rels[0].model_copy(update={"start": D(2024, 5, 1), "end": D(2024, 2, 1)})
    elif fault == "overlap":
        extra = AttributeValue(name="location", value="Hull, UK", valid_from=D(2024, 6, 1), valid_to=END)
        people[3] = people[3].model_copy(update={"attributes": people[3].attributes + [extra]})
    elif fault == "permanent_friend":
        rels[3] = rels[3].model_copy(update={"permanent": True, "end": None})
    elif fault == "colleague_after_job_change":
        rels[0] = rels[0].model_copy(update={"end": END})
    elif fault == "neighbours_apart":
        rels.append(Relationship(id="r9", a="u3", b="u4", kind="neighbour", permanent=False, start=START, end=END))
    elif fault == "ghost_member":
        groups[0] = groups[0].model_copy(update={"members": groups[0].members + [Membership(person="u99", start=START, end=END)]})
    elif fault == "lonely_group":
        groups.append(Group(id="g2", name="Solo", purpose="-", basis="interest: chess",
                            members=[Membership(person="u3", start=START, end=END)]))
    elif fault == "island":
        people.append(person("u5", "Eve Grey"))
    elif fault == "self_loop":
        rels.append(Relationship(id="r9", a="u2", b="u2", kind="friend", permanent=False, start=START, end=END))
    elif fault == "same_name":
        people[3] = people[3].model_copy(update={"name": "Ana Silva"})
    bad = _broken(community, relationships=rels, people=people, groups=groups)
    found = {k: v for k, v in sg.check(bad).items() if v}
    assert list(found) == [expected], found
    fixed, changes = sg.repair(bad, random.Random(0))
    assert {k: v for k, v in sg.check(fixed).items() if v} == {}
    assert expected in {c.check for c in changes}
    assert [c.check for c in fixed.changes] == [c.check for c in changes]


def test_repair_ends_a_work_bond_at_the_job_change(community):
    rels = [r.model_copy(update={"end": END}) if r.id == "r1" else r for r in community.relationships if r.id != "r4"]
    fixed, _ = sg.repair(_broken(community, relationships=rels), random.Random(0))
    v = sg.CommunityView(fixed)
    r1 = next(r for r in fixed.relationships if r.id == "r1")
    assert r1.end == D(2024, 6, 30)  # Ben left Acme
    assert r1.start == D(2022, 5, 1)  # before the period: kept as proposed
    assert not [r for r in v.relationships_between("u1", "u2", D(2024, 8, 1)) if r.kind == "colleague"]


def test_build_person_dates_a_life_event():
    draft = sg.ProfileDraft(
        name="Ana Silva", age=30, gender="f", occupation="nurse", employer="Acme", location="Leeds", education="BSc",
        interests=["running", " "], beliefs="b", texting_style="t", blogging_style="b", shopping_preferences="s",
        life_event=sg.LifeEventDraft(kind="new_job", month=4, new_occupation="manager", new_employer="Bolt",
                                     new_location="", new_education=""),
    )
    changes = []
    p = sg.build_person("u1", draft, "persona", "seed", START, END, changes)
    v = sg.CommunityView(Community(period_start=START, period_end=END, people=[p], relationships=[], groups=[]))
    assert v.attributes_at("u1", D(2024, 3, 31))["employer"] == "Acme"
    assert v.attributes_at("u1", D(2024, 4, 1)) | {} == v.attributes_at("u1", D(2024, 4, 1))
    assert v.attributes_at("u1", D(2024, 4, 1))["employer"] == "Bolt"
    assert v.attributes_at("u1", D(2024, 4, 1))["occupation"] == "manager"
    assert v.attributes_at("u1", START)["interests"] == "running"
    assert changes == []


def test_personas_shipped_and_bad_files_named(tmp_path):
    personas = sg.load_personas()
    assert len(personas) >= 80 and len({p["persona"] for p in personas}) == len(personas)
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"persona": "a teacher"}\n{"name": "x"}\n')
    with pytest.raises(ValueError, match=r"p\.jsonl:2: no 'persona' text"):
        sg.load_personas(bad)


# --------------------------------------------------------------------------- generation, scripted


def _profile(name, employer="Acme", location="Leeds, UK", event="none"):
    return {"name": name, "age": 33, "gender": "f", "occupation": "clerk", "employer": employer, "location": location,
            "education": "BA", "interests": ["chess"], "beliefs": "b", "texting_style": "t", "blogging_style": "b",
            "shopping_preferences": "s", "life_event": {"kind": event, "month": 6, "new_occupation": "",
                                                        "new_employer": "Bolt" if event == "new_job" else "",
                                                        "new_location": "", "new_education": ""}}


def scripted_generator(unparsable_groups=False):
    names = iter(["Ana Silva", "Ben Okafor", "Cy Silva", "Dee Park", "Eve Grey", "Fay Lund", "Gus Moe"])
    profiles = iter(["Acme", "Acme", "Zeta"])  # u01, u02, u03 (requests start in this order)

    def reply(messages, settings):
        text = messages[-1]["content"]
        if "Decide how they know each other" in text:
            return json.dumps({"relationships": [
                {"a": "u01", "b": "u02", "kind": "colleague", "since_year": 2024, "why": "same office"},
                {"a": "u02", "b": "u03", "kind": "manager", "since_year": 2021, "why": "boss"},  # u03 is at Zeta
                {"a": "u01", "b": "u77", "kind": "friend", "since_year": 2020, "why": "ghost"},
            ]})
        if "group chat" in text:
            if unparsable_groups:
                return "Here are some groups!"
            return json.dumps({"groups": [{"name": "Acme crew", "purpose": "work", "basis": "employer",
                                           "basis_value": "Acme", "member_ids": ["u01", "u02", "u99"]}]})
        if "needs one new person" in text:
            return json.dumps({"persona": "A clerk.", "profile": _profile(next(names), employer="Elsewhere Ltd"),
                               "since_year": 2019, "why": "met at work"})
        employer = next(profiles)
        return json.dumps(_profile(next(names), employer=employer, event="new_job" if employer == "Acme" else "none"))

    return FakeBackend(reply)


def _cfg(**over):
    return config.parse(minimal_params(**{"community.size": 5, "community.initial_seed": 3, "community.groups": 2,
                                          **over}))


def _generate(cfg, backend, tmp_path):
    roles = llm.Roles(cfg, tmp_path, backend_factory=lambda spec: backend)
    model = roles.role("generator")
    model.backoff_s = 0.0
    return sg.build(cfg, model)


def test_generation_with_a_scripted_generator_passes_validation(tmp_path):
    backend = scripted_generator()
    community, report = _generate(_cfg(), backend, tmp_path)
    assert report["people"] == 5 and all(v == 0 for v in report["remaining_after_repair"].values())
    assert report["found_in_proposal"]["endpoints"] == 1  # the ghost u77
    v = sg.CommunityView(community)
    # The seeds all move from Acme to Bolt in June 2023: moving together, they stay colleagues.
    r1 = next(r for r in community.relationships if r.id == "r1")
    assert r1.kind == "colleague" and r1.end == D(2024, 12, 31)
    # Seeds describe how they know each other at the start, whatever year they name.
    assert r1.start == D(2023, 1, 1)
    assert v.attributes_at("u01", D(2023, 6, 1))["employer"] == "Bolt"
    # Ben "manages" Cy, who works at Zeta: no shared employer, so they are only acquaintances.
    assert next(r for r in community.relationships if r.id == "r2").kind == "acquaintance"
    assert report["found_in_proposal"]["employer"] == 1
    assert len(community.groups) == 2 and all(len(g.members) >= 2 for g in community.groups)
    assert "u99" not in {m.person for g in community.groups for m in g.members}
    assert len(backend.calls) == 3 + 1 + 2 + 1  # profiles, seed relationships, expansions, groups
    sg.save(community, report, tmp_path)
    again = sg.load(tmp_path)
    assert again.c == community
    assert (tmp_path / "community.graphml").read_text().startswith("<graphml")


def test_unparsable_groups_reply_is_recorded_and_groups_formed_by_code(tmp_path):
    community, report = _generate(_cfg(), scripted_generator(unparsable_groups=True), tmp_path)
    assert any(c.check == "unparsed" and c.record == "groups" for c in community.changes)
    assert len(community.groups) == 2
    assert report["remaining_after_repair"]["groups"] == 0


def test_same_seed_same_community(tmp_path):
    a, _ = _generate(_cfg(), scripted_generator(), tmp_path / "a")
    b, _ = _generate(_cfg(), scripted_generator(), tmp_path / "b")
    assert a == b
