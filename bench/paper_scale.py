"""Paper scale on a simulated endpoint: ``params/community_1.yaml`` end to end with every role
bound to ``bench/sim_server.py`` at a fixed latency, measured stage by stage.

    python bench/paper_scale.py [--scale 0.1] [--volumes 1] [--latency 1] [--leak-share 0.2]
                                [--out outputs/paper_scale] [--port 8767] [--estimate]

``--scale F`` (0 < F <= 1) shrinks community_1 for a shorter run: its users (at least its 3
seeds), each user's document volumes, the secrets probed (F times the 36 that 12 users keep
on average) and the validation samples. ``--volumes V`` gives the volumes a factor of their
own: 1 keeps the paper's 620 documents a user, which cost little next to probing. Each model
keeps the file's ``max_concurrency`` (five targets, three judges; roles on one model share it,
as pbench's gates make them) and probing its ``conversations_in_flight``. The stages run one at
a time through ``pbench.run.run`` into ``--out``; a rerun resumes a killed run as ``pbench
run`` does (keep the port: it is part of the parameters). First the model calls to expect and
the least time they can take are printed, for community_1 and for the scaled run
(``--estimate`` prints them and stops).

Per stage: wall time; model calls; our CPU time per call (this process and its reaped
children, the notebook kernels, over the stage, divided by its calls; the simulator runs in a
process of its own and is not counted); peak resident memory (polled: this process with its
kernels, and the largest kernel alone); the stage's files in the run folder; and our
overhead: wall time minus the least time the calls can take at the configured concurrency
(each model's calls in waves of its limit; for probing also every conversation's chain of
prober, assistant and judge steps, ``conversations_in_flight`` at a time), as a share of wall
time. A stage that picked up an earlier attempt's partial outputs is marked ``resumed``; one a
rerun skipped keeps the figures of the attempt that ran it. Then the report's size and its
load time in headless Chromium (``bench/report_load.py``: from asking a just-started browser
to open it until the page is ready). Prints a table; writes the figures to
``paper_scale.json`` in the run folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psutil

from pbench import config, llm, probing, run, store
from pbench import estimate as pbench_estimate
from report_load import CHROMIUM, open_cold

HERE = Path(__file__).resolve().parent
COMMUNITY_1 = HERE.parent / "params" / "community_1.yaml"
VOLUMES = ("private_conversations", "group_conversations", "ai_conversations", "blog_posts", "purchases")
COMPONENTS = 2  # core components per secret: every theme of pbench.themes draws two


def mean(r: list[int]) -> float:
    return (r[0] + r[1]) / 2


# --------------------------------------------------------------------------- parameters


def scaled(data: dict[str, Any], scale: float, volumes: float, url: str, out: Path) -> dict[str, Any]:
    """community_1's parameters shrunk by ``scale`` (each user's documents by ``volumes``) into
    the run folder ``out``, every role bound to the simulator at ``url`` with its own
    ``max_concurrency``."""
    data = json.loads(json.dumps(data))
    data["run_name"], data["outputs_dir"] = out.name, str(out.parent)
    c, fp = data["community"], data["footprint"]
    users = max(c["initial_seed"], round(mean(c["size"]) * scale))
    if scale < 1:
        data["probing"]["secrets"] = max(1, round(scale * mean(c["size"]) * mean(fp["secrets_per_user"])))
    c["size"] = [users, users]
    c["groups"] = [min(g, users) for g in c["groups"]]
    for key in VOLUMES:
        fp[key] = [round(n * volumes) for n in fp[key]]
    v = data["validation"]
    v["snippets"], v["human_sample"] = round(v["snippets"] * scale), round(v["human_sample"] * scale)

    def bound(spec: dict[str, Any]) -> dict[str, Any]:
        return {"provider": "openai", "model": spec["model"], "name": spec["name"] or spec["model"], "base_url": url,
                "max_concurrency": spec["max_concurrency"], "temperature": spec["temperature"],
                "max_tokens": spec["max_tokens"]}

    data["models"] = {role: [bound(s) for s in spec] if isinstance(spec, list) else bound(spec) if spec else None
                      for role, spec in data["models"].items()}
    data["llm"]["cache_path"] = None
    return data


def servers(cfg: config.RunConfig) -> tuple[dict[tuple[str, str], tuple], dict[tuple, int]]:
    """(role, model label) to the server its calls queue for, and each server's limit: pbench's
    own gates (``llm.server_of``), so that roles on one model share its ``max_concurrency``."""
    where = {}
    for role in llm.ROLES:
        spec = getattr(cfg.models, role) or cfg.models.assistant[0]  # the tagger: the first target
        for s in spec if isinstance(spec, list) else [spec]:
            where[(role, s.label)] = llm.server_of(s)
    return where, {k: g.limit for k, g in llm.Roles.gates_of(cfg).items()}


# --------------------------------------------------------------------------- least time


def least_seconds(calls: dict[tuple[str, str], float], cfg: config.RunConfig, latency: float) -> float:
    """The least time ``calls`` ((role, model label) to calls) can take at the configured
    concurrency: each server's calls in waves of its limit, the servers at once."""
    where, limits = servers(cfg)
    per_server: dict[tuple, float] = defaultdict(float)
    for key, n in calls.items():
        per_server[where[key]] += n
    return max((math.ceil(n / limits[k]) for k, n in per_server.items()), default=0) * latency


def chain_seconds(steps: float, cfg: config.RunConfig, latency: float) -> float:
    """The least time probing's conversations take, however fast the servers: their ``steps``
    (a prober message or redraft, an assistant reply, a verdict by the judges) one after another
    within a conversation, ``conversations_in_flight`` conversations at a time."""
    return steps * latency / cfg.probing.conversations_in_flight


def estimate(cfg: config.RunConfig, latency: float) -> dict[str, dict[str, float]]:
    """Per stage: the model calls ``pbench.estimate``'s arithmetic expects (probing at most:
    every conversation to its last round) and the least time they take at ``latency``."""
    v = pbench_estimate.volumes(cfg)
    where, _ = servers(cfg)
    labels = {role: [label for r, label in where if r == role] for role in llm.ROLES}
    by_stage: dict[str, dict[tuple[str, str], float]] = {st.name: defaultdict(float) for st in run.STAGES}
    for stage, role, n in pbench_estimate.arithmetic(cfg, v, pbench_estimate.dev_rows(cfg), COMPONENTS):
        # Conversations are spread over the targets, each judge gets every question, one target tags.
        models = labels[role] if role == "judge" or stage == "04_probing" else labels[role][:1]
        for label in models:
            by_stage[stage][(role, label)] += n / len(models)
    out = {}
    for stage, calls in by_stage.items():
        least = least_seconds(calls, cfg, latency)
        if stage == "04_probing":
            least = max(least, chain_seconds(v["turns"] * (2 + (cfg.judging.method == "verdict")), cfg, latency))
        out[stage] = {"calls": round(sum(calls.values())), "least_s": round(least, 1)}
    return out


def print_estimate(label: str, cfg: config.RunConfig, latency: float) -> None:
    est = estimate(cfg, latency)
    total, least = sum(e["calls"] for e in est.values()), sum(e["least_s"] for e in est.values())
    print(f"{label}: about {total:,.0f} model calls, at least {least / 60:,.0f} minutes at {latency:g} s a call")
    for name, e in est.items():
        print(f"  {name:<17} {e['calls']:>10,.0f} calls  >= {e['least_s'] / 60:8.1f} min")


# --------------------------------------------------------------------------- measuring


class MemoryPeak:
    """Polls the resident memory of this process with its children (the notebook kernels), less
    the simulator's (``total``), and of the largest child alone (``child``): the highest since
    ``reset``."""

    def __init__(self, skip: int, every_s: float = 0.25) -> None:
        self.me, self.skip, self.every_s = psutil.Process(), skip, every_s
        self.total = self.child = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                kids = [k.memory_info().rss for k in self.me.children(recursive=True) if k.pid != self.skip]
                mine = self.me.memory_info().rss
            except psutil.Error:  # a kernel that ended between listing and reading
                continue
            self.total = max(self.total, mine + sum(kids))
            self.child = max([self.child, *kids])

    def reset(self) -> None:
        self.total = self.child = 0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def cpu_seconds() -> float:
    """User and system seconds of this process and its reaped children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def stage_bytes(run_dir: Path, st: run.Stage) -> int:
    """Bytes of a stage's outputs, partial outputs and executed notebook in the run folder."""
    names = dict.fromkeys((*st.outputs, *st.partial, f"notebooks/{st.name}.ipynb"))
    return sum(du(run_dir / n) for n in names)


def measured_least(name: str, usage: dict[str, Any], cfg: config.RunConfig, latency: float, run_dir: Path,
                   resumed: set[str]) -> float:
    """The least time a stage's measured calls can take; for probing, no less than the chains of
    its conversations (but the ``resumed`` ones, which an earlier attempt ran)."""
    calls = {(role, label): u["calls"] for role, models in usage.items() for label, u in models.items()}
    least = least_seconds(calls, cfg, latency)
    if name == "04_probing":
        verdict = cfg.judging.method == "verdict"
        steps = sum(2 + t.prober_redrafts + (verdict and bool(t.check.votes))
                    for c in probing.load_conversations(run_dir) if c.id not in resumed for t in c.turns)
        least = max(least, chain_seconds(steps, cfg, latency))
    return least


def report_figures(run_dir: Path) -> dict[str, Any]:
    """The report's size (the page and the transcripts it reads a page at a time) and its load
    time in headless Chromium: from asking a just-started browser to open it until the page
    marks itself ready, then after its verdict filter is set (``bench/report_load.py``)."""
    if CHROMIUM is None:
        raise SystemExit("chromium is not installed (make browser)")
    with tempfile.TemporaryDirectory() as profile:
        seconds, shown = open_cold(run_dir / "report.html", Path(profile))
    return {"bytes": du(run_dir / "report.html"), "transcripts_bytes": du(run_dir / "report_transcripts"),
            "open_s": round(seconds, 2), "filter_s": round(shown["filter_s"], 2), "errors": shown["errors"]}


# --------------------------------------------------------------------------- the simulator


def start_simulator(port: int, latency: float, leak_share: float, log: Path) -> subprocess.Popen:
    """``bench/sim_server.py`` in a process of its own (its CPU is not ours), once it listens."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            raise SystemExit(f"port {port} is taken (a simulator left running?); free it or give --port")
    # Its standard input is a pipe from us: however this process ends, the simulator stops.
    proc = subprocess.Popen([sys.executable, str(HERE / "sim_server.py"), "--latency", str(latency), "--port", str(port),
                             "--leak-share", str(leak_share), "--stop-on-eof"], stdin=subprocess.PIPE,
                            stdout=open(log, "a"), stderr=subprocess.STDOUT)
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        if proc.poll() is not None:
            raise SystemExit(f"the simulator exited ({proc.returncode}); see {log}")
        time.sleep(0.1)
    raise SystemExit(f"the simulator did not listen on port {port}; see {log}")


def stop_simulator(proc: subprocess.Popen) -> None:
    """Stop the simulator with SIGTERM, which it takes as Ctrl-C: it logs its counts."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- the run


def run_stages(params: Path, cfg: config.RunConfig, run_dir: Path, latency: float, sim_pid: int,
               figures: dict[str, Any]) -> None:
    """Each stage through ``pbench.run.run``, measured; ``figures`` updated (and saved) per stage.
    A stage a rerun skips keeps the figures of the attempt that ran it."""
    memory = MemoryPeak(skip=sim_pid)
    try:
        for st in run.STAGES:
            memory.reset()
            resumed = any((run_dir / p).exists() for p in st.partial)  # an earlier attempt's partial outputs
            before = {c.id for c in probing.load_conversations(run_dir)} if st.name == "04_probing" else set()
            cpu0, t0 = cpu_seconds(), time.perf_counter()
            # The stage list given: pbench's own estimate line would come once per stage (ours is above).
            result = run.run(params, stages=[st.name], all_stages=run.STAGES, progress=False)[0]
            wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
            row = figures["stages"].get(st.name, {}) if result.status == "skipped" else {}
            if result.status == "ran":
                calls = sum(u["calls"] for models in result.usage.values() for u in models.values())
                least = measured_least(st.name, result.usage, cfg, latency, run_dir, before)
                row = {"wall_s": round(wall, 1), "calls": calls, "cpu_s": round(cpu, 1),
                       "cpu_ms_per_call": round(1000 * cpu / calls, 1) if calls else None,
                       "peak_rss_mb": round(memory.total / 2**20), "kernel_rss_mb": round(memory.child / 2**20),
                       "least_s": round(least, 1), "overhead_s": round(wall - least, 1),
                       "overhead_share": round((wall - least) / wall, 3)}
            row["bytes"] = stage_bytes(run_dir, st)
            row["status"] = "resumed" if result.status == "ran" and resumed else result.status
            figures["stages"][st.name] = row
            store.write_json(run_dir / "paper_scale.json", figures)
    finally:
        memory.stop()


def print_table(figures: dict[str, Any]) -> None:
    cols = (("stage", 17), ("status", 7), ("wall s", 8), ("calls", 8), ("CPU ms/call", 11), ("peak MB", 8),
            ("kernel MB", 9), ("files MB", 9), ("least s", 8), ("overhead", 15))
    print("  ".join(name.rjust(w) if i else name.ljust(w) for i, (name, w) in enumerate(cols)))
    for name, r in figures["stages"].items():
        over = f"{r['overhead_s']:.0f} s {100 * r['overhead_share']:.0f}%" if "overhead_s" in r else "-"
        cells = (name, r["status"], r.get("wall_s", "-"), r.get("calls", "-"), r.get("cpu_ms_per_call") or "-",
                 r.get("peak_rss_mb", "-"), r.get("kernel_rss_mb", "-"), f"{r['bytes'] / 2**20:.1f}",
                 r.get("least_s", "-"), over)
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, (_, w)) in enumerate(zip(cells, cols))))
    ran = [r for r in figures["stages"].values() if "wall_s" in r]
    if ran:
        wall, calls, cpu, least = (sum(r[k] for r in ran) for k in ("wall_s", "calls", "cpu_s", "least_s"))
        print(f"all stages: {wall / 60:.1f} min, {calls:,} calls, {1000 * cpu / max(calls, 1):.1f} ms CPU a call, "
              f"least {least / 60:.1f} min: overhead {(wall - least) / 60:.1f} min, {100 * (wall - least) / wall:.0f}%")
    rep = figures.get("report")
    if rep:
        print(f"report: report.html {rep['bytes'] / 2**20:.1f} MB, report_transcripts/ {rep['transcripts_bytes'] / 2**20:.1f} MB; "
              f"headless Chromium ready in {rep['open_s']:.2f} s, {rep['filter_s']:.2f} s more after a filter; "
              f"script errors: {rep['errors'] or 'none'}")
    print(f"run folder: {figures['run_folder_mb']:.0f} MB (response cache {figures['cache_mb']:.0f} MB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="share of community_1's users and volumes (0 < F <= 1)")
    ap.add_argument("--volumes", type=float, default=None,
                    help="share of each user's document volumes (0 < V <= 1; default: the scale)")
    ap.add_argument("--latency", type=float, default=1.0, help="seconds the simulator takes per request")
    ap.add_argument("--leak-share", type=float, default=0.2, help="share of outsider conversations that leak")
    ap.add_argument("--out", type=Path, default=Path("outputs/paper_scale"), help="the run folder")
    ap.add_argument("--port", type=int, default=8767, help="the simulator's port (part of the parameters)")
    ap.add_argument("--judging", choices=("verdict", "match"), default=None,
                    help="the leak judge's method (default: community_1's, verdict; the simulator judges by verbatim "
                         "words, which the dev set's paraphrases defeat; match reads replies by code and MiniLM)")
    ap.add_argument("--estimate", action="store_true", help="print the expected calls and stop")
    args = ap.parse_args()
    volumes = args.scale if args.volumes is None else args.volumes
    for name, value in (("--scale", args.scale), ("--volumes", volumes)):
        if not 0 < value <= 1:
            ap.error(f"{name} must be in (0, 1], got {value}")
    run_dir = args.out.resolve()
    url = f"http://127.0.0.1:{args.port}/v1"
    full = config.load(COMMUNITY_1)
    params = run_dir / "paper_scale.yaml"
    data = scaled(full.dump(), args.scale, volumes, url, run_dir)
    if args.judging:
        data["judging"]["method"] = args.judging
    cfg = config.parse(data, source=f"{COMMUNITY_1} scaled by {args.scale}, volumes by {volumes}")
    print_estimate("community_1", config.parse(scaled(full.dump(), 1.0, 1.0, url, run_dir)), args.latency)
    print_estimate(f"scale {args.scale:g}, volumes {volumes:g}", cfg, args.latency)
    if args.estimate:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    store.write_yaml(params, data)
    old = store.read_json(run_dir / "paper_scale.json", default={})
    figures = {"scale": args.scale, "volumes": volumes, "latency_s": args.latency, "leak_share": args.leak_share,
               "cores": os.cpu_count(), "estimate": estimate(cfg, args.latency),
               "stages": old.get("stages", {}) if (old.get("scale"), old.get("volumes")) == (args.scale, volumes) else {}}
    sim = start_simulator(args.port, args.latency, args.leak_share, run_dir / "sim_server.log")
    try:
        run_stages(params, cfg, run_dir, args.latency, sim.pid, figures)
    finally:
        stop_simulator(sim)
    figures["report"] = report_figures(run_dir)
    figures["run_folder_mb"] = round(du(run_dir) / 2**20, 1)
    figures["cache_mb"] = round(du(run_dir / "llm_cache.sqlite") / 2**20, 1)
    store.write_json(run_dir / "paper_scale.json", figures)
    print_table(figures)


if __name__ == "__main__":
    main()
