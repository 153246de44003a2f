"""The models of a run, bound to roles: code asks for a role (``generator``, ``assistant``,
``prober``, ``judge``, ``tagger``), never for a provider; the parameter file binds each role
to a model spec (``pbench.config.ModelSpec``)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pbench import embedded
from pbench.config import ModelSpec, RunConfig
from pbench.llm.backends import AnthropicBackend, Backend, OpenAIBackend, make_backend
from pbench.llm.batch import AnthropicBatchBackend, BatchBackend
from pbench.llm.cache import ResponseCache
from pbench.llm.chat import ChatModel
from pbench.llm.concurrency import Gate, concurrency_of, server_of
from pbench.llm.faults import FaultyBackend
from pbench.llm.ledger import LEDGER

ROLES = ("generator", "assistant", "prober", "judge", "tagger")


def bound(cfg: RunConfig, role: str) -> ModelSpec | list[ModelSpec]:
    """The spec (or list of specs) a role is bound to; the tagger defaults to the first assistant."""
    spec = getattr(cfg.models, role)
    if role == "tagger" and spec is None:
        spec = cfg.models.assistant[0]
    return spec


class Roles:
    """The models of a run, bound to roles. Backends are built (and servers started) lazily.

    Args:
        cfg: the run's parameters.
        run_dir: the run folder (the default cache lives there).
        backend_factory: builds a backend for a spec; tests pass a fake.
        stage: the stage the models serve (a spec's ``batch`` may name the stages it batches).
    """

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: str | Path,
        backend_factory: Callable[[ModelSpec], Backend] = make_backend,
        stage: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.stage = stage
        self._factory = backend_factory
        self._backends: dict[str, Backend] = {}
        self._lock = threading.Lock()
        self.gates = self.gates_of(cfg, stage)
        path = cfg.llm.cache_path or Path(run_dir) / "llm_cache.sqlite"
        self.cache = ResponseCache(path) if cfg.llm.cache else None

    def _backend(self, spec: ModelSpec) -> Backend:
        key = spec.model_dump_json()
        with self._lock:
            if key not in self._backends:
                backend = self._factory(spec)
                if spec.batched(self.stage) and isinstance(backend, OpenAIBackend | AnthropicBackend):
                    batching = AnthropicBatchBackend if isinstance(backend, AnthropicBackend) else BatchBackend
                    backend = batching(backend, self.run_dir / "batches", spec.batch_poll_s, spec.batch_failed)
                self._backends[key] = backend
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
    def gates_of(cls, cfg: RunConfig, stage: str | None = None) -> dict[tuple[str, str, str], Gate]:
        """One ``Gate`` per server, at the smallest concurrency any role declares for it (in ``stage``)."""
        limits: dict[tuple[str, str, str], int] = {}
        for spec in cls.specs_of(cfg):
            key = server_of(spec)
            own = concurrency_of(spec, stage)
            limits[key] = min(limits.get(key, own), own)
        return {k: Gate(v) for k, v in limits.items()}

    @staticmethod
    def specs_of(cfg: RunConfig) -> list[ModelSpec]:
        """Every model spec of the run's roles (the tagger defaults to the first assistant)."""
        out: list[ModelSpec] = []
        for r in ROLES:
            v = bound(cfg, r)
            out.extend(v if isinstance(v, list) else [v])
        return out

    def role(self, name: str) -> ChatModel:
        """The model bound to a single-model role (``generator``, ``prober``, ``tagger``)."""
        spec = bound(self.cfg, name)
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
            v = bound(cfg, r)
            out[r] = [describe(s) for s in v] if isinstance(v, list) else describe(v)
        return out
