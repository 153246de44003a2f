"""The per-turn encoder: the batcher hands each caller its own rows, in its order, under
concurrent callers, passes errors on, and batches; with MiniLM (marked slow) a text's vector
does not depend on what it was encoded with, so batching cannot change a result."""

import asyncio
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from pbench import embeddings
from tests.test_footprint import bow_embed


class Recorder:
    """``bow_embed`` that records each call's texts and takes ``delay`` seconds, so that
    callers arriving meanwhile queue up; raises for a text containing ``poison``."""

    def __init__(self, delay: float = 0.02, poison: str = "\x00") -> None:
        self.delay, self.poison, self.calls = delay, poison, []

    def __call__(self, texts):
        self.calls.append(list(texts))
        time.sleep(self.delay)
        if any(self.poison in t for t in texts):
            raise ValueError("cannot encode this")
        return bow_embed(texts)


def started(future) -> None:
    """Wait until the encoder thread has taken ``future``'s request (later ones queue behind it)."""
    deadline = time.monotonic() + 10
    while not (future.running() or future.done()):
        assert time.monotonic() < deadline, "the encoder thread never took the request"
        time.sleep(0.001)


def requests(n: int, seed: int = 0) -> list[list[str]]:
    """``n`` callers' text lists: 1-5 texts each, some texts shared between callers."""
    rng = random.Random(seed)
    words = "ana ben moves to lisbon in may owes the bank money quit her job".split()
    return [[" ".join(rng.sample(words, rng.randint(2, 6))) for _ in range(rng.randint(1, 5))] for _ in range(n)]


def test_concurrent_callers_each_get_their_own_rows_in_order_and_are_batched():
    enc = Recorder()
    batcher = embeddings.Batcher(enc, max_texts=16)
    asks = requests(40)
    start = threading.Barrier(8)

    def caller(part: list[list[str]]) -> list[np.ndarray]:
        start.wait()
        return [batcher.submit(texts).result(timeout=30) for texts in part]

    with ThreadPoolExecutor(8) as pool:
        parts = [asks[i::8] for i in range(8)]
        got = dict(zip(range(8), pool.map(caller, parts), strict=True))
    for i, part in enumerate(parts):
        for texts, rows in zip(part, got[i], strict=True):
            assert rows.shape == (len(texts), 256)
            np.testing.assert_array_equal(rows, bow_embed(texts))
    assert len(enc.calls) < len(asks)  # callers were served together...
    assert max(len(c) for c in enc.calls) > 5  # ...more texts at once than any one caller has
    assert all(len(c) <= 16 for c in enc.calls)  # within max_texts (no single request exceeds it here)
    assert all(len(c) == len(set(c)) for c in enc.calls)  # a text asked twice in a batch is encoded once


def test_an_error_reaches_every_caller_of_its_batch_and_the_encoder_carries_on():
    enc = Recorder(delay=0.1, poison="BAD")
    batcher = embeddings.Batcher(enc)
    first = batcher.submit(["warm", "up"])  # occupies the encoder while the next two queue up
    started(first)
    bad, innocent = batcher.submit(["fine", "BAD text"]), batcher.submit(["also fine"])
    np.testing.assert_array_equal(first.result(timeout=10), bow_embed(["warm", "up"]))
    for f in (bad, innocent):
        with pytest.raises(ValueError, match="cannot encode this"):
            f.result(timeout=10)
    np.testing.assert_array_equal(batcher(["after the error"]), bow_embed(["after the error"]))
    with pytest.raises(TypeError, match="strings"):
        batcher.submit(["a", None])
    assert batcher([]).shape == (0, embeddings.DIMENSIONS)


def test_a_caller_that_gave_up_is_skipped():
    enc = Recorder(delay=0.1)
    batcher = embeddings.Batcher(enc)
    busy = batcher.submit(["one"])
    started(busy)
    gone = batcher.submit(["never encoded"])
    assert gone.cancel()
    busy.result(timeout=10)
    np.testing.assert_array_equal(batcher.submit(["two"]).result(timeout=10), bow_embed(["two"]))
    assert enc.calls == [["one"], ["two"]]


def test_aembed_awaits_a_batcher_without_the_loops_executor():
    enc = Recorder()
    batcher = embeddings.Batcher(enc)
    asks = requests(30, seed=1)

    class NoExecutor(ThreadPoolExecutor):
        def submit(self, *a, **k):
            raise AssertionError("a Batcher must not take a worker thread")

    async def main():
        asyncio.get_running_loop().set_default_executor(NoExecutor())
        return await asyncio.gather(*(embeddings.aembed(batcher, texts) for texts in asks))

    got = asyncio.run(main())
    for texts, rows in zip(asks, got, strict=True):
        np.testing.assert_array_equal(rows, bow_embed(texts))
    assert len(enc.calls) < len(asks)


def test_aembed_runs_a_plain_function_in_the_executor():
    def on_worker(texts):
        assert threading.current_thread() is not threading.main_thread()
        return bow_embed(texts)

    np.testing.assert_array_equal(asyncio.run(embeddings.aembed(on_worker, ["a b"])), bow_embed(["a b"]))


TEXTS = [
    "Ana is resigning from Acme in May",
    "X was just thinking that the garden party came up again",
    "honestly I owe the bank about $18,000 and he has no clue 🙃",
    "ok",
    "we moved to Lisbon last week because of the new job, the flat is tiny but the light is great. " * 4,
    "the doctor said my diagnosis is diabetes, what should I eat " * 12,  # over 256 tokens: truncated
    "shall we talk it over on Monday at 5?",
    "X is not leaving",
]


@pytest.mark.slow
def test_minilm_vectors_do_not_depend_on_the_company_they_are_encoded_in():
    import torch

    alone = np.stack([embeddings.encode_alone([t])[0] for t in TEXTS])
    plain = embeddings.embed(TEXTS)
    for t, v in zip(TEXTS, alone, strict=True):  # the same vector as an encode of the text by itself, but for padding
        assert np.abs(v - embeddings.embed([t])[0]).max() < 1e-6
    assert np.abs(alone - plain).max() < 1e-6
    assert np.abs(alone @ alone.T - plain @ plain.T).max() < 1e-6
    rng = random.Random(3)
    threads = torch.get_num_threads()
    try:
        for n_threads in (1, 2):
            torch.set_num_threads(n_threads)
            for _ in range(4):
                order = rng.sample(range(len(TEXTS)), rng.randint(2, len(TEXTS)))
                many = [TEXTS[i] for i in order] * 3  # over 16 texts: torch keeps its threads
                np.testing.assert_array_equal(embeddings.encode_alone(many), alone[order * 3])
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_each_text_is_encoded_once_a_process_and_kept_vectors_are_the_encoded_ones(monkeypatch):
    encoded, encode = [], embeddings.encode_alone

    def counting(texts):
        encoded.extend(texts)
        return encode(texts)

    monkeypatch.setattr(embeddings, "encode_alone", counting)
    monkeypatch.setattr(embeddings, "_memo", embeddings.OrderedDict())
    monkeypatch.setattr(embeddings, "MEMO", 4)
    first = embeddings.embed_alone(TEXTS[:3] + TEXTS[:1])
    assert encoded == TEXTS[:3]  # a text asked for twice in one call is encoded once
    again = embeddings.embed_alone(TEXTS[1:5])
    assert encoded == TEXTS[:3] + TEXTS[3:5]  # the kept ones are not encoded again
    np.testing.assert_array_equal(again[:2], first[1:3])
    np.testing.assert_array_equal(again, encode(TEXTS[1:5]))  # bit for bit an encode's
    assert list(embeddings._memo) == TEXTS[1:5]  # the 4 used last; the first is dropped
    embeddings.embed_alone(TEXTS[:1])
    assert encoded[-1] == TEXTS[0]


@pytest.mark.slow
def test_the_shared_batcher_gives_concurrent_callers_what_each_would_get_alone():
    alone = {t: embeddings.embed_alone([t])[0] for t in TEXTS}
    rng = random.Random(5)
    asks = [rng.sample(TEXTS, rng.randint(1, 4)) for _ in range(24)]
    batcher = embeddings.Batcher(embeddings.embed_alone)
    with ThreadPoolExecutor(12) as pool:
        got = list(pool.map(batcher, asks))
    for texts, rows in zip(asks, got, strict=True):
        np.testing.assert_array_equal(rows, np.stack([alone[t] for t in texts]))
