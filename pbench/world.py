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
    manifest["hf_files"] = hf_layout(tmp, manifest)
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
    listed = {f: manifest.get("files", {}).get(f) for f in WORLD_FILES} | manifest.get("hf_files", {})
    for f, expected in listed.items():
        if expected is None or not (path / f).is_file():
            raise WorldError(f"{path / f}: missing from the world")
        if _sha256(path / f) != expected:
            raise WorldError(f"{path / f}: sha256 does not match the world's manifest (changed since it was packed)")
    if world_id(path) != manifest.get("world_id"):
        raise WorldError(f"{mf}: world_id {manifest.get('world_id')!r} is not its content's ({world_id(path)})")
    return World(path.resolve(), manifest)


HF = "hf"  # the Hugging Face dataset layout, inside the pack


def tables(folder: str | Path) -> dict[str, list[dict[str, Any]]]:
    """The world's records as flat tables: people, relationships, groups, changes (of stage
    01's community), documents, secrets and sharing (one telling a row, with its secret_id)."""
    folder = Path(folder)
    community = json.loads((folder / "community.json").read_text(encoding="utf-8"))
    secrets = store.read_jsonl(folder / "secrets.jsonl")
    out = {name: community.get(name, []) for name in ("people", "relationships", "groups", "changes")}
    out["documents"] = store.read_jsonl(folder / "documents.jsonl")
    out["secrets"] = [{k: v for k, v in s.items() if k != "sharing"} for s in secrets]
    out["sharing"] = [{"secret_id": s["id"], **t} for s in secrets for t in s.get("sharing", [])]
    return out


def hf_layout(folder: Path, manifest: dict[str, Any]) -> dict[str, str]:
    """Write ``hf/``: one Parquet file a table (a nested field as its JSON text) and a dataset
    card (README.md with its YAML header), which ``datasets.load_dataset`` and pandas read.
    Returns each file's sha256, by its path in the pack."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    hf = folder / HF
    hf.mkdir(exist_ok=True)
    written = {}
    for name, rows in tables(folder).items():
        columns = list(dict.fromkeys(k for r in rows for k in r))
        flat = {c: [json.dumps(r[c], sort_keys=True, ensure_ascii=False) if isinstance(r.get(c), dict | list)
                    else r.get(c) for r in rows] for c in columns}
        pq.write_table(pa.table(flat) if columns else pa.table({"id": pa.array([], pa.string())}),
                       hf / f"{name}.parquet")
        written[name] = len(rows)
    configs = "".join(f"- config_name: {n}\n  data_files: {n}.parquet\n" for n in written)
    card = (f"---\npretty_name: PrivacyBench world {manifest['name']} {manifest['version']}\n"
            f"tags: [privacy, synthetic, benchmark, rag]\nconfigs:\n{configs}---\n\n"
            f"# PrivacyBench world `{manifest['name']}` version {manifest['version']}\n\n"
            f"World id `{manifest['world_id']}`: the sha256 of its content, printed on every report, metrics.csv "
            f"and figure of a run on it. Cite it by name, version and id.\n\n"
            "Tables (a nested field is stored as its JSON text): "
            + ", ".join(f"`{n}` ({k} rows)" for n, k in written.items()) + ".\n\n"
            "```python\nimport pandas as pd\ndocs = pd.read_parquet(\"documents.parquet\")\n"
            "# or: datasets.load_dataset(\"parquet\", data_files=\"documents.parquet\")\n```\n\n"
            "To run an assistant on it, use the pack itself (the folder above this one): "
            "`pbench run FILE --world PATH` (docs/worlds.md of PrivacyBench).\n\n"
            + (folder / "DATASHEET.md").read_text(encoding="utf-8"))
    store.atomic_write_text(hf / "README.md", card)
    return {f"{HF}/{f.name}": _sha256(f) for f in sorted(hf.iterdir())}


def materialise(world: World, stage: str, run_dir: str | Path) -> None:
    """Copy a stage's files from a verified world into the run folder (each atomically)."""
    for f in STAGE_FILES[stage]:
        store.atomic_write_bytes(Path(run_dir) / f, (world.path / f).read_bytes())
