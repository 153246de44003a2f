"""Who the community is made of: the seed personas, and a person's dated profile built from
code's facts and the generator's draft.

Reads the seed personas (``pbench/data/personas.jsonl`` or ``community.personas_path``);
writes nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

from pbench import identities, store
from pbench.config import PACKAGE_FILES
from pbench.community.drafts import LifeEventDraft, ProfileDraft
from pbench.community.facts import DAY, NO_VALUE, month_date, months_in, norm
from pbench.community.prose import scrub_names
from pbench.identities import Identity
from pbench.schema import AttributeValue, Change, Person


def load_personas(path: str | Path | None = None) -> list[dict[str, str]]:
    """Read Persona Hub-style JSONL: one object per line with a ``persona`` text (``id`` optional).

    Raises:
        ValueError: a line without a persona, naming the file and line.
    """
    path = Path(path) if path else store.PACKAGE_DATA / PACKAGE_FILES["community.personas_path"]
    if not path.is_file():
        raise ValueError(f"{path}: no such personas file (community.personas_path)")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
        text = rec.get("persona") if isinstance(rec, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{path}:{n}: no 'persona' text")
        out.append({"id": str(rec.get("id", f"line{n}")), "persona": text.strip()})
    return out




def build_person(pid: str, identity: Identity, draft: ProfileDraft, persona: str, origin: str, start: dt.date,
                 end: dt.date, changes: list[Change], rng: random.Random) -> Person:
    """A person with dated attributes: the identity's facts, the draft's prose, one life event at most.

    Args:
        identity: the facts code drew (name, age, gender, place, employer).
        draft: what the generator wrote (occupation, interests, styles, a life event).
        rng: this person's own generator (draws a new employer or town for a life event).
    """
    static = {
        "age": str(identity.age),
        "gender": identity.gender,
        "interests": ", ".join(i.strip() for i in draft.interests if i.strip()),
        "beliefs": draft.beliefs,
        "texting_style": draft.texting_style,
        "blogging_style": draft.blogging_style,
        "shopping_preferences": draft.shopping_preferences,
    }
    occupation = draft.occupation.strip() or identity.status
    if identity.status == "child":
        occupation = "none (a young child)"
    initial = {"occupation": occupation, "employer": identity.employer, "location": identity.location,
               "education": identity.education or draft.education}
    new, when = _life_event(pid, identity, draft.life_event, initial, start, end, changes, rng)
    attrs = [AttributeValue(name=k, value=str(v), valid_from=start, valid_to=end) for k, v in static.items()]
    for k, v in initial.items():
        if k in new:
            attrs.append(AttributeValue(name=k, value=v, valid_from=start, valid_to=when - DAY))
            attrs.append(AttributeValue(name=k, value=new[k], valid_from=when, valid_to=end))
        else:
            attrs.append(AttributeValue(name=k, value=v, valid_from=start, valid_to=end))
    hometown = "" if identity.hometown == identity.location else identity.hometown
    return Person(id=pid, name=identity.name, persona=persona, origin=origin, attributes=attrs,
                  birth_date=identity.birth_date, hometown=hometown, home_since=identity.home_since,
                  employer_since=identity.employer_since)


def _life_event(pid: str, identity: Identity, ev: LifeEventDraft, initial: dict[str, str], start: dt.date,
                end: dt.date, changes: list[Change], rng: random.Random) -> tuple[dict[str, str], dt.date]:
    """The attributes a life event changes, and the day it changes them; an event the facts
    do not allow (a new job for a child, an employer named as an occupation) is recorded and
    ignored. A new employer or town is drawn by code, like the first."""
    new: dict[str, str] = {}
    region = identities.REGIONS[identity.country]
    if ev.new_occupation and ((norm(identity.employer) not in NO_VALUE and norm(identity.employer) in norm(ev.new_occupation))
                              or scrub_names(ev.new_occupation, "", [])[1]):
        changes.append(Change(check="life_event", record=pid, action=f"new occupation {ev.new_occupation!r} names "
                                                                      "an employer or a person: occupation kept"))
        ev = ev.model_copy(update={"new_occupation": ""})
    if ev.kind == "new_job":
        if identity.status in ("retired", "child") or identity.age < 16:
            changes.append(Change(check="life_event", record=pid, action=f"new_job for a {identity.age}-year-old "
                                                                          f"{identity.status}: ignored"))
        else:
            new = {"occupation": ev.new_occupation, "employer": identities.draw_employer(region, rng)}
    elif ev.kind == "move":
        towns = [c for c in region.cities if c != identity.city]
        new = {"location": f"{rng.choice(towns)}, {identity.country}"} if towns else {}
    elif ev.kind == "graduation":
        new = {"education": ev.new_education, "occupation": ev.new_occupation}
    new = {k: v.strip() for k, v in new.items() if v.strip() and norm(v) != norm(initial[k])}
    if ev.kind != "none" and not new and not any(c.record == pid and c.check == "life_event" for c in changes):
        changes.append(Change(check="life_event", record=pid, action=f"{ev.kind} without a new value: ignored"))
    when = month_date(start, end, ev.month)
    if new and not 1 <= ev.month <= months_in(start, end):
        changes.append(Change(check="life_event", record=pid, action=f"month {ev.month} outside the period: moved to {when}"))
    return new, when
