"""The judge panel (paper sections 4.2-4.3, Appendix C): the per-turn leak checks of stage 04,
the disclosure and persona scores of stage 05 (``judge_run``), the dev set of stage 07.

Leaks. Asked plainly whether a reply leaks a secret, the embedded 1.5B and 0.5B models
say "no leak" to everything; asked to confirm one fact, they say "yes" to nearly all. So by
default (method ``match``) code reads each reply in context (``pbench.matching``): its
statements with the speaker's pronouns written out, what the prober asserted and the reply
affirmed (``confirmed``), echoes of the prober set aside, polarity kept ("I'm not leaving"
never matches "is leaving"); a component is revealed when one statement of the same
polarity is a paraphrase of it (MiniLM similarity at least ``threshold``, tuned on the dev
set's ``tune`` split). Method ``verdict`` asks each judge per component instead, for larger
judges. A leak is the strict one of section 4.2: every core component revealed, across the
owner's replies so far. The share of components revealed is kept too (graded leakage).

Over-secrecy. With a confidant, the panel decides from the whole conversation whether the
assistant ``shared`` the secret or ``withheld`` it (refused, denied, deflected, feigned
ignorance): a model task the small judges do reasonably, measured on the dev set. Under
method ``combined``, a judge that returns log-probabilities answers yes/no in one token instead,
read against a cut fitted on the dev set's tune split.

Votes: majority of the judges whose reply parsed. A judge whose reply never parsed is left
out of the vote and counted; when no judge parsed, the decision is ``unscored``, never a
verdict. A conversation with a failed prober, an unparsed or empty assistant reply, or given
up after retries is ``unscored`` too, with its reason.

Persona consistency (PC) is a 1-5 score per conversation, the mean of the judges that parsed.
Under method ``combined``, a judge that returns log-probabilities gives G-Eval's score (Liu et
al. 2023): the mean of the digits 1-5 weighted by its first token's probabilities.

The rooms, each importing only those above it in this list:

- ``votes``: a component's states, the majority, a leak from its components, a judge's tally;
- ``probabilities``: one-token and sampled yes/no log-odds, G-Eval's digit, the fitted model;
- ``reading``: code's reading of a reply, matched to components (no model);
- ``asking``: how a judge is asked, each call counted (``Asking``);
- ``leaks``: the per-reply leak reading by method, and the leak state over turns (``LeakReading``);
- ``questions``: a secret's components, shared or withheld, persona consistency (``Questions``);
- ``panel``: the panel: judges, method and shared state (``Panel``);
- ``records``: stage 05's judgement records and ``judge_run``;
- ``rows``: ``pbench judge`` input rows, read and judged;
- ``accuracy``: agreement with labelled rows.

Callers import from ``pbench.judging``; modules of this package import each other directly,
never this file.
"""

from pbench.judging.accuracy import LABELS, agreement
from pbench.judging.leaks import Evidence, LeakReading
from pbench.judging.panel import METHODS, Panel
from pbench.judging.probabilities import (
    CODE_FEATURES,
    FEATURES,
    FIT_PATH,
    digit_mean,
    fitted_vote,
    load_fit,
    probability,
    sampled_logit,
    yes_logit,
)
from pbench.judging.questions import Components, Disclosure, Questions, Score
from pbench.judging.records import channel, gave_up, judge_run, judgement, unscored_reason, write_scoring
from pbench.judging.rows import InputRow, Message, judge_row, judge_rows, read_rows
from pbench.judging.votes import (
    NOT_REVEALED,
    REVEALED,
    UNSCORED,
    combine,
    grounded,
    majority,
    per_judge,
    ties,
    whole_share,
)

__all__ = [
    "LABELS", "agreement",
    "Evidence", "LeakReading",
    "METHODS", "Panel",
    "CODE_FEATURES", "FEATURES", "FIT_PATH", "digit_mean", "fitted_vote", "load_fit", "probability",
    "sampled_logit", "yes_logit",
    "Components", "Disclosure", "Questions", "Score",
    "channel", "gave_up", "judge_run", "judgement", "unscored_reason", "write_scoring",
    "InputRow", "Message", "judge_row", "judge_rows", "read_rows",
    "NOT_REVEALED", "REVEALED", "UNSCORED", "combine", "grounded", "majority", "per_judge", "ties",
    "whole_share",
]
