"""Shared test helpers: a scripted fake chat backend (a test double, never a default) and
small parameter dictionaries made in code."""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from pbench import store
from pbench.llm import RawReply

LOCAL = {"provider": "local", "model": "qwen2.5-0.5b"}


@pytest.fixture(autouse=True, scope="session")
def _own_user_dir(tmp_path_factory):
    """Tests read and write a user folder of their own, never the person's (``store.user_dir``)."""
    patch = pytest.MonkeyPatch()
    patch.setenv(store.HOME_ENV, str(tmp_path_factory.mktemp("pbench_home")))
    yield
    patch.undo()


def minimal_params(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "run_name": "t",
        "seed": 1,
        "models": {"generator": LOCAL, "assistant": [LOCAL], "prober": LOCAL, "judge": [LOCAL]},
    }
    for dotted, value in overrides.items():
        node = data
        *head, last = dotted.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return copy.deepcopy(data)


class FakeBackend:
    """Answers from a script: each entry is a reply text, an exception to raise, or a
    callable of (messages, settings) returning either. Records every call it gets."""

    def __init__(self, script: Sequence[Any] | Callable[..., Any], delay_s: float = 0.0) -> None:
        self.identity = {"provider": "fake", "model": "scripted"}
        self.script = list(script) if not callable(script) else script
        self.calls: list[dict[str, Any]] = []
        self.delay_s = delay_s
        self.in_flight = 0
        self.max_in_flight = 0

    async def generate(self, messages, *, schema, settings) -> RawReply:
        self.calls.append({"messages": list(messages), "schema": schema, "settings": dict(settings)})
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            item = self.script(messages, settings) if callable(self.script) else self.script.pop(0)
        finally:
            self.in_flight -= 1
        if isinstance(item, BaseException):
            raise item
        return RawReply(item, prompt_tokens=10, completion_tokens=len(item.split()))


class ShuffledBackend:
    """Wraps a backend so that concurrent calls finish in an order unrelated to the order they
    started in: each waits a delay drawn from ``seed`` before answering. Two seeds, two orders."""

    def __init__(self, inner: Any, seed: int, max_delay_s: float = 0.02) -> None:
        self.inner, self.identity = inner, inner.identity
        self._rng, self.max_delay_s = random.Random(seed), max_delay_s
        self.calls = 0

    async def generate(self, messages, *, schema, settings) -> RawReply:
        self.calls += 1
        await asyncio.sleep(self._rng.random() * self.max_delay_s)
        return await self.inner.generate(messages, schema=schema, settings=settings)


class NoCalls:
    """A backend that fails the test if it is ever called (a run that must come from the cache)."""

    identity = {"provider": "fake", "model": "scripted"}

    async def generate(self, messages, *, schema, settings) -> RawReply:
        raise AssertionError(f"a model call where the cache should have answered: {messages[-1]['content'][:80]!r}")


@pytest.fixture
def fake_backend() -> type[FakeBackend]:
    return FakeBackend
