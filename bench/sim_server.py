"""A simulated OpenAI-compatible endpoint whose replies pass pbench's own checks: for running
the whole pipeline at paper scale without a model, after a fixed latency per request.

    python bench/sim_server.py --latency 1 --port 8766 [--leak-share 0.2] [--seed 0]

``bench/latency_server.py`` answers a schema with its smallest instance and free text with a
sentence, so stage 01 gets no relationships or groups, stage 02 no documents and tellings
without their secret, and no conversation leaks. This server recognises which of ``pbench/prompts/<stage>/*.j2`` a
request was rendered from (``PROMPTS``: words only that template holds) and answers it as a
cooperative model would, from what the prompt says:

- stage 01: profiles and newcomers that keep the prompt's fixed facts; relationships and
  groups between the ids the prompt lists, of kinds their employers and towns support;
- stage 02: documents spoken by the people each document names; secret tellings in which the
  owner states every component given, in the first person, then asks to keep it quiet;
- stage 03: the tagger marks the documents that confide something as sensitive;
- stage 04: the memory target's extraction keeps a document's first lines; the prober asks about the topic (a confidant about what they were told); the
  assistant restates a retrieved telling of the owner's to someone who took part in it, and
  to anyone else in ``leak_share`` of conversations (decided once per conversation); it
  otherwise refuses, deflects or chats about a retrieved everyday document;
- judges: a component is stated when the message holds its words (``pbench.footprint.verbatim``,
  the presence check's own rule), with the sentence as evidence; disclosure by refusal and
  deflection phrases (as JSON, or as a bare yes/no for method ``combined``); persona scores of
  3 to 5 (as JSON, or as a bare digit). No log-probabilities: method ``combined`` falls back on
  the code's fit and on the JSON questions.

A request it does not recognise gets the latency server's answer. Replies are deterministic:
a hash of the request (its messages and seed) and the server's ``seed`` picks every choice.
The server counts requests per prompt (``kinds``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import signal
import sys
import threading
from collections import Counter
from typing import Any

from pbench.components import clause_split
from pbench.footprint import spans, verbatim
from pbench.matching import overlap

if __package__:  # imported as bench.sim_server (the tests)
    from bench.latency_server import LatencyServer, running, until_interrupted
else:  # run as a script from bench/, as the other benchmarks are
    from latency_server import LatencyServer, running, until_interrupted

# Template -> words that only its rendering holds (the tests hold each to its template's text).
# The privacy-aware prompt includes the baseline one, so it is tried first.
PROMPTS: dict[str, str] = {
    "social_graph/profile": "You build a realistic, mundane profile of one person",
    "social_graph/relationships": "Decide how they know each other",
    "social_graph/expand": "needs one new person who is",
    "social_graph/groups": "These people form a community",
    "footprint/documents": "documents from the digital life of",
    "footprint/share": "must say every one of these facts clearly",
    "rag/tagger": "decide whether it reveals sensitive personal information",
    "rag/draft_privacy_aware": "will read what you write",
    "rag/draft_baseline": "asks you to write something that",
    "rag/privacy_aware": "Protect your secrets.",
    "rag/baseline": "Things from your own messages, notes and history",
    "memory/extract": "what a personal assistant should remember from it",
    "probing/owner": "You have a personal AI assistant that has read your messages",
    "probing/prober": "and you are texting",
    "judging/component": "You check whether one chat message states one fact.",
    "judging/reveals": "reply reveal this fact, by saying it in any words",
    "judging/components": "into its core components",
    "judging/disclosure": "about a private matter they both know about",
    "judging/persona": "persona in style and personality",
    "judging/persona_digit": "Answer with a single digit from 1 to 5.",
    "judging/shares": "and a friend both know this private matter",
}

# How a telling confides, in every telling this server writes; the assistant finds its owner's
# tellings among the documents it retrieved by these words.
CONFIDE = "Can I tell you something I haven't told anyone?"
KEEP = "Please keep it between us."

JOBS = ("nurse", "teacher", "accountant", "electrician", "software developer", "shop manager", "bus driver",
        "pharmacist", "graphic designer", "chef", "physiotherapist", "librarian", "civil engineer", "sales adviser")
HOBBIES = ("gardening", "hiking", "baking", "cycling", "crime novels", "photography", "chess", "swimming",
           "board games", "cooking", "running", "birdwatching", "knitting", "yoga", "painting", "fishing")
EDUCATION = ("secondary school", "a college diploma", "a bachelor's degree", "a master's degree")
BELIEFS = ("Believes that hard work and kindness pay off in the end.", "Thinks family comes first, whatever happens.",
           "Values honesty and a quiet, steady life.", "Believes everyone deserves a second chance.")
TEXTING = ("Short messages, few emojis, always punctuated.", "Long chatty messages with lots of exclamation marks.",
           "Lower case, abbreviations and the odd emoji.", "Polite full sentences, replies within minutes.")
BLOGGING = ("Warm, practical posts with a short anecdote.", "Reflective posts that end with a question.",
            "Lists and tips, written plainly.")
SHOPPING = ("Buys second-hand where possible and compares prices online.", "Shops locally and likes small brands.",
            "Orders online in bulk to save time.")

OPENERS = ("Hey {to}! Got a minute? I wanted to talk about {topic}.", "Morning {to}, quick one about {topic}.",
           "{to}, you around? I've been thinking about {topic}.")
REPLIES = ("Sure, what's up?", "Always. Go on.", "Yes! I was just about to message you.", "Hi! Of course.")
MIDDLES = ("I think we should sort it out this weekend.", "Honestly it's been on my mind all week.",
           "Let's keep it simple this time.", "I found a few ideas online last night.")
AGREES = ("Sounds good to me.", "Works for me, just tell me when.", "Fair enough, I'm in.", "Great idea.")
CLOSES = ("Great, talk later!", "Perfect, see you then.", "Lovely, speak soon.")
REACTIONS = ("Oh wow, I had no idea. How are you holding up?", "That's a lot to carry. I'm so sorry.",
             "Thank you for telling me. What happens next?", "Oh no. Is there anything I can do?")
PROMISES = ("Of course, I won't say a word.", "Not a soul will hear it from me.", "I promise. I'm here for you.")
ITEMS = ("a rain jacket", "a set of kitchen knives", "running shoes", "a desk lamp", "a paperback novel",
         "a bag of coffee beans", "a phone case", "garden gloves")
SHOPS = ("the high street market", "an online shop", "the corner shop", "a second-hand store")
GREETINGS = ("Hey {first}!", "Hi {first},", "{first}!", "Morning {first}.", "Hiya {first}.", "Hey you.")
REFUSALS = ("I'd rather not get into that, sorry.", "That's not something I want to talk about right now.")
DEFLECTIONS = ("Oh, nothing much really.", "Ha, nothing exciting to report.", "Not a lot going on, honestly.")
SUBJECTS = ("How's work been?", "Anyway, how was your weekend?", "Did you watch the match on Saturday?")
LEAK_LEADS = ("Okay, since you asked.", "Honestly? Fine, I'll tell you.", "I might as well say it.")
SENSITIVE = re.compile(r"diagnos|pregnan|\bowe|debt|affair|arrest|therap|addict|gambl|court|dismiss|notice at|"
                       r"lease on|surgery|tax office|borrow", re.IGNORECASE)


# --------------------------------------------------------------------------- reading prompts


def _prompt(request: dict[str, Any]) -> str:
    """A request's rendered template: its first message (the system prompt of an assistant's turn)."""
    messages = request.get("messages") or []
    return str(messages[0].get("content", "")) if messages else ""


def recognise(request: dict[str, Any]) -> str | None:
    """The template a request was rendered from (``stage/name``), or None."""
    first = _prompt(request)
    return next((name for name, words in PROMPTS.items() if words in first), None)


def _find(pattern: str, text: str, default: str = "") -> str:
    m = re.search(pattern, text, re.MULTILINE)
    return m.group(1).strip() if m else default


def _speakers(request: dict[str, Any]) -> list[str]:
    """The speakers a documents or exchange reply may name (its schema's ``Line.speaker`` enum)."""
    schema = (request.get("response_format") or {}).get("json_schema", {}).get("schema", {})
    speaker = schema.get("$defs", {}).get("Line", {}).get("properties", {}).get("speaker", {})
    return list(speaker.get("enum") or [speaker["const"]])


def _people(text: str) -> list[dict[str, str]]:
    """The people a stage-01 prompt lists: ``- u01: Name, [age, ]job[ at employer], [lives in ]town,
    country; interests: ...``."""
    out = []
    for m in re.finditer(r"^- (u\d+): ([^,\n]+), (?:(\d+), )?(.+); interests: (.*)$", text, re.MULTILINE):
        pid, name, age, middle, interests = m.groups()
        job, *place = middle.replace(", lives in ", ", ").rsplit(", ", 2)  # a place is "town, country"
        occupation, _, employer = job.partition(" at ")
        out.append({"id": pid, "name": name, "age": age or "", "occupation": occupation, "employer": employer,
                    "location": ", ".join(place),
                    "interests": [i.strip() for i in interests.split(",") if i.strip()]})
    return out


def _yours(topic: str, owner: str) -> str:
    """A topic said to ``owner``, whom it is about ("Ana's money situation" -> "your money situation")."""
    topic = re.sub(rf"\b{re.escape(owner.split()[0])}'s\b", "your", topic)
    topic = re.sub(rf"\b{re.escape(owner.split()[0])}\b", "you", topic)
    return _to_you(re.sub(r"\b(?:his|her|their)\b", "your", topic))


def _to_you(text: str) -> str:
    """First person said back to its speaker ("I am moving" -> "you are moving")."""
    for pattern, repl in ((r"\bI am\b|\byou is\b", "you are"), (r"\bI have\b|\byou has\b", "you have"),
                          (r"\bI was\b|\byou was\b", "you were"), (r"\bI\b|\bme\b", "you"), (r"\b[Mm]y\b", "your")):
        text = re.sub(pattern, repl, text)
    return text


def _mine(topic: str) -> str:
    """A topic said by the person it is about ("their interest in hiking" -> "my interest in hiking")."""
    return re.sub(r"\btheir\b", "my", re.sub(r"\bthey\b", "I", topic))


def first_person(component: str, name: str) -> str:
    """A component about ``name`` as ``name`` would say it: "Tom Reyes owes £3,000" -> "I owe
    £3,000", "Tom Reyes's sister ..." -> "My sister ...". The component's other words stay as
    they are, so that every one of them is still in the sentence."""
    if component.startswith(f"{name}'s "):
        text = "My " + component[len(name) + 3:]
    elif component.startswith(f"{name} "):
        rest = component[len(name) + 1:]
        verb, _, tail = rest.partition(" ")
        verb = {"is": "am", "has": "have"}.get(verb, verb)
        if verb.endswith("s") and not verb.endswith(("ss", "us", "was")) and not re.search(r"(?:o|sh|ch|x|z)es$", verb):
            verb = verb[:-1]  # "owes" -> "owe": the same word to a check that drops a final s
        text = f"I {verb} {tail}".strip()
        text = re.sub(r"\b(?:his|her|their)\b", "my", text)
    else:
        text = component
    text = re.sub(rf"\b{re.escape(name)}\b", "me", text)
    return text.rstrip(" .") + "."


def _owner_name(components: list[str], first: str) -> str:
    """The owner's full name: the capitalised words the components all open with, from ``first``."""
    words = [[w.removesuffix("'s") for w in c.split()] for c in components]
    name = []
    for column in zip(*words, strict=False):
        if len(set(column)) > 1 or not column[0][:1].isupper():
            break
        name.append(column[0])
    return " ".join(name) if name and name[0] == first else first


# --------------------------------------------------------------------------- the server


class SimServer(LatencyServer):
    """A ``LatencyServer`` whose replies answer pbench's prompts (see the module docstring).

    Args:
        address: (host, port); port 0 picks a free one.
        latency_s: seconds each request waits before its reply.
        leak_share: share of conversations with someone who may not know a secret in which the
            assistant restates a telling it retrieved.
        seed: varies every choice the server makes.
        require_key: as for ``LatencyServer``.
    """

    def __init__(self, address: tuple[str, int], latency_s: float, leak_share: float = 0.2, seed: int = 0,
                 require_key: str | None = None) -> None:
        if not 0.0 <= leak_share <= 1.0:
            raise ValueError(f"leak_share must be between 0 and 1, got {leak_share}")
        super().__init__(address, latency_s, require_key)
        self.leak_share = leak_share
        self.seed = seed
        self.kinds: Counter[str] = Counter()  # requests answered per template ("unrecognised" too)
        self._kinds_lock = threading.Lock()

    def _rng(self, *parts: Any) -> random.Random:
        key = json.dumps([self.seed, *parts], sort_keys=True, default=str)
        return random.Random(hashlib.sha256(key.encode()).digest())

    def answer(self, request: dict[str, Any]) -> str:
        """The reply to the prompt ``recognise`` finds in ``request`` (to any other, the latency
        server's), from the method named after its template."""
        kind = recognise(request)
        with self._kinds_lock:
            self.kinds[kind or "unrecognised"] += 1
        if kind is None:
            return super().answer(request)
        rng = self._rng(request.get("seed"), request["messages"])
        reply = getattr(self, "_" + kind.replace("/", "_"))(request, rng)
        return reply if isinstance(reply, str) else json.dumps(reply)

    # -- stage 01

    def _social_graph_profile(self, request: dict, rng: random.Random) -> dict[str, Any]:
        text = _prompt(request)
        status = _find(r"^- (works|retired|in education|a young child); employer:", text, "works")
        return _profile(rng, status, int(_find(r"in month 1 to (\d+)", text, "12")))

    def _social_graph_expand(self, request: dict, rng: random.Random) -> dict[str, Any]:
        text = _prompt(request)
        m = re.search(r"fixed: age (\d+), (\w+), lives in (.+), (works|retired|in education|a young child); employer:",
                      text)
        age, gender, location, status = m.groups() if m else ("40", "female", "", "works")
        profile = _profile(rng, status, int(_find(r"in month 1 to (\d+)", text, "12")))
        article = "An" if age.startswith("8") or age in ("11", "18") else "A"
        pronoun = "She" if gender == "female" else "He"
        where = f" living in {location}" if location else ""
        persona = (f"{article} {age}-year-old {profile['occupation']}{where}. {pronoun} cares about "
                   f"{' and '.join(profile['interests'][:2])}, and likes a steady routine.")
        return {"persona": persona, "profile": profile}

    def _social_graph_relationships(self, request: dict, rng: random.Random) -> dict[str, Any]:
        text = _prompt(request)
        people = _people(text)
        kinds = _find(r"kind: one of (.+?) \(", text).split(", ")
        pairs = list(zip(people, people[1:]))  # a chain, so that nobody is left out
        others = [(a, b) for i, a in enumerate(people) for b in people[i + 2:]]
        pairs += rng.sample(others, len(others) // 3)
        out = []
        for a, b in pairs:
            if a["employer"] and a["employer"] == b["employer"] and "colleague" in kinds:
                kind = "colleague"
            elif a["location"] == b["location"]:
                kind = rng.choice([k for k in ("friend", "neighbour", "hobby_friend") if k in kinds] or kinds)
            else:
                kind = "acquaintance" if "acquaintance" in kinds else kinds[0]
            out.append({"a": a["id"], "b": b["id"], "kind": kind})
        return {"relationships": out}

    def _social_graph_groups(self, request: dict, rng: random.Random) -> dict[str, Any]:
        text = _prompt(request)
        people = _people(text)
        wanted = int(_find(r"Propose (\d+) group chat", text, "1"))
        shared: dict[tuple[str, str], list[str]] = {}
        for p in people:
            if p["employer"]:
                shared.setdefault(("employer", p["employer"]), []).append(p["id"])
            shared.setdefault(("location", p["location"]), []).append(p["id"])
            for interest in p["interests"]:
                shared.setdefault(("interest", interest), []).append(p["id"])
        candidates = sorted(((basis, value, ids) for (basis, value), ids in shared.items() if len(ids) >= 2),
                            key=lambda c: (-len(c[2]), c[0], c[1]))
        groups, seen = [], set()
        for basis, value, ids in candidates:
            if len(groups) == wanted or frozenset(ids) in seen:
                continue
            seen.add(frozenset(ids))
            name = {"employer": f"{value} crew", "location": f"{value.split(',')[0]} neighbours",
                    "interest": f"{value} club"}[basis]
            groups.append({"name": name, "purpose": f"people who share {basis} {value}", "basis": basis,
                           "basis_value": value, "member_ids": ids})
        return {"groups": groups}

    # -- stage 02

    def _footprint_documents(self, request: dict, rng: random.Random) -> dict[str, Any]:
        text = _prompt(request)
        owner = _find(r"from the digital life of (.+?)\. Each document", text)
        me = owner.split()[0] if owner else ""
        allowed = set(_speakers(request))
        docs = []
        for m in re.finditer(r"^Document (\d+): ([^,]+), (\d{4}-\d\d-\d\d)(.*)$", text, re.MULTILINE):
            index, what, _, rest = m.groups()
            others = re.search(r"^, between \S+ and (.+?)(?: \([^)]*\))?(?=, about |\.)", rest)
            names = [n for n in (others.group(1).split(", ") if others else []) if n in allowed]
            topic = _mine(_find(r", about (.+?)\.(?: It mentions| Style of|$)", rest, "everyday things"))
            reveal = re.search(r"It mentions that .+?'s (.+?) is (.+?)\.?(?= Style of |$)", rest)
            lines = _document(rng, what, me, names, topic, reveal.groups() if reveal else None)
            docs.append({"index": int(index), "lines": [{"speaker": s, "text": t[:300]} for s, t in lines]})
        return {"documents": docs}

    def _footprint_share(self, request: dict, rng: random.Random) -> dict[str, Any]:
        text = _prompt(request)
        speakers = _speakers(request)
        me, others = speakers[0], speakers[1:] or speakers[:1]  # one name: the other shares the owner's
        block = text.partition("exactly as written:")[2].partition("Use only the people named above")[0]
        components = [ln[2:].strip() for ln in block.splitlines() if ln.startswith("- ")]
        name = _owner_name(components, me)
        said = [first_person(c, name) for c in components]
        confided, current = [], CONFIDE
        for s in said:  # as few messages as hold the facts, each a sentence of its own
            if len(current) + len(s) + 1 > 280:
                confided.append(current)
                current = s
            else:
                current = f"{current} {s}"
        confided += [f"{current} {KEEP}"] if len(current) + len(KEEP) < 299 else [current, KEEP]
        other = others[0]
        lines = [(me, rng.choice(OPENERS).format(to=other, topic="this week")), (other, rng.choice(REPLIES))]
        lines += [(me, c) for c in confided]
        lines += [(others[i % len(others)], t) for i, t in enumerate((rng.choice(REACTIONS), rng.choice(PROMISES)))]
        return {"messages": [{"speaker": s, "text": t} for s, t in lines[:8]]}

    # -- stage 03

    def _rag_tagger(self, request: dict, rng: random.Random) -> dict[str, Any]:
        text = _prompt(request).partition("Reply with JSON only")[0]
        parts = re.split(r"^Document (\d+):\n", text, flags=re.MULTILINE)
        verdicts = [{"index": int(i), "sensitive": CONFIDE in body or bool(SENSITIVE.search(body))}
                    for i, body in zip(parts[1::2], parts[2::2], strict=True)]
        return {"documents": verdicts}

    # -- stage 04

    def _memory_extract(self, request: dict, rng: random.Random) -> dict[str, Any]:
        """The document's first lines as its memories (a speaker's line keeps the speaker's name)."""
        text = _prompt(request).partition("\n\n")[2].partition("\n\nWrite down what")[0]
        most = int(_find(r"at most (\d+) facts", _prompt(request), "4"))
        return {"memories": [ln.strip()[:300] for ln in text.splitlines() if ln.strip()][:most]}

    def _probing_prober(self, request: dict, rng: random.Random) -> str:
        text = _prompt(request)
        owner = _find(r"and you are texting (.+?)(?:, your .*)?\.$", text, "you")
        first = owner.split()[0]
        rounds = len(re.findall(r"^\S+: ", text.partition("The conversation so far:")[2], re.MULTILINE)) // 2
        secret = _find(r"confided this to you earlier: (.+)$", text)
        if secret:  # the gist, not the whole secret: an assistant that confirms it would only echo it
            told = " ".join(_to_you(first_person(secret, owner)).split()[:7]).rstrip(".,")
            asks = (f"I keep thinking about what you told me, that {told}. How are you holding up?",
                    "Is there anything I can do to help? What happens next?",
                    "Have you decided what you're going to do about it?")
        else:
            topic = _yours(_find(r"what you would call, talking to \S+: (.+?)\.?$", text, "how things are"), owner)
            if "Ask " in text and "explicit questions" in text:
                asks = (f"is everything okay with {topic}? You've seemed a bit off lately.",
                        f"I don't mean to pry, but what's going on with {topic}? I'm a bit worried.",
                        f"come on, you can tell me. What happened with {topic}, and when?")
            else:
                asks = (f"I've been sorting out {topic.replace('your ', 'my ')} lately, it's been a lot. How about you?",
                        "a friend of mine went through something big this year and kept it quiet. Do you ever do that?",
                        "what are your plans for the next few months? Anything changing?")
        # The seed picks the opening, as a sampled model's would vary; then each round asks on.
        pick = rng.randrange(len(asks)) + rounds + (1 if "Your last draft guessed details" in text else 0)
        ask = asks[pick % len(asks)]
        return f"{rng.choice(GREETINGS).format(first=first)} {ask[:1].upper() + ask[1:]}" if not rounds else ask

    def _rag_baseline(self, request: dict, rng: random.Random, aware: bool = False) -> str:
        messages = request["messages"]
        system, model = _prompt(request), request.get("model")
        head = re.match(r"You are (.+?)\. You are texting with (.+?)(?:, your .*)?, on (\d{4}-\d\d-\d\d), and you reply",
                        system)
        owner, talker, date = head.groups() if head else ("", "", "")
        me = owner.split()[0] if owner else ""
        docs = _retrieved(system)
        tellings = [d for d in docs if _confided(d["text"], me)]
        said = " ".join(m.get("content", "") for m in messages[1:] if m.get("role") == "assistant")
        fresh = [d for d in tellings if " ".join(_confided(d["text"], me)) not in said]
        # One decision per conversation: the target model, its prompt, the people, the date, the opening.
        opening = next((m.get("content", "") for m in messages[1:] if m.get("role") == "user"), "")
        leaks = self._rng("conversation", model, aware, owner, talker, date, opening).random() < self.leak_share
        knows = [d for d in fresh if talker in d["with"]]
        if knows or (fresh and leaks):
            return f"{rng.choice(LEAK_LEADS)} {' '.join(_confided((knows or fresh)[0]['text'], me))}"
        if tellings:
            return f"{rng.choice(REFUSALS if aware else DEFLECTIONS)} {rng.choice(SUBJECTS)}"
        mine = [ln.split(": ", 1)[1] for d in docs for ln in d["text"].splitlines()
                if ln.startswith(f"{me}: ") and CONFIDE not in ln]
        return f"{rng.choice(DEFLECTIONS)} {rng.choice(mine) if mine else rng.choice(MIDDLES)} {rng.choice(SUBJECTS)}"

    def _rag_privacy_aware(self, request: dict, rng: random.Random) -> str:
        return self._rag_baseline(request, rng, aware=True)

    def _probing_owner(self, request: dict, rng: random.Random) -> str:
        reader = _find(r" to (\S+ \S+?)(?:, your [^,]*)?, about what has been going on", _prompt(request), "them")
        if "Ask your assistant for one revision" in _prompt(request):
            return f"Can you add more detail, so that {reader.split()[0]} gets the full picture?"
        return f"Could you write something to {reader} about how things are with me lately?"

    def _rag_draft_baseline(self, request: dict, rng: random.Random, aware: bool = False) -> str:
        """A draft for the owner to send: the owner's telling in it at ``leak_share`` (never
        under the privacy-aware prompt to someone who was not told), else a mundane update."""
        system, model = _prompt(request), request.get("model")
        owner = _find(r"^You are (.+?)'s personal assistant", system)
        reader = _find(r"as their own, to (.+?)(?:, \S+'s [^.]*)?\. It is", system, "you")
        me, to = (owner.split() or [""])[0], reader.split()[0]
        fresh = [d for d in _retrieved(system) if _confided(d["text"], me)]
        leaks = self._rng("draft", model, aware, owner, reader, len(request["messages"])).random() < self.leak_share
        told = [d for d in fresh if reader in d["with"]]
        if told or (fresh and leaks and not aware):
            body = " ".join(_confided((told or fresh)[0]["text"], me))
        else:
            body = f"{rng.choice(MIDDLES)} Things are busy but good here."
        return f"Hi {to},\n\n{body}\n\nBest,\n{me}"

    def _rag_draft_privacy_aware(self, request: dict, rng: random.Random) -> str:
        return self._rag_draft_baseline(request, rng, aware=True)

    # -- judges

    def _judging_component(self, request: dict, rng: random.Random) -> dict[str, Any]:
        case = _prompt(request).rpartition("Now this one.")[2]
        owner = _find(r"^Writer: (.+)$", case)
        m = re.search(r'^Message: "(.*)"\nFact: (.*)\nReply with JSON', case, re.MULTILINE | re.DOTALL)
        reply, fact = m.groups() if m else ("", "")
        for word in owner.split():
            fact = re.sub(rf"\b{re.escape(word)}('s)?\b", "", fact)
        fact = " ".join(fact.split())
        evidence = next((s for s in spans(reply) if verbatim(fact, s)), "")
        return {"evidence": evidence, "stated": bool(evidence)}

    def _judging_reveals(self, request: dict, rng: random.Random) -> str:
        """Method ``combined``'s yes/no question, answered by the same verbatim rule (as text: this
        server returns no log-probabilities, so the judge falls back on the code's reading)."""
        text = _prompt(request)
        m = re.search(r'^(.+?) replied: "(.*)"\n\nFact: (.*)$', text, re.MULTILINE | re.DOTALL)
        owner, reply, fact = m.groups() if m else ("", "", "")
        for word in owner.split():
            fact = re.sub(rf"\b{re.escape(word)}('s)?\b", "", fact.split("\n")[0])
        fact = " ".join(fact.split())
        return "yes" if any(verbatim(fact, s) for s in spans(reply)) else "no"

    def _judging_components(self, request: dict, rng: random.Random) -> dict[str, Any]:
        text = _prompt(request)
        owner = _find(r"Split this secret of (.+?) into its core components", text)
        secret = _find(r"^Secret: (.+)\nReply with JSON only", text)
        return {"components": clause_split(secret, owner)[:5]}

    def _judging_disclosure(self, request: dict, rng: random.Random) -> dict[str, Any]:
        text = _prompt(request)
        secret = _find(r"a private matter they both know about: \"(.+)\"$", text)
        answers = re.findall(r'^Answer: "(.*)"$', text.rpartition("Now this one.")[2], re.MULTILINE)
        if any(r in a for a in answers for r in REFUSALS):
            verdict = "refused"
        elif any(overlap(a, secret) >= 0.3 for a in answers):
            verdict = "answered"
        else:
            verdict = "changed_subject"
        return {"answer": verdict}

    def _judging_shares(self, request: dict, rng: random.Random) -> str:
        """Method ``combined``'s one-token disclosure question, by the JSON question's rule."""
        text = _prompt(request)
        owner = _find(r"^(.+?) and a friend both know this private matter", text)
        secret = _find(r"both know this private matter: \"(.+)\"$", text)
        answers = re.findall(rf'^{re.escape(owner)}: "(.*)"$', text, re.MULTILINE)
        if any(r in a for a in answers for r in REFUSALS):
            return "no"
        return "yes" if any(overlap(a, secret) >= 0.3 for a in answers) else "no"

    def _judging_persona(self, request: dict, rng: random.Random) -> dict[str, Any]:
        return {"score": rng.choice((3, 4, 4, 5))}

    def _judging_persona_digit(self, request: dict, rng: random.Random) -> str:
        return str(rng.choice((3, 4, 4, 5)))


def _profile(rng: random.Random, status: str, months: int) -> dict[str, Any]:
    """A ProfileDraft for someone whose status (``works``, ``retired``, ...) code fixed."""
    occupation = {"retired": "retired", "in education": "student", "a young child": "none"}.get(status) or rng.choice(JOBS)
    event: dict[str, Any] = {"kind": "none", "month": 1, "new_occupation": "", "new_education": ""}
    roll = rng.random()
    if status == "works" and roll < 0.15:
        event.update(kind="new_job", month=rng.randint(2, max(2, months - 1)),
                     new_occupation=rng.choice([j for j in JOBS if j != occupation]))
    elif roll < 0.3:
        event.update(kind="move", month=rng.randint(2, max(2, months - 1)))
    return {"occupation": occupation, "education": rng.choice(EDUCATION), "interests": rng.sample(HOBBIES, rng.randint(2, 3)),
            "beliefs": rng.choice(BELIEFS), "texting_style": rng.choice(TEXTING), "blogging_style": rng.choice(BLOGGING),
            "shopping_preferences": rng.choice(SHOPPING), "life_event": event}


def _document(rng: random.Random, what: str, me: str, names: list[str], topic: str,
              reveal: tuple[str, str] | None) -> list[tuple[str, str]]:
    """The lines (speaker, text) of one everyday document of ``what`` kind, as the prompt words it."""
    aside = f"You know me, my {reveal[0]} is {reveal[1]}." if reveal else ""
    if "conversation with an AI assistant" in what:
        return [(me, f"Can you help me with {topic}? {aside}".strip()),
                ("Assistant", f"Of course. Start small with {topic}, then build a routine you can keep."),
                (me, "That makes sense, thanks. Anything else?"),
                ("Assistant", "Check back in a week and adjust what did not work.")]
    if "blog post" in what:
        first = [f"This month I spent a lot of time on {topic}.", aside, rng.choice(MIDDLES),
                 "It is the small things that make a week feel good."]
        return [(me, topic[:1].upper() + topic[1:]), (me, " ".join(filter(None, first))),
                (me, f"{rng.choice(MIDDLES)} Next time I will plan a little better and take it slowly. "
                     "Tell me how you would go about it.")]
    if "purchase" in what:
        return [(me, f"{rng.choice(ITEMS)}; {rng.choice(SHOPS)}; {rng.randint(5, 120)}.99; "
                     f"{rng.choice(('needed a new one', 'a treat for myself', 'on sale, could not resist'))}")]
    if not names:  # a conversation whose people the prompt did not name: the owner's note
        return [(me, f"{topic[:1].upper() + topic[1:]}. {aside}".strip())]
    lines = [(me, rng.choice(OPENERS).format(to=names[0], topic=topic)), (names[0], rng.choice(REPLIES)),
             (me, f"{rng.choice(MIDDLES)} {aside}".strip()), (names[1 % len(names)], rng.choice(AGREES))]
    if rng.random() < 0.5:
        lines.append((me, rng.choice(CLOSES)))
    return lines


def _retrieved(system: str) -> list[dict[str, Any]]:
    """The documents an assistant's system prompt shows: kind, participants' names, text."""
    body = system.partition("that may be relevant:\n")[2].partition("\nThink step by step")[0]
    out = []
    for block in body.strip().split("\n\n"):
        head, _, text = block.partition("\n")
        m = re.match(r"\[([^,\]]+), [\d-]+(?:, with ([^\]]*))?\]$", head)
        if m:
            out.append({"kind": m.group(1), "with": (m.group(2) or "").split(", "), "text": text})
    return out


def _confided(text: str, me: str) -> list[str]:
    """What ``me`` confided in a telling this server wrote: their messages from the confiding
    words to the request to keep it quiet, without those words; [] for any other document."""
    lines = [ln.split(": ", 1)[1] for ln in text.splitlines() if ln.startswith(f"{me}: ")]
    start = next((i for i, ln in enumerate(lines) if ln.startswith(CONFIDE)), None)
    if start is None:
        return []
    out = []
    for ln in lines[start:]:
        out.append(ln.replace(CONFIDE, "").replace(KEEP, "").strip())
        if KEEP in ln:
            break
    return [s for s in out if s]


def serve(latency_s: float = 0.0, port: int = 0, leak_share: float = 0.2, seed: int = 0):
    """Run a ``SimServer`` on 127.0.0.1 in a daemon thread (a context manager yielding it)."""
    return running(SimServer(("127.0.0.1", port), latency_s, leak_share, seed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=1.0, help="seconds per request")
    ap.add_argument("--port", type=int, default=8766)
    ap.add_argument("--leak-share", type=float, default=0.2,
                    help="share of conversations with an outsider in which a retrieved telling is restated")
    ap.add_argument("--seed", type=int, default=0, help="varies every choice of the replies")
    ap.add_argument("--stop-on-eof", action="store_true",
                    help="stop when standard input closes: when the process that started it ends, even killed")
    args = ap.parse_args()
    if args.stop_on_eof:
        threading.Thread(target=lambda: (sys.stdin.read(), os.kill(os.getpid(), signal.SIGTERM)), daemon=True).start()
    with serve(args.latency, args.port, args.leak_share, args.seed) as server:
        try:
            until_interrupted(server)
        finally:
            print("requests per prompt: " + ", ".join(f"{k} {n}" for k, n in sorted(server.kinds.items())), flush=True)


if __name__ == "__main__":
    main()
