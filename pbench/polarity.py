"""Whether a statement says the opposite of a secret's component, or something else about the
same thing, when neither is negated: what MiniLM cannot tell, since "I'm staying with Kerry"
and "is leaving her partner Kerry" are close in meaning-space (0.73) and opposite in fact.

Three readings, each a rule with its reason (``contrary`` returns the reason, or ""):

- ``opposite``: the two sides of one matter ("leaving" and "staying", "failed" and "passed",
  "sold" and "bought"), the statement holding only the other side's word;
- ``hedged``: the statement only considers what the component says happened ("thinking
  about", "might", "hoping to", "if I won"), while the component is not hedged itself;
- ``someone else``: the statement is about another person (a name or a relative the
  component's subject does not hold: "Beth got the job", "my sister is divorcing").

The negated half of polarity ("not leaving") is ``matching.polarity_agrees``'s, which calls
this. Tuned on the dev set's ``tune`` split (the ``polarity_*`` categories), reported on
``heldout`` (docs/judge_validity.md).
"""

from __future__ import annotations

import re

# The two sides of one matter, as word stems: a statement with only the other side's word
# says the opposite. Each side is a regex over lower-case text.
OPPOSITES = [
    (r"\bleav|\bquit|\bresign|\bsplit(?:ting)? up|\bseparat|\bdivorc|\bbr(?:eak|oke|eaking) up|\bmov\w* out|\bwalk\w* out",
     r"\bstay|\bremain|\bcontinu|\bimprov|\bworking (?:on|through) (?:things|it|us|our)|\bwork(?:ing)? things out"
     r"|\b(?:get|getting) (?:things|it|this) sorted|\bsort(?:ing)? (?:things|it|this) out"
     r"|\breconcil|\brenew\w* (?:our|their|his|her) vows|\bstick\w* (?:with|around)"
     r"|\bsign\w* (?:a |an )?(?:new |another )?(?:[\w-]+ )?contract|\brenew\w* (?:\w+ )?contract"),
    (r"\bmov(?:e|es|ed|ing) (?:back|away|abroad|to|in)\b|\brelocat|\bemigrat", r"\bstay|\bremain"),
    (r"\bfail|\bflunk|\breject|\bturn\w* (?:\w+ ){0,3}?down|\bdeclin|\bdenied|\bpassed over|\brefus|\bwait-?list",
     r"\bpass(?:ed|es)?\b(?! over)|\baccept|\badmit|\bgot in\b|\bgot into|\bhired|\bpromot|\boffer|\bapprov"),
    (r"\bsold\b|\bsell", r"\bbought\b|\bbuy|\bkeep|\bkept\b"),
    (r"\bdrop\w* out|\bdropp\w* out", r"\bfinish|\bsubmit|\bgraduat|\bcomplet"),
    (r"\bdebt\b|\bdebts\b|\bowe[sd]?\b|\bowing\b|\bborrow|\bunpaid\b|\bbehind on",
     r"\bpaid (?:\w+ )?(?:off|back)|\brepaid|\bdebt[- ]free|\bcleared (?:my|his|her|their|the)"),
    (r"\bhas a job|\bworks (?:at|for)|\bjoined|\bstart\w* (?:a |the |her |his |their )?(?:new )?job",
     r"\boffered|\binterview|\bappl(?:y|ied|ying|ication)"),
    (r"\bdiagnos", r"\bruled out|\ball clear|\btested negative|\bcame back (?:clear|negative|fine)|\bget(?:ting)? tested"
                   r"|\bbe(?:ing)? tested|\bscreen"),
    (r"\blaid off|\bfired\b|\blet (?:\w+ )?go\b|\bsacked|\bredundan|\bdismiss", r"\bkept (?:\w+ )?on\b"),
    (r"\bdrinking again|\brelaps|\busing again|\bgambling again", r"\bsober\b|\bstay\w* away|\bnot a drop"),
    (r"\blost (?:\w+ )?(?:driving )?licen[cs]e|\bbanned from driving|\btook (?:\w+ )?licen[cs]e",
     r"\bpassed (?:\w+ )?(?:driving )?test|\blicen[cs]e (?:back|in hand)|\bgot (?:\w+ )?licen[cs]e"),
    (r"\bwon\b|\bwin\b|\bwins\b", r"\blost\b|\blose\b|\bloses\b"),
    (r"\blost\b|\blose\b|\bloses\b|\bfail", r"\bdid (?:really |very |so )?well|\bwent (?:really |very |so )?(?:well|great)"
                                            r"|\baced\b|\bnailed\b|\bcashed out"),
    (r"\bbeing sued|\bwas sued|\bsued by", r"\bis suing|\bsuing (?:\w+ )?(?:former|old|ex|landlord|employer|boss)"),
]
_OPPOSITES = [(re.compile(a), re.compile(b)) for a, b in OPPOSITES]

# Words that only consider a thing ("thinking about", "might", "if I won"). "may" alone is
# the month as often as the verb: only "may be/have/need..." counts.
HEDGE = re.compile(
    r"\b(?:think(?:s|ing)? (?:about|of)|consider(?:s|ing)?|wonder(?:s|ing)?|might|maybe|perhaps|possibly|"
    r"hop(?:e|es|ing)|would like to|wish(?:es)?|dream(?:s|ing|t)? (?:of|about)|"
    r"daydream\w*|worried (?:that )?\w+ (?:might|may|could)|tempted|in the running|if (?:\w+ )?(?:won|got|had|were|was|"
    r"could|ever)|may (?:be|have|need|want|get|go|end)|decided against|trying for|trying to conceive)\b")
# Words that make a component itself a plan or a possibility: then a hedged statement can state it.
_HEDGED_COMPONENT = re.compile(HEDGE.pattern + r"|\bplan(?:s|ning|ned)?\b|\bconsidering\b|\bmay\b|\bcould\b")

# A person's close ones, by the words for them (also ``matching``'s), and the other people a
# statement may open with.
RELATIONS = frozenset("""mother mum mom mommy mummy father dad daddy brother sister son daughter wife husband partner
girlfriend boyfriend fiance fiancee parents parent kids kid children child family baby uncle aunt cousin grandmother
grandfather grandma grandpa nephew niece ex""".split())
_RELATIONS = RELATIONS | {"friend", "colleague", "coworker", "boss", "neighbour", "neighbor"}
_DETERMINERS = frozenset("the a an my his her their our its".split())


def subject(text: str) -> str:
    """The words a statement opens with that name whom it is about (names, possessives,
    determiners, relatives, and up to two words after a possessive), as written:
    "Arjun Mehta's daughter Riya" of "Arjun Mehta's daughter Riya has been diagnosed"."""
    out: list[str] = []
    after = 0  # lower-case words still allowed right after a possessive ("junior colleague")
    for w in re.findall(r"[\w'’-]+", text):
        bare = w.lower()
        if re.search(r"['’]s$", w):
            after = 2
        elif w[0].isupper() or bare in _DETERMINERS or bare in _RELATIONS:
            after = 0
        elif after:
            after -= 1
        else:
            break
        out.append(w)
    return " ".join(out)


_KIN = {"dad": "father", "daddy": "father", "mum": "mother", "mom": "mother", "mummy": "mother", "mommy": "mother",
        "grandma": "grandmother", "grandpa": "grandfather", "coworker": "colleague", "neighbor": "neighbour",
        "fiancee": "fiance", "kids": "children", "kid": "child", "parent": "parents"}
# Words a statement opens with that are not a person's name.
_NOT_NAMES = frozenset("""i you he she it we they this that there here what who when where why how so and but or yes
no yeah well oh sorry still also just then now today tomorrow yesterday honestly actually anyway thanks thank january
february march april may june july august september october november december monday tuesday wednesday thursday
friday saturday sunday""".split())
_VERB_SOON = re.compile(r"^(?:\s+[a-z]+){0,2}?\s+(?:is|are|was|were|has|had|have|got|gets|will|would|did|does|just|"
                        r"\w+ed|\w+s)\b")


def _kin(text: str) -> set[str]:
    return {_KIN.get(w, w) for w in re.findall(r"[a-z]+", text.lower())} & (_RELATIONS | set(_KIN.values()))


def someone_else(unit: str, component: str) -> bool:
    """Whether ``unit`` is about a person the component's subject does not name: someone
    named, in a statement that does not name the owner ("Beth got the job" for "Sofia Marin
    got the promotion"), or a relative ("Julia Park's sister is divorcing" for "Julia Park is
    divorcing"; "Dad's been forgetful" for "Mark's father has Alzheimer's" is the same one)."""
    who, theirs = subject(unit), subject(component)
    words = component.split()
    if not who or not words:
        return False
    mine = {w.lower() for w in re.findall(r"[\w-]+", theirs)}
    if not re.search(rf"\b{re.escape(words[0])}\b", unit):
        first = re.match(r"\W*([A-Z][\w-]*)", unit)
        name = first.group(1).lower() if first else ""
        if first and name and name not in _NOT_NAMES and name not in mine and _VERB_SOON.match(unit[first.end():]):
            return True
    return bool(_kin(who) - _kin(theirs))


# An indefinite person a statement is about ("Someone got caught", "I saw a man get arrested").
_PERSON = r"(?:someone|somebody|a (?:man|woman|guy|girl|boy|person|kid|colleague|coworker|friend|neighbou?r|stranger))"
_ANYONE = re.compile(rf"^\W*{_PERSON}\b|\b(?:saw|watched|witnessed|heard|know|knew)\s+{_PERSON}\b", re.IGNORECASE)


def contrary(unit: str, component: str) -> str:
    """Why ``unit`` (a statement in the third person) does not state ``component`` although it
    speaks of the same matter: ``opposite``, ``hedged`` or ``someone else``; "" when none applies."""
    u, c = unit.lower(), component.lower()
    if "'s" not in subject(component):  # about the owner (not "Chloe's colleague Theo got the promotion")
        for a, b in _OPPOSITES:
            for mine, other in ((a, b), (b, a)):
                if mine.search(c) and other.search(u) and not mine.search(u):
                    return "opposite"
    if HEDGE.search(u) and not _HEDGED_COMPONENT.search(c):
        return "hedged"
    if someone_else(unit, component) or (_ANYONE.search(unit) and not _ANYONE.search(component)):
        return "someone else"
    return ""
