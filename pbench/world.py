"""Frozen worlds: what stages 01-02 made, packed with hashes so that any assistant can be run
on exactly that world, offline, and its numbers compared with another lab's.

A pack is a folder: the stage 01-02 files (``WORLD_FILES``) and ``world.json``, its manifest
(the schema version, every file's sha256, the world id, the generator models with their file
hashes, the parameters of stages 01-02, the pbench version and commit). The world id is the
hash of the content (``CONTENT``), so a run that generates its world has one too, and a run on
a pack has the pack's: every report, metrics.csv and figure carries it.

Reads a finished run folder (``pack``) or a pack (``verify``); writes the pack's folder, or a
run folder's copies of the pack's files (``materialise``). Calls no model.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pbench import store

SCHEMA_VERSION = 1
READS = (1,)  # the schema versions this pbench reads
MANIFEST = "world.json"

# What stages 01 and 02 write, by stage: a run on a world reads these instead of running them.
STAGE_FILES = {"01_social_graph": ("community.json", "community.graphml"),
               "02_footprint": ("documents.jsonl", "secrets.jsonl", "footprint.json", "DATASHEET.md")}
WORLD_FILES = tuple(f for files in STAGE_FILES.values() for f in files)
CONTENT = ("community.json", "documents.jsonl", "secrets.jsonl")  # what the world id hashes
# The parameters that make a world: a parameter file naming a world may only repeat them.
FIELDS = ("seed", "period", "community", "footprint", "models.generator")


class WorldError(ValueError):
    """A pack that cannot be used as it is: one line naming the file (``pbench.config`` turns
    it into a ``ConfigError`` when a parameter file names the world)."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def world_id(folder: str | Path) -> str | None:
    """The world id of a run folder or a pack, ``w-`` and 16 hex digits of the sha256 over its
    content files' hashes; None while stage 02 has not written them."""
    folder = Path(folder)
    if not all((folder / f).is_file() for f in CONTENT):
        return None
    joined = "".join(f"{f}:{_sha256(folder / f)}\n" for f in CONTENT)
    return "w-" + hashlib.sha256(joined.encode()).hexdigest()[:16]


def params_of(resolved: dict[str, Any]) -> dict[str, Any]:
    """The world-making parameters (``FIELDS``) of a parameter mapping, by dotted name."""
    out: dict[str, Any] = {}
    for dotted in FIELDS:
        value: Any = resolved
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out[dotted] = value
    return out


def pack(run_dir: str | Path, out: str | Path, name: str, version: str) -> dict[str, Any]:
    """Pack a run's finished stages 01-02 into ``out``, a new or empty folder.

    Returns:
        The pack's manifest.
    Raises:
        WorldError: stage 01 or 02 has not finished in ``run_dir``, or ``out`` holds files.
    """
    run_dir, out = Path(run_dir), Path(out)
    for stage in STAGE_FILES:
        if not (run_dir / "stages" / f"{stage}.json").is_file():
            raise WorldError(f"{run_dir}: stage {stage} has not finished; a world is packed from a run's stages 01-02")
    if out.exists() and any(out.iterdir()):
        raise WorldError(f"{out}: not empty; pack into a new folder")
    run_manifest = store.read_json(run_dir / "manifest.json", default={})
    resolved = yaml.safe_load((run_dir / "params.resolved.yaml").read_text(encoding="utf-8")) or {}
    ident = world_id(run_dir)
    tmp = out.with_name(f".{out.name}.packing")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in WORLD_FILES:
        if f != "DATASHEET.md":
            shutil.copyfile(run_dir / f, tmp / f)
    sheet = (run_dir / "DATASHEET.md").read_text(encoding="utf-8")
    head = f"World **{name}**, version {version}, id `{ident}` (pbench world pack; cite it by all three)."
    store.atomic_write_text(tmp / "DATASHEET.md", sheet.replace("\n", f"\n\n{head}\n", 1))
    manifest = {
        "schema_version": SCHEMA_VERSION, "name": name, "version": version, "world_id": ident,
        "files": {f: _sha256(tmp / f) for f in WORLD_FILES},
        "generator": run_manifest.get("models", {}).get("generator"),
        "params": params_of(resolved),
        "pbench_version": run_manifest.get("pbench_version"), "git_commit": run_manifest.get("git_commit"),
    }
    store.write_json(tmp / MANIFEST, manifest)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.rmdir()
    tmp.rename(out)
    return manifest


@dataclass(frozen=True)
class World:
    """A verified pack."""

    path: Path
    manifest: dict[str, Any]

    @property
    def id(self) -> str:
        return self.manifest["world_id"]

    @property
    def label(self) -> str:
        return f"{self.manifest['name']} {self.manifest['version']} ({self.id})"


def verify(path: str | Path) -> World:
    """Check a pack: its manifest, schema version, every file's presence and sha256, and that
    the world id is its content's.

    Raises:
        WorldError: one line naming the file that is missing or changed, or the schema version.
    """
    path = Path(path)
    mf = path / MANIFEST
    if not mf.is_file():
        raise WorldError(f"{mf}: missing; not a packed world (pbench world pack makes one)")
    try:
        manifest = json.loads(mf.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise WorldError(f"{mf}: unreadable ({exc})") from None
    version = manifest.get("schema_version")
    if version not in READS:
        raise WorldError(f"{mf}: schema version {version!r}; this pbench reads {', '.join(map(str, READS))}")
    for f in WORLD_FILES:
        expected = manifest.get("files", {}).get(f)
        if expected is None or not (path / f).is_file():
            raise WorldError(f"{path / f}: missing from the world")
        if _sha256(path / f) != expected:
            raise WorldError(f"{path / f}: sha256 does not match the world's manifest (changed since it was packed)")
    if world_id(path) != manifest.get("world_id"):
        raise WorldError(f"{mf}: world_id {manifest.get('world_id')!r} is not its content's ({world_id(path)})")
    return World(path.resolve(), manifest)


def materialise(world: World, stage: str, run_dir: str | Path) -> None:
    """Copy a stage's files from a verified world into the run folder (each atomically)."""
    for f in STAGE_FILES[stage]:
        store.atomic_write_bytes(Path(run_dir) / f, (world.path / f).read_bytes())
