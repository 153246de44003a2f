"""The package's own source, read as text: which ``pbench`` modules a module (or a notebook)
imports, and one hash over the source a stage runs, so that editing the code a stage uses
reruns that stage (``pbench.fingerprints.fingerprint``).

A stage's code is the closure of the ``pbench`` modules its notebook imports, followed
through every import in their text, those inside functions included (a subpackage with
all its modules: the target kinds are loaded by name), plus the package's
data and prompt files (personas, drafting prompts, the judge's fit: the code reads them as
it runs), and the user's own judge fit where there is one. Notebooks open their stage with
``pbench.stage``, not with the runner, so no stage's code takes in the runner and all it
imports (the command line, the estimate).
"""

from __future__ import annotations

import ast
import hashlib
import json
from functools import cache
from pathlib import Path

from pbench import store

PACKAGE = Path(__file__).resolve().parent
DATA = ("data", "prompts")
"""Folders of the package whose files the code reads at run time: part of every stage's code."""
NOT_READ = ("data/calibration.json",)
"""Files there that no stage reads: the estimate's measured rates (``pbench.estimate``)."""
USER_READ = ("judge_fit.json",)
"""Files of the user's folder (``store.user_dir``) that stage code reads before the package's:
the judge's own fit (``pbench judge --fit``)."""


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """``pbench/llm/chat.py`` -> ``pbench.llm.chat``; a package's ``__init__`` is the package."""
    return ".".join(path.with_suffix("").relative_to(package.parent).parts).removesuffix(".__init__")


def imports_in(text: str) -> set[str]:
    """The ``pbench`` modules a Python text imports anywhere (functions included):
    ``from pbench import a`` gives ``pbench.a``; ``from pbench.b import c`` and
    ``import pbench.b`` give ``pbench.b``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module == "pbench":
            found |= {f"pbench.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pbench."):
            found.add(node.module or "")
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("pbench.")}
    return found


@cache
def graph(package: Path = PACKAGE) -> dict[str, frozenset[str]]:
    """Every module of the package to the package's modules it imports, itself left out.
    A name imported from ``pbench`` that is not a module is dropped. Read once a process:
    the imports of a module edited since are seen by the next process (its bytes, which
    ``digest`` hashes, are read each time)."""
    texts = {module_name(p, package): p.read_text(encoding="utf-8") for p in sorted(package.rglob("*.py"))}
    return {name: frozenset(imports_in(text) & set(texts) - {name}) for name, text in texts.items()}


def notebook_imports(notebook: Path) -> set[str]:
    """The ``pbench`` modules a notebook's code cells import (lines of IPython magic skipped)."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    found: set[str] = set()
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        text = "".join(cell.get("source", []))
        found |= imports_in("\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("%", "!"))))
    return found


def closure(roots: set[str], package: Path | None = None) -> list[str]:
    """``roots`` and every module they import, directly or through others, sorted (``package``:
    default ``PACKAGE``, this one). A subpackage brings all its modules: ``pbench.targets``
    runs the kinds of target, which the parameters load by name and none imports."""
    known = graph(package or PACKAGE)
    seen: set[str] = set()
    todo = [r for r in roots if r in known]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += known[name] - seen
            todo += [m for m in known if m.startswith(f"{name}.") and m not in seen]
    return sorted(seen)


def stage_modules(notebook: Path, package: Path | None = None) -> list[str]:
    """The modules a stage's notebook runs: the closure of its imports."""
    return closure(notebook_imports(notebook), package)


def digest(notebook: Path, package: Path | None = None, without: tuple[str, ...] = ()) -> str:
    """sha256 over the source of ``stage_modules`` and the package's data files, each by its
    path in the package: the same bytes, the same digest, on any machine. ``without``: data
    files (``data/judge_dev.jsonl``) that only some stages read, hashed by those instead."""
    package = package or PACKAGE
    h = hashlib.sha256()
    paths = [package.parent.joinpath(*m.split(".")) for m in stage_modules(notebook, package)]
    files = [p / "__init__.py" if p.is_dir() else p.with_suffix(".py") for p in paths]
    files += sorted(f for d in DATA if (package / d).is_dir() for f in (package / d).rglob("*")
                    if f.is_file() and "__pycache__" not in f.parts
                    and f.relative_to(package).as_posix() not in NOT_READ + without)
    for f in files:
        h.update(f"{f.relative_to(package.parent).as_posix()}\n".encode())
        h.update(hashlib.sha256(f.read_bytes()).digest())
    for name in USER_READ:
        if (mine := store.user_dir() / name).is_file():
            h.update(f"user:{name}\n".encode())
            h.update(hashlib.sha256(mine.read_bytes()).digest())
    return h.hexdigest()
