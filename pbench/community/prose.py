"""The generator's prose made to agree with code's names and facts.

Reads what the generator wrote (personas, occupations, group names) and code's facts
(``pbench.identities``); returns the fixed text and what was changed, for the caller to record.
A name the generator made up is never kept: code's names are the only ones in the community.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pbench import identities, matching
from pbench.community.drafts import NewMemberDraft, ProfileDraft
from pbench.identities import Identity
from pbench.schema import Change, Person

KIN_WORDS = {"husband", "wife", "partner", "son", "daughter", "brother", "sister", "mother", "father", "friend",
             "colleague", "cousin", "neighbour", "neighbor", "manager", "boss", "named", "called", "niece", "nephew",
             "aunt", "uncle", "grandson", "granddaughter", "boyfriend", "girlfriend"}
NOT_NAMES = {"She", "He", "They", "The", "A", "An", "In", "At", "On", "Her", "His", "Will", "May", "June", "April",
             "August", "Grace", "Hope", "Faith", "Joy", "Rose", "Summer", "Dawn", "Christian", "Mark", "Art", "Bill",
             "Sunny", "Lake", "River", "Sky", "Royal", "King", "Major", "Long", "Young", "Black", "White", "Brown",
             "Green", "Gold", "Frank", "Georgia", "Jordan", "Chelsea", "Sunday", "Friday", "Monday", "Saturday",
             "English", "Spanish", "French", "German", "Premier", "League", "Church", "Catholic", "Muslim"}
WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")


def _capitalised(word: str) -> bool:
    return word[0].isupper() and word[1:] == word[1:].lower() and len(word) > 1


def scrub_names(text: str, subject: str, keep: Iterable[str]) -> tuple[str, list[str]]:
    """Remove names the generator wrote into prose that are not code's: "her husband Tom" loses
    "Tom", "a boy named Alex" becomes "a boy", a name opening a sentence (or a placeholder such as
    John Doe) becomes ``subject``, any other becomes "someone". A single capitalised first name counts only where it acts as one
    ("Maria loves", "Maria's", "Maria,"), so that words like "Grace" in prose stay.

    Returns:
        The text and the names it replaced.
    """
    keep_tokens = {t for n in (subject, *keep) for t in WORD.findall(n)}
    place_tokens = {t for p in (*identities.all_places(), *identities.REGIONS) for t in p.split()}
    firsts = identities.first_names()
    found: list[str] = []

    def placeholder(m: re.Match) -> str:
        found.append(m.group(0))
        return subject

    text = re.sub(r"\b(John|Jane)\s+(Doe|Smith)\b", placeholder, text)
    words = list(WORD.finditer(text))
    out, pos, i = [], 0, 0
    while i < len(words):
        m = words[i]
        first = m.group(0)
        if (not _capitalised(first) or first in keep_tokens or first in NOT_NAMES or first in place_tokens
                or first not in firsts):
            i += 1
            continue
        last = words[i + 1] if i + 1 < len(words) and text[m.end():words[i + 1].start()].isspace() else None
        if last is not None and (not _capitalised(last.group(0)) or last.group(0) in place_tokens
                                 or last.group(0) in NOT_NAMES or last.group(0) in keep_tokens):
            last = None
        kin = words[i - 1].group(0).lower() if i and text[words[i - 1].end():m.start()].isspace() else ""
        kin = kin if kin in KIN_WORDS else ""
        end = last.end() if last else m.end()
        if not last and not kin and not re.match(r"('s|,|\s+(is|was|works|lives|has|runs|loves|enjoys)\b)", text[end:]):
            i += 1
            continue
        found.append(text[m.start():end])
        if kin in ("named", "called"):  # "a boy named Alex" -> "a boy"
            out.append(text[pos:words[i - 1].start()])
        elif kin:  # "her husband Tom" -> "her husband"
            out.append(text[pos:m.start()])
        else:  # the subject of a sentence is the person described; anyone else is "someone"
            at_start = not text[:m.start()].strip() or text[:m.start()].rstrip()[-1] in ".!?;"
            out.append(text[pos:m.start()] + (subject if at_start or not subject else "someone"))
        pos = end
        i += 2 if last else 1
    out.append(text[pos:])
    return " ".join("".join(out).split()).replace(" ,", ",").replace(" .", "."), found


def fit_persona(text: str, ident: Identity, occupation: str) -> tuple[str, list[str]]:
    """Make a persona the generator wrote agree with code's facts: its age, its town and country.

    Returns:
        The persona and what was changed.
    """
    said, fixed = identities.persona_facts(text), []
    text = re.sub(r"\b([Aa]) ((8\d|11|18)-year-old)", lambda m: f"{m.group(1)}n {m.group(2)}", text)
    if said.age is not None and said.age != ident.age:
        article = "An" if str(ident.age).startswith("8") or ident.age in (11, 18) else "A"
        text = re.sub(r"\b[Aa]n? \d{1,3}-year-old", f"{article} {ident.age}-year-old", text, count=1)
        fixed.append(f"age {said.age} -> {ident.age}")
    if (said.country and said.country != ident.country) or (said.city and said.city != ident.city):
        # Sentences that name another place go; code states where they live.
        places = [*identities.all_places(), *identities.REGIONS]
        keep = [s for s in matching.sentences(text)
                if not any(re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", s) for p in places)]
        age = re.search(r"\b[Aa]n? \d{1,3}-year-old", keep[0]) if keep else None
        head = "" if age else f"A {ident.age}-year-old {occupation} living in {ident.location}."
        text = " ".join([head, *keep]).strip() if keep or head else text
        fixed.append(f"place {said.city or said.country} -> {ident.location}")
    if said.gender and said.gender != ident.gender:
        text = swap_pronouns(text, ident.gender)
        fixed.append(f"pronouns {said.gender} -> {ident.gender}")
    return text, fixed


def swap_pronouns(text: str, gender: str) -> str:
    """Turn third-person pronouns to ``gender`` ("her" becomes "his" before a word, else "him")."""
    def sub(m: re.Match) -> str:
        word, low = m.group(1), m.group(1).lower()
        if gender == "female":
            new = {"he": "she", "his": "her", "him": "her", "himself": "herself"}.get(low, low)
        else:
            nxt = text[m.end():].lstrip()
            possessive = bool(re.match(r"[a-z]", nxt)) and not re.match(r"(and|or|to|with|at|in|on|for)\b", nxt)
            new = {"she": "he", "herself": "himself", "hers": "his",
                   "her": "his" if possessive else "him"}.get(low, low)
        return new.capitalize() if word[0].isupper() else new
    return re.sub(r"\b(he|his|him|himself|she|her|hers|herself)\b", sub, text, flags=re.I)


def fit_newcomer(pid: str, draft: NewMemberDraft, ident: Identity, anchor: Person,
                 changes: list[Change]) -> tuple[str, ProfileDraft]:
    """A newcomer's persona and profile as the generator wrote them, made to agree with code:
    names scrubbed, an occupation that is a job rather than a bond, the persona's age, place
    and pronouns those of ``ident``. Each change is recorded in ``changes``.

    Returns:
        The persona and the profile draft.
    """
    keep = [anchor.name, ident.name, ident.employer, *(a.value for a in anchor.attributes if a.name == "employer")]
    persona, names = scrub_names(draft.persona.strip(), ident.name.split()[0], keep)
    if names:
        changes.append(Change(check="names", record=pid, action=f"persona named {names}: replaced by code's name"))
    profile = draft.profile
    # An occupation is a job, not a bond: "manager at work of <anchor>" becomes "manager".
    occupation = re.sub(rf"\s+(?:at work\s+)?(?:of|for|to|with)\s+{re.escape(anchor.name)}.*$", "",
                        profile.occupation.strip())
    if occupation != profile.occupation.strip():
        changes.append(Change(check="names", record=pid, action=f"occupation {profile.occupation!r}: {occupation!r}"))
        profile = profile.model_copy(update={"occupation": occupation})
    persona, fixed = fit_persona(persona, ident, profile.occupation.strip() or "person")
    if fixed:
        changes.append(Change(check="facts", record=pid, action=f"persona disagreed with code's facts: {fixed}"))
    return persona, profile
