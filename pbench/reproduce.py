"""Reproduction: do the same inputs give the same outputs?

A run is reproducible when running its parameter file again, into another run folder, from a
copy of its response cache, makes no model call and writes the same data files. Wall-clock
fields (how long a stage took) are left out of the comparison, and so are the files that only
describe an attempt: the executed notebooks, stage markers, the manifest (timings and usage),
the resolved parameters (they name the outputs folder), Chroma's own index files (the index
is compared through ``index.json`` and what each turn retrieved), and the report's sections
marked as describing the attempt (the code's commit, each stage's model calls).

    python bench/reproduce.py [--params params/tiny.yaml]
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

# Fields that time an attempt rather than describe its data.
WALL_CLOCK = frozenset({"seconds", "conversations_per_minute", "dev_seconds", "model_seconds", "last_run_seconds",
                        "finished", "seconds_to_regenerate"})
# Top-level entries of a run folder that are not compared (see the module docstring).
NOT_DATA = frozenset({"stages", "notebooks", "stale", "index", "manifest.json", "params.resolved.yaml"})


def copy_cache(src: str | Path, dst: str | Path) -> int:
    """Copy a response cache (SQLite, its write-ahead log included) to ``dst``; returns its replies."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
        return b.execute("SELECT COUNT(*) FROM replies").fetchone()[0]


def data_files(run_dir: str | Path) -> list[str]:
    """The files of a run folder that hold its data, relative to it, sorted."""
    run_dir = Path(run_dir)
    out = []
    for p in run_dir.rglob("*"):
        rel = p.relative_to(run_dir)
        if not p.is_file() or rel.parts[0] in NOT_DATA or p.name.startswith("llm_cache.sqlite"):
            continue
        if p.suffix in (".lock", ".tmp") or p.name.startswith("."):
            continue
        out.append(rel.as_posix())
    return sorted(out)


def _drop_clock(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _drop_clock(v) for k, v in obj.items() if k not in WALL_CLOCK}
    if isinstance(obj, list):
        return [_drop_clock(v) for v in obj]
    return obj


def normalised(path: Path, run_dir: Path) -> list[str]:
    """A file's content as lines to compare: JSON without its wall-clock fields, any other text
    with the run folder's path written as ``<run>`` (and, in the report, the sections marked as
describing the attempt left out); binary files as their bytes' hex digest."""
    data = path.read_bytes()
    if path.suffix == ".json":
        return json.dumps(_drop_clock(json.loads(data)), sort_keys=True, indent=1).splitlines()
    if path.suffix == ".jsonl":
        return [json.dumps(_drop_clock(json.loads(line)), sort_keys=True) for line in data.decode().splitlines()]
    try:
        text = data.decode()
    except UnicodeDecodeError:
        import hashlib

        return [hashlib.sha256(data).hexdigest()]
    if path.suffix == ".html":  # the report's account of the attempt (pbench.report.attempt)
        text = re.sub(r'<(span|div) class="attempt">.*?</\1>', "<attempt/>", text, flags=re.DOTALL)
    return text.replace(str(run_dir.resolve()), "<run>").replace(str(run_dir), "<run>").splitlines()


def differences(a: str | Path, b: str | Path) -> dict[str, str]:
    """Data files of run folders ``a`` and ``b`` that differ: file to what differs first
    (``only in ...`` for a file one of them lacks). Empty when the runs agree."""
    a, b = Path(a), Path(b)
    fa, fb = data_files(a), data_files(b)
    out = {f: f"only in {a.name if f in fa else b.name} ({(a if f in fa else b)})" for f in sorted(set(fa) ^ set(fb))}
    for f in sorted(set(fa) & set(fb)):
        la, lb = normalised(a / f, a), normalised(b / f, b)
        if la == lb:
            continue
        differ = [k for k, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y] + list(range(min(len(la), len(lb)),
                                                                                    max(len(la), len(lb))))
        i = differ[0]
        first = la[i] if i < len(la) else "(end)"
        second = lb[i] if i < len(lb) else "(end)"
        out[f] = f"{len(differ)} lines differ; first, line {i + 1}: {first[:160]!r} vs {second[:160]!r}"
    return out


def model_calls(results: list[Any]) -> dict[str, int]:
    """Model calls (retries included) per stage that ran, from ``pbench.run.run``'s results."""
    return {r.name: sum(u["calls"] for m in r.usage.values() for u in m.values())
            for r in results if r.status == "ran"}
