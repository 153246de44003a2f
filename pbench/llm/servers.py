"""Embedded GGUF models served in this process: one xllamacpp server (llama.cpp's own
OpenAI-compatible server on 127.0.0.1) per model file, started on first use, shared by every
role bound to it, stopped at exit."""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path
from typing import Any

from pbench import embedded
from pbench.config import ModelSpec
from pbench.llm.errors import LLMError


class LocalServers:
    """xllamacpp servers in this process, one per model file, started on first use."""

    def __init__(self) -> None:
        self._servers: dict[Path, tuple[Any, str, tuple]] = {}
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def url(self, spec: ModelSpec) -> tuple[str, Path]:
        """Start (once) the server for ``spec``'s model and return its base URL and model file."""
        path = self._path(spec)
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

    def _path(self, spec: ModelSpec) -> Path:
        return embedded.ensure(spec.model) if spec.model in embedded.EMBEDDED else Path(spec.model)

    def running(self, spec: ModelSpec) -> bool:
        """Whether ``spec``'s model is served in this process now."""
        with self._lock:
            return self._path(spec) in self._servers

    def stop(self, spec: ModelSpec) -> None:
        """Stop the server of ``spec``'s model, if one runs (its clients must be done with it)."""
        with self._lock:
            self._servers.pop(self._path(spec), None)

    def stop_all(self) -> None:
        with self._lock:
            # Dropping the last reference stops llama.cpp's server and frees the model.
            self._servers.clear()


SERVERS = LocalServers()
