"""Does speculative decoding pay for the embedded 1.5B on this machine? (issue 40, item 2)

    python bench/speculative.py [--slots 1 4] [--tokens 96] [--waves 2]

Serves qwen2.5-coder-1.5b with xllamacpp three ways and measures generated tokens a wall
second, with ``slots`` requests at once, each the best of ``waves`` waves:
- ``none``: as the run serves it;
- ``draft 0.5b``: qwen2.5-0.5b (the same tokenizer family) drafts tokens that the 1.5B checks;
- ``ngram``: drafts taken from n-grams already in the prompt and reply (no second model), which
  pays where a reply copies its prompt, as a draft copies the retrieved documents.
The requests are two of the run's kinds at the run's temperatures: a draft written from
documents in the prompt (the assistant, 0.7) and free text (the generator, 0.8). Prints a
table; writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import httpx

from pbench import embedded

DOCS = "\n".join(
    f"[private chat, 2024-0{m}-1{m}, with Sam] I told Sam the landlord wants the flat back by the end of "
    f"the month and I have not found a new place near the school yet; the rent in town went up by a fifth."
    for m in range(1, 6))
KINDS = {
    "assistant": (0.7, "Here are your notes:\n" + DOCS + "\nDraft a short note to your sister about the flat, "
                  "using what the notes say."),
    "generator": (0.8, "Write a group chat between three friends planning a Saturday hike, ten messages, "
                  "one per line, 'Name: message'."),
}


def serve(kind: str, slots: int):
    import xllamacpp

    threads = os.cpu_count() or 1
    p = xllamacpp.CommonParams()
    p.model.path = str(embedded.ensure("qwen2.5-coder-1.5b"))
    p.n_ctx, p.n_parallel = 4096 * slots, slots
    p.cpuparams.n_threads = p.cpuparams_batch.n_threads = threads
    p.port, p.verbosity = 0, 0
    if kind == "draft 0.5b":
        p.speculative.types = [xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        p.speculative.draft.mparams.path = str(embedded.ensure("qwen2.5-0.5b"))
        p.speculative.draft.cpuparams.n_threads = p.speculative.draft.cpuparams_batch.n_threads = threads
        p.speculative.draft.n_max = 8
    elif kind == "ngram":
        p.speculative.types = [xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
    return xllamacpp.Server(p)


async def wave(url: str, slots: int, tokens: int, temperature: float, prompt: str, seed: int) -> tuple[int, float]:
    async with httpx.AsyncClient(timeout=600) as client:
        async def one(k: int) -> int:
            r = await client.post(url + "/chat/completions", json={
                "model": "local", "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
                "temperature": temperature, "seed": seed + k})
            return r.json()["usage"]["completion_tokens"]

        t0 = time.perf_counter()
        wrote = sum(await asyncio.gather(*(one(k) for k in range(slots))))
        return wrote, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--waves", type=int, default=2)
    args = ap.parse_args()
    print(f"{os.cpu_count()} cores; generated tokens a wall second, best of {args.waves} waves of {args.tokens}")
    print(f"{'serving':<12} {'slots':>5} " + " ".join(f"{k:>10}" for k in KINDS))
    for kind in ("none", "draft 0.5b", "ngram"):
        for slots in args.slots:
            server = serve(kind, slots)
            url = server.listening_address
            asyncio.run(wave(url, 1, 4, 0.7, "Say hi.", 0))  # load and warm up
            best = {}
            for name, (temperature, prompt) in KINDS.items():
                for w in range(args.waves):
                    wrote, secs = asyncio.run(wave(url, slots, args.tokens, temperature, prompt, 100 * w))
                    best[name] = max(best.get(name, 0.0), wrote / secs)
            print(f"{kind:<12} {slots:>5} " + " ".join(f"{best[k]:>10.1f}" for k in KINDS), flush=True)
            del server


if __name__ == "__main__":
    main()
