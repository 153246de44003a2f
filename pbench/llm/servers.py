"""Embedded GGUF models served in this process: one xllamacpp server (llama.cpp's own
OpenAI-compatible server on 127.0.0.1) per model file, started by the first request that
reaches it, shared by every role bound to it, stopped at exit."""

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
        self._promised: dict[Path, tuple] = {}  # settings of backends made, whose server has not started yet
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def check(self, spec: ModelSpec) -> Path:
        """``spec``'s model file, once it is known to exist and to agree with the settings its
        server runs with, or was promised to by an earlier check; nothing is started.

        Raises:
            LLMError: the file is missing, or another role bound the model with other settings.
        """
        path = self._path(spec)
        if not path.is_file():
            raise LLMError(f"local model file {path} does not exist")
        settings = self._settings(spec)
        with self._lock:
            promised = self._servers[path][2] if path in self._servers else self._promised.setdefault(path, settings)
        if promised != settings:
            raise LLMError(f"{spec.model}: already served with n_ctx, n_parallel, n_threads = {promised}; "
                           f"bind every role using this model with the same settings")
        return path

    def url(self, spec: ModelSpec) -> tuple[str, Path]:
        """Start (once) the server for ``spec``'s model and return its base URL and model file."""
        path = self.check(spec)
        settings = self._settings(spec)
        with self._lock:
            if path in self._servers:
                return self._servers[path][1], path
            import xllamacpp

            params = xllamacpp.CommonParams()
            params.model.path = str(path)
            params.n_ctx = spec.n_ctx  # shared by the slots: each gets n_ctx / n_parallel
            params.n_parallel = spec.n_parallel
            params.cpuparams.n_threads = settings[2]
            params.cpuparams_batch.n_threads = settings[2]
            params.port = 0  # a free port
            params.verbosity = 0
            server = xllamacpp.Server(params)
            url = server.listening_address
            self._servers[path] = (server, url, settings)
            return url, path

    @staticmethod
    def _settings(spec: ModelSpec) -> tuple:
        return spec.n_ctx, spec.n_parallel, spec.n_threads or os.cpu_count() or 1

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
            self._promised.pop(self._path(spec), None)

    def stop_all(self) -> None:
        with self._lock:
            # Dropping the last reference stops llama.cpp's server and frees the model.
            self._servers.clear()
            self._promised.clear()


SERVERS = LocalServers()
