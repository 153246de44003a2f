"""A parameter file read and validated: YAML in, a ``RunConfig`` out or a ``ConfigError``
with one line per problem naming the field's full path; input files named in the file are
read relative to it; local model files checked against their sha256."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pbench import world as worlds
from pbench.config.base import ConfigError
from pbench.config.models import CALL_ONLY, LOCAL_ONLY
from pbench.config.runconfig import RunConfig
from pbench.config.targets import START_DIR, kinds


def _describe(err: Any) -> str:  # pydantic's ErrorDetails
    loc = err["loc"]
    if loc[:1] == ("targets",) and len(loc) > 2 and loc[2] in kinds():
        loc = loc[:2] + loc[3:]  # pydantic names the kind it tried; the file does not
    path = ".".join(str(p) for p in loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{path}: unknown field"
    if kind == "missing":
        return f"{path}: required field is missing"
    if kind == "union_tag_invalid":
        return f"{path}.kind: unknown kind {err['ctx']['tag']!r}; known: {err['ctx']['expected_tags']}"
    msg = err["msg"].removeprefix("Value error, ")
    if "input" in err and kind not in ("model_type", "dict_type"):
        shown = repr(err["input"])
        if len(shown) > 60:
            shown = shown[:57] + "..."
        return f"{path}: {msg} (got {shown})"
    return f"{path}: {msg}"


def parse(data: Any, source: str = "<params>") -> RunConfig:
    """Validate a mapping into a RunConfig.

    Raises:
        ConfigError: one line per problem, each naming the field's full path.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of parameters at the top level")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: {_describe(e)}" for e in exc.errors()]
        raise ConfigError("\n".join(lines)) from None


FILE_FIELDS = (("community", "personas_path"), ("validation", "dev_set"))
WORLD_ENV = "PBENCH_WORLD"  # `pbench run FILE --world PATH` names the world here, for every stage's notebook
# How the world's generator was served and called: the file's own choice (a run on a world never calls it).
SERVING = tuple(k for k in CALL_ONLY + LOCAL_ONLY if k != "sha256")


def load(path: str | Path) -> RunConfig:
    """Read and validate a YAML parameter file.

    Args:
        path: the YAML file.
    Returns:
        The validated RunConfig. When it names a world (``world:``, relative to the file, or
        ``--world``), the world is verified and its stage 01-02 parameters fill those the file
        leaves out.
    Raises:
        ConfigError: missing file, YAML syntax error or invalid field; a world that fails its
            check, or a field the file gives that the world fixes otherwise.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such parameter file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: {where}invalid YAML ({problem})") from None
    # Input files named in a parameter file are relative to that file (notebooks run from
    # notebooks/, so the working directory would mislead).
    for section, key in FILE_FIELDS:
        node = data.get(section) if isinstance(data, dict) else None
        if isinstance(node, dict) and isinstance(node.get(key), str) and not Path(node[key]).is_absolute():
            node[key] = str((path.parent / node[key]).resolve())
    # A shared cache is named as outputs_dir is, from the folder the run starts in: a notebook
    # (working directory notebooks/) would otherwise open a new, empty cache of that name.
    llm = data.get("llm") if isinstance(data, dict) else None
    if isinstance(llm, dict) and isinstance(llm.get("cache_path"), str) and not Path(llm["cache_path"]).is_absolute():
        llm["cache_path"] = str(Path(os.environ.get(START_DIR) or os.getcwd()).resolve() / llm["cache_path"])
    models = data.get("models") if isinstance(data, dict) else None
    for spec in _model_dicts(models):
        local_file = spec.get("provider") == "local" and str(spec.get("model", "")).endswith(".gguf")
        if local_file and not Path(spec["model"]).is_absolute():
            spec["model"] = str((path.parent / spec["model"]).resolve())
    world = _world_named(data, path)
    if world is None:
        return parse(data, source=str(path))
    cfg = parse({**_filled(data, world), "world": str(world.path)}, source=str(path))
    _refuse_changes(cfg, world, str(path))
    return cfg


def _world_named(data: Any, path: Path) -> worlds.World | None:
    named = os.environ.get(WORLD_ENV) or (data.get("world") if isinstance(data, dict) else None)
    if not named:
        return None
    where = Path(named) if Path(named).is_absolute() or os.environ.get(WORLD_ENV) else path.parent / named
    try:
        return worlds.verify(where)
    except worlds.WorldError as exc:
        raise ConfigError(f"{path}: world: {exc}") from None


def _filled(data: dict[str, Any], world: worlds.World) -> dict[str, Any]:
    """``data`` with the world's stage 01-02 parameters where it gives none (a section field by
    field; the generator without how it is called, which the file decides)."""
    out = dict(data)
    for dotted, theirs in world.manifest.get("params", {}).items():
        if theirs is None:
            continue
        *parent, key = dotted.split(".")
        node = out
        for part in parent:
            node[part] = dict(node.get(part) or {})
            node = node[part]
        if isinstance(theirs, dict):
            fixed = {k: v for k, v in theirs.items() if not (parent and k in SERVING)}
            node[key] = {**fixed, **_served_like(data, fixed), **(node.get(key) or {})}
        else:
            node.setdefault(key, theirs)
    return out


def _served_like(data: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """How the file serves ``spec``'s local model in another role (``LOCAL_ONLY``: one server
    serves every role bound to it, so they agree), or nothing."""
    models = data.get("models") or {}
    for role in models.values():
        for other in role if isinstance(role, list) else [role]:
            if isinstance(other, dict) and other.get("provider") == spec.get("provider") == "local" \
                    and other.get("model") == spec.get("model"):
                return {k: other[k] for k in SERVING if k in LOCAL_ONLY and k in other}
    return {}


def _refuse_changes(cfg: RunConfig, world: worlds.World, source: str) -> None:
    """A field of stages 01-02 that differs from the world's, named (how a model is called aside)."""
    mine = worlds.params_of(cfg.dump())
    for dotted, theirs in world.manifest.get("params", {}).items():
        ours = mine.get(dotted)
        if isinstance(theirs, dict) and isinstance(ours, dict):
            keys = sorted(set(theirs) | set(ours))
            differ = [k for k in keys if ours.get(k) != theirs.get(k) and not (dotted.startswith("models.") and k in SERVING)]
            field, value = (f"{dotted}.{differ[0]}", theirs.get(differ[0])) if differ else (None, None)
        else:
            field, value = (dotted, theirs) if ours != theirs else (None, None)
        if field:
            raise ConfigError(f"{source}: {field}: the world {world.label} fixes it at {value!r}; "
                              "remove the field or run on another world")


def _model_dicts(models: Any) -> list[dict[str, Any]]:
    if not isinstance(models, dict):
        return []
    specs = [v for value in models.values() for v in (value if isinstance(value, list) else [value])]
    return [s for s in specs if isinstance(s, dict)]


def verify_model_files(cfg: RunConfig) -> None:
    """Check the sha256 of every local .gguf file that gives one (embedded models are checked
    when assembled).

    Raises:
        ConfigError: a file whose bytes do not match, naming the role and the file.
    """
    import hashlib

    checked: dict[str, str] = {}
    for role in ("generator", "assistant", "prober", "judge", "tagger"):
        value = getattr(cfg.models, role)
        specs = value if isinstance(value, list) else [value] if value is not None else []
        for i, spec in enumerate(specs):
            if spec.provider != "local" or spec.sha256 is None:
                continue
            if spec.model not in checked:
                digest = hashlib.sha256()
                with open(spec.model, "rb") as fh:
                    while chunk := fh.read(1 << 22):
                        digest.update(chunk)
                checked[spec.model] = digest.hexdigest()
            if checked[spec.model] != spec.sha256:
                where = f"models.{role}[{i}]" if isinstance(value, list) else f"models.{role}"
                raise ConfigError(f"{where}: {spec.model} fails its checksum (sha256 {checked[spec.model][:12]}..., "
                                  f"expected {spec.sha256[:12]}...); the file is damaged or not the one named")
