"""Probing and judging throughput against a latency-bound endpoint: pbench's runner with C
conversations in flight against a plain sequential loop (the paper's Appendix B, one call after
another).

    python bench/concurrency.py [--run outputs/tiny] [--params params/tiny.yaml] [--latency 0.5]
                                [--conversations 64] [--in-flight 1 4 16 32] [--torch-threads N]

Every role (prober, assistant, judge) is bound to ``bench/latency_server.py``, which answers
each request after ``--latency`` seconds, as a hosted API would. Retrieval, prompt assembly
and the per-turn leak check run for real on the run's dataset and index (MiniLM on the CPU):
with the judging method ``match`` the check is code, no model call (pbench.matching reads the
reply and MiniLM matches its statements to the secret's components); with ``verdict`` each
judge is asked per component. After a conversation, its stage 05 calls: the persona score
(``persona``, schema ``judging.Score``) and, with a confidant whose replies restated no core
component, the shared/withheld question (``disclosure``, schema ``judging.Disclosure``).
pbench runs them with its own stage 05 (``judging.judge_run``, C in flight). Each setting gets
an empty response cache, so every call reaches the server. The plan is repeated with distinct
ids (so distinct seeds and replies) up to ``--conversations``. Target: speed-up >= 0.8 x C up
to C = 32. Writes only temporary files.

Besides the speed-up, the table gives each setting's latency floor (the calls it made times
the latency, over C) and the share of wall time MiniLM spent encoding (under pbench's encode
lock, so never two at once): near 100%, the encoder, not the endpoint, sets the pace. "on
loop" is the part encoded on pbench's event loop thread, during which no other
conversation's request or reply is handled (pbench encodes on its encoder thread, so this
should stay 0). "texts/encode" is how many texts one MiniLM call encoded on average: the
conversations in flight queue their queries and replies' statements, and the encoder thread
encodes what has queued together (``embeddings.batched``; the sequential loop uses it too,
one caller at a time).

``--torch-threads N`` sets torch's threads for the process (default: one per core, as in a
run). pbench encodes at most 4 texts on one thread whatever it says (on 2 busy cores a
single-text encode on two swings from 20 ms to 300-800 ms); a larger batch of the
conversations in flight uses torch's threads (``embeddings.embed_alone``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import openai

from latency_server import config_for, serve
from pbench import audit, embeddings, footprint, judging, llm, probing, prompts, rag, targets
from pbench.schema import LeakCheck


class EncodeTimer:
    """Adds up the seconds MiniLM spends encoding (its ``encode``, called under pbench's lock),
    how many of them on pbench's event loop thread, where nothing else runs meanwhile, and the
    texts per call (how well the conversations' encodes were batched)."""

    def __init__(self) -> None:
        self.reset()
        model = embeddings.model()
        encode = model.encode

        def timed(texts, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return encode(texts, *args, **kwargs)
            finally:
                spent = time.perf_counter() - t0
                self.seconds += spent
                self.calls += 1
                self.texts += len(texts)
                if threading.current_thread().name == "pbench-llm":
                    self.on_loop += spent

        model.encode = timed

    def reset(self) -> None:
        self.seconds = self.on_loop = 0.0
        self.calls = self.texts = 0


def repeated_plan(ds: footprint.Dataset, cfg, n: int) -> list[probing.Probe]:
    """``n`` probes: the run's plan repeated, each copy with its own id (hence its own seeds)."""
    rows = probing.plan(ds, cfg)
    out = []
    for i in range(n):
        row = rows[i % len(rows)]
        out.append(dataclasses.replace(row, id=hashlib.sha256(f"{row.id}/{i}".encode()).hexdigest()[:12]))
    return out


def run_pbench(ds, index, cfg, probes, in_flight: int, run_dir: Path) -> tuple[list, list[dict]]:
    """pbench's stage 04 runner with ``in_flight`` conversations at once (as ``probing.run``
    gates them), then its stage 05 (``judging.judge_run``, ``in_flight`` at once) on them.
    Returns the conversations and their judgement records."""
    roles = llm.Roles(cfg, cfg.llm.cache_path.parent)
    panel = judging.Panel.from_config(cfg, roles)
    built = targets.for_run(cfg, index, {m.label: m for m in roles.panel("assistant")}, ds.view)
    runner = probing.Runner(ds, roles.role("prober"), built, panel, cfg.probing.max_rounds)

    try:
        convs = llm.run_sync(llm.gather_bounded(runner.run, probes, in_flight))
        judged = judging.judge_run(ds, convs, panel, run_dir, in_flight=in_flight)
        return convs, judged
    finally:
        roles.cache.close()


def findings(check: LeakCheck | None, method: str) -> tuple | None:
    """What a turn's leak check decided, to compare pbench's with the loop's: the verdict and
    per-component states, and with method ``match`` each vote (similarity, evidence, how). None
    for a turn not judged (an empty reply)."""
    if check is None or check.method == "not judged":
        return None
    return check.leaked, check.components, check.votes if method == "match" else None


def run_sequential(ds, index, cfg, probes) -> list[tuple[list[tuple[str, str, list[str], tuple | None]],
                                                          float | None, str | None]]:
    """The plain loop: per conversation, per round, prober call (asked again where pbench's
    guard asks again), retrieval, assistant call and the leak check (code with method
    ``match``; a judge call per component with ``verdict``), then the conversation's persona
    call and (confidants) disclosure call, one after another with a synchronous client. Same
    prompts, seeds, stopping rule and calls as pbench's stages 04 and 05. Returns per
    conversation its turns (exchange, documents retrieved, the leak check's ``findings``),
    persona score and, for a confidant, its shared/withheld decision."""
    client = openai.OpenAI(base_url=cfg.models.prober.base_url, api_key="not-needed", max_retries=0)
    prober, target, judge = cfg.models.prober, cfg.models.assistant[0], cfg.models.judge[0]
    prompter = probing.Runner(ds, None, {}, None, cfg.probing.max_rounds)
    # The match reading is pbench's own code (no model call); only its embeddings cost time.
    matcher = judging.Panel([], "match", cfg.judging.match_threshold, cfg.seed)

    def schema_format(schema) -> dict:
        return {"type": "json_schema", "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema()}}

    def chat(spec, messages, seed, temperature=None, **kw) -> str:
        resp = client.chat.completions.create(
            model=spec.model, messages=messages, seed=seed, max_tokens=spec.max_tokens,
            temperature=spec.temperature if temperature is None else temperature, **kw)
        return resp.choices[0].message.content or ""

    def ask_judge(template: str, schema, **variables):
        text = prompts.render("judging", template, **variables)
        reply = chat(judge, [{"role": "user", "content": text}], cfg.seed, 0.0, response_format=schema_format(schema))
        return schema.model_validate_json(reply)

    def asserts(probe, secret, owner_name, said) -> bool:
        if probe.authorised or not said:
            return False
        return bool(asyncio.run(matcher.asserted(secret.core_components, owner_name, said,
                                                 ds.view.name(probe.audience))))

    def leak_check(components, owner_name, said, reply, prior):
        if cfg.judging.method == "match":
            return asyncio.run(matcher.check(components, owner_name, said, reply, prior))
        before = prior.components if prior is not None else [judging.NOT_REVEALED] * len(components)
        states = list(before)
        for i, comp in enumerate(components):
            if before[i] == judging.REVEALED:
                continue
            out = ask_judge("component", judging.Evidence, owner=owner_name, question=said, reply=reply, fact=comp)
            stated = out.stated and not (out.evidence and not judging.grounded(out.evidence, reply + " " + said))
            states[i] = judging.REVEALED if stated else judging.NOT_REVEALED
        return LeakCheck(method="verdict", leaked=judging.combine(states), components=states)

    out = []
    for probe in probes:
        secret = ds.secret_by_id[probe.secret_id]
        owner = ds.view.people[probe.owner]
        assistant = rag.Assistant(ds.view, index, None, probe.owner, probe.prompt, probe.defence, cfg.probing.top_k)
        seed = int(probe.id[:8], 16)
        history: list[tuple[str, str]] = []
        turns = []  # per round: the exchange, the documents retrieved, the check's findings
        check, failed = None, False
        for rnd in range(1, cfg.probing.max_rounds + 1):
            said = probing.clean_prober(chat(prober, prompter._prober_messages(probe, secret, history), seed + rnd))
            # pbench's prober guard: an outsider's message that asserts a component (read by
            # the judge's matcher) or repeats the last reply is asked again.
            redrafts = 0
            while (asserts(probe, secret, owner.name, said) or (history and audit.is_echo(said, history[-1][1]))) \
                    and redrafts < probing.PROBER_REDRAFTS:
                redrafts += 1
                again = prompter._prober_messages(probe, secret, history, redraft=True)
                said = probing.clean_prober(chat(prober, again, seed + rnd + 1000 * redrafts))
            if not said:
                failed = True
                break
            conversation = [m for s, h in history for m in ({"role": "user", "content": s},
                                                             {"role": "assistant", "content": h})]
            conversation.append({"role": "user", "content": said})
            docs = assistant.retrieve(probe.audience, conversation, probe.at)
            reply = chat(target, assistant.messages(probe.audience, conversation, probe.at, docs), seed + 100 + rnd)
            reply = reply.strip()
            history.append((said, reply))
            if not reply:
                turns.append((said, reply, [d.id for d in docs], None))
                failed = True
                break
            check = leak_check(secret.core_components, owner.name, said, reply, check)
            turns.append((said, reply, [d.id for d in docs], findings(check, cfg.judging.method)))
            if check.leaked:
                break
        # Stage 05: the persona score, and with a confidant, shared or withheld.
        replies = [r for _, r in history if r.strip()]
        pc = float(ask_judge("persona", judging.Score, owner=owner.name, persona=owner.persona,
                             replies=replies).score) if replies else None
        disclosure = None
        if probe.authorised and not failed and history:
            if judging.REVEALED in check.components:
                disclosure = "shared"
            else:
                answer = ask_judge("disclosure", judging.Disclosure, owner=owner.name, secret=secret.content,
                                   turns=[{"asker": q, "reply": r} for q, r in history]).answer
                disclosure = "shared" if answer == "answered" else "withheld"
        out.append((turns, pc, disclosure))
    client.close()
    return out


def outcome(conv, judged: dict, method: str) -> tuple[list[tuple[str, str, list[str], tuple | None]],
                                                       float | None, str | None]:
    """A pbench conversation in ``run_sequential``'s terms: per turn the exchange, the
    documents retrieved and the leak check's findings; the persona score; and for a confidant
    its shared/withheld decision."""
    return ([(t.prober, t.reply, t.retrieved, findings(t.check, method)) for t in conv.turns], judged["pc"],
            judged["verdict"] if conv.authorised and judged["verdict"] in ("shared", "withheld") else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=Path("outputs/tiny"), help="a finished run (stages 01-03)")
    ap.add_argument("--params", type=Path, default=Path("params/tiny.yaml"))
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per request at the server")
    ap.add_argument("--conversations", type=int, default=64)
    ap.add_argument("--in-flight", type=int, nargs="+", default=[1, 4, 16, 32])
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="torch's intra-op threads for MiniLM (default: torch's own, one per core)")
    args = ap.parse_args()

    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    ds = footprint.load_dataset(args.run)
    index = rag.Index(args.run)
    encoder = EncodeTimer()
    with serve(args.latency) as server, tempfile.TemporaryDirectory() as tmp:
        base = config_for(args.params, server.url, Path(tmp) / "unused.sqlite")
        probes = repeated_plan(ds, base, args.conversations)
        for owner in sorted({p.owner for p in probes}):  # load MiniLM and open each collection before timing
            index.search(owner, "warm up", base.probing.top_k, "none", owner, probes[0].at)
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"torch {torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.2f}")
        print(f"command: {Path(sys.executable).name} {' '.join(sys.argv)}")
        per_round = "2" if base.judging.method == "match" else "2 + 1 per component not yet revealed"
        print(f"{args.conversations} conversations of up to {base.probing.max_rounds} rounds "
              f"({len(probing.plan(ds, base))} planned, repeated), judging method {base.judging.method}: "
              f"{per_round} calls per round, then a persona call (and a disclosure call for a confidant) "
              f"per conversation; {args.latency} s per call at the server, max_concurrency 64 per model")

        rows = []
        encoder.reset()
        server.reset()
        t0 = time.perf_counter()
        sequential = run_sequential(ds, index, base, probes)
        rows.append(("sequential loop", 1, time.perf_counter() - t0, sum(len(h) for h, _, _ in sequential),
                     server.requests, server.max_in_flight, encoder.seconds, encoder.on_loop,
                     encoder.texts / max(encoder.calls, 1)))
        same = True
        for c in args.in_flight:
            cfg = config_for(args.params, server.url, Path(tmp) / f"c{c}" / "cache.sqlite")
            encoder.reset()
            server.reset()
            t0 = time.perf_counter()
            convs, judged = run_pbench(ds, index, cfg, probes, c, Path(tmp) / f"c{c}")
            rows.append((f"pbench C={c}", c, time.perf_counter() - t0, sum(len(v.turns) for v in convs),
                         server.requests, server.max_in_flight, encoder.seconds, encoder.on_loop,
                         encoder.texts / max(encoder.calls, 1)))
            by_id = {r["id"]: r for r in judged}
            same &= [outcome(v, by_id[v.id], cfg.judging.method) for v in convs] == sequential

    seq_s = rows[0][2]
    print(f"\n{'setting':<16} {'seconds':>8} {'conv/min':>9} {'speed-up':>9} {'speed-up/C':>11} {'max in flight':>14} "
          f"{'turns':>6} {'requests':>9} {'floor s':>8} {'MiniLM busy':>12} {'on loop':>8} {'texts/encode':>13}")
    for name, c, secs, turns, requests, peak, encode_s, on_loop, per_call in rows:
        speed = seq_s / secs
        floor = requests * args.latency / min(c, args.conversations)
        print(f"{name:<16} {secs:>8.1f} {60 * args.conversations / secs:>9.1f} {speed:>9.2f} {speed / c:>11.2f} "
              f"{peak:>14} {turns:>6} {requests:>9} {floor:>8.1f} {encode_s / secs:>11.0%} {on_loop / secs:>8.0%} "
              f"{per_call:>13.1f}")
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    print(f"transcripts, documents retrieved, leak checks (with each match's similarity), persona scores and "
          f"shared/withheld decisions identical to the sequential loop's "
          f"in every setting: {'yes' if same else 'NO'}")
    print(f"{'C':>3} {'speed-up/C':>11}  target >= 0.8 x C up to C = 32")
    for name, c, secs, *_ in rows[1:]:
        if c <= 32:
            ratio = seq_s / secs / c
            print(f"{c:>3} {ratio:>11.2f}  {'met' if ratio >= 0.8 else 'MISSED'}")


if __name__ == "__main__":
    main()
