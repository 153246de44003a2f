"""What a stage's completion depends on, hashed: its fingerprint (the runner skips a stage
whose marker holds the same one), and its parts, so that a rerun can say which changed
("the pbench code it runs changed since it finished; running it again")."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pbench import config as config_mod
from pbench import sources, store
from pbench.config import RunConfig


def _section(cfg: RunConfig, dotted: str) -> Any:
    """A parameter section as a stage's fingerprint reads it: model specs without the fields
    that only say how to call them (``config.CALL_ONLY``: concurrency, timeouts, prices)."""
    value: Any = cfg.dump()
    for part in dotted.split("."):
        value = value[part]
    if dotted.startswith("models."):
        specs = value if isinstance(value, list) else [value]
        stripped = [None if s is None else {k: v for k, v in s.items() if k not in config_mod.CALL_ONLY} for s in specs]
        value = stripped if isinstance(value, list) else stripped[0]
    return value


def fingerprint(cfg: RunConfig, stage: Any, notebook: Path, upstream: list[str], run_dir: Path | None = None) -> str:
    """Hash of what determines a stage's outputs: the parameters it reads, its notebook, the
    ``pbench`` code that notebook runs (``sources.digest``), the stages before it, and its
    ``inputs`` in ``run_dir`` where there are any (a run without labels keeps the fingerprint
    it had before inputs existed)."""
    return fingerprint_and_parts(cfg, stage, notebook, upstream, run_dir)[0]


def fingerprint_and_parts(cfg: RunConfig, stage: Any, notebook: Path, upstream: list[str],
                          run_dir: Path | None = None) -> tuple[str, dict[str, str]]:
    """The fingerprint, and a short hash of each of its parts, kept with each attempt so that a
    rerun can say which part changed (``changed``); the parts are read once for both."""
    what = _fingerprinted(cfg, stage, notebook, upstream, run_dir)
    parts = {k: hashlib.sha256(json.dumps(v, sort_keys=True, default=str).encode()).hexdigest()[:16]
             for k, v in what.items()}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest(), parts


def _fingerprinted(cfg: RunConfig, stage: Any, notebook: Path, upstream: list[str],
                   run_dir: Path | None) -> dict[str, Any]:
    what: dict[str, Any] = {"reads": {s: _section(cfg, s) for s in stage.reads},
                            "notebook": hashlib.sha256(notebook.read_bytes()).hexdigest(), "upstream": upstream,
                            "code": sources.digest(notebook, without=PACKAGE_FILES)}
    if getattr(stage, "files", ()):
        what["files"] = {f: hashlib.sha256(named_file(cfg, f).read_bytes()).hexdigest() for f in stage.files}
    if run_dir is not None and (given := input_digests(run_dir, stage.inputs)):
        what["inputs"] = given
    return what


PACKAGE_FILES = tuple(f"data/{name}" for name in config_mod.PACKAGE_FILES.values())
"""The package's data files that a parameter names (personas, the dev set): part of the
fingerprint of the stages that read them (``Stage.files``), not of every stage's code."""


def named_file(cfg: RunConfig, dotted: str) -> Path:
    """The file a parameter names (``community.personas_path``), or the package's default."""
    section, field = dotted.split(".")
    given = getattr(getattr(cfg, section), field)
    return Path(given) if given is not None else store.PACKAGE_DATA / config_mod.PACKAGE_FILES[dotted]


# The parts of a fingerprint, as a rerun names them.
PARTS = {"reads": "its parameters", "notebook": "its notebook", "code": "the pbench code it runs",
         "upstream": "a stage before it", "inputs": "its inputs (people's labels)",
         "files": "a file its parameters name (personas, the dev set)"}


def changed(before: dict[str, str] | None, now: dict[str, str] | None) -> str:
    """What changed between two attempts' parts (``fingerprint_and_parts``), in words: "the pbench code it
    runs changed"; "its fingerprint changed" when an attempt kept no parts.

    >>> changed({"reads": "a", "code": "b"}, {"reads": "a", "code": "c"})
    'the pbench code it runs changed'
    """
    if not before or not now:
        return "its fingerprint changed"
    what = [words for part, words in PARTS.items() if before.get(part) != now.get(part)]
    return (" and ".join(what) or "its fingerprint") + " changed"


def input_digests(run_dir: Path, names: tuple[str, ...]) -> dict[str, str]:
    """sha256 of each file under the run folder's ``names`` (files, or folders read whole),
    by its path in the run folder; a name that does not exist adds nothing."""
    out = {}
    for name in names:
        path = run_dir / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path] * path.is_file()
        for f in files:
            out[f.relative_to(run_dir).as_posix()] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out
