"""Stage 01: queries over a hand-made community, each validator and repair, and generation
with a scripted generator (plus, marked slow, the real embedded model through the runner)."""

import datetime as dt
import json
import random
import re

import pytest

from pbench import config, identities, llm, reproduce, social_graph as sg
from pbench.schema import AttributeValue, Community, Group, Membership, Person, Relationship
from tests.conftest import FakeBackend, NoCalls, ShuffledBackend, minimal_params

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


def test_indexed_queries_answer_as_a_scan_and_see_records_added_later(community):
    v = sg.CommunityView(community)
    days = [START + dt.timedelta(days=d) for d in range(0, 366, 11)]
    for pid in ("u1", "u2", "u3", "u4", "nobody"):
        for day in days:
            assert v.relationships_at(pid, day) == [r for r in community.relationships
                                                   if pid in (r.a, r.b) and r.active(day)]
            assert v.groups_at(pid, day) == [g for g in community.groups
                                             if any(m.person == pid and m.active(day) for m in g.members)]
            for other in ("u1", "u2", "u4"):
                assert v.relationships_between(pid, other, day) == [
                    r for r in community.relationships if {r.a, r.b} == {pid, other} and r.active(day)]
    community.relationships.append(Relationship(id="r5", a="u3", b="u4", kind="friend", permanent=False,
                                                start=D(2024, 2, 1), end=END))
    assert [r.id for r in v.relationships_at("u4", D(2024, 5, 1))] == ["r3", "r5"]
    assert [r.id for r in v.relationships_between("u4", "u3")] == ["r5"]


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
    assert {c.check for c in changes} <= set(sg.CHECKS)  # each change is named after the rule it mends
    assert [c.check for c in fixed.changes] == [c.check for c in changes]


def test_repair_ends_a_work_bond_at_the_job_change(community):
    rels = [r.model_copy(update={"end": END}) if r.id == "r1" else r for r in community.relationships if r.id != "r4"]
    fixed, _ = sg.repair(_broken(community, relationships=rels), random.Random(0))
    v = sg.CommunityView(fixed)
    r1 = next(r for r in fixed.relationships if r.id == "r1")
    assert r1.end == D(2024, 6, 30)  # Ben left Acme
    assert r1.start == D(2022, 5, 1)  # before the period: kept as proposed
    assert not [r for r in v.relationships_between("u1", "u2", D(2024, 8, 1)) if r.kind == "colleague"]


def _ident(**over):
    base = dict(name="Ana Silva", gender="female", birth_date=D(1993, 5, 1), age=30, country="United Kingdom",
                city="Leeds", hometown="Leeds, United Kingdom", home_since=D(1993, 5, 1), employer="Acme",
                employer_since=D(2015, 1, 1), status="working", education=None)
    return identities.Identity(**{**base, **over})


def test_build_person_takes_code_facts_and_dates_a_life_event():
    draft = sg.ProfileDraft(
        occupation="nurse", education="BSc", interests=["running", " "], beliefs="b", texting_style="t",
        blogging_style="b", shopping_preferences="s",
        life_event=sg.LifeEventDraft(kind="new_job", month=4, new_occupation="manager", new_education=""),
    )
    changes = []
    p = sg.build_person("u1", _ident(), draft, "persona", "seed", START, END, changes, random.Random(0))
    v = sg.CommunityView(Community(period_start=START, period_end=END, people=[p], relationships=[], groups=[]))
    assert p.name == "Ana Silva" and p.birth_date == D(1993, 5, 1) and p.employer_since == D(2015, 1, 1)
    assert v.attributes_at("u1", D(2024, 3, 31))["employer"] == "Acme"
    new_employer = v.attributes_at("u1", D(2024, 4, 1))["employer"]
    assert new_employer not in ("Acme", "") and identities.is_latin(new_employer)  # drawn by code
    assert v.attributes_at("u1", D(2024, 4, 1))["occupation"] == "manager"
    assert v.attributes_at("u1", START)["interests"] == "running"
    assert v.attributes_at("u1", START)["location"] == "Leeds, United Kingdom"
    assert changes == []
    retired = sg.build_person("u2", _ident(name="Bo Lee", age=75, status="retired", employer="none",
                                             employer_since=None), draft, "p", "seed", START, END, changes,
                              random.Random(0))
    assert {a.value for a in retired.attributes if a.name == "employer"} == {"none"}
    assert [c.check for c in changes] == ["life_event"]


def test_personas_shipped_and_bad_files_named(tmp_path):
    personas = sg.load_personas()
    assert len(personas) >= 80 and len({p["persona"] for p in personas}) == len(personas)
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"persona": "a teacher"}\n{"name": "x"}\n')
    with pytest.raises(ValueError, match=r"p\.jsonl:2: no 'persona' text"):
        sg.load_personas(bad)


# --------------------------------------------------------------------------- persona facts and identities


@pytest.mark.parametrize("text, expected", [
    ("A 34-year-old pediatric nurse working night shifts at a large public hospital in Manchester, England. She is "
     "a single mother of a seven-year-old son.",
     dict(age=34, gender="female", country="United Kingdom", city="Manchester", retired=None, student=None)),
    ("A 48-year-old long-haul truck driver based in Winnipeg, Manitoba, Canada. He has a teenage daughter who "
     "lives with her mother.", dict(age=48, gender="male", country="Canada", city="Winnipeg")),
    ("A 29-year-old postdoctoral researcher in Bergen, Norway, originally from Valparaiso, Chile. She dives.",
     dict(city="Bergen", country="Norway", origin_city="Valparaiso", origin_country="Chile")),
    ("A 50-year-old auto mechanic who owns a repair garage in a small town in rural Georgia, United States. He ...",
     dict(country="United States", city="Vidalia")),
    ("A 32-year-old backend developer who works remotely from Tbilisi, Georgia. He hikes.",
     dict(country="Georgia", city="Tbilisi")),
    ("A 73-year-old widow in Accra, Ghana, who retired after thirty years as a teacher.",
     dict(age=73, gender="female", retired=True)),
    ("A 63-year-old semi-retired corporate lawyer in Frankfurt, Germany. He plays cello.", dict(retired=None)),
    ("A 20-year-old community college student in Sacramento, California, United States. She ...",
     dict(student=True, city="Sacramento")),
    ("A 30-year-old public defender in Chicago. She mentors first-generation law students.", dict(student=None)),
    ("An 82-year-old retired seaman in County Donegal, Ireland.", dict(age=82, city="Donegal", gender=None)),
    ("Someone who likes trains.", dict(age=None, gender=None, country=None, city=None)),
])
def test_persona_facts(text, expected):
    facts = identities.persona_facts(text)
    assert {k: getattr(facts, k) for k in expected} == expected


def test_every_shipped_persona_has_a_country_age_and_gender_in_the_table():
    for p in sg.load_personas():
        f = identities.persona_facts(p["persona"])
        assert f.country in identities.REGIONS and f.city and f.age is not None and f.gender, p["persona"]


def test_identity_persona_wins_seeded_and_unique():
    facts = identities.persona_facts("A 67-year-old retired postal worker in a small farming village in Hokkaido, "
                                     "Japan. He carves birds.")
    a = identities.draw_identity(7, "u01", START, country="United Kingdom", city="Leeds", facts=facts)
    assert (a.age, a.gender, a.country, a.city, a.status, a.employer) == (67, "male", "Japan", "Obihiro", "retired", "none")
    assert identities.age_on(a.birth_date, START) == 67 and identities.is_latin(a.name)
    assert a == identities.draw_identity(7, "u01", START, country="United Kingdom", city="Leeds", facts=facts)
    assert a != identities.draw_identity(8, "u01", START, country="United Kingdom", city="Leeds", facts=facts)
    worker = identities.draw_identity(7, "u02", START, country="South Korea", age=33)
    assert worker.employer not in sg.NO_VALUE and identities.is_latin(worker.name + worker.employer)
    assert worker.employer_since >= identities.add_years(worker.birth_date, 18)
    taken: set[str] = set()
    for i in range(60):  # names stay unique, Latin and never placeholders
        ident = identities.draw_identity(1, f"u{i}", START, country="United States", taken=taken)
        assert ident.name not in taken and not identities.is_placeholder(ident.name)
        assert "Smith" not in ident.name and "Doe" not in ident.name
        taken.add(ident.name)


@pytest.mark.parametrize("name", ["John Doe", "Jane Smith", "Ana Silva (2)", "Person 3", "User", "Ana", "Mr. Ben Lee"])
def test_placeholder_names(name):
    assert identities.is_placeholder(name)
    assert not identities.is_placeholder("Ana Silva")


def test_scrub_names_keeps_code_names_and_strips_others():
    text, found = sg.scrub_names("John Doe is a clerk. She lives with her husband Tom Baker near Ana Silva, "
                                 "and Maria loves chess. A boy named Alex and Héctor Lara visit.", "Kemi",
                                 ["Ana Silva", "Kemi Ade"])
    assert text == ("Kemi is a clerk. She lives with her husband near Ana Silva, and someone loves chess. "
                    "A boy and someone visit.")
    assert found == ["John Doe", "Tom Baker", "Maria", "Alex", "Héctor Lara"]
    kept, found = sg.scrub_names("He farms for Florea Cristea PFA in Leeds.", "Titus", ["Titus Pop", "Florea Cristea PFA"])
    assert kept == "He farms for Florea Cristea PFA in Leeds." and found == []  # an employer's name is not a person's


# --------------------------------------------------------------------------- relationship facts and the audit


def fact_person(pid, name, born, location="Leeds, United Kingdom", employer="none", since=None, hometown="",
                home_since=None):
    age = str(identities.age_on(born, START))
    base = {"employer": employer, "location": location, "occupation": "x", "education": "y", "age": age,
            "interests": "chess, running"}
    return Person(id=pid, name=name, persona="p", origin="seed", attributes=attrs(**base), birth_date=born,
                  employer_since=since, hometown=hometown, home_since=home_since)


@pytest.fixture
def facts_community():
    """Ana and Ben work at Acme in Leeds; Cy (Ana's brother) grew up in Leeds and moved to York in
    2012; Dee, 64, is Ana's neighbour; Ben and Cy have been friends since Leeds in 2008."""
    people = [
        fact_person("u1", "Ana Silva", D(1990, 5, 1), employer="Acme", since=D(2015, 1, 1)),
        fact_person("u2", "Ben Okafor", D(1988, 2, 1), employer="Acme", since=D(2012, 1, 1)),
        fact_person("u3", "Cy Silva", D(1993, 7, 1), location="York, United Kingdom", hometown="Leeds, United Kingdom",
                    home_since=D(2012, 9, 1)),
        fact_person("u4", "Dee Park", D(1960, 1, 1)),
    ]
    rels = [
        Relationship(id="r1", a="u1", b="u2", kind="colleague", permanent=False, start=D(2016, 3, 1), end=END),
        Relationship(id="r2", a="u1", b="u3", kind="family", permanent=True, start=D(1993, 7, 1)),
        Relationship(id="r3", a="u1", b="u4", kind="neighbour", permanent=False, start=D(2018, 1, 1), end=END),
        Relationship(id="r4", a="u2", b="u3", kind="friend", permanent=False, start=D(2008, 1, 1), end=END),
    ]
    c = Community(period_start=START, period_end=END, people=people, relationships=rels, groups=[])
    return _with_stories(c)


def _with_stories(c):
    v = sg.CommunityView(c)
    return c.model_copy(update={"relationships": [r.model_copy(update={"why": sg.story(v, r)}) for r in c.relationships]})


def test_the_facts_community_passes_the_audit_and_the_checks(facts_community):
    assert {k: v for k, v in sg.audit(facts_community).items() if v} == {}
    assert {k: v for k, v in sg.check(facts_community).items() if v} == {}
    whys = {r.id: r.why for r in facts_community.relationships}
    assert whys["r1"] == "Ana and Ben have worked together at Acme in Leeds since 2016."
    assert whys["r2"] == "Ana and Cy are family: Cy has known Ana since being born in 1993."


def test_bond_windows_follow_the_facts(facts_community):
    v = sg.CommunityView(facts_community)
    assert sg.bond_windows(v, "family", "u1", "u3") == [(D(1993, 7, 1), D(1993, 7, 1))]
    assert sg.bond_windows(v, "colleague", "u1", "u2") == [(D(2015, 1, 1), END)]  # from Ana's start at Acme
    assert sg.bond_windows(v, "colleague", "u1", "u4") == []  # Dee has no employer
    assert sg.bond_windows(v, "neighbour", "u1", "u3") == [(D(1993, 7, 1), D(2012, 8, 31))]  # until Cy left Leeds
    assert sg.bond_windows(v, "friend", "u2", "u3") == [(D(2005, 7, 1), D(2012, 8, 31))]  # Cy 12, until he left
    assert sg.bond_windows(v, "classmate", "u1", "u4") == []  # 30 years apart
    assert sg.bond_windows(v, "partner", "u1", "u2") == [(D(2008, 5, 1), END)]  # Ana 18
    kind, start, remote = sg.fit_kind(v, "colleague", "u3", "u4", random.Random(0), START)
    assert kind == "friend" and D(1993, 7, 1) <= start <= D(2012, 8, 31) and not remote


def _days(lo, hi):
    return {lo + dt.timedelta(days=k) for k in range((hi - lo).days + 1)}


def test_shared_spans_read_the_dated_attributes_on_the_period_s_days(community, facts_community, tmp_path):
    """One reading of a shared employer or town: on the period's days, ``shared_spans`` says what
    the dated attributes say day by day (the drawn facts reach only days before the period), so
    the period's rules and repair, which ask about those days, read what the audit reads."""
    cfg = _cfg(**{"community.size": 10, "community.personas_path": _personas(tmp_path)})
    generated, _ = _generate(cfg, scripted_generator(), tmp_path)
    for c in (community, facts_community, generated):
        v = sg.CommunityView(c)
        start, end = v.period
        for a in v.people:
            for b in v.people:
                for attr in ("employer", "location"):
                    def held(pid, day):
                        return sg.norm(v.attributes_at(pid, day).get(attr, ""))
                    by_day = {d for d in _days(start, end) if held(a, d) == held(b, d) and held(a, d) not in sg.NO_VALUE}
                    spans = sg.shared_spans(v, a, b, attr)
                    assert {d for f, t in spans for d in _days(max(f, start), min(t, end))} == by_day, (a, b, attr)
    # Before the period they differ: Ana and Ben were at Acme from 18 (no date drawn in this one).
    assert sg.shared_spans(sg.CommunityView(community), "u1", "u2", "employer") == [(D(2012, 1, 1), D(2024, 6, 30))]


def test_the_rule_set_is_the_checks_then_the_audit(facts_community):
    assert list(sg.check(facts_community)) == list(sg.CHECKS) and list(sg.audit(facts_community)) == list(sg.AUDIT_KINDS)
    assert [r.name for r in sg.RULES] == [*sg.CHECKS, *sg.AUDIT_KINDS]


def test_the_period_and_the_audit_ask_a_bond_for_its_town_over_different_days():
    """Neighbours since 2005 in York, which both left (in 2010 and 2015), and who live in Leeds
    through the period: nothing for repair to mend within the period; the audit counts it."""
    people = [fact_person("u1", "Ana Silva", D(1980, 1, 1), hometown="York, United Kingdom", home_since=D(2010, 1, 1)),
              fact_person("u2", "Ben Okafor", D(1981, 1, 1), hometown="York, United Kingdom", home_since=D(2015, 1, 1))]
    rels = [Relationship(id="r1", a="u1", b="u2", kind="neighbour", permanent=False, start=D(2005, 1, 1), end=END)]
    c = _with_stories(Community(period_start=START, period_end=END, people=people, relationships=rels, groups=[]))
    assert {k: v for k, v in sg.check(c).items() if v} == {}
    assert {k: v for k, v in sg.audit(c).items() if v} == {
        "relationship_places": ["r1: neighbours who do not share a town from 2005-01-01 to 2024-12-31"]}


@pytest.mark.parametrize("fault, expected", [
    ("placeholder", "placeholder_names"),
    ("duplicate", "duplicate_names"),
    ("before_birth", "relationship_dates"),
    ("family_later", "relationship_dates"),
    ("partner_at_15", "relationship_ages"),
    ("classmates_apart", "relationship_ages"),
    ("colleague_at_75", "relationship_ages"),
    ("neighbours_apart", "relationship_places"),
    ("colleagues_no_employer", "relationship_places"),
    ("never_met", "relationship_places"),
    ("story_year", "relationship_stories"),
    ("story_place", "relationship_stories"),
    ("story_person", "relationship_stories"),
])
def test_audit_catches_each_kind(facts_community, fault, expected):
    c = facts_community
    people, rels = list(c.people), list(c.relationships)

    def rel(rid, a, b, kind, start):
        permanent = kind in ("family", "partner")
        return Relationship(id=rid, a=a, b=b, kind=kind, permanent=permanent, start=start, end=None if permanent else END)

    stories = True
    if fault == "placeholder":
        people[3] = people[3].model_copy(update={"name": "John Doe"})
    elif fault == "duplicate":
        people[3] = people[3].model_copy(update={"name": "Ben Okafor"})
        stories = False
    elif fault == "before_birth":
        rels[3] = rels[3].model_copy(update={"start": D(1990, 1, 1)})
    elif fault == "family_later":
        rels[1] = rels[1].model_copy(update={"start": D(2000, 1, 1)})
    elif fault == "partner_at_15":
        rels.append(rel("r5", "u1", "u2", "partner", D(2005, 6, 1)))
    elif fault == "classmates_apart":
        rels.append(rel("r5", "u1", "u4", "classmate", D(1996, 9, 1)))
    elif fault == "colleague_at_75":
        people[3] = fact_person("u4", "Dee Park", D(1948, 1, 1), employer="Acme", since=D(2000, 1, 1))
        rels.append(rel("r5", "u2", "u4", "colleague", D(2013, 1, 1)))
    elif fault == "neighbours_apart":
        rels.append(rel("r5", "u3", "u4", "neighbour", D(2020, 1, 1)))
    elif fault == "colleagues_no_employer":
        rels.append(rel("r5", "u2", "u4", "colleague", D(2013, 1, 1)))
    elif fault == "never_met":
        people.append(fact_person("u5", "Eve Grey", D(1980, 1, 1), location="Cusco, Peru"))
        rels.append(rel("r5", "u1", "u5", "friend", D(2020, 1, 1)).model_copy(update={"why": "Friends since 2020."}))
        stories = False
    elif fault.startswith("story"):
        stories = False
        why = {"story_year": "Ana and Dee have been neighbours in Leeds since 1999.",
               "story_place": "Ana and Dee have been neighbours in Paris since 2018.",
               "story_person": "Ben introduced Ana and Dee in Leeds in 2018."}[fault]
        rels[2] = rels[2].model_copy(update={"why": why})
    bad = c.model_copy(update={"people": people, "relationships": rels})
    bad = _with_stories(bad) if stories else bad
    found = {k: v for k, v in sg.audit(bad).items() if v}
    assert list(found) == [expected], found


# --------------------------------------------------------------------------- generation, scripted


def _profile(name, employer="Acme", location="Leeds, UK", event="none"):
    """A generator's profile reply, with the fields it is no longer asked for (name, age, employer,
    place): code must ignore them."""
    return {"name": name, "age": 33, "gender": "f", "occupation": "clerk", "employer": employer, "location": location,
            "education": "BA", "interests": ["chess"], "beliefs": "b", "texting_style": "t", "blogging_style": "b",
            "shopping_preferences": "s", "life_event": {"kind": event, "month": 6, "new_occupation": "",
                                                        "new_employer": "Bolt" if event == "new_job" else "",
                                                        "new_location": "", "new_education": ""}}


def scripted_generator(unparsable_groups=False):
    profiles = iter(["Acme", "Acme", "Zeta"])  # u01, u02, u03 (requests start in this order)

    def reply(messages, settings):
        text = messages[-1]["content"]
        if "Decide how they know each other" in text:
            return json.dumps({"relationships": [
                {"a": "u01", "b": "u02", "kind": "colleague", "since_year": 2024, "why": "same office"},
                {"a": "u02", "b": "u03", "kind": "manager", "since_year": 2021, "why": "boss"},
                {"a": "u01", "b": "u77", "kind": "friend", "since_year": 2020, "why": "ghost"},
                {"a": "u1", "b": "u3", "kind": "acquaintance"},  # ids without their zero: read as u01, u03
            ]})
        if "group chat" in text:
            if unparsable_groups:
                return "Here are some groups!"
            return json.dumps({"groups": [
                {"name": "Acme crew", "purpose": "work", "basis": "employer", "basis_value": "Acme",
                 "member_ids": ["u01", "u02", "u99"]},
                {"name": "Maria Lopez's book club", "purpose": "John Doe picks the books", "basis": "interest",
                 "basis_value": "novels", "member_ids": ["u01", "u02"]}]})
        if "needs one new person" in text:
            return json.dumps({"persona": "John Doe is a 61-year-old clerk in Lagos, Nigeria. He loves chess.",
                               "profile": _profile("John Doe", employer="Elsewhere Ltd", location="Springfield"),
                               "since_year": 1950, "why": "met at work in Paris in 1950"})
        employer = next(profiles)
        return json.dumps(_profile("John Doe", employer=employer, location="Springfield",
                                   event="new_job" if employer == "Acme" else "none"))

    return FakeBackend(reply)


PERSONAS = [
    "A 34-year-old nurse at a hospital in Leeds, England. She runs a parkrun group.",
    "A 41-year-old bus driver in Leeds, England. He fishes on Sundays.",
    "A 70-year-old retired miner in Leeds, England. He keeps pigeons.",
    "A 19-year-old engineering student in Leeds, England. She sings in a choir.",
    "A 52-year-old baker in Manchester, England. He bakes rye bread.",
    "A 27-year-old line cook in Seville, Spain. He plays football.",
]


def _personas(tmp_path):
    path = tmp_path / "personas.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": f"p{i}", "persona": p}) + "\n" for i, p in enumerate(PERSONAS)))
    return str(path)


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
    cfg_start = community.period_start
    assert report["people"] == 5 and all(v == 0 for v in report["remaining_after_repair"].values())
    assert report["found_in_proposal"]["endpoints"] == 1  # the ghost u77
    assert report["quality"] == dict.fromkeys(sg.AUDIT_KINDS, 0)
    assert report["quality_examples"] == {}  # only kinds with findings (pbench.audit.summary)
    # The seeds were drawn different employers: "colleague" and "manager" do not fit, and change.
    rels = {r.id: r for r in community.relationships}
    assert rels["r1"].kind in ("friend", "acquaintance") and rels["r2"].kind in ("friend", "acquaintance")
    assert (rels["r4"].a, rels["r4"].b) == ("u01", "u03")
    assert {c.record for c in community.changes if c.check == "facts"} >= {"r1", "r2"}
    # Seeds describe how they know each other at the start; stories come from the facts.
    assert all(r.start <= cfg_start for r in (rels["r1"], rels["r2"]))
    assert all(str(r.start.year) in r.why for r in community.relationships if r.source != "evolution")
    assert len(community.groups) == 2 and all(len(g.members) >= 2 for g in community.groups)
    assert "u99" not in {m.person for g in community.groups for m in g.members}
    assert not any("Maria" in g.name or "John" in g.purpose for g in community.groups)  # groups never rename people
    assert len(backend.calls) == 3 + 1 + 2 + 1  # profiles, seed relationships, expansions, groups
    sg.save(community, report, tmp_path)
    again = sg.load(tmp_path)
    assert again.c == community
    saved = json.loads((tmp_path / "community.json").read_text())
    assert saved["validation"]["quality"] == report["quality"]
    assert (tmp_path / "community.graphml").read_text().startswith("<graphml")


def test_generated_community_takes_its_facts_from_code(tmp_path):
    cfg = _cfg(**{"community.size": 10, "community.personas_path": _personas(tmp_path)})
    community, report = _generate(cfg, scripted_generator(), tmp_path)
    v = sg.CommunityView(community)
    start = v.period[0]
    names = [p.name for p in community.people]
    assert len(names) == 10 and len(set(names)) == 10
    assert not any(identities.is_placeholder(n) for n in names)
    assert not any("John" in p.persona or "Doe" in p.persona for p in community.people)
    at_start = {pid: v.attributes_at(pid, start) for pid in v.people}
    assert not any(a["employer"] == "Elsewhere Ltd" or "Springfield" in a["location"] for a in at_start.values())
    # Most people live in the first persona's town, nearly all in its country.
    town = at_start["u01"]["location"]
    assert sum(a["location"] == town for a in at_start.values()) >= 6
    assert sum(a["location"].endswith(town.rpartition(", ")[2]) for a in at_start.values()) >= 7
    # The seeds' own words win: age, gender, town.
    for p in community.people:
        said = identities.persona_facts(p.persona)
        if p.origin == "seed":
            assert (int(at_start[p.id]["age"]), at_start[p.id]["gender"]) == (said.age, said.gender)
            assert at_start[p.id]["location"] == f"{said.city}, {said.country}"
        assert identities.age_on(p.birth_date, start) == int(at_start[p.id]["age"])
        if said.age is not None:  # a newcomer's persona is made to agree with code's facts
            assert said.age == int(at_start[p.id]["age"])
        if said.gender is not None:
            assert said.gender == at_start[p.id]["gender"]
    for r in community.relationships:
        if r.kind in ("colleague", "manager"):
            assert at_start[r.a]["employer"] == at_start[r.b]["employer"] or r.start > start
    assert report["quality"] == dict.fromkeys(sg.AUDIT_KINDS, 0), report["quality_examples"]
    assert all(n == 0 for n in report["remaining_after_repair"].values())


def test_unparsable_groups_reply_is_recorded_and_groups_formed_by_code(tmp_path):
    community, report = _generate(_cfg(), scripted_generator(unparsable_groups=True), tmp_path)
    assert any(c.check == "unparsed" and c.record == "groups" for c in community.changes)
    assert len(community.groups) == 2
    assert report["remaining_after_repair"]["groups"] == 0


def test_same_seed_same_community(tmp_path):
    a, _ = _generate(_cfg(), scripted_generator(), tmp_path / "a")
    b, _ = _generate(_cfg(), scripted_generator(), tmp_path / "b")
    assert a == b
    c, _ = _generate(_cfg(seed=2), scripted_generator(), tmp_path / "c")
    assert [p.name for p in c.people] != [p.name for p in a.people]


def test_replies_in_any_order_give_the_same_community_and_a_cached_run_calls_nothing(tmp_path):
    """Concurrent profile and expansion requests answered in two different orders give the same
    community; a run from the first one's response cache makes no call and gives it again."""

    def by_content(messages, settings):  # the same reply for the same prompt, whenever it comes
        text = messages[-1]["content"]
        if "Decide how they know each other" in text:
            return json.dumps({"relationships": [{"a": "u01", "b": "u02", "kind": "friend"},
                                                 {"a": "u02", "b": "u03", "kind": "neighbour"}]})
        if "group chat" in text:
            return "no groups today"  # formed by code, noted
        if "needs one new person" in text:
            return json.dumps({"persona": "John Doe is a clerk. He loves chess.",  # a name code replaces, noted
                               "profile": _profile("John Doe", employer="Acme", location="Leeds, England")})
        return json.dumps(_profile("John Doe", employer="Acme", location="Leeds, England", event="new_job"))

    cfg = _cfg(**{"community.size": 8, "community.personas_path": _personas(tmp_path)})
    first, shuffled = ShuffledBackend(FakeBackend(by_content), 1), ShuffledBackend(FakeBackend(by_content), 2)
    a, _ = _generate(cfg, first, tmp_path / "a")
    b, _ = _generate(cfg, shuffled, tmp_path / "b")
    assert first.calls == shuffled.calls > 5 and a.changes
    assert a == b
    reproduce.copy_cache(tmp_path / "a" / "llm_cache.sqlite", tmp_path / "c" / "llm_cache.sqlite")
    c, _ = _generate(cfg, NoCalls(), tmp_path / "c")
    assert c == a


# --------------------------------------------------------------------------- the stage's modules


def test_each_community_module_imports_only_those_listed_above_it():
    import pbench.community
    from tests.test_architecture import imports

    order = re.findall(r"^- ``(\w+)``", pbench.community.__doc__, re.M)
    graph = imports()
    assert sorted(order) == sorted(m.rpartition(".")[2] for m in graph if m.startswith("pbench.community."))
    for i, name in enumerate(order):
        inside = {m for m in graph[f"pbench.community.{name}"] if m.startswith("pbench.community") or m == "pbench.social_graph"}
        assert inside <= {f"pbench.community.{m}" for m in order[:i]}, (name, inside)
