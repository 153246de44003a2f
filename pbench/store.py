"""Files of a run: atomic writes, append-only JSONL records, the manifest.

Every stage writes through these helpers, so a run killed at any moment leaves each
file either as it was or complete, never half written.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml


def repo_root() -> Path:
    """The repository's top folder (the package is installed editable from it)."""
    return Path(__file__).resolve().parent.parent


PACKAGE_DATA = Path(__file__).resolve().parent / "data"
"""The data the package ships (``pbench/data``): personas, the judge's dev set and fit, the calibration."""
HOME_ENV = "PBENCH_HOME"
"""The environment variable naming the user's pbench folder (default: ``$XDG_CONFIG_HOME/pbench``)."""


def user_dir() -> Path:
    """The user's pbench folder, where ``pbench judge --fit`` and ``pbench estimate --calibrate``
    write (an installed package is read-only, and two projects would overwrite each other's):
    ``$PBENCH_HOME``, else ``$XDG_CONFIG_HOME/pbench``, else ``~/.config/pbench``."""
    if named := os.environ.get(HOME_ENV):
        return Path(named)
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "pbench"


def user_or_shipped(name: str) -> Path:
    """``name`` in the user's folder (``user_dir``) where it exists there, else the one the
    package ships in ``pbench/data``."""
    mine = user_dir() / name
    return mine if mine.is_file() else PACKAGE_DATA / name


_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a run's files are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def _lines(records: Iterable[dict[str, Any]]) -> str:
    """Records as JSON lines: the one encoding of every JSONL file a run writes."""
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False, default=str) + "\n" for r in records)


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    """Write records as JSON lines, atomically (the whole file or nothing)."""
    atomic_write_text(path, _lines(records))


def sort_jsonl(path: str | Path, ids: list[str], key: str = "id", last_wins: bool = False) -> None:
    """Rewrite a JSONL file with its records in the order of ``ids`` (their ``key`` field),
    atomically, under the file's lock: records written as concurrent work finished come out
    in plan order. Records whose id is not in ``ids`` keep their order after the others.
    With ``last_wins``, of several records with one id only the last written is kept (a
    rerun's record replaces the one it retried)."""
    path = Path(path)
    if not path.exists():
        return
    rank: dict[Any, int] = {v: i for i, v in enumerate(ids)}
    with locked(path):
        records = read_jsonl(path)
        if last_wins:
            records = list({r.get(key): r for r in records}.values()) if all(key in r for r in records) else records
        write_jsonl(path, sorted(records, key=lambda r: rank.get(r.get(key), len(rank))))


def read_json(path: str | Path, default: Any = None) -> Any:
    path = Path(path)
    if not path.exists():
        return default
    return json.loads(path.read_text(encoding="utf-8"))


def write_yaml(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, yaml.safe_dump(obj, sort_keys=False, allow_unicode=True))


@contextlib.contextmanager
def locked(path: str | Path) -> Iterator[None]:
    """An exclusive advisory lock on ``<path>.lock``, for read-modify-write of shared files."""
    lock = Path(str(path) + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def append_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    """Append whole records to a JSONL file.

    One ``write`` of complete lines under a lock, then fsync: a crash leaves at most a
    torn last line, which ``read_jsonl`` drops and ``repair_jsonl`` cuts off.
    """
    payload = _lines(records)
    if not payload:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path):
        repair_jsonl(path)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())


def repair_jsonl(path: str | Path, chunk: int = 1 << 16) -> int:
    """Cut a torn last line (no newline at the end) left by a killed writer.

    Reads only the file's tail: the last byte, and backwards from it to the last newline
    when the line is torn. An append's cost so stays independent of the file's size.

    Returns:
        The number of bytes removed.
    """
    path = Path(path)
    if not path.exists():
        return 0
    with open(path, "rb+") as fh:
        end = fh.seek(0, os.SEEK_END)
        if end == 0:
            return 0
        fh.seek(end - 1)
        if fh.read(1) == b"\n":
            return 0
        keep, pos = 0, end
        while pos > 0:
            start = max(0, pos - chunk)
            fh.seek(start)
            block = fh.read(pos - start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            pos = start
        fh.truncate(keep)
        return end - keep


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read every complete record of a JSONL file (a torn last line is ignored).

    Raises:
        ValueError: a complete line that is not valid JSON, naming the file and line.
    """
    path = Path(path)
    if not path.exists():
        return []
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.endswith("\n"):
                break
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not a JSON record ({exc.msg})") from None
    return out


def update_json(path: str | Path, update: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``update`` into a JSON object file, under a lock, atomically."""
    path = Path(path)
    with locked(path):
        current = read_json(path, default={})
        merged = _deep_merge(current, update)
        write_json(path, merged)
    return merged


def _deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
