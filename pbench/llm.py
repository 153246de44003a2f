"""Every LLM call goes through here: roles bound to models, caching, retries, limits, accounting.

Code asks for a role (``generator``, ``assistant``, ``prober``, ``judge``); the parameter
file binds each role to a model spec (``pbench.config.ModelSpec``). Providers:

- ``local``: an embedded GGUF model (``pbench.embedded``) served by xllamacpp, llama.cpp's
  own OpenAI-compatible server, inside this process on 127.0.0.1; started once per process
  per model file and shared by every role bound to it; stopped at exit.
- ``openai``: any OpenAI-compatible endpoint (vLLM, Ollama, LM Studio, llama.cpp, OpenAI).
- ``langchain``: any provider LangChain's ``init_chat_model`` knows, when its package is installed.

Structured output is enforced with a JSON schema (``response_format``) where the server
supports it, and always validated here. A reply that cannot be parsed is retried with a
new seed a bounded number of times, then returned with ``unparsed=True`` and its raw text,
and counted: never turned into a default value. Transient errors (connection, timeout,
rate limit, server error) are retried with backoff a bounded number of times, then raised
as ``LLMError`` and counted as a give-up. Replies are cached in SQLite keyed by model,
messages, settings, schema, seed and attempt, so rerunning the same work makes no calls.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import hashlib
import json
import os
import random
import re
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from pbench import embedded
from pbench.config import ModelSpec, RunConfig

T = TypeVar("T")
Message = dict[str, str]


class LLMError(RuntimeError):
    """A model call failed after its bounded retries (named in the message)."""


class TransientError(RuntimeError):
    """Raised by backends for failures worth retrying that have no library exception."""


def _transient_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [TransientError, httpx.TransportError, asyncio.TimeoutError]
    try:
        import openai

        errors += [openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError]
    except ImportError:  # pragma: no cover - openai is a dependency
        pass
    try:  # only when a LangChain Anthropic binding is installed
        import anthropic

        errors += [anthropic.APIConnectionError, anthropic.RateLimitError, anthropic.InternalServerError]
    except ImportError:
        pass
    return tuple(errors)


TRANSIENT_ERRORS = _transient_errors()


def _refusals() -> tuple[type[BaseException], ...]:
    # Errors the endpoint answers with that a retry cannot mend: a bad key (401), no access
    # (403), an unknown model (404), a malformed request (400).
    try:
        import openai

        return (openai.APIStatusError,)
    except ImportError:  # pragma: no cover - openai is a dependency
        return ()


REFUSALS = _refusals()


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class RawReply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    injected: bool = False  # a fault made on purpose (``FaultyBackend``): never cached as the model's answer
    # The first generated token's most likely alternatives, (token, log-probability), when the
    # request asked for them (``top_logprobs``) and the provider returns them; else None.
    top: tuple[tuple[str, float], ...] | None = None


@dataclass
class Completion:
    """One answered request.

    ``parsed`` holds the validated schema object; when a schema was asked for and no
    attempt parsed, ``unparsed`` is True and ``text`` keeps the last raw reply.
    """

    text: str
    parsed: Any = None
    unparsed: bool = False
    error: str | None = None
    attempts: int = 1
    cached: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    top: tuple[tuple[str, float], ...] | None = None  # the first token's alternatives (``RawReply.top``)


@dataclass
class RoleUsage:
    calls: int = 0  # requests that reached a model (retries included)
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0  # wall time inside model calls
    retries: int = 0  # transient-error retries
    give_ups: int = 0  # requests that failed after all retries
    parse_failures: int = 0  # replies that did not parse (each retried)
    unparsed: int = 0  # requests returned unparsed after all parse retries
    injected: int = 0  # faults injected on purpose (llm.faults), counted where they happened
    cached_prompt_tokens: int = 0  # the tokens cache hits carried when first answered:
    cached_completion_tokens: int = 0  # a resumed run's manifest still shows its whole volume

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


class Ledger:
    """Usage per (role, model label), for the run's manifest."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usage: dict[tuple[str, str], RoleUsage] = defaultdict(RoleUsage)

    def add(self, role: str, model: str, **counts: float) -> None:
        with self._lock:
            u = self._usage[(role, model)]
            for k, v in counts.items():
                setattr(u, k, getattr(u, k) + v)

    def snapshot(self) -> dict[str, dict[str, dict[str, Any]]]:
        with self._lock:
            out: dict[str, dict[str, dict[str, Any]]] = {}
            for (role, model), u in sorted(self._usage.items()):
                out.setdefault(role, {})[model] = u.as_dict()
            return out

    def totals(self) -> RoleUsage:
        with self._lock:
            total = RoleUsage()
            for u in self._usage.values():
                for k, v in u.__dict__.items():
                    setattr(total, k, getattr(total, k) + v)
            return total


LEDGER = Ledger()


# --------------------------------------------------------------------------- runtime

class _Runtime:
    """One background event loop that owns every client, semaphore and server call.

    Sync callers (scripts) and async callers (notebooks with their own loop) both submit
    coroutines here, so clients and semaphores never cross event loops.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="pbench-llm", daemon=True).start()
                self._loop = loop
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the runtime loop from any loop."""
        if asyncio.get_running_loop() is self._loop:
            return await coro
        return await asyncio.wrap_future(self.submit(coro))


RUNTIME = _Runtime()


async def gather_bounded(fn: Callable[[Any], Coroutine[Any, Any, T]], items: Sequence[Any], limit: int) -> list[T]:
    """``await fn(item)`` for every item, at most ``limit`` at once; results in the items' order."""
    gate = asyncio.Semaphore(limit)

    async def one(item: Any) -> T:
        async with gate:
            return await fn(item)

    return list(await asyncio.gather(*(one(x) for x in items)))


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even inside a running notebook loop."""
    return RUNTIME.submit(coro).result()


# --------------------------------------------------------------------------- cache


class ResponseCache:
    """Persistent replies keyed by a hash of everything that determines them.

    Reads are a primary-key lookup on the caller's thread. Writes never wait for the disk:
    ``put`` hands the reply to a writer thread that commits whatever has arrived in one
    transaction, at most ``flush_s`` after the first of them, on its own connection (SQLite's
    write-ahead log lets readers go on meanwhile). Until then ``get`` finds the reply among
    the pending ones. A killed process loses at most the last ``flush_s`` of replies, which
    a rerun asks for again; ``flush``, ``close`` and the interpreter's exit commit the rest.
    """

    def __init__(self, path: str | Path, flush_s: float = 0.2) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.flush_s = flush_s
        self._lock = threading.Lock()  # the reading connection
        self._db = self._connect()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, reply TEXT NOT NULL, created REAL)")
        self._pending: dict[str, tuple[str, float]] = {}
        self._changed = threading.Condition()  # guards _pending, _writing and _closed
        self._writing = 0  # replies taken from _pending whose commit has not finished
        self._flush_now = self._closed = False
        self._writer = threading.Thread(target=self._write_loop, name="pbench-cache", daemon=True)
        self._writer.start()
        atexit.register(self.close)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)

    def get(self, key: str) -> RawReply | None:
        with self._changed:
            pending = self._pending.get(key)
        if pending is not None:
            return _reply_of(pending[0])
        with self._lock:
            row = self._db.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return _reply_of(row[0]) if row else None

    def put(self, key: str, reply: RawReply) -> None:
        if reply.injected:
            raise ValueError("an injected fault is not the model's answer: it is never cached")
        record = {"text": reply.text, "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens}
        if reply.top is not None:  # only replies that carry them: older records stay byte for byte
            record["top"] = [list(t) for t in reply.top]
        with self._changed:
            if self._closed:
                raise ValueError(f"{self.path}: the response cache is closed")
            self._pending[key] = (json.dumps(record), time.time())
            self._changed.notify_all()  # wakes the writer if it was idle

    def _write_loop(self) -> None:
        db = self._connect()
        try:
            while True:
                with self._changed:
                    self._changed.wait_for(lambda: self._pending or self._closed)
                    if not self._pending:  # closed, nothing left
                        return
                    deadline = time.monotonic() + self.flush_s  # let a batch gather
                    while not (self._closed or self._flush_now) and (left := deadline - time.monotonic()) > 0:
                        self._changed.wait(left)
                    self._flush_now = False
                    batch = list(self._pending.items())
                    self._writing = len(batch)
                db.execute("BEGIN")
                db.executemany("INSERT OR REPLACE INTO replies VALUES (?, ?, ?)",
                               [(k, text, created) for k, (text, created) in batch])
                db.execute("COMMIT")
                with self._changed:
                    for k, value in batch:  # a newer put of the same key stays pending
                        if self._pending.get(k) is value:
                            del self._pending[k]
                    self._writing = 0
                    self._changed.notify_all()
        finally:
            db.close()

    def flush(self) -> None:
        """Wait until every reply put so far is committed."""
        with self._changed:
            self._flush_now = True
            self._changed.notify_all()
            self._changed.wait_for(lambda: not self._pending and not self._writing or not self._writer.is_alive())

    def __len__(self) -> int:
        self.flush()
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def close(self) -> None:
        """Commit what is pending, stop the writer and close the file (idempotent)."""
        with self._changed:
            if self._closed:
                return
            self._closed = True
            self._changed.notify_all()
        self._writer.join()
        with self._lock:
            self._db.close()
        atexit.unregister(self.close)


def _reply_of(record: str) -> RawReply:
    d = json.loads(record)
    if d.get("top") is not None:
        d["top"] = tuple((str(t), float(lp)) for t, lp in d["top"])
    return RawReply(**d)


def flush_caches(models: Iterable[Any]) -> None:
    """Commit what the models' response caches hold pending. Call it before writing a record
    made from their replies: after a kill, a record never outlives the replies it came from,
    so a rerun (or a reproduction from the cache) finds every one of them."""
    seen: set[int] = set()
    for model in models:
        cache = getattr(model, "cache", None)
        if cache is not None and id(cache) not in seen:
            seen.add(id(cache))
            cache.flush()


def cache_key(identity: dict[str, Any], messages: Sequence[Message], settings: dict[str, Any]) -> str:
    blob = json.dumps({"model": identity, "messages": list(messages), "settings": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


# --------------------------------------------------------------------------- backends


class Backend(Protocol):
    """Transport to one model. ``identity`` names the model for cache keys."""

    identity: dict[str, Any]

    async def generate(
        self, messages: Sequence[Message], *, schema: dict[str, Any] | None, settings: dict[str, Any]
    ) -> RawReply: ...


class OpenAIBackend:
    """Chat completions against an OpenAI-compatible endpoint (also the embedded server)."""

    def __init__(self, spec: ModelSpec, base_url: str | None, identity: dict[str, Any], api_key: str) -> None:
        import openai

        self.spec = spec
        self.identity = identity
        # Our own retries and accounting; the client's would be invisible to the ledger.
        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=spec.timeout_s)

    async def generate(
        self, messages: Sequence[Message], *, schema: dict[str, Any] | None, settings: dict[str, Any]
    ) -> RawReply:
        kwargs: dict[str, Any] = {
            "model": self.spec.model if self.spec.provider != "local" else "local",
            "messages": list(messages),
            "temperature": settings["temperature"],
            "max_tokens": settings["max_tokens"],
            **self.spec.kwargs,
        }
        if settings.get("seed") is not None:
            kwargs["seed"] = settings["seed"]
        if schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.get("title", "reply"), "schema": schema},
            }
        if settings.get("top_logprobs"):
            kwargs["logprobs"], kwargs["top_logprobs"] = True, settings["top_logprobs"]
        resp = await self._client.chat.completions.create(**kwargs)
        if not resp.choices:
            raise TransientError("the server returned no choices")
        usage = resp.usage
        return RawReply(
            text=resp.choices[0].message.content or "",
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            top=_first_token_top(resp.choices[0]) if settings.get("top_logprobs") else None,
        )


def _first_token_top(choice: Any) -> tuple[tuple[str, float], ...] | None:
    """The first generated token's alternatives from an OpenAI-style choice, or None when the
    provider returned no log-probabilities."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return None
    return tuple((t.token, float(t.logprob)) for t in (content[0].top_logprobs or []))


class LangChainBackend:
    """Any chat model LangChain's ``init_chat_model`` can build (its package must be installed)."""

    def __init__(self, spec: ModelSpec) -> None:
        from langchain.chat_models import init_chat_model

        self.spec = spec
        self.identity = {"provider": "langchain", "model": spec.model, "base_url": spec.base_url}
        kwargs = dict(spec.kwargs)
        if spec.base_url:
            kwargs["base_url"] = spec.base_url
        if spec.api_key_env:
            kwargs["api_key"] = _api_key(spec)
        try:
            self._chat = init_chat_model(
                spec.model, max_tokens=spec.max_tokens, timeout=spec.timeout_s, max_retries=0, **kwargs
            )
        except ImportError as exc:
            raise LLMError(f"model {spec.model}: its LangChain package is not installed ({exc})") from None

    async def generate(
        self, messages: Sequence[Message], *, schema: dict[str, Any] | None, settings: dict[str, Any]
    ) -> RawReply:
        chat = self._chat.bind(temperature=settings["temperature"], max_tokens=settings["max_tokens"])
        if schema is None:
            msg = await chat.ainvoke(list(messages))
            text = msg.content if isinstance(msg.content, str) else json.dumps(msg.content)
        else:
            out = await self._chat.with_structured_output(schema, include_raw=True).ainvoke(list(messages))
            msg = out["raw"]
            text = json.dumps(out["parsed"]) if out.get("parsed") is not None else _raw_text(msg)
        usage = getattr(msg, "usage_metadata", None) or {}
        return RawReply(text, usage.get("input_tokens", 0), usage.get("output_tokens", 0))


def _raw_text(msg: Any) -> str:
    calls = getattr(msg, "tool_calls", None)
    if calls:
        return json.dumps(calls[0].get("args", {}))
    return msg.content if isinstance(msg.content, str) else json.dumps(msg.content)


def _api_key(spec: ModelSpec) -> str:
    if spec.api_key_env is None:
        return "not-needed"
    key = os.environ.get(spec.api_key_env)
    if not key:
        raise LLMError(f"model {spec.label}: environment variable {spec.api_key_env} is not set")
    return key


# --------------------------------------------------------------------------- local server


class LocalServers:
    """xllamacpp servers in this process, one per model file, started on first use."""

    def __init__(self) -> None:
        self._servers: dict[Path, tuple[Any, str, tuple]] = {}
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def url(self, spec: ModelSpec) -> tuple[str, Path]:
        """Start (once) the server for ``spec``'s model and return its base URL and model file."""
        path = embedded.ensure(spec.model) if spec.model in embedded.EMBEDDED else Path(spec.model)
        if not path.is_file():
            raise LLMError(f"local model file {path} does not exist")
        threads = spec.n_threads or os.cpu_count() or 1
        settings = (spec.n_ctx, spec.n_parallel, threads)
        with self._lock:
            if path in self._servers:
                _, url, running = self._servers[path]
                if running != settings:
                    raise LLMError(
                        f"{spec.model}: already served with n_ctx, n_parallel, n_threads = {running}; "
                        f"bind every role using this model with the same settings"
                    )
                return url, path
            import xllamacpp

            params = xllamacpp.CommonParams()
            params.model.path = str(path)
            params.n_ctx = spec.n_ctx  # shared by the slots: each gets n_ctx / n_parallel
            params.n_parallel = spec.n_parallel
            params.cpuparams.n_threads = threads
            params.cpuparams_batch.n_threads = threads
            params.port = 0  # a free port
            params.verbosity = 0
            server = xllamacpp.Server(params)
            url = server.listening_address
            self._servers[path] = (server, url, settings)
            return url, path

    def stop_all(self) -> None:
        with self._lock:
            # Dropping the last reference stops llama.cpp's server and frees the model.
            self._servers.clear()


SERVERS = LocalServers()


def make_backend(spec: ModelSpec) -> Backend:
    """Build the transport for a model spec (starting the local server if needed)."""
    if spec.provider == "local":
        url, path = SERVERS.url(spec)
        ident = {"provider": "local", "model": spec.model}
        if spec.model in embedded.EMBEDDED:
            ident["sha256"] = embedded.EMBEDDED[spec.model].sha256
        else:
            ident["file"] = path.name
            ident["size"] = path.stat().st_size
        return OpenAIBackend(spec, url + "/v1", ident, api_key="not-needed")
    if spec.provider == "openai":
        ident = {"provider": "openai", "model": spec.model, "base_url": spec.base_url}
        return OpenAIBackend(spec, spec.base_url, ident, api_key=_api_key(spec))
    return LangChainBackend(spec)


# --------------------------------------------------------------------------- fault injection


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
            raise openai.APITimeoutError(request=request)
        status, error = (429, openai.RateLimitError) if kind == "rate_limit" else (500, openai.InternalServerError)
        raise error(f"injected HTTP {status}", response=httpx.Response(status, request=request), body=None)


# --------------------------------------------------------------------------- parsing

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_reply(text: str, schema: type[BaseModel]) -> BaseModel:
    """Validate a reply against a pydantic model (a fenced ```json block is accepted).

    Raises:
        ValueError: empty, not JSON, or not matching the schema.
    """
    if not text.strip():
        raise ValueError("empty reply")
    m = _FENCE.match(text)
    body = m.group(1) if m else text
    try:
        return schema.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "reply"
        raise ValueError(f"{where}: {first['msg']}") from None


# --------------------------------------------------------------------------- chat model


class Gate:
    """The requests one server takes at once, shared by every role bound to it.

    A local server has ``n_parallel`` slots whoever asks: the prober, the assistant and the
    judges of one vLLM server together must not exceed them, or requests queue at the server
    and use up their timeouts. The semaphore is made on first use, on the loop that awaits it.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._semaphore: asyncio.Semaphore | None = None

    async def __aenter__(self) -> None:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.limit)
        await self._semaphore.acquire()

    async def __aexit__(self, *exc: object) -> None:
        assert self._semaphore is not None
        self._semaphore.release()


def server_of(spec: ModelSpec) -> tuple[str, str, str]:
    """What identifies the server (and the model on it) a spec's requests go to: roles with
    the same key share one ``Gate``. Hosted models are keyed per model, as their providers
    limit them; a local model file is one llama.cpp server."""
    return (spec.provider, spec.base_url or "", spec.model)


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
        return self.gate.limit if self.gate is not None else self.concurrency_of(self.spec)

    @staticmethod
    def concurrency_of(spec: ModelSpec) -> int:
        """A spec's own limit: ``max_concurrency``, or a local server's slots when not set."""
        if spec.provider == "local" and "max_concurrency" not in spec.model_fields_set:
            return spec.n_parallel
        return spec.max_concurrency

    def _count(self, **counts: float) -> None:
        self.ledger.add(self.role, self.label, **counts)

    async def acomplete(
        self,
        messages: Sequence[Message],
        schema: type[BaseModel] | None = None,
        *,
        seed: int | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        top_logprobs: int | None = None,
    ) -> Completion:
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
        return await RUNTIME.run(self._complete(messages, schema, seed, temperature, max_tokens, top_logprobs))

    def complete(self, messages: Sequence[Message], schema: type[BaseModel] | None = None, **kw: Any) -> Completion:
        """Blocking form of ``acomplete``."""
        return run_sync(self.acomplete(messages, schema, **kw))

    async def ask(
        self,
        stage: str,
        template: str,
        schema: type[BaseModel] | None = None,
        *,
        seed: int | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        top_logprobs: int | None = None,
        progress: Any = None,
        **variables: Any,
    ) -> Completion:
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

    async def _complete(
        self,
        messages: Sequence[Message],
        schema: type[BaseModel] | None,
        seed: int | None,
        temperature: float | None,
        max_tokens: int | None,
        top_logprobs: int | None = None,
    ) -> Completion:
        json_schema = schema.model_json_schema() if schema is not None else None
        base_seed = self.seed if seed is None else seed
        settings = {
            "temperature": self.spec.temperature if temperature is None else temperature,
            "max_tokens": self.spec.max_tokens if max_tokens is None else max_tokens,
            "kwargs": self.spec.kwargs,
        }
        if top_logprobs:  # only then: the cache keys of every other request stay as they were
            settings["top_logprobs"] = top_logprobs
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
                if schema is None:
                    if not reply.text.strip():
                        raise ValueError("empty reply")
                    parsed = None
                else:
                    parsed = parse_reply(reply.text, schema)
            except ValueError as exc:
                error = str(exc)
                self._count(parse_failures=1)
                continue
            return Completion(reply.text, parsed, False, None, attempt + 1, cached_all, prompt_tok, completion_tok,
                              reply.top)
        self._count(unparsed=1)
        return Completion(reply.text, None, True, error, attempts, cached_all, prompt_tok, completion_tok)

    async def _raw(
        self, messages: Sequence[Message], schema: dict[str, Any] | None, settings: dict[str, Any]
    ) -> tuple[RawReply, bool]:
        key = cache_key(self.backend.identity, messages, {**settings, "schema": schema})
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            self._count(cache_hits=1, cached_prompt_tokens=hit.prompt_tokens,
                        cached_completion_tokens=hit.completion_tokens)
            return hit, True
        async with self.gate:
            reply = await self._call_with_retries(messages, schema, settings)
        if self.cache is not None and not reply.injected:
            self.cache.put(key, reply)
        return reply, False

    async def _call_with_retries(
        self, messages: Sequence[Message], schema: dict[str, Any] | None, settings: dict[str, Any]
    ) -> RawReply:
        delay = self.backoff_s
        for attempt in range(self.spec.max_retries + 1):
            start = time.perf_counter()
            try:
                reply = await asyncio.wait_for(
                    self.backend.generate(messages, schema=schema, settings=settings), self.spec.timeout_s
                )
            except TRANSIENT_ERRORS as exc:
                self._count(calls=1, seconds=time.perf_counter() - start)
                if attempt == self.spec.max_retries:
                    self._count(give_ups=1)
                    raise LLMError(
                        f"{self.role} model {self.label}: gave up after {attempt + 1} attempts "
                        f"({type(exc).__name__}: {exc})"
                    ) from exc
                self._count(retries=1)
                await asyncio.sleep(min(delay, 30.0) * (0.5 + random.random()))
                delay *= 2
                continue
            except REFUSALS as exc:
                self._count(calls=1, give_ups=1, seconds=time.perf_counter() - start)
                status = getattr(exc, "status_code", "?")
                raise LLMError(f"{self.role} model {self.label}: the endpoint refused the request (HTTP {status}, "
                               f"{type(exc).__name__}); not retried: check the model name, base_url and api_key_env") from exc
            self._count(
                calls=1,
                seconds=time.perf_counter() - start,
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
            )
            return reply
        raise AssertionError("unreachable")  # pragma: no cover


# --------------------------------------------------------------------------- roles


ROLES = ("generator", "assistant", "prober", "judge", "tagger")


class Roles:
    """The models of a run, bound to roles. Backends are built (and servers started) lazily.

    Args:
        cfg: the run's parameters.
        run_dir: the run folder (the default cache lives there).
        backend_factory: builds a backend for a spec; tests pass a fake.
    """

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: str | Path,
        backend_factory: Callable[[ModelSpec], Backend] = make_backend,
    ) -> None:
        self.cfg = cfg
        self._factory = backend_factory
        self._backends: dict[str, Backend] = {}
        self._lock = threading.Lock()
        self.gates = self.gates_of(cfg)
        path = cfg.llm.cache_path or Path(run_dir) / "llm_cache.sqlite"
        self.cache = ResponseCache(path) if cfg.llm.cache else None

    def _backend(self, spec: ModelSpec) -> Backend:
        key = spec.model_dump_json()
        with self._lock:
            if key not in self._backends:
                self._backends[key] = self._factory(spec)
            return self._backends[key]

    def _bind(self, role: str, spec: ModelSpec) -> ChatModel:
        backend = self._backend(spec)
        faults = self.cfg.llm.faults
        if faults.rate > 0:
            seed = int(hashlib.sha256(f"{faults.seed}|{role}|{spec.label}".encode()).hexdigest()[:8], 16)
            backend = FaultyBackend(backend, faults.rate, faults.kinds, seed,
                                    on_fault=lambda kind: LEDGER.add(role, spec.label, injected=1))
        return ChatModel(spec, role, backend, self.cache, seed=self.cfg.seed, backoff_s=self.cfg.llm.backoff_s,
                         gate=self.gates[server_of(spec)])

    @classmethod
    def gates_of(cls, cfg: RunConfig) -> dict[tuple[str, str, str], Gate]:
        """One ``Gate`` per server, at the smallest concurrency any role declares for it."""
        limits: dict[tuple[str, str, str], int] = {}
        for spec in cls.specs_of(cfg):
            key = server_of(spec)
            own = ChatModel.concurrency_of(spec)
            limits[key] = min(limits.get(key, own), own)
        return {k: Gate(v) for k, v in limits.items()}

    @staticmethod
    def specs_of(cfg: RunConfig) -> list[ModelSpec]:
        """Every model spec of the run's roles (the tagger defaults to the first assistant)."""
        out: list[ModelSpec] = []
        for r in ROLES:
            v = getattr(cfg.models, r)
            if r == "tagger" and v is None:
                v = cfg.models.assistant[0]
            out.extend(v if isinstance(v, list) else [v])
        return out

    def role(self, name: str) -> ChatModel:
        """The model bound to a single-model role (``generator``, ``prober``, ``tagger``)."""
        spec = getattr(self.cfg.models, name)
        if name == "tagger" and spec is None:
            spec = self.cfg.models.assistant[0]
        if isinstance(spec, list):
            raise ValueError(f"role {name} is a list of models; use panel({name!r})")
        return self._bind(name, spec)

    def panel(self, name: str) -> list[ChatModel]:
        """The models bound to a list role (``assistant`` targets, ``judge`` panel)."""
        specs = getattr(self.cfg.models, name)
        return [self._bind(name, s) for s in (specs if isinstance(specs, list) else [specs])]

    @staticmethod
    def bindings_of(cfg: RunConfig) -> dict[str, Any]:
        """What the manifest records: each role's model(s), with embedded file hashes."""

        def describe(s: ModelSpec) -> dict[str, Any]:
            d = {"provider": s.provider, "model": s.model, "label": s.label}
            if s.base_url:
                d["base_url"] = s.base_url
            if s.model in embedded.EMBEDDED:
                d["sha256"] = embedded.EMBEDDED[s.model].sha256
            return d

        out: dict[str, Any] = {}
        for r in ROLES:
            v = getattr(cfg.models, r)
            if r == "tagger" and v is None:
                v = cfg.models.assistant[0]
            out[r] = [describe(s) for s in v] if isinstance(v, list) else describe(v)
        return out
