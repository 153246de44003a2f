"""Life facts and bond rules: when two people may have met, as what, and how to say it.

Reads a ``CommunityView``; writes nothing. The one home for the rules that tie a bond to the
people's facts: the generator dates bonds with them (``bond_windows``, ``date_bond``) and fits
kinds with them (``fit_kind``), ``pbench.community.rules`` checks a community against them, and
``story`` writes how two people met from them.

A person's ``location`` and ``employer`` over a life (``life_timeline``) are the drawn facts
before the period (home town, ``home_since``, ``employer_since``) and the dated attributes
within it.
"""

from __future__ import annotations

import datetime as dt
import random
import re

from pbench.community.view import CommunityView
from pbench.identities import add_years, age_on
from pbench.schema import PLACE_KINDS, WORK_KINDS, Relationship

DAY = dt.timedelta(days=1)
# Values that name no organisation or place: nobody is a colleague or neighbour through them.
NO_VALUE = {"", "none", "n/a", "na", "unemployed", "retired", "self-employed", "self employed", "freelance", "student"}


def norm(value: str) -> str:
    return " ".join(value.lower().split())


def months_in(start: dt.date, end: dt.date) -> int:
    return (end.year - start.year) * 12 + end.month - start.month + 1


def month_date(start: dt.date, end: dt.date, month: int) -> dt.date:
    """First day of the ``month``-th month of the period (1-based), kept a month inside its ends."""
    total = months_in(start, end)
    month = min(max(month, 2), max(total - 1, 2))
    y, m = divmod(start.month - 1 + month - 1, 12)
    day = dt.date(start.year + y, m + 1, 1)
    return min(max(day, start + DAY), end)

# --------------------------------------------------------------------------- facts over a lifetime

FAR_PAST = dt.date(1900, 1, 1)
MIN_AGE = {"family": 0, "neighbour": 0, "classmate": 5, "friend": 12, "hobby_friend": 12, "acquaintance": 12,
           "partner": 18, "colleague": 18, "manager": 18, "business_partner": 18}
WORK_AGE_MAX = 70
CLASSMATE_GAP_DAYS = 3 * 366
REMOTE_WORDS = ("online",)  # a story that says how two people who never shared a town met


def birth_of(view: CommunityView, pid: str) -> dt.date | None:
    """The person's birth date (from the ``age`` attribute when none was drawn: the latest it can be)."""
    p = view.people[pid]
    if p.birth_date is not None:
        return p.birth_date
    age = view.attributes_at(pid, view.period[0]).get("age", "").strip()
    return add_years(view.period[0], -int(age)) if age.isdigit() else None


def life_timeline(view: CommunityView, pid: str, attr: str) -> list[tuple[dt.date, dt.date, str]]:
    """``location`` or ``employer`` over a life: before the period from the person's drawn facts
    (home town, ``home_since``, ``employer_since``), then the dated attribute."""
    p = view.people[pid]
    start = view.period[0]
    born = birth_of(view, pid) or FAR_PAST
    hist = view.attribute_history(pid, attr)
    out: list[tuple[dt.date, dt.date, str]] = []
    if hist:
        first = hist[0].value
        since = born
        if attr == "location" and p.hometown and p.home_since and born < p.home_since <= start \
                and norm(p.hometown) != norm(first):
            out.append((born, p.home_since - DAY, p.hometown))
            since = p.home_since
        elif attr == "employer":
            since = p.employer_since or (add_years(born, 18) if norm(first) not in NO_VALUE else start)
        if since < start:
            out.append((since, start - DAY, first))
    return out + [(a.valid_from, a.valid_to, a.value) for a in hist]


def value_at(view: CommunityView, pid: str, attr: str, t: dt.date) -> str:
    """The person's ``location`` or ``employer`` on day ``t`` ('' when unknown)."""
    return next((v for f, to, v in life_timeline(view, pid, attr) if f <= t <= to), "")


def _merge(spans: list[tuple[dt.date, dt.date]]) -> list[tuple[dt.date, dt.date]]:
    merged: list[tuple[dt.date, dt.date]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1] + DAY:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def shared_spans(view: CommunityView, a: str, b: str, attr: str) -> list[tuple[dt.date, dt.date]]:
    """Days in their lives on which ``a`` and ``b`` held the same real ``location`` or ``employer``.

    The one reading of a shared employer or town, over a life and over the period alike: within
    the period it reads the dated attributes only (``life_timeline`` adds the drawn facts on
    days before the period alone), so the period's rules and repair, which ask about days in
    the period, read the same spans as the lifetime's.

    Returns:
        Disjoint spans, sorted, two that touch merged (moving together to a new employer
        keeps them colleagues).
    """
    out = []
    for fa, ta, va in life_timeline(view, a, attr):
        for fb, tb, vb in life_timeline(view, b, attr):
            if norm(va) == norm(vb) and norm(va) not in NO_VALUE and max(fa, fb) <= min(ta, tb):
                out.append((max(fa, fb), min(ta, tb)))
    return _merge(out)


def within(spans: list[tuple[dt.date, dt.date]], lo: dt.date, hi: dt.date) -> bool:
    """Whether one of ``spans`` holds every day from ``lo`` to ``hi``."""
    return any(f <= lo and hi <= t for f, t in spans)


def bound_attr(kind: str) -> str | None:
    """What a bond of ``kind`` lasts only while the two share: ``employer``, ``location`` or None."""
    return "employer" if kind in WORK_KINDS else "location" if kind in PLACE_KINDS else None


def bound_holds(view: CommunityView, r: Relationship, lo: dt.date, hi: dt.date) -> bool:
    """Whether the two share what ``r``'s kind is bound to (their employer for work bonds, their
    town for neighbours) on every day from ``lo`` to ``hi``; True for kinds bound to neither."""
    attr = bound_attr(r.kind)
    return attr is None or within(shared_spans(view, r.a, r.b, attr), lo, hi)


def bond_windows(view: CommunityView, kind: str, a: str, b: str) -> list[tuple[dt.date, dt.date]]:
    """The days on which a bond of ``kind`` between ``a`` and ``b`` may start, by their facts.

    Family: the younger one's birth. Partner, business partner: both 18 or older. Colleague,
    manager: a shared employer, both 18 to 70. Classmates: at most 3 years apart, from school
    age to 18. Every kind but family: a town they both lived in at that time.

    Returns:
        Disjoint (first, last) spans; empty when the facts do not support the kind.
    """
    ba, bb = birth_of(view, a), birth_of(view, b)
    ps, pe = view.period
    if ba is None or bb is None:
        return [(FAR_PAST, pe)]  # nothing known to check against
    if kind == "family":
        return [(max(ba, bb), max(ba, bb))]
    lo = max(add_years(ba, MIN_AGE[kind]), add_years(bb, MIN_AGE[kind]))
    hi = pe
    if kind in WORK_KINDS:
        if max(age_on(ba, ps), age_on(bb, ps)) > WORK_AGE_MAX:
            return []
        spans = shared_spans(view, a, b, "employer")
    else:
        if kind == "classmate":
            if abs((ba - bb).days) > CLASSMATE_GAP_DAYS:
                return []
            hi = min(add_years(ba, 19), add_years(bb, 19)) - DAY
        spans = shared_spans(view, a, b, "location")
    return [(max(f, lo), min(t, hi)) for f, t in spans if max(f, lo) <= min(t, hi)]


def date_bond(view: CommunityView, kind: str, a: str, b: str, rng: random.Random, latest: dt.date,
              earliest: dt.date = FAR_PAST) -> tuple[dt.date, bool] | None:
    """A start date the facts support, from ``earliest`` to ``latest``, and whether they met at a
    distance (acquaintances who never shared a town meet online). None: the facts do not support ``kind``."""
    wins = [(max(f, earliest), min(t, latest)) for f, t in bond_windows(view, kind, a, b)
            if max(f, earliest) <= min(t, latest)]
    remote = False
    if not wins and kind == "acquaintance":
        ba, bb = birth_of(view, a) or FAR_PAST, birth_of(view, b) or FAR_PAST
        lo = max(add_years(ba, MIN_AGE[kind]), add_years(bb, MIN_AGE[kind]), add_years(latest, -15))
        wins, remote = ([(lo, latest)] if lo <= latest else []), True
    if not wins:
        return None
    k = rng.randrange(sum((t - f).days + 1 for f, t in wins))
    for f, t in wins:
        if k <= (t - f).days:
            return f + dt.timedelta(days=k), remote
        k -= (t - f).days + 1
    raise AssertionError("unreachable")


FALLBACK_KINDS = ("friend", "acquaintance")


def fit_kind(view: CommunityView, kind: str, a: str, b: str, rng: random.Random,
             latest: dt.date) -> tuple[str, dt.date, bool] | None:
    """``kind`` if the facts support it, else the first of friend, acquaintance that they do:
    (kind, start, met at a distance), or None when none fits."""
    for k in dict.fromkeys((kind, *FALLBACK_KINDS)):
        got = date_bond(view, k, a, b, rng, latest)
        if got is not None:
            return k, *got
    return None


# --------------------------------------------------------------------------- stories


def town_of(location: str) -> str:
    """The town of a "Town, Country" location."""
    return location.split(",")[0].strip() or "their town"


def _first(view: CommunityView, pid: str) -> str:
    return view.name(pid).split()[0]


def _shared_interest(view: CommunityView, a: str, b: str, t: dt.date) -> str:
    def interests(pid: str) -> list[str]:
        return [i.strip() for i in view.attributes_at(pid, t).get("interests", "").split(",") if i.strip()]
    common = [i for i in interests(a) if norm(i) in {norm(j) for j in interests(b)}] or interests(a)
    safe = [i for i in common if not re.search(r"\d|[A-Z]", i)]  # no dates, places or names in a hobby
    return safe[0] if safe else "a shared hobby"


def story(view: CommunityView, r: Relationship) -> str:
    """How two people know each other, written from the facts only: the kind, their towns and
    employer when the bond started, and its start year (a template per kind; the audit's
    ``relationship_stories`` holds a story to the same facts)."""
    a, b, t, year = _first(view, r.a), _first(view, r.b), r.start, r.start.year
    ca, cb = town_of(value_at(view, r.a, "location", t)), town_of(value_at(view, r.b, "location", t))
    emp = value_at(view, r.a, "employer", t)
    if r.kind == "family":
        ba, bb = birth_of(view, r.a) or t, birth_of(view, r.b) or t
        young, old = (a, b) if ba >= bb else (b, a)
        return f"{a} and {b} are family: {young} has known {old} since being born in {year}."
    if norm(value_at(view, r.a, "location", t)) != norm(value_at(view, r.b, "location", t)):
        return f"{a} and {b} got to know each other online in {year}; {a} lived in {ca} then, {b} in {cb}."
    return {
        "partner": f"{a} and {b} met in {ca} and have been partners since {year}.",
        "colleague": f"{a} and {b} have worked together at {emp} in {ca} since {year}.",
        "manager": f"{a} has been {b}'s manager at {emp} in {ca} since {year}.",
        "neighbour": f"{a} and {b} have been neighbours in {ca} since {year}.",
        "classmate": f"{a} and {b} were in the same class at school in {ca} from {year}.",
        "friend": f"{a} and {b} became friends in {ca} in {year}.",
        "hobby_friend": f"{a} and {b} met through {_shared_interest(view, r.a, r.b, max(t, view.period[0]))} "
                        f"in {ca} in {year} and have been friends since.",
        "business_partner": f"{a} and {b} have run a business together in {ca} since {year}.",
        "acquaintance": f"{a} and {b} have known each other around {ca} since {year}.",
    }[r.kind]
