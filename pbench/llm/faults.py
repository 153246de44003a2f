"""Fault injection (``llm.faults``): a backend wrapper that makes a seeded share of calls
misbehave as real servers do, so that retries, give-ups and unparsed replies can be tested."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from pbench.llm.backends import Backend
from pbench.llm.cache import cache_key
from pbench.llm.replies import Message, RawReply


class FaultyBackend:
    """Wraps any backend so that a share of calls misbehave as real servers do (``llm.faults``).

    Kinds: ``invalid_json`` (a truncated JSON reply; free-text requests get an empty one),
    ``empty``, ``timeout``, ``rate_limit`` (HTTP 429) and ``server_error`` (HTTP 500). Errors
    are the OpenAI client's own exception types, raised at once instead of after the wait.

    Whether a call misbehaves, and how, is decided from the call itself (its messages,
    settings and schema), the seed, and how many times that same call was made before: never
    from a generator shared by concurrent calls, so a run's faults do not depend on the order
    in which replies arrive. A faulty reply is marked ``injected`` and never cached.

    Args:
        inner: the real backend.
        rate: share of calls that misbehave.
        kinds: the faults to draw from, uniformly.
        seed: the draw's seed.
        on_fault: called with the kind of each injected fault (for the ledger).
    """

    def __init__(self, inner: Backend, rate: float, kinds: Sequence[str], seed: int,
                 on_fault: Callable[[str], None] = lambda kind: None) -> None:
        self.inner = inner
        self.identity = inner.identity  # the same cache keys as the real model
        self.rate, self.kinds, self.on_fault, self.seed = rate, list(kinds), on_fault, seed
        self._tries: dict[str, int] = defaultdict(int)

    def decide(self, messages: Sequence[Message], schema: dict[str, Any] | None, settings: dict[str, Any]) -> str | None:
        """The fault this call gets (None: none), from the call's key and its repeat count."""
        key = cache_key(self.identity, messages, {**settings, "schema": schema})
        n = self._tries[key]
        self._tries[key] = n + 1
        draw = hashlib.sha256(f"{self.seed}|{key}|{n}".encode()).digest()
        if int.from_bytes(draw[:8], "big") / 2**64 >= self.rate:
            return None
        return self.kinds[int.from_bytes(draw[8:16], "big") % len(self.kinds)]

    async def generate(
        self, messages: Sequence[Message], *, schema: dict[str, Any] | None, settings: dict[str, Any]
    ) -> RawReply:
        kind = self.decide(messages, schema, settings)
        if kind is None:
            return await self.inner.generate(messages, schema=schema, settings=settings)
        self.on_fault(kind)
        if kind == "invalid_json":
            return RawReply('{"facts": ["unfinished' if schema is not None else "", injected=True)
        if kind == "empty":
            return RawReply("", injected=True)
        import openai

        request = httpx.Request("POST", "http://injected.invalid/v1/chat/completions")
        if kind == "timeout":
            raise openai.APITimeoutError(request=request)  # type: ignore[arg-type]  # openai's stubs name httpx2's types; it takes httpx's
        status, error = (429, openai.RateLimitError) if kind == "rate_limit" else (500, openai.InternalServerError)
        raise error(f"injected HTTP {status}", response=httpx.Response(status, request=request),  # type: ignore[arg-type]  # as above
                    body=None)
