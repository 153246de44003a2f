"""This machine's rates for an embedded model: prompt tokens read and tokens generated a wall
second, with as many requests at once as the model's server has slots (issue 40).

A stage that calls a local model cannot go faster than its tokens at these rates allow, so
the estimate prices a local call in tokens at this machine's rates rather than in another
machine's seconds per call. Measuring takes a few seconds (the model's load, one wave of
prompts, one of generations); the result is kept in ``rates.json`` beside the model cache,
under a key naming the machine, the model file and the server's settings, so a second run on
this machine reads it instead.

- The prompt rate: one prompt of about 300 tokens per slot, each opened by a nonce so that no
  slot (and no host-memory prompt cache) holds a prefix of it, answered with one token.
- The generation rate: one short prompt per slot, answered with ``GENERATED`` tokens.

Each is measured ``WAVES`` times and the best kept: on this machine the first wave after the
model's load read prompts at 39 tok/s and later ones at 56-68.

The two overlap a little (the generation wave reads its short prompts, the prompt wave writes
one token), which makes both rates slightly low: a bound computed from them is slightly high.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from pbench import embedded, store
from pbench.config import ModelSpec

FILLER = ("Maya wrote in her diary about the market, the rain, the bus that came late, the neighbour's dog, "
          "the bread she bought, and the long walk home along the canal in the evening light. ")
PROMPT_REPEATS = 7  # about 300 tokens of filler per prompt
GENERATED = 48
WAVES = 2


@dataclass(frozen=True)
class Rates:
    """Tokens a wall second on this machine with ``slots`` requests at once."""

    prompt: float
    generation: float
    slots: int
    measured_at: str
    seconds: float  # what measuring took, the model's load included

    def seconds_for(self, prompt_tokens: float, completion_tokens: float) -> float:
        """The lower bound for this work: read every prompt token, write every completion token."""
        return prompt_tokens / self.prompt + completion_tokens / self.generation

    def describe(self) -> str:
        return f"{self.prompt:.0f} prompt tok/s, {self.generation:.1f} generated tok/s"


def rates_file() -> Path:
    """Where measured rates are kept: ``rates.json`` beside the embedded model cache."""
    return embedded.cache_dir().parent / "rates.json"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def key(spec: ModelSpec) -> str:
    """What rates depend on: the machine, the model file, the server's settings and llama.cpp's build."""
    model = embedded.EMBEDDED[spec.model].sha256[:16] if spec.model in embedded.EMBEDDED else Path(spec.model).name
    try:
        build = metadata.version("xllamacpp")
    except metadata.PackageNotFoundError:
        build = "?"
    threads = spec.n_threads or os.cpu_count() or 1
    return (f"{platform.node()}|{cpu_name()}|{os.cpu_count()} cpus|{model}|slots {spec.n_parallel}|"
            f"threads {threads}|ctx {spec.n_ctx}|xllamacpp {build}")


def known(spec: ModelSpec, path: Path | None = None) -> Rates | None:
    """Rates measured on this machine earlier for ``spec``'s model and settings, or None."""
    try:
        got = (store.read_json(path or rates_file()) or {}).get(key(spec))
        return Rates(**got) if got else None
    except (ValueError, TypeError):  # a damaged or older file: measure again
        return None


def measure(spec: ModelSpec) -> Rates:
    """Measure ``spec``'s rates now, with ``spec.n_parallel`` requests at once. The server is the
    one the run's roles share (started here if it is not running, and then stopped)."""
    from pbench import llm

    started = time.perf_counter()
    was_running = llm.SERVERS.running(spec)
    backend = llm.make_backend(spec)
    slots = spec.n_parallel

    async def wave(prompts: list[str], tokens: int) -> tuple[float, int, int]:
        import asyncio

        settings = {"temperature": 0.7, "max_tokens": tokens, "seed": 1}
        t0 = time.perf_counter()
        out = await asyncio.gather(*(backend.generate([{"role": "user", "content": p}], schema=None,
                                                      settings=settings) for p in prompts))
        return time.perf_counter() - t0, sum(r.prompt_tokens for r in out), sum(r.completion_tokens for r in out)

    prompt = generation = 0.0
    try:
        llm.run_sync(wave(["Say hi."], 2))  # the model's load and a warm-up
        for w in range(WAVES):  # the best of a few: the first after a load runs slow while pages come in
            nonce = f"{time.time_ns()}-{w}"
            secs, read, _ = llm.run_sync(wave(
                [f"Note {nonce}-{k}. " + FILLER * PROMPT_REPEATS + "Give this note a one-word title." for k in range(slots)], 1))
            gsecs, _, wrote = llm.run_sync(wave(
                [f"Story {nonce}-{k}: write a long story about a lighthouse keeper." for k in range(slots)], GENERATED))
            prompt, generation = max(prompt, read / secs), max(generation, wrote / gsecs)
    finally:
        if not was_running:
            llm.SERVERS.stop(spec)
    return Rates(prompt=prompt, generation=generation, slots=slots,
                 measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"), seconds=round(time.perf_counter() - started, 1))


def rates(spec: ModelSpec, *, measure_now: bool = True, path: Path | None = None) -> Rates | None:
    """This machine's rates for ``spec``: as measured earlier, else measured now and kept (None
    when there are none and ``measure_now`` is false, or for a model that is not local)."""
    if spec.provider != "local":
        return None
    have = known(spec, path)
    if have is not None or not measure_now:
        return have
    got = measure(spec)
    target = path or rates_file()
    with store.locked(target):
        try:
            kept = store.read_json(target) or {}
        except ValueError:  # a damaged file holds nothing worth keeping
            kept = {}
        store.write_json(target, {**kept, key(spec): asdict(got)})
    return got
