"""The ``python`` target: an assistant in Python, ``module:Class`` implementing
``pbench.targets.Target``, made with ``Class(owner)`` once per owner (``pbench.remote``). It
has its own instructions and no defence of ours; it drafts when its class says
``drafts = True``."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from pbench import remote
from pbench.config import START_DIR, PlannedTarget, TargetSpecBase, target_kind
from pbench.targets import Context, Maker
from pbench.targets.http import LABEL


class PythonTargetSpec(TargetSpecBase):
    """An assistant in Python: ``module:Class`` implementing ``pbench.targets.Target``, made
    with ``Class(owner)`` once per owner."""

    kind: Literal["python"]
    label: LABEL = "python"
    entry: Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")] = Field(
        description="module:Class, importable from the working directory or the installed packages")
    retries: Annotated[int, Field(ge=0, le=10)] = Field(
        1, description="retries of a reply that raises; then the conversation is unscored with reason target_failed")

    @field_validator("entry")
    @classmethod
    def _importable(cls, value: str) -> str:
        import_entry(value)
        return value


def import_entry(entry: str) -> type:
    """The class a python target's ``module:Class`` names, imported from the folder ``pbench
    run`` started in, or the installed packages.

    Raises:
        ValueError: the module does not import, has no such class, or it has no ``reply``.
    """
    module_name, _, name = entry.partition(":")
    start = os.environ.get(START_DIR) or os.getcwd()
    if start not in sys.path:
        sys.path.insert(0, start)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r} ({exc})") from None
    found = getattr(module, name, None)
    if not isinstance(found, type):
        raise ValueError(f"module {module_name!r} has no class {name!r}")
    if not callable(getattr(found, "reply", None)):
        raise ValueError(f"{entry} has no reply method (see pbench.targets.Target)")
    return found


def _drafts(spec: Any) -> bool:
    return bool(getattr(import_entry(spec.entry), "drafts", False))


@target_kind("python", PythonTargetSpec, "assistant class", drafts=_drafts,
             cannot_draft="its class has no drafts = True (pbench.targets.Target)")
def make(t: PlannedTarget, c: Context) -> Maker:
    """The class's targets, one instance per owner; its footprints are ingested at prepare."""
    made = remote.PythonTargets(t.label, import_entry(t.spec.entry), t.spec.retries)
    return Maker(t.label, t.kind, lambda owner, prompt, defence: made.target(owner), prepare=made.prepare)
