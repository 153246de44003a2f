"""The runner: executes the numbered notebooks of a run with papermill, in order, resumably.

Reads a parameter file and the notebooks in ``notebooks/``; writes ``outputs/<run>/``:
``params.resolved.yaml``, ``manifest.json``, ``notebooks/NN_stage.ipynb`` (executed), and
``stages/NN_stage.json`` (a stage's completion marker: its fingerprint, time and model usage).

A stage is skipped when its marker's fingerprint matches (the parameter sections it reads,
its notebook, the code it runs, and the fingerprints of the stages before it) and its
declared outputs exist. Notebooks get two parameters, ``params_path`` and ``run_dir``, and
open with ``ctx = pbench.stage.stage_context(...)``, which validates the parameters again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pbench
from pbench import config as config_mod
from pbench import store
from pbench import world as worlds
from pbench.config import RunConfig
from pbench.fingerprints import changed, fingerprint_and_parts
from pbench.stage import INCOMPLETE


@dataclass(frozen=True)
class Stage:
    """One numbered notebook.

    Args:
        name: the notebook's stem, e.g. ``01_social_graph``.
        reads: dotted parameter sections that determine its outputs.
        outputs: files (relative to the run folder) that a finished stage has written.
        partial: files or folders an unfinished attempt leaves to resume from; valid only for
            the same fingerprint.
        reports: outputs that describe the attempt (timings, what was resumed) rather than data
            later stages read: checked for damage, but their bytes do not make later stages rerun.
        inputs: files or folders of the run folder that no stage writes (people's labels, kept
            by ``pbench agreement``): their bytes are part of the fingerprint, so that new
            labels rerun the stages that use them.
        files: dotted parameters that name a file the stage reads (personas, the dev set): the
            bytes of the file, or of the package's default (``config.PACKAGE_FILES``), are part
            of its fingerprint, and of no other stage's.
    """

    name: str
    reads: tuple[str, ...]
    outputs: tuple[str, ...] = ()
    partial: tuple[str, ...] = ()  # what an interrupted attempt leaves for the next to resume from
    reports: tuple[str, ...] = ()  # outputs describing the attempt (timings, resumed counts), not data
    inputs: tuple[str, ...] = ()  # what people put in the run folder (labels/), read by the stage
    files: tuple[str, ...] = ()  # parameters naming a file it reads (config.PACKAGE_FILES): their bytes count


# Later issues add their stages here, in order.
STAGES: tuple[Stage, ...] = (
    Stage("01_social_graph", reads=("seed", "period", "community", "models.generator"),
          outputs=("community.json", "community.graphml"), files=("community.personas_path",)),
    Stage("02_footprint", reads=("seed", "footprint", "models.generator"),
          outputs=("documents.jsonl", "secrets.jsonl", "footprint.json", "DATASHEET.md"), partial=("footprint",),
          reports=("footprint.json", "DATASHEET.md")),
    Stage("03_rag_assistant", reads=("seed", "probing", "models.tagger", "models.assistant", "targets"),
          outputs=("index.json", "index"), reports=("index.json",)),
    Stage("04_probing", reads=("seed", "probing", "models.prober", "models.assistant", "targets", "models.judge",
                               "judging"),
          outputs=("probe_plan.csv", "conversations.jsonl", "probing.json"),
          partial=("conversations.jsonl", "memories.jsonl"),  # memories.jsonl: a memory target's (pbench.memory)
          reports=("probing.json",)),
    Stage("05_scoring", reads=("seed", "models.judge", "judging", "validation.dev_set", "validation.dev_split",
                               "validation.dev_cases"),
          outputs=("judgements.jsonl", "metrics.csv", "scoring.json", "judge_error.json"),
          partial=("judgements.jsonl",), reports=("scoring.json",), inputs=("labels",), files=("validation.dev_set",)),
    Stage("06_analysis", reads=("probing.max_rounds",), outputs=("report.html", "report_transcripts", "tables", "figures", "findings.md"),
          inputs=("labels",)),
    Stage("07_validation", reads=("seed", "validation", "models.judge", "judging"),
          outputs=("validation.json", "validation", "label.html"), inputs=("labels",), files=("validation.dev_set",)),
)

KERNEL_NAME = "pbench"


class StageFailed(RuntimeError):
    """A notebook raised; the message names the notebook and the cell."""


repo_root = store.repo_root  # kept here for the notebooks and tests that name it


def default_notebooks_dir() -> Path:
    return repo_root() / "notebooks"


def git_commit(root: Path | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root or repo_root(), capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root or repo_root(), capture_output=True, text=True)
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def ensure_kernel() -> str:
    """Register this interpreter's Jupyter kernel inside its prefix once, so papermill runs
    the notebooks with the same environment as the runner (never in a user-wide location)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
        if Path(spec.argv[0]).resolve() == Path(sys.executable).resolve():
            return KERNEL_NAME
    except NoSuchKernel:
        pass
    subprocess.run(
        [sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL_NAME,
         "--display-name", "Python (pbench)"],
        check=True,
        capture_output=True,
    )
    return KERNEL_NAME


def kernel_manager_class() -> type:
    """The kernel manager papermill starts each stage's kernel with: jupyter_client's own,
    provisioning CurveZMQ keys for kernels whose spec declares them (ipykernel's does).

    The kernel's sockets stay on loopback TCP with ports of their own (IPC sockets were named
    after the notebook's folder and collided between concurrent runs), and the traffic is
    encrypted, so ipykernel no longer warns at every stage that it runs "over TCP without
    encryption"; a kernel that declares no Curve support still starts, unencrypted.
    """
    global _KERNEL_MANAGER
    if _KERNEL_MANAGER is None:
        from jupyter_client.manager import AsyncKernelManager
        from traitlets import default

        class EncryptedKernelManager(AsyncKernelManager):
            @default("transport_encryption")
            def _encrypt_where_supported(self) -> str:
                return "auto"

        _KERNEL_MANAGER = EncryptedKernelManager
    return _KERNEL_MANAGER


_KERNEL_MANAGER: type | None = None


@dataclass
class StageResult:
    name: str
    status: str  # ran | skipped | failed | world (read from a packed world)
    seconds: float = 0.0
    usage: dict[str, Any] = field(default_factory=dict)


def _usage_totals(usage: dict[str, Any]) -> dict[str, int]:
    tot = {"calls": 0, "cache_hits": 0, "tokens": 0, "retries": 0, "unparsed": 0, "give_ups": 0}
    for models in usage.values():
        for u in models.values():
            tot["calls"] += u["calls"]
            tot["cache_hits"] += u["cache_hits"]
            tot["tokens"] += u["prompt_tokens"] + u["completion_tokens"]
            tot["retries"] += u["retries"]
            tot["unparsed"] += u["unparsed"]
            tot["give_ups"] += u["give_ups"]
    return tot


def _execute(nb_in: Path, nb_out: Path, params_path: Path, run_dir: Path, progress: bool) -> None:
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    nb_out.parent.mkdir(parents=True, exist_ok=True)
    try:
        pm.execute_notebook(
            str(nb_in),
            str(nb_out),
            parameters={"params_path": str(params_path), "run_dir": str(run_dir)},
            kernel_name=ensure_kernel(),
            kernel_manager_class=kernel_manager_class(),
            progress_bar={"desc": nb_in.stem, "leave": True} if progress else False,
            cwd=str(nb_in.parent),
            stderr_file=sys.stderr if progress else None,  # the notebook's own progress bars
        )
    except PapermillExecutionError as exc:
        raise StageFailed(
            f"stage {nb_in.stem} failed in cell {exc.exec_count} ({exc.ename}: {exc.evalue}); "
            f"see {nb_out}"
        ) from None


def run(
    params_path: str | Path,
    *,
    stages: list[str] | None = None,
    force: bool = False,
    notebooks_dir: Path | None = None,
    all_stages: tuple[Stage, ...] | None = None,
    progress: bool = True,
    base: Path | None = None,
    world: str | Path | None = None,
) -> list[StageResult]:
    """Run the pipeline on a parameter file.

    Args:
        params_path: the YAML parameter file.
        stages: names (or number prefixes such as ``01``) to run; default all.
        force: rerun stages even when their outputs are complete.
        notebooks_dir: where the numbered notebooks are (default: the repository's).
        all_stages: the stage list (default ``STAGES``; tests pass their own).
        progress: show papermill's per-cell progress bars.
        base: folder that a relative ``outputs_dir`` is taken from (default: current folder).
        world: a packed world to run on (``pbench world pack``), in place of the file's
            ``world``: stages 01-02 read it instead of generating one.
    Returns:
        One StageResult per stage considered.
    Raises:
        ConfigError: invalid parameters, or a labels file in the run's ``labels/`` that cannot
            be read back (``labelling.LabelsError``), before anything runs or is written.
        StageFailed: a notebook raised; earlier stages' outputs are untouched.
    """
    params_path = Path(params_path).resolve()
    os.environ.setdefault(config_mod.START_DIR, str(Path.cwd()))  # a python target's module is found from here
    before = os.environ.get(config_mod.WORLD_ENV)
    if world is not None:  # every stage's notebook loads the parameters again, and must see it
        os.environ[config_mod.WORLD_ENV] = str(Path(world).resolve())
    try:
        return _run(params_path, stages, force, notebooks_dir, all_stages, progress, base)
    finally:
        if before is None:
            os.environ.pop(config_mod.WORLD_ENV, None)
        else:
            os.environ[config_mod.WORLD_ENV] = before


def _run(params_path: Path, stages: list[str] | None, force: bool, notebooks_dir: Path | None,
         all_stages: tuple[Stage, ...] | None, progress: bool, base: Path | None) -> list[StageResult]:
    cfg = config_mod.load(params_path)
    config_mod.verify_model_files(cfg)
    nb_dir = notebooks_dir or default_notebooks_dir()
    pipeline = STAGES if all_stages is None else all_stages
    selected = _select(pipeline, stages)
    run_dir = cfg.run_dir(base or Path.cwd()).resolve()
    world = worlds.verify(cfg.world) if cfg.world is not None else None
    _refuse_other_world(world, run_dir)
    manifest = _open_run(cfg, params_path, run_dir)
    # After every check of the input: measuring this machine's rates loads a model.
    rates = _print_estimate(cfg, params_path) if all_stages is None else {}
    if rates:  # this machine's rates, so that `pbench estimate --calibrate` on this run can use them
        store.update_json(manifest, {"machine_rates": rates})
    results: list[StageResult] = []
    upstream: list[str] = []
    started = time.perf_counter()
    first_selected = min(pipeline.index(s) for s in selected) if selected else len(pipeline)
    for position, st in enumerate(pipeline):
        nb_in = nb_dir / f"{st.name}.ipynb"
        if not nb_in.is_file():
            raise StageFailed(f"stage {st.name}: notebook {nb_in} is missing")
        from_world = world is not None and st.name in worlds.STAGE_FILES
        fp, parts = ((hashlib.sha256(f"{world.id}|{st.name}".encode()).hexdigest(), None) if world and from_world
                     else fingerprint_and_parts(cfg, st, nb_in, upstream, run_dir))
        marker = _marker(run_dir, st)
        done = store.read_json(marker, default={}) if marker.exists() else {}
        damaged = damaged_outputs(run_dir, st, done)
        if st not in selected:
            if position < first_selected and (not done or damaged):
                what = f"its {', '.join(damaged)} is missing or changed since it finished" if done else "it has not finished"
                raise StageFailed(f"stage {st.name} is needed by the stages asked for, but {what}; rerun it: "
                                  f"pbench run {params_path.name} --stages {st.name.split('_', 1)[0]}")
            upstream.append(f"{fp}:{_digest_of(st, done)}")
            continue
        unfinished = done.get("metrics", {}).get(INCOMPLETE, 0)
        if not force and done.get("fingerprint") == fp and not damaged and not unfinished:
            results.append(StageResult(st.name, "skipped", 0.0, done.get("usage", {})))
            upstream.append(f"{fp}:{_digest_of(st, done)}")
            continue
        if done and damaged and not force:
            print(f"{st.name}: {', '.join(damaged)} missing or changed since the stage finished; running it again")
        elif done and unfinished and not force:
            print(f"{st.name}: {unfinished} units of work were given up last time; trying them again")
        elif done and done.get("fingerprint") != fp and not force and not from_world:
            print(f"{st.name}: {changed(_attempt(run_dir, st).get('parts'), parts)} since it finished; running it again")
        if world and from_world:
            done = _read_world(world, st, fp, run_dir, results)
        else:
            done = _run_stage(st, nb_in, fp, params_path, run_dir, results, force=force, progress=progress,
                              parts=parts)
        upstream.append(f"{fp}:{_digest_of(st, done)}")
        if st.name == "02_footprint":  # the world every later record belongs to
            store.update_json(manifest, {"world_id": worlds.world_id(run_dir),
                                         "world": world.label if world is not None else None})
    store.update_json(manifest, {"last_run_seconds": round(time.perf_counter() - started, 2)})
    _print_summary(results)
    _print_headline(run_dir)
    return results


def _print_estimate(cfg: RunConfig, params_path: Path) -> dict[str, Any]:
    """The run's estimate, one line, at this machine's rates for its local models (measured in a
    few seconds the first time, then kept); it informs, so a missing calibration never stops a
    run. Returns the rates it used, for the manifest."""
    from dataclasses import asdict

    from pbench import estimate

    rates = estimate.machine_rates(cfg)
    try:
        print(estimate.estimate(cfg, source=params_path.name, rates=rates).one_line(), flush=True)
    except FileNotFoundError as exc:
        print(f"estimate: unavailable ({exc})", flush=True)
    return {"|".join(key): asdict(r) for key, r in rates.items()}


def _open_run(cfg: RunConfig, params_path: Path, run_dir: Path) -> Path:
    """Check the run's labels files, then create its folder, ``params.resolved.yaml`` and the
    manifest's header; the manifest's path."""
    from pbench import labelling
    from pbench.llm import Roles

    labelling.stored(run_dir)  # a bad labels file stops the run before anything is written
    run_dir.mkdir(parents=True, exist_ok=True)
    store.write_yaml(run_dir / "params.resolved.yaml", cfg.dump())
    manifest = run_dir / "manifest.json"
    store.update_json(
        manifest,
        {
            "pbench_version": pbench.__version__,
            "git_commit": git_commit(),
            "python": platform.python_version(),
            "params_file": params_path.name,
            "run_name": cfg.run_name,
            "models": Roles.bindings_of(cfg),
        },
    )
    return manifest



def _marker(run_dir: Path, st: Stage) -> Path:
    """The record of a finished stage, ``stages/NN_name.json``: written last, so its absence means
    the stage has not finished."""
    return run_dir / "stages" / f"{st.name}.json"

def _run_stage(st: Stage, nb_in: Path, fp: str, params_path: Path, run_dir: Path, results: list[StageResult], *,
               force: bool, progress: bool, parts: dict[str, str] | None = None) -> dict[str, Any]:
    """Execute one stage's notebook and record it: its marker in ``stages/``, its manifest entry and
    its StageResult in ``results``. The marker is written last, so a stage cut off runs again."""
    manifest = run_dir / "manifest.json"
    _marker(run_dir, st).unlink(missing_ok=True)
    _set_aside_stale(run_dir, st, fp, forced=force, parts=parts)
    usage_file = run_dir / "stages" / f"{st.name}.usage.json"
    usage_file.unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        _execute(nb_in, run_dir / "notebooks" / nb_in.name, params_path, run_dir, progress)
    except StageFailed:
        results.append(StageResult(st.name, "failed", time.perf_counter() - t0))
        store.update_json(manifest, {"stages": {st.name: {"status": "failed"}}})
        _print_summary(results)
        raise
    seconds = time.perf_counter() - t0
    record = store.read_json(usage_file, default={})
    usage, metrics = record.get("llm", {}), record.get("metrics", {})
    missing = [o for o in st.outputs if not (run_dir / o).exists()]
    if missing:
        raise StageFailed(f"stage {st.name} finished without writing {', '.join(missing)}")
    done = {"fingerprint": fp, "seconds": round(seconds, 2), "usage": usage, "metrics": metrics,
            "outputs": output_digests(run_dir, st)}
    store.write_json(_marker(run_dir, st), done)
    entry = {"status": "ran", "seconds": round(seconds, 2), "finished": time.time(), "llm": usage, "metrics": metrics}
    store.update_json(manifest, {"stages": {st.name: entry}})
    results.append(StageResult(st.name, "ran", seconds, usage))
    return done


def _refuse_other_world(world: worlds.World | None, run_dir: Path) -> None:
    """A run on a packed world never overwrites a run folder that holds another world."""
    if world is None:
        return
    held = worlds.world_id(run_dir)
    if held is not None and held != world.id:
        raise config_mod.ConfigError(
            f"{run_dir}: holds another world ({held}) than {world.path} ({world.id}); "
            "give the run another run_name or outputs_dir")


def _read_world(world: worlds.World, st: Stage, fp: str, run_dir: Path,
                results: list[StageResult]) -> dict[str, Any]:
    """A stage 01 or 02 on a packed world: its files copied from the verified pack, recorded
    as a finished stage with no model call."""
    _marker(run_dir, st).unlink(missing_ok=True)
    t0 = time.perf_counter()
    worlds.materialise(world, st.name, run_dir)
    seconds = time.perf_counter() - t0
    print(f"{st.name}: read from the world {world.label}")
    done = {"fingerprint": fp, "seconds": round(seconds, 2), "usage": {}, "metrics": {"world": world.label},
            "outputs": output_digests(run_dir, st)}
    store.write_json(_marker(run_dir, st), done)
    store.update_json(run_dir / "manifest.json", {"stages": {st.name: {"status": "world", "seconds": done["seconds"],
                                                                    "finished": time.time(), "llm": {}}}})
    results.append(StageResult(st.name, "world", seconds, {}))
    return done


def output_digests(run_dir: Path, st: Stage) -> dict[str, str]:
    """sha256 of each of a stage's output files (folders are only required to exist: a vector
    store rewrites its own files when opened)."""
    out = {}
    for name in st.outputs:
        path = run_dir / name
        if path.is_file():
            digest = hashlib.sha256()
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 22):
                    digest.update(chunk)
            out[name] = digest.hexdigest()
    return out


def damaged_outputs(run_dir: Path, st: Stage, marker: dict[str, Any]) -> list[str]:
    """A finished stage's outputs that are missing, or whose bytes differ from when it finished
    (truncated, edited, replaced)."""
    missing = [o for o in st.outputs if not (run_dir / o).exists()]
    recorded = marker.get("outputs", {})
    now = output_digests(run_dir, st) if recorded else {}
    return missing + [o for o, h in recorded.items() if o not in missing and now.get(o) != h]


def _digest_of(st: Stage, marker: dict[str, Any]) -> str:
    # What later stages depend on: the data this stage wrote, so that a stage rerun which
    # changes it reruns the stages after it (a report's timings do not).
    data = {k: v for k, v in marker.get("outputs", {}).items() if k not in st.reports}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _print_headline(run_dir: Path) -> None:
    """Where the report is, and the run's headline figures (from stage 06's record)."""
    report = run_dir / "report.html"
    if not report.exists():
        return
    figures = store.read_json(run_dir / "stages" / "06_analysis.json", default={}).get("metrics", {})
    print(f"\nreport: {report}")
    for key in ("leakage rate", "over-secrecy rate", "inappropriate retrieval rate", "persona consistency"):
        if key in figures:
            print(f"  {key}: {figures[key]}")


def _attempt(run_dir: Path, st: Stage) -> dict[str, Any]:
    """The last attempt's record: its fingerprint and its parts (``fingerprint_and_parts``)."""
    return store.read_json(run_dir / "stages" / f"{st.name}.attempt.json", default={})


def _set_aside_stale(run_dir: Path, st: Stage, fp: str, forced: bool = False,
                     parts: dict[str, str] | None = None) -> None:
    """Resume only what an attempt with the same fingerprint left. Partial outputs of an attempt
    with another fingerprint (it says which part changed), or of any attempt when ``forced`` (a
    forced stage recomputes from scratch, its model replies coming from the response cache),
    are moved (never deleted) to ``stale/<stage>-<time>/``."""
    last = _attempt(run_dir, st)
    previous = last.get("fingerprint")
    present = [p for p in st.partial if (run_dir / p).exists()]
    is_changed = previous is not None and previous != fp
    if (forced or is_changed) and present:
        stamp = f"{st.name}-{time.strftime('%Y%m%dT%H%M%S')}"
        dest, n = run_dir / "stale" / stamp, 1
        while dest.exists():  # two forced runs within a second
            n += 1
            dest = dest.with_name(f"{stamp}-{n}")
        dest.mkdir(parents=True)
        for p in present:
            (run_dir / p).rename(dest / Path(p).name)
        why = "--force" if forced else changed(last.get("parts"), parts) + " since the last attempt"
        print(f"{st.name}: {why}: recomputing from scratch; its partial outputs moved to {dest}")
    elif forced:
        print(f"{st.name}: --force: recomputing from scratch")
    store.write_json(run_dir / "stages" / f"{st.name}.attempt.json",
                     {"fingerprint": fp, **({"parts": parts} if parts else {})})


def _select(pipeline: tuple[Stage, ...], names: list[str] | None) -> list[Stage]:
    if not names:
        return list(pipeline)
    chosen = []
    for n in names:
        match = [s for s in pipeline if s.name == n or s.name.split("_", 1)[0] == n]
        if not match:
            known = ", ".join(s.name for s in pipeline) or "(none yet)"
            raise config_mod.ConfigError(f"--stages: unknown stage {n!r}; known: {known}")
        chosen.extend(match)
    return chosen


def _print_summary(results: list[StageResult]) -> None:
    if not results:
        print("no stages to run")
        return
    rows: list[tuple[str, ...]] = [("stage", "status", "seconds", "calls", "cache hits", "tokens", "retries", "unparsed",
                                    "give-ups")]
    for r in results:
        t = _usage_totals(r.usage)
        # A skipped stage made no call this time; its earlier usage stays in manifest.json.
        keys = ("calls", "cache_hits", "tokens", "retries", "unparsed", "give_ups")
        cells = ["-"] * len(keys) if r.status == "skipped" else [str(t[k]) for k in keys]
        rows.append((r.name, r.status, f"{r.seconds:.1f}", *cells))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
