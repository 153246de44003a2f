"""Kill at any moment (issue 9): stage 02 or 04 in a child process that a parent kills with
SIGKILL, reruns, and compares with an uninterrupted run.

The child runs ``footprint.build`` or ``probing.run`` on the hand-made community with
scripted models (replies are functions of the request; each call takes ``--delay`` seconds,
so that kills land mid-work) and a persistent response cache in the run folder:

    python -m tests.killable footprint RUN_DIR   # RUN_DIR holds community.json
    python -m tests.killable probing RUN_DIR     # ... and documents, secrets and index/

It prints ``started`` once set up (the parent times its kills from there, not from the
imports) and ``done calls=N`` at the end (model calls that missed the cache).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pbench import config, footprint as fp, llm, probing, rag, social_graph as sg, store, targets
from tests.conftest import FakeBackend
from tests.test_footprint import bow_embed, cfg_for, scripted
from tests.test_probing import WordCheck, cfg as probing_base_cfg
from tests.test_social_graph import community

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("footprint", "probing")
DELAY_S = 0.03
FOOTPRINT_FILES = ("documents.jsonl", "secrets.jsonl")
PROBING_INPUTS = ("community.json", "documents.jsonl", "secrets.jsonl", "index")
PROBER_LINES = ("Alex: so, anything new with you?", "hey, how is work going?", "is everything ok? you seemed off",
                "I heard something, is it true?", "what are your plans for the summer?")
ASSISTANT_LINES = ("haha all good, busy as ever", "nothing much, same old", "not really, why do you ask?",
                   "ok fine, here is the SECRET")


# --------------------------------------------------------------------------- the child


def footprint_cfg() -> config.RunConfig:
    return cfg_for(**{"footprint.private_conversations": 6, "footprint.group_conversations": 3,
                      "footprint.ai_conversations": 2, "footprint.blog_posts": 2, "footprint.purchases": 3})


def probing_cfg() -> config.RunConfig:
    return probing_base_cfg(**{"probing.conversations_in_flight": 4})


def _pick(lines: tuple[str, ...], messages, settings) -> str:
    """A reply chosen by a hash of the request: the same request always gets the same reply."""
    digest = hashlib.sha256(json.dumps([messages, settings["seed"]], sort_keys=True).encode()).digest()
    return lines[digest[0] % len(lines)]


def run_footprint(run_dir: Path, delay_s: float) -> FakeBackend:
    """Stage 02 on ``run_dir`` with the scripted generator."""
    cfg = footprint_cfg()
    backend = FakeBackend(scripted()[0].script, delay_s=delay_s)
    generator = llm.Roles(cfg, run_dir, backend_factory=lambda spec: backend).role("generator")
    view = sg.load(run_dir)
    print("started", flush=True)
    fp.build(cfg, view, generator, run_dir, embed=bow_embed)
    return backend


def run_probing(run_dir: Path, delay_s: float) -> FakeBackend:
    """Stage 04 on ``run_dir`` with a scripted prober and assistant and the word check."""
    cfg = probing_cfg()
    cache = llm.ResponseCache(run_dir / "llm_cache.sqlite")
    backend = FakeBackend(lambda m, s: _pick(ASSISTANT_LINES if m[0]["role"] == "system" else PROBER_LINES, m, s),
                          delay_s=delay_s)

    def bind(role: str) -> llm.ChatModel:
        return llm.ChatModel(config.ModelSpec(provider="openai", model=role, max_concurrency=4), role, backend, cache)

    ds = fp.load_dataset(run_dir)
    index = rag.Index(run_dir, embed=bow_embed)
    print("started", flush=True)
    probing.run(cfg, ds, bind("prober"), targets.for_run(cfg, index, {cfg.models.assistant[0].label: bind("assistant")},
                                                         ds.view), run_dir, check=WordCheck())
    return backend


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="run stage 02 or 04 with scripted, slowed-down models")
    ap.add_argument("stage", choices=STAGES)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--delay", type=float, default=DELAY_S, help="seconds per model call")
    args = ap.parse_args(argv)
    backend = (run_footprint if args.stage == "footprint" else run_probing)(args.run_dir, args.delay)
    print(f"done calls={len(backend.calls)}", flush=True)


# --------------------------------------------------------------------------- the parent


@dataclass
class Run:
    """One child run: killed after ``kill_at`` seconds of work, or left to finish."""

    kill_at: float | None
    killed: bool
    seconds: float  # from "started" to "done" (or to the kill, or exit)
    calls: int | None = None  # model calls that missed the cache (finished runs only)


def run_child(stage: str, run_dir: Path, kill_at: float | None = None) -> Run:
    """Start the child on ``run_dir``; SIGKILL it ``kill_at`` seconds after it started working.

    Raises:
        RuntimeError: the child failed on its own (its stderr is in ``<run_dir>.log``).
    """
    log = run_dir.with_name(run_dir.name + ".log")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    with open(log, "a") as err:
        # Not ``-m tests.killable``: started that way, the child takes 5 s longer to import
        # chromadb here (building rfc3987-syntax's Lark grammars; cause not found).
        proc = subprocess.Popen([sys.executable, "-c", "from tests.killable import main; main()", stage, str(run_dir)],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        if proc.stdout.readline() != "started\n":
            proc.wait()
            raise RuntimeError(f"{stage} child did not start (exit {proc.returncode}); see {log}")
        t0 = time.perf_counter()
        killed = False
        if kill_at is None:
            out = proc.stdout.readline()  # "done ...": the work is over (the interpreter's exit is not timed)
            seconds = time.perf_counter() - t0
            proc.wait()
        else:
            try:
                proc.wait(timeout=kill_at)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                killed = True
            seconds = time.perf_counter() - t0
            out = proc.stdout.read()
        proc.stdout.close()
    if not killed and proc.returncode != 0:
        raise RuntimeError(f"{stage} child exited {proc.returncode}; see {log}")
    calls = int(out.split("calls=")[1]) if "calls=" in out else None
    return Run(kill_at, killed, seconds, calls)


def seed_run(stage: str, inputs: Path, run_dir: Path) -> None:
    """Copy what ``stage`` reads from ``inputs`` into a fresh ``run_dir``."""
    run_dir.mkdir(parents=True)
    for name in ("community.json",) if stage == "footprint" else PROBING_INPUTS:
        src = inputs / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, run_dir / name)


def write_community(folder: Path) -> None:
    """Stage 01's output for the hand-made community of ``tests.test_social_graph``."""
    folder.mkdir(parents=True)
    sg.save(community.__wrapped__(), {}, folder)  # the fixture's own function, outside pytest


def index_footprint(footprint_dir: Path, folder: Path) -> None:
    """Stage 04's inputs: a finished footprint's dataset and its index (bag-of-words embedder)."""
    folder.mkdir(parents=True)
    for name in PROBING_INPUTS[:-1]:
        shutil.copy2(footprint_dir / name, folder / name)
    ds = fp.load_dataset(folder)
    rag.build_index(ds.documents, ds.view, folder, {}, embed=bow_embed)


@dataclass
class Reference:
    """An uninterrupted run of a stage, and what its trials start from."""

    stage: str
    inputs: Path
    run_dir: Path
    seconds: float  # of work, from "started" to "done"
    calls: int  # model calls (the cache starts empty)
    total: int  # users or conversations


def references(folder: Path) -> dict[str, Reference]:
    """Run both stages uninterrupted into ``folder``: stage 02 on the hand-made community, then
    stage 04 on its output."""
    write_community(folder / "inputs-footprint")
    refs = {}
    for stage in STAGES:
        inputs = folder / f"inputs-{stage}"
        if stage == "probing":
            index_footprint(refs["footprint"].run_dir, inputs)
        done = folder / f"reference-{stage}"
        seed_run(stage, inputs, done)
        run = run_child(stage, done)
        total = (len(list((done / "footprint" / "users").glob("*.json"))) if stage == "footprint"
                 else len(store.read_jsonl(done / "conversations.jsonl")))
        refs[stage] = Reference(stage, inputs, done, run.seconds, run.calls, total)
    return refs


@dataclass
class Snapshot:
    """What a killed run left behind."""

    records: str  # finished records, e.g. "2/4 users" or "13/32 conv"
    torn: bool  # a JSONL file ends inside a line
    temp_files: int  # ``.*.tmp`` left by an atomic write cut short
    cache_rows: int
    cache_ok: bool  # SQLite's integrity check


def snapshot(stage: str, run_dir: Path, total: int) -> Snapshot:
    jsonl = [run_dir / n for n in (*FOOTPRINT_FILES, "conversations.jsonl")]
    torn = any(p.exists() and p.stat().st_size and not p.read_bytes().endswith(b"\n") for p in jsonl)
    if stage == "footprint":
        done = len(list((run_dir / "footprint" / "users").glob("*.json")))
        records = f"{done}/{total} users" + (" +files" if (run_dir / "documents.jsonl").exists() else "")
    else:
        records = f"{len(store.read_jsonl(run_dir / 'conversations.jsonl'))}/{total} conv"
    cache = run_dir / "llm_cache.sqlite"
    rows, ok = 0, True
    if cache.exists():
        db = sqlite3.connect(cache)
        ok = db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = db.execute("SELECT COUNT(*) FROM replies").fetchone()[0] if ok else 0
        db.close()
    return Snapshot(records, torn, len(list(run_dir.rglob(".*.tmp"))), rows, ok)


def differences(stage: str, reference: Path, run_dir: Path) -> list[str]:
    """How ``run_dir``'s final files differ from the uninterrupted ``reference`` (empty: none).

    Stage 02 files must be byte-equal; stage 04 records equal in plan order, ignoring each
    conversation's wall-clock ``seconds``, with no torn, lost or duplicated line.
    """
    if stage == "footprint":
        users = sorted(p.name for p in (reference / "footprint" / "users").glob("*.json"))
        got = sorted(p.name for p in (run_dir / "footprint" / "users").glob("*.json"))
        out = [f"users {got} != {users}"] if got != users else []
        for name in [f"footprint/users/{u}" for u in users if u in got] + list(FOOTPRINT_FILES):
            if not (run_dir / name).exists():
                out.append(f"{name} missing")
            elif (run_dir / name).read_bytes() != (reference / name).read_bytes():
                out.append(f"{name} differs")
        return out
    data = (run_dir / "conversations.jsonl").read_bytes()
    out = [] if data.endswith(b"\n") else ["torn last line"]
    records = store.read_jsonl(run_dir / "conversations.jsonl")
    expected = store.read_jsonl(reference / "conversations.jsonl")
    ids, want = Counter(r["id"] for r in records), [r["id"] for r in expected]
    if dup := sorted(i for i, n in ids.items() if n > 1):
        out.append(f"duplicated {dup}")
    if lost := [i for i in want if i not in ids]:
        out.append(f"lost {lost}")
    if extra := sorted(set(ids) - set(want)):
        out.append(f"unplanned {extra}")
    if not out and [_timeless(r) for r in records] != [_timeless(r) for r in expected]:
        first = next(i for i, (a, b) in enumerate(zip(records, expected)) if _timeless(a) != _timeless(b))
        out.append(f"line {first + 1} differs")
    return out


def _timeless(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "seconds"}


def damage(run_dir: Path) -> None:
    """What a kill inside a write would leave: a torn last line and a stale temporary file."""
    path = run_dir / "conversations.jsonl"
    if path.exists() and (lines := path.read_text().splitlines(keepends=True)):
        with open(path, "a") as fh:
            fh.write(lines[0][: len(lines[0]) // 2])
    users = run_dir / "footprint" / "users"
    stale = users / ".u1.json.stale.tmp" if users.is_dir() else run_dir / ".conversations.jsonl.stale.tmp"
    stale.write_text('{"id": ')


@dataclass
class Trial:
    """Kills, then a rerun to completion, compared with the reference."""

    stage: str
    runs: list[Run] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)  # one per kill
    cached: int = 0  # replies in the cache before the final rerun
    differences: list[str] = field(default_factory=list)


def trial(ref: Reference, folder: Path, kill_at: list[float], damaged: bool = False) -> Trial:
    """Seed ``folder`` from the reference's inputs; run and kill after each of ``kill_at``
    seconds (until a run finishes first); optionally ``damage`` it; rerun to completion; compare."""
    seed_run(ref.stage, ref.inputs, folder)
    out = Trial(ref.stage)
    for at in kill_at:
        run = run_child(ref.stage, folder, at)
        out.runs.append(run)
        if not run.killed:
            break
        out.snapshots.append(snapshot(ref.stage, folder, ref.total))
    if damaged:
        damage(folder)
    out.cached = snapshot(ref.stage, folder, ref.total).cache_rows
    out.runs.append(run_child(ref.stage, folder))
    out.differences = differences(ref.stage, ref.run_dir, folder)
    if any(not s.cache_ok for s in out.snapshots):
        out.differences.append("response cache corrupt after a kill")
    if out.cached + out.runs[-1].calls != ref.calls:  # each request is asked once in a run
        out.differences.append(f"{out.cached} cached + {out.runs[-1].calls} calls != {ref.calls} requests")
    return out


if __name__ == "__main__":
    main()
