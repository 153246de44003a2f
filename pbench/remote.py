"""Systems under test that live outside pbench: a service over HTTP, or a Python class.

Reads the run's ``targets`` entries of kind ``http`` and ``python``; writes nothing. Both
take the owner's footprint as a deployed assistant would have it (``schema.deployed``: text
and social metadata, never ground truth) and reply to one asker at a time. A failure is
retried within bounds (``retries``), then raised as ``TargetError``: stage 04
records the conversation as unscored (``target_failed``) and a rerun tries it again.

The HTTP contract (version 1; JSON in and out, UTF-8):

- ``POST <url>/ingest`` with ``{"owner": id, "documents": [document, ...]}``, once per
  owner before any conversation. A document is ``{"id", "owner", "kind", "participants",
  "group", "timestamp", "text", "public"}``: people are ids (``u03``), as ``asker`` is;
  ``timestamp`` is ISO 8601. Answer 2xx with any JSON value.
- ``POST <url>/reply`` with ``{"owner": id, "asker": id, "at": ISO 8601 time,
  "conversation": [{"role": "user" | "assistant", "content": str}, ...], "seed": int}``:
  reply to the last ``user`` message (the asker's). Answer ``{"reply": str}``, and where the
  service can say, ``"used": [document id, ...]``: the documents it drew on, for the
  inappropriate retrieval rate (without ``used`` the target's IRR is n/a).
- A draft (the ``delegation`` strategy), sent only to a service whose target entry says
  ``drafts: true``: the same request with ``"reader": id``. The asker is then the owner, who
  asks their assistant for a draft to send to ``reader``; answer with the draft as the
  ``reply``, written for the owner to send, saying only what ``reader`` may read. A service
  without ``drafts: true`` is never asked, and its delegation probes are counted as skipped.

A timeout, a closed connection, a 5xx answer or an answer that breaks the contract (not
JSON, no ``reply`` string, ``used`` not a list of ids) is retried, after 0.5 s, 1 s, ...; a
4xx answer is not (the request will not improve).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pbench.schema import Turn

BACKOFF_S = 0.5


class TargetError(RuntimeError):
    """A target failed to reply (or to ingest) after its retries: stage 04 records the
    conversation as unscored (``target_failed``), and a rerun tries it again."""


class ContractError(ValueError):
    """An answer that breaks the contract (retried like a server error)."""


def parse_reply(body: Any) -> Turn:
    """A ``/reply`` answer (or a Python target's return value) as a ``Turn``: a ``Turn``, a
    string, or ``{"reply": str, "used": [id, ...]}`` (``used`` optional: n/a without it)."""
    if isinstance(body, Turn):
        return body
    if isinstance(body, str):
        return Turn(body, None)
    if not isinstance(body, dict) or not isinstance(body.get("reply"), str):
        raise ContractError(f"expected {{\"reply\": string, \"used\": [ids]}}, got {str(body)[:80]!r}")
    used = body.get("used")
    if used is not None and not (isinstance(used, list) and all(isinstance(u, str) for u in used)):
        raise ContractError(f"\"used\" must be a list of document ids, got {str(used)[:80]!r}")
    return Turn(body["reply"], used)


async def _with_retries(label: str, what: str, attempt: Any, retries: int,
                        retried: tuple[type[BaseException], ...]) -> Any:
    """``await attempt()``, retried ``retries`` times on ``retried`` errors, ``BACKOFF_S``
    doubling between tries (tenacity); then ``TargetError``."""
    import tenacity

    try:
        async for tried in tenacity.AsyncRetrying(stop=tenacity.stop_after_attempt(retries + 1),
                                                  wait=tenacity.wait_exponential(multiplier=BACKOFF_S),
                                                  retry=tenacity.retry_if_exception_type(retried), reraise=True):
            with tried:
                return await attempt()
    except retried as exc:
        raise TargetError(f"target {label}: {what} failed after {retries + 1} tries ({_describe(exc)})") from exc
    raise AssertionError("unreachable")  # pragma: no cover


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".rstrip(": ")[:200]


# --------------------------------------------------------------------------- http


class ServerError(RuntimeError):
    """A 5xx answer."""


@dataclass
class HttpService:
    """One service behind the contract, shared by every owner's target (one connection pool)."""

    label: str
    url: str
    timeout_s: float = 60.0
    retries: int = 2
    _client: Any = field(default=None, repr=False)

    async def post(self, path: str, payload: dict[str, Any]) -> Any:
        """POST ``payload`` to ``<url>/<path>``, retried; the answer's JSON."""
        import httpx

        async def attempt() -> Any:
            # One client per event loop: stage 04 runs its loop once, a test may run several.
            loop = asyncio.get_running_loop()
            if self._client is None or self._client[0] is not loop:
                self._client = (loop, httpx.AsyncClient(timeout=self.timeout_s, trust_env=False))
            answer = await self._client[1].post(f"{self.url.rstrip('/')}/{path}", json=payload)
            if answer.status_code >= 500:
                raise ServerError(f"HTTP {answer.status_code}")
            if answer.status_code >= 400:
                raise TargetError(f"target {self.label}: {path} answered HTTP {answer.status_code}: "
                                  f"{answer.text[:120]!r}")
            try:
                return answer.json()
            except ValueError:
                raise ContractError(f"not JSON: {answer.text[:80]!r}") from None

        async def checked() -> Any:
            body = await attempt()
            return parse_reply(body) if path == "reply" else body

        return await _with_retries(self.label, path, checked, self.retries,
                                   (httpx.TransportError, ServerError, ContractError))

    async def aclose(self) -> None:
        """Close the connection pool (stage 04 calls it when its conversations are done)."""
        if self._client is not None:
            client, self._client = self._client[1], None
            await client.aclose()

    async def prepare(self, footprints: Mapping[str, list[dict[str, Any]]]) -> None:
        """``/ingest`` each owner's footprint."""
        for owner, documents in footprints.items():
            await self.post("ingest", {"owner": owner, "documents": [_jsonable(d) for d in documents]})


def _jsonable(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, dt.datetime) else v for k, v in doc.items()}


@dataclass
class HttpTarget:
    """One owner's assistant behind an ``HttpService``."""

    service: HttpService
    owner: str
    label: str = "http"
    kind: str = "http"

    def ingest(self, documents: list[dict[str, Any]]) -> None:
        """Nothing here: ``HttpService.prepare`` ingests every owner once, before probing."""

    async def reply(self, asker: str, conversation: list[dict[str, str]], at: dt.datetime,
                    seed: int | None = None, reader: str | None = None) -> Turn:
        drafting = {} if reader is None else {"reader": reader}
        return await self.service.post("reply", {"owner": self.owner, "asker": asker, "at": at.isoformat(),
                                                 "conversation": conversation, "seed": seed, **drafting})


# --------------------------------------------------------------------------- python


@dataclass
class PythonTargets:
    """A ``module:Class`` target: ``Class(owner)`` once per owner, ``ingest`` at prepare, then
    ``reply`` (a coroutine or a plain method) returning a ``Turn``, a string or the http
    answer's dict. A class with ``drafts = True`` drafts too: its ``reply`` is then also
    called with ``reader=`` (``pbench.targets.Target.reply``)."""

    label: str
    cls: type
    retries: int = 1
    made: dict[str, Any] = field(default_factory=dict, repr=False)

    async def prepare(self, footprints: Mapping[str, list[dict[str, Any]]]) -> None:
        for owner, documents in footprints.items():
            target = self.cls(owner)

            async def attempt(target: Any = target, documents: list = documents) -> None:
                await asyncio.to_thread(target.ingest, documents)

            await _with_retries(self.label, f"ingest for {owner}", attempt, self.retries, (Exception,))
            self.made[owner] = target

    def target(self, owner: str) -> PythonTarget:
        if owner not in self.made:
            raise TargetError(f"target {self.label}: no footprint ingested for {owner}")
        return PythonTarget(self, self.made[owner])


@dataclass
class PythonTarget:
    """One owner's Python target, its replies retried and checked."""

    targets: PythonTargets
    inner: Any

    @property
    def label(self) -> str:
        return self.targets.label

    kind: str = "python"

    def ingest(self, documents: list[dict[str, Any]]) -> None:
        """Nothing here: ``PythonTargets.prepare`` made and fed it."""

    async def reply(self, asker: str, conversation: list[dict[str, str]], at: dt.datetime,
                    seed: int | None = None, reader: str | None = None) -> Turn:
        drafting = {} if reader is None else {"reader": reader}

        async def attempt() -> Turn:
            out = self.inner.reply(asker, conversation, at, seed=seed, **drafting)
            return parse_reply(await out if inspect.isawaitable(out) else out)

        return await _with_retries(self.label, "reply", attempt, self.targets.retries, (Exception,))
