"""Token and call accounting per (role, model), for the run's manifest."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any


@dataclass
class RoleUsage:
    calls: int = 0  # requests that reached a model (retries included)
    batched: int = 0  # of calls, those sent through the Batch API (pbench.llm.batch)
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reused_prompt_tokens: int = 0  # of prompt_tokens, those the server's prefix cache held (not read again)
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


LEDGER = Ledger()  # the process's ledger: every ChatModel counts here unless given its own
