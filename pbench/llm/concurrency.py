"""Where model calls run and how many at once: one background event loop for every call
(``run_sync``), a bounded gather, and one ``Gate`` per server shared by the roles bound to it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from pbench.config import ModelSpec

T = TypeVar("T")


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


BATCH_IN_FLIGHT = 50_000
"""Requests one batched model may have waiting at once (``pbench.llm.batch.MAX_ITEMS``)."""


def concurrency_of(spec: ModelSpec, stage: str | None = None) -> int:
    """A spec's own limit: ``max_concurrency``, or a local server's slots when not set; for a
    spec sent by batch in ``stage`` (``ModelSpec.batched``), a batch's worth: requests wait
    there, not in the gate."""
    if spec.batched(stage):
        return BATCH_IN_FLIGHT
    if spec.provider == "local" and "max_concurrency" not in spec.model_fields_set:
        return spec.n_parallel
    return spec.max_concurrency
