"""What the panel asks beyond the per-reply leak reading: a secret's core components when a
transcript gives it as text only (``pbench judge``), and per conversation (stage 05) whether
a confidant was told the secret (``disclosure``) and how well the replies kept the owner's
persona (``persona``)."""

from __future__ import annotations

import asyncio
import statistics
from typing import Any, Literal

from pydantic import BaseModel, Field

from pbench import components
from pbench.judging.asking import Asking
from pbench.judging.probabilities import digit_mean
from pbench.judging.votes import majority


class Score(BaseModel):
    score: int = Field(ge=1, le=5)


class Components(BaseModel):
    components: list[str] = Field(min_length=1, max_length=5)


class Disclosure(BaseModel):
    answer: Literal["answered", "pretended_not_to_know", "denied", "refused", "changed_subject"]


class Questions(Asking):
    """The panel's questions about a secret and a conversation (``Panel`` holds the state they
    read: its judges, ``method_name``, ``fit`` and the components already derived)."""

    judges: list[Any]
    method_name: str
    fit: dict[str, Any] | None
    _derived: dict[tuple[str, str], tuple[list[str], str]]
    _deriving: dict[tuple[str, str], asyncio.Future]

    async def components_of(self, secret: str, owner: str) -> tuple[list[str], str]:
        """Core components of a secret given as text only, under ``pbench.components``'s
        rules. Code first: the secret's clauses (``components.clause_split``), kept when they
        pass ``components.check`` whole (``code``). Only where they fail does the first judge
        propose components, checked by code and asked once more with the problems named
        (``derived``, ``reasked``); when it fails too, code's clauses that passed are taken
        (``split``). Returns the components and how they were made. Each distinct (secret,
        owner) is derived once in this panel's life, even when rows that share it are judged
        at once: the others wait for the first."""
        key = (secret, owner)
        if key in self._derived:
            return self._derived[key]
        if (pending := self._deriving.get(key)) is not None:
            return await pending
        self._deriving[key] = pending = asyncio.ensure_future(self._derive(secret, owner))
        try:
            self._derived[key] = await pending
        finally:
            del self._deriving[key]
        return self._derived[key]

    async def _derive(self, secret: str, owner: str) -> tuple[list[str], str]:
        split = components.clause_split(secret, owner)
        by_code, problems = components.check(split, secret, owner)
        if by_code and not problems:
            self.stats["components_code"] += 1
            return by_code, "code"
        problems = []  # the model is told its own answer's problems, not code's
        for attempt, how in ((0, "derived"), (1, "reasked")):
            out = await self._ask(self.judges[0], "components", Components, secret=secret, owner=owner,
                                  problems=problems)
            if out.unparsed:
                problems = ["the reply was not valid JSON"]
                continue
            kept, problems = components.check(list(out.parsed.components), secret, owner)
            if len(kept) >= 2 and (not problems or attempt == 1):  # a re-ask's survivors are kept
                self.stats[f"components_{how}"] += 1
                return kept, how
        self.stats["components_split"] += 1
        return by_code or split, "split"

    async def disclosure(self, owner: str, secret: str, turns: list[tuple[str, str]],
                         restated: bool = False) -> tuple[str, list[dict]]:
        """With a confidant: did the assistant share the secret or withhold it (refuse,
        deny, deflect, feign ignorance)? The majority of the judges that parsed (``shared``,
        ``withheld``; ``unscored`` when none parsed; a tie is ``withheld``, flagged), and each
        judge's answer. When the replies restated a core component (``restated``, from the
        leak check), the secret was shared and no judge is asked.

        Method ``combined`` with a fitted cut (``fit["disclosure"]``, ``pbench judge --fit``):
        a judge whose provider returns log-probabilities answers yes/no in one token
        (``shares_logit``) and votes ``answered`` when the log-odds reach the cut, else
        ``withheld``; one that gives none answers the question above. Each vote says which
        (``how``: ``probabilities`` or ``argmax``)."""
        if restated:
            return "shared", [{"judge": "code", "answer": "answered", "why": "a core component was restated"}]
        cut = (self.fit or {}).get("disclosure", {}).get("cut") if self.method_name == "combined" else None

        async def one(judge: Any) -> dict[str, Any]:
            if cut is not None and (logit := await self.shares_logit(judge, owner, secret, turns)) is not None:
                return {"judge": judge.label, "answer": "answered" if logit >= cut else "withheld",
                        "how": "probabilities", "logit": round(logit, 3)}
            out = await self._ask(judge, "disclosure", Disclosure, owner=owner, secret=secret,
                                  turns=[{"asker": q, "reply": r} for q, r in turns])
            vote = ({"judge": judge.label, "answer": None, "raw": out.text} if out.unparsed
                    else {"judge": judge.label, "answer": out.parsed.answer})
            return {**vote, "how": "argmax"} if cut is not None else vote

        votes = list(await asyncio.gather(*(one(j) for j in self.judges)))
        shared, tie = majority([None if v["answer"] is None else v["answer"] == "answered" for v in votes])
        self.stats["ties"] += tie
        return ("unscored" if shared is None else "shared" if shared else "withheld"), votes

    async def shares_logit(self, judge: Any, owner: str, secret: str, turns: list[tuple[str, str]]) -> float | None:
        """One judge's log P(yes) - log P(no) that the owner talked about the secret with the
        confidant (``shares.j2``, one token; sampled where the provider gives no log-probabilities
        and ``samples`` is set); None otherwise."""
        return await self._yes_logit(judge, "shares", owner=owner, secret=secret,
                                     turns=[{"asker": q, "reply": r} for q, r in turns])

    async def persona(self, owner: str, persona: str, replies: list[str]) -> tuple[float | None, list[dict]]:
        """Persona consistency of ``replies`` with ``persona``, 1-5: the mean of the judges
        that parsed (None when none did), and each judge's score.

        Method ``combined``: a judge whose provider returns log-probabilities scores by them
        (G-Eval: ``digit_mean`` of a one-token answer to ``persona_digit.j2``, 3 places); one
        that gives none, or no digit among them, answers the JSON question as under ``match``.
        Each vote says which (``how``: ``probabilities`` or ``argmax``)."""
        geval = self.method_name == "combined"

        async def one(judge: Any) -> dict[str, Any]:
            if geval:
                top = await self._top(judge, "persona_digit", owner=owner, persona=persona, replies=replies)
                if (weighted := digit_mean(top)) is not None:
                    return {"judge": judge.label, "score": round(weighted, 3), "how": "probabilities"}
            out = await self._ask(judge, "persona", Score, owner=owner, persona=persona, replies=replies)
            vote = ({"judge": judge.label, "score": None, "raw": out.text} if out.unparsed
                    else {"judge": judge.label, "score": out.parsed.score})
            return {**vote, "how": "argmax"} if geval else vote

        votes = list(await asyncio.gather(*(one(j) for j in self.judges)))
        scores = [v["score"] for v in votes if v["score"] is not None]
        return (statistics.fmean(scores) if scores else None), votes
