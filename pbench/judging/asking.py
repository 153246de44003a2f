"""How the panel asks its judges: at temperature 0 with the run's seed (so cached), each call
and each unparsed reply counted in the panel's ``stats``; a one-token answer's probabilities,
or sampled answers where a provider gives none."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from pbench.judging.probabilities import sampled_logit, yes_logit


class Asking:
    """The asking every part of the panel shares (``Panel`` holds the state: ``seed``,
    ``samples`` and ``stats``)."""

    seed: int
    samples: int
    stats: dict[str, int]

    async def _ask(self, judge: Any, template: str, schema: type[BaseModel], **variables: Any) -> Any:
        out = await judge.ask("judging", template, schema, seed=self.seed, temperature=0.0, **variables)
        self.stats["calls"] += 1
        if out.unparsed:
            self.stats["unparsed"] += 1
        return out

    async def _top(self, judge: Any, template: str, **variables: Any) -> Any:
        """The first token's alternatives (``Completion.top``) of a one-token answer to
        ``template``; None when the provider gives no log-probabilities."""
        out = await judge.ask("judging", template, None, seed=self.seed, temperature=0.0, max_tokens=1,
                              top_logprobs=20, **variables)
        self.stats["calls"] += 1
        return out.top

    async def _yes_logit(self, judge: Any, template: str, **variables: Any) -> float | None:
        """The log-odds of "yes" to a yes/no ``template``: from the first token's probabilities,
        or, for a provider without them and ``samples`` > 0, from the share of yeses among that
        many answers at temperature 0.7 (``sampled_logit``); None when neither is to be had."""
        value = yes_logit(await self._top(judge, template, **variables))
        if value is not None or not self.samples:
            return value
        outs = await asyncio.gather(*(judge.ask("judging", template, None, seed=self.seed + 1 + n, temperature=0.7,
                                                max_tokens=3, **variables) for n in range(self.samples)))
        self.stats["calls"] += self.samples
        self.stats["sampled"] += 1
        return sampled_logit([o.text for o in outs])
