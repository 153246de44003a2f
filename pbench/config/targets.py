"""The ``targets`` section: the systems under test (rag, extractive, memory, http, python),
checked against the ``models`` section, and the targets the plan crosses, each with the
prompts and defences it runs under (``plan_targets``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from pbench.config.base import Strict
from pbench.config.models import ModelSpec
from pbench.config.sections import DRAFTING, Defence, Probing, PromptVariant, Strategy


NO_PROMPT = "none"
"""The prompt a target without a system prompt is planned under (the extractive target)."""


class _Probed(Strict):
    """What every target kind takes: the strategies it is probed with."""

    strategies: Annotated[list[Strategy], Field(min_length=1)] | None = Field(
        None, description="the strategies it is probed with; default: probing.strategies (delegation left out, "
                          "and counted, for a target that cannot draft)")


class RagTargetSpec(_Probed):
    """Today's RAG assistant (stage 03's index, an ``assistant`` model, a system prompt and a
    defence), once per ``probing.prompts`` and ``probing.defences``."""

    kind: Literal["rag"]
    model: str = Field("all", description="the label of a models.assistant entry; all: one target per entry")


class ExtractiveTargetSpec(_Probed):
    """No generator: the retrieved sentences closest to the conversation, up to a word budget
    fixed in advance (the "generator removed" ablation). It has no system prompt."""

    kind: Literal["extractive"]
    budget_words: Annotated[int, Field(gt=0)] = Field(60, description="words per reply at most, about a short reply's")
    defences: Annotated[list[Defence], Field(min_length=1)] | None = Field(
        None, description="the defences it is probed under; default: probing.defences")


class MemoryTargetSpec(_Probed):
    """A memory-layer assistant: memories extracted from the footprint by its model, retrieved
    in place of raw documents, answered by the same model (``pbench.memory``)."""

    kind: Literal["memory"]
    model: str | None = Field(None, description="the label of a models.assistant entry; null: the first")
    top_k: Annotated[int, Field(ge=1, le=100)] | None = Field(None, description="memories retrieved a turn; null: probing.top_k")
    prompts: Annotated[list[PromptVariant], Field(min_length=1)] | None = Field(
        None, description="the system prompts it is probed under; default: probing.prompts")
    defences: Annotated[list[Defence], Field(min_length=1)] | None = Field(
        None, description="the defences it is probed under (on each memory's source document); default: probing.defences")


class HttpTargetSpec(_Probed):
    """An assistant running as a service, behind the JSON contract of ``pbench.remote``
    (POST <url>/ingest, POST <url>/reply)."""

    kind: Literal["http"]
    label: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")] = "http"
    url: Annotated[str, Field(pattern=r"^https?://\S+$")] = Field(description="the service's base URL")
    timeout_s: Annotated[float, Field(gt=0, le=600)] = Field(60.0, description="seconds a request may take")
    retries: Annotated[int, Field(ge=0, le=10)] = Field(
        2, description="retries of a failed request (timeout, 5xx, non-JSON, closed connection); then the "
                       "conversation is unscored with reason target_failed")
    drafts: bool = Field(False, description="the service drafts for its owner: it reads the reply request's "
                                            "reader field (pbench.remote); false: its delegation probes are skipped")


class PythonTargetSpec(_Probed):
    """An assistant in Python: ``module:Class`` implementing ``pbench.targets.Target``, made
    with ``Class(owner)`` once per owner."""

    kind: Literal["python"]
    label: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")] = "python"
    entry: Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")] = Field(
        description="module:Class, importable from the working directory or the installed packages")
    retries: Annotated[int, Field(ge=0, le=10)] = Field(
        1, description="retries of a reply that raises; then the conversation is unscored with reason target_failed")

    @field_validator("entry")
    @classmethod
    def _importable(cls, value: str) -> str:
        import_entry(value)
        return value


START_DIR = "PBENCH_START_DIR"
"""The environment variable holding the folder ``pbench run`` started in (its notebooks run
in ``notebooks/``): a python target's module is looked for there first."""


def import_entry(entry: str) -> type:
    """The class a python target's ``module:Class`` names, imported from the folder ``pbench
    run`` started in, or the installed packages.

    Raises:
        ValueError: the module does not import, has no such class, or it has no ``reply``.
    """
    import importlib
    import os
    import sys

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


def can_draft(t: Any) -> bool:
    """Whether a target spec's system drafts for its owner (the ``delegation`` strategy): our
    own kinds do; an http service says so with ``drafts: true``; a python class with a class
    attribute ``drafts = True`` (its ``reply`` then takes ``reader``)."""
    if t.kind == "http":
        return t.drafts
    if t.kind == "python":
        return bool(getattr(import_entry(t.entry), "drafts", False))
    return True


TargetSpec = Annotated[RagTargetSpec | ExtractiveTargetSpec | MemoryTargetSpec | HttpTargetSpec | PythonTargetSpec,
                       Field(discriminator="kind")]
TARGET_KINDS = ("rag", "extractive", "memory", "http", "python")
OWN_PROMPT = "own"
"""The prompt a target with its own, unknown instructions is planned under (http, python)."""


@dataclass(frozen=True)
class PlannedTarget:
    """One target as the plan crosses it: its label (the probes' ``target``), kind, the
    prompts and defences it runs under, what it needs (a rag or memory target's model) and
    its parameters (``spec``)."""

    label: str
    kind: str
    prompts: tuple[str, ...]
    defences: tuple[str, ...]
    model: ModelSpec | None = None
    budget_words: int | None = None
    spec: Any = None
    strategies: tuple[str, ...] = ("direct", "indirect")
    drafts: bool = True


def label_of(t: Any) -> str:
    """A non-rag target's label: its ``label`` field, or its kind."""
    return getattr(t, "label", None) or t.kind


def check_targets(targets: list[Any], labels: list[str]) -> None:
    """Whether the ``targets`` listed fit the assistants' ``labels``: a rag or memory entry
    names one of them (rag: or ``all``), and no target is listed twice.

    Raises:
        ValueError: naming the item.
    """
    seen: set[str] = set()
    for i, t in enumerate(targets):
        if t.strategies and DRAFTING in t.strategies and not can_draft(t):
            raise ValueError(f"item {i}: strategy delegation needs a target that drafts for its owner; "
                             + ("set drafts: true once the service reads the reply request's reader field"
                                if t.kind == "http" else "its class has no drafts = True (pbench.targets.Target)"))
        if t.kind in ("rag", "memory") and t.model not in ("all", None) and t.model not in labels:
            raise ValueError(f"item {i}: model {t.model!r} is not the label of a models.assistant entry "
                             f"({', '.join(labels)}{', or all' if t.kind == 'rag' else ''})")
        mine = (labels if t.model == "all" else [t.model]) if t.kind == "rag" else [label_of(t)]
        for label in mine:
            if t.kind != "rag" and label in TARGET_KINDS and label != t.kind:  # findings read "extractive" as the kind
                raise ValueError(f"item {i}: label {label!r} is the name of another kind of target")
            if label in seen:
                raise ValueError(f"item {i}: target {label!r} is listed twice")
            seen.add(label)


def plan_targets(targets: list[Any] | None, probing: Probing, assistants: list[ModelSpec]) -> list[PlannedTarget]:
    """The targets the plan crosses, in order (``RunConfig.planned_targets``): ``targets`` as
    listed, a rag entry with ``model: all`` one target per assistant, or without ``targets``
    one rag target per assistant."""
    p = probing
    specs = targets or [RagTargetSpec(kind="rag")]
    out = []
    for t in specs:
        how = {"strategies": tuple(t.strategies or p.strategies), "drafts": can_draft(t)}
        if isinstance(t, RagTargetSpec):
            out += [PlannedTarget(m.label, "rag", tuple(p.prompts), tuple(p.defences), model=m, **how)
                    for m in assistants if t.model in ("all", m.label)]
        elif isinstance(t, ExtractiveTargetSpec):
            out.append(PlannedTarget("extractive", "extractive", (NO_PROMPT,), tuple(t.defences or p.defences),
                                     budget_words=t.budget_words, spec=t, **how))
        elif isinstance(t, MemoryTargetSpec):
            model = next(m for m in assistants if t.model in (None, m.label))
            out.append(PlannedTarget(label_of(t), "memory", tuple(t.prompts or p.prompts),
                                     tuple(t.defences or p.defences), model=model, spec=t, **how))
        else:  # http, python: their own instructions, no defence of ours
            out.append(PlannedTarget(t.label, t.kind, (OWN_PROMPT,), ("none",), spec=t, **how))
    return out
