"""The chat model a role is bound to: one request answered through the cache, the server's
gate, bounded retries on transient errors, and bounded re-asks of replies that do not parse.

A reply that cannot be parsed is retried with a new seed a bounded number of times, then
returned with ``unparsed=True`` and its raw text, and counted: never turned into a default
value. Transient errors are retried with backoff a bounded number of times, then raised as
``LLMError`` and counted as a give-up.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from pbench.config import ModelSpec
from pbench.llm.backends import Backend
from pbench.llm.cache import ResponseCache, cache_key
from pbench.llm.concurrency import RUNTIME, Gate, concurrency_of, run_sync
from pbench.llm.errors import LLMError, refusals, transient_errors
from pbench.llm.ledger import LEDGER, Ledger
from pbench.llm.replies import Completion, Message, RawReply, parse_reply


@dataclass
class ChatModel:
    """A model bound to a role: the one object stage code talks to.

    Args:
        spec: the model spec from the parameters.
        role: the role name, for accounting.
        backend: the transport (``make_backend(spec)`` unless a test passes a fake).
        cache: the response cache, or None to always call.
        seed: default seed of requests that do not give one.
        backoff_s: first backoff delay for transient errors (doubles each retry, capped at 30 s).
    """

    spec: ModelSpec
    role: str
    backend: Backend
    cache: ResponseCache | None = None
    seed: int | None = 0
    backoff_s: float = 1.0
    ledger: Ledger = field(default_factory=lambda: LEDGER)
    gate: Gate | None = None
    # Requests in flight by cache key: an identical request asked meanwhile waits for the same
    # reply instead of asking the model again (all on RUNTIME's one event loop).
    _flying: dict[str, asyncio.Future[RawReply]] = field(default_factory=dict, init=False, repr=False)

    concurrency_of = staticmethod(concurrency_of)  # a spec's own limit, before servers are shared

    def __post_init__(self) -> None:
        if self.gate is None:
            self.gate = Gate(self.concurrency)

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def concurrency(self) -> int:
        """The requests this model's server takes at once (shared with the other roles bound
        to it when the model came from ``Roles``)."""
        return self.gate.limit if self.gate is not None else concurrency_of(self.spec)

    def _count(self, **counts: float) -> None:
        self.ledger.add(self.role, self.label, **counts)

    async def acomplete(self, messages: Sequence[Message], schema: type[BaseModel] | None = None, *,
                        seed: int | None = None, temperature: float | None = None, max_tokens: int | None = None,
                        top_logprobs: int | None = None) -> Completion:
        """Answer one request (from any event loop).

        Args:
            messages: OpenAI-style ``{"role", "content"}`` dicts.
            schema: a pydantic model the reply must validate against, or None for free text.
            seed, temperature, max_tokens: override the spec's settings for this request.
            top_logprobs: ask for the first token's ``top_logprobs`` most likely alternatives
                (``Completion.top``; None where the provider gives none).
        Returns:
            A Completion; ``unparsed`` is True when no attempt produced a valid reply.
        Raises:
            LLMError: transient errors persisted past ``max_retries``.
        """
        settings = request_settings(self.spec, temperature, max_tokens, top_logprobs)
        return await RUNTIME.run(self._complete(messages, schema, self.seed if seed is None else seed, settings))

    def complete(self, messages: Sequence[Message], schema: type[BaseModel] | None = None, **kw: Any) -> Completion:
        """Blocking form of ``acomplete``."""
        return run_sync(self.acomplete(messages, schema, **kw))

    async def ask(self, stage: str, template: str, schema: type[BaseModel] | None = None, *,
                  seed: int | None = None, temperature: float | None = None, max_tokens: int | None = None,
                  top_logprobs: int | None = None, progress: Any = None, **variables: Any) -> Completion:
        """Render the prompt ``pbench/prompts/<stage>/<template>.j2`` with ``variables`` and
        answer it as one user message: the one way stage code asks a model for a reply.

        Args:
            stage, template: which prompt.
            schema, seed, temperature, max_tokens, top_logprobs: as for ``acomplete``.
            progress: a tqdm bar ticked once the request is answered, or None.
            variables: the template's variables.
        """
        from pbench import prompts

        text = prompts.render(stage, template, **variables)
        out = await self.acomplete([{"role": "user", "content": text}], schema, seed=seed, temperature=temperature,
                                   max_tokens=max_tokens, top_logprobs=top_logprobs)
        if progress is not None:
            progress.update(1)
        return out

    async def _complete(self, messages: Sequence[Message], schema: type[BaseModel] | None, base_seed: int | None,
                        settings: dict[str, Any]) -> Completion:
        json_schema = schema.model_json_schema() if schema is not None else None
        error, reply, prompt_tok, completion_tok, cached_all = None, RawReply(""), 0, 0, True
        attempts = self.spec.parse_retries + 1
        for attempt in range(attempts):
            # A retry after an unparsable reply asks again with another seed, so a
            # deterministic server does not repeat the same bad answer.
            this = {**settings, "seed": None if base_seed is None else base_seed + attempt, "attempt": attempt}
            reply, cached = await self._raw(messages, json_schema, this)
            cached_all &= cached
            prompt_tok += reply.prompt_tokens
            completion_tok += reply.completion_tokens
            try:
                parsed = checked(reply.text, schema)
            except ValueError as exc:
                error = str(exc)
                self._count(parse_failures=1)
                continue
            return Completion(reply.text, parsed, False, None, attempt + 1, cached_all, prompt_tok, completion_tok,
                              reply.top)
        self._count(unparsed=1)
        return Completion(reply.text, None, True, error, attempts, cached_all, prompt_tok, completion_tok)

    async def _raw(self, messages: Sequence[Message], schema: dict[str, Any] | None,
                   settings: dict[str, Any]) -> tuple[RawReply, bool]:
        key = cache_key(self.backend.identity, messages, {**settings, "schema": schema})
        if self.cache is None:
            return await self._call(messages, schema, settings), False
        hit = self.cache.get(key)
        if hit is None and key in self._flying:  # asked already and not answered yet: the same reply
            shared = await asyncio.shield(self._flying[key])
            hit = None if shared.injected else shared
        if hit is not None:
            self._count(cache_hits=1, cached_prompt_tokens=hit.prompt_tokens,
                        cached_completion_tokens=hit.completion_tokens)
            return hit, True
        flying = self._flying[key] = asyncio.get_running_loop().create_future()
        try:
            reply = await self._call(messages, schema, settings)
            if not reply.injected:
                self.cache.put(key, reply)  # before it leaves _flying: a request asked now finds one or the other
            flying.set_result(reply)
        except Exception as exc:  # those waiting on it get the same error, after the same retries
            flying.set_exception(exc)
            flying.exception()  # read: a request alone in flight leaves no "never retrieved" warning
            raise
        finally:
            if not flying.done():  # cancelled
                flying.cancel()
            self._flying.pop(key, None)
        return reply, False

    async def _call(self, messages: Sequence[Message], schema: dict[str, Any] | None,
                    settings: dict[str, Any]) -> RawReply:
        assert self.gate is not None  # set in __post_init__
        async with self.gate:
            return await self._call_with_retries(messages, schema, settings)

    async def _call_with_retries(self, messages: Sequence[Message], schema: dict[str, Any] | None,
                                 settings: dict[str, Any]) -> RawReply:
        """One reply from the backend, a transient failure retried ``spec.max_retries`` times
        (tenacity) after a jittered backoff doubling from ``backoff_s`` (at most 30 s), each
        attempt, retry and give-up counted; a refusal is never retried."""
        import tenacity

        who = f"{self.role} model {self.label}"

        def wait(state: tenacity.RetryCallState) -> float:
            return min(self.backoff_s * 2 ** (state.attempt_number - 1), 30.0) * (0.5 + random.random())

        retrying = tenacity.AsyncRetrying(stop=tenacity.stop_after_attempt(self.spec.max_retries + 1), wait=wait,
                                          retry=tenacity.retry_if_exception_type(transient_errors()),
                                          before_sleep=lambda state: self._count(retries=1), reraise=True)
        try:
            async for tried in retrying:
                with tried:
                    reply = await self._call_once(who, messages, schema, settings)
        except transient_errors() as exc:
            self._count(give_ups=1)
            raise LLMError(f"{who}: gave up after {self.spec.max_retries + 1} attempts "
                           f"({type(exc).__name__}: {exc})") from exc
        return reply

    async def _call_once(self, who: str, messages: Sequence[Message], schema: dict[str, Any] | None,
                         settings: dict[str, Any]) -> RawReply:
        """One request to the backend within ``spec.timeout_s``, its call and time counted."""
        start = time.perf_counter()
        try:
            reply = await asyncio.wait_for(self.backend.generate(messages, schema=schema, settings=settings),
                                           None if getattr(self.backend, "waits", False) else self.spec.timeout_s)
        except transient_errors():
            self._count(calls=1, seconds=time.perf_counter() - start)
            raise
        except refusals() as exc:
            self._count(calls=1, give_ups=1, seconds=time.perf_counter() - start)
            raise refused(who, exc) from exc
        if getattr(self.backend, "waits", False):
            self._count(batched=1)
        self._count(calls=1, seconds=time.perf_counter() - start, prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens, reused_prompt_tokens=reply.reused_tokens)
        return reply


def request_settings(spec: ModelSpec, temperature: float | None, max_tokens: int | None,
                     top_logprobs: int | None) -> dict[str, Any]:
    """A request's settings (part of its cache key): the spec's, overridden where the request
    gives its own. The seed and attempt are added per attempt."""
    settings = {
        "temperature": spec.temperature if temperature is None else temperature,
        "max_tokens": spec.max_tokens if max_tokens is None else max_tokens,
        "kwargs": spec.kwargs,
    }
    if top_logprobs:  # only then: the cache keys of every other request stay as they were
        settings["top_logprobs"] = top_logprobs
    return settings


def checked(text: str, schema: type[BaseModel] | None) -> BaseModel | None:
    """The reply parsed against ``schema`` (None for free text, which must not be empty).

    Raises:
        ValueError: the reply is empty or does not parse.
    """
    if schema is not None:
        return parse_reply(text, schema)
    if not text.strip():
        raise ValueError("empty reply")
    return None


def refused(who: str, exc: BaseException) -> LLMError:
    """The error for a request the endpoint refused (not retried: a retry cannot mend it)."""
    status = getattr(exc, "status_code", "?")
    return LLMError(f"{who}: the endpoint refused the request (HTTP {status}, {type(exc).__name__}); "
                    "not retried: check the model name, base_url and api_key_env")
