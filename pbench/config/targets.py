"""The ``targets`` section: the systems under test, each of a registered kind (``TargetKind``),
checked against the ``models`` section, and the targets the plan crosses, each with the
prompts and defences it runs under (``plan_targets``).

A kind is one module that registers itself with ``target_kind``: its spec (a subclass of
``TargetSpecBase`` with ``kind: Literal[<name>]``), its factory, what its replies cost and
its display name. Ours are in ``pbench/targets/`` (``BUILT_IN``); another package adds one
through an entry point in the group ``pbench.targets`` that names the module, and is found
the first time parameters are validated (``kinds``). This module never imports a kind by
name, so the parameters stay below the stages that make targets.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Annotated, Any, Literal, Union

from pydantic import Field

from pbench.config.base import ConfigError, Strict
from pbench.config.models import ModelSpec
from pbench.config.sections import DRAFTING, Probing, Strategy

NO_PROMPT = "none"
"""The prompt a target without a system prompt is planned under (the extractive target)."""
OWN_PROMPT = "own"
"""The prompt a target with its own, unknown instructions is planned under (http, python)."""
START_DIR = "PBENCH_START_DIR"
"""The environment variable holding the folder ``pbench run`` started in (its notebooks run
in ``notebooks/``): a python target's module is looked for there first."""
ENTRY_POINTS = "pbench.targets"
"""The entry-point group another package registers a target kind in: ``<kind> = <module>``."""
BUILT_IN = ("pbench.targets.rag", "pbench.targets.extractive", "pbench.targets.memory",
            "pbench.targets.http", "pbench.targets.python")
"""The modules of our own kinds, in the order ``pbench check`` lists them."""


class TargetSpecBase(Strict):
    """What every target kind's spec takes: its ``kind`` (a ``Literal`` of the kind's name in
    the subclass) and the strategies it is probed with."""

    kind: str
    strategies: Annotated[list[Strategy], Field(min_length=1)] | None = Field(
        None, description="the strategies it is probed with; default: probing.strategies (delegation left out, "
                          "and counted, for a target that cannot draft)")


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
    spec: Any = None
    strategies: tuple[str, ...] = ("direct", "indirect")
    drafts: bool = True


@dataclass(frozen=True)
class TargetKind:
    """A kind of system under test, as its module registers it (``target_kind``).

    Attributes:
        name: the ``kind`` a parameter file names it by.
        spec: its parameters, a ``TargetSpecBase`` subclass with ``kind: Literal[name]``.
        make: ``(PlannedTarget, pbench.targets.Context) -> pbench.targets.Maker``: stage 04's
            factory of its targets.
        title: what tables and messages call it.
        replies: what one reply costs, for ``pbench estimate``: ``assistant``, one call of its
            ``models.assistant`` model; ``own``, the system's own time, not estimated; ``none``,
            no model call.
        prompts: the system prompts it runs under: ``ours`` (``probing.prompts``, or its spec's
            ``prompts``), ``own`` (its own instructions, ``OWN_PROMPT``), ``none`` (it has no
            generator: ``NO_PROMPT``; the findings read it as retrieval alone).
        defences: whether it runs under our retrieval defences (``probing.defences``, or its
            spec's ``defences``); if not, under ``none`` only.
        each_assistant: one target per ``models.assistant`` entry its spec's ``model`` names
            (``all``: every one), labelled by the model (rag); otherwise one target, labelled by
            its spec's ``label`` or its kind.
        reads_footprint: its model reads each document of a probed owner's footprint once
            before probing (memory), for the estimate.
        drafts: whether a spec's system drafts for its owner (the ``delegation`` strategy).
        cannot_draft: what to change when ``drafts`` says no and delegation is asked.
    """

    name: str
    spec: type[TargetSpecBase]
    make: Callable[[PlannedTarget, Any], Any]
    title: str
    replies: Literal["assistant", "own", "none"] = "own"
    prompts: Literal["ours", "own", "none"] = "own"
    defences: bool = False
    each_assistant: bool = False
    reads_footprint: bool = False
    drafts: Callable[[Any], bool] = lambda spec: True
    cannot_draft: str = "its kind does not draft for its owner"


_KINDS: dict[str, TargetKind] = {}
_found: list[bool] = []  # non-empty once the built-in modules and the entry points are loaded


def target_kind(name: str, spec: type[TargetSpecBase], title: str, **how: Any) -> Callable[[Callable], Callable]:
    """Register a kind of target: decorate its factory (``TargetKind.make``) in the module that
    defines its spec. ``how``: the other fields of ``TargetKind``.

    Raises:
        ValueError: another kind is registered under ``name``, or the spec's ``kind`` is not it.
    """
    if spec.model_fields["kind"].annotation != Literal[name]:
        raise ValueError(f"target kind {name!r}: its spec {spec.__name__} must declare kind: Literal[{name!r}]")

    def register(make: Callable) -> Callable:
        kind = TargetKind(name, spec, make, title, **how)
        known = _KINDS.get(name)
        if known is not None and known.spec.__module__ != spec.__module__:  # a module imported again may
            raise ValueError(f"target kind {name!r} is registered twice ({known.spec.__module__} and {spec.__module__})")
        _KINDS[name] = kind
        return make

    return register


def kinds() -> dict[str, TargetKind]:
    """Every kind of target, by name: ours (``BUILT_IN``), then those of the entry points in
    the group ``pbench.targets``, loaded the first time they are asked for.

    Raises:
        ConfigError: an entry point does not load, or registers no kind of its name.
    """
    if not _found:
        _found.append(True)
        for module in BUILT_IN:
            importlib.import_module(module)
        for ep in metadata.entry_points(group=ENTRY_POINTS):
            where = f"entry point {ep.name} = {ep.value} ({ep.dist.name if ep.dist else 'no distribution'})"
            if ep.name in _KINDS and _KINDS[ep.name].spec.__module__ in BUILT_IN:
                raise ConfigError(f"{where}: {ep.name!r} is the name of one of pbench's own target kinds")
            try:
                ep.load()
            except Exception as exc:  # a broken plugin is named, not a traceback
                _found.clear()
                raise ConfigError(f"{where}: does not load ({type(exc).__name__}: {exc})") from None
            if ep.name not in _KINDS:
                _found.clear()
                raise ConfigError(f"{where}: registers no target kind named {ep.name!r} (pbench.config.target_kind)")
        ours = [k for k in _KINDS.values() if k.spec.__module__ in BUILT_IN]  # in BUILT_IN's order, then the others
        ordered = sorted(ours, key=lambda k: BUILT_IN.index(k.spec.__module__)) + [k for k in _KINDS.values()
                                                                                  if k not in ours]
        _KINDS.clear()
        _KINDS.update((k.name, k) for k in ordered)
    return _KINDS


def kind(name: str) -> TargetKind:
    """The kind registered as ``name``.

    Raises:
        KeyError: no such kind.
    """
    return kinds()[name]


class TargetSpec:
    """A ``targets`` entry: the spec of the kind its ``kind`` names, as a pydantic union over
    the registered kinds, built when ``RunConfig`` first validates (it defers its schema), so
    that kinds registered by then are known."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        specs = tuple(k.spec for k in kinds().values())
        return handler.generate_schema(Annotated[Union[specs], Field(discriminator="kind")])  # noqa: UP007


def label_of(t: Any) -> str:
    """A target's label unless its kind labels it by its model: its ``label`` field, or its kind."""
    return getattr(t, "label", None) or t.kind


def check_targets(targets: list[Any], labels: list[str]) -> None:
    """Whether the ``targets`` listed fit the assistants' ``labels``: an entry with a ``model``
    names one of them (``all`` too, for a kind with one target per assistant), one that probes
    with delegation drafts, and no target is listed twice.

    Raises:
        ValueError: naming the item.
    """
    seen: set[str] = set()
    for i, t in enumerate(targets):
        k = kind(t.kind)
        if t.strategies and DRAFTING in t.strategies and not k.drafts(t):
            raise ValueError(f"item {i}: strategy delegation needs a target that drafts for its owner; {k.cannot_draft}")
        model = getattr(t, "model", None)
        if model is not None and model not in labels and not (k.each_assistant and model == "all"):
            raise ValueError(f"item {i}: model {model!r} is not the label of a models.assistant entry "
                             f"({', '.join(labels)}{', or all' if k.each_assistant else ''})")
        mine = (labels if model == "all" else [str(model)]) if k.each_assistant else [label_of(t)]
        for label in mine:
            if not k.each_assistant and label in kinds() and label != t.kind:  # a table would read it as that kind
                raise ValueError(f"item {i}: label {label!r} is the name of another kind of target")
            if label in seen:
                raise ValueError(f"item {i}: target {label!r} is listed twice")
            seen.add(label)


def plan_targets(targets: list[Any] | None, probing: Probing, assistants: list[ModelSpec]) -> list[PlannedTarget]:
    """The targets the plan crosses, in order (``RunConfig.planned_targets``): ``targets`` as
    listed, a kind with one target per assistant once per model its spec names, or without
    ``targets`` one rag target per assistant."""
    p = probing
    out = []
    for t in targets or [kind("rag").spec(kind="rag")]:
        k = kind(t.kind)
        prompts = {"ours": tuple(getattr(t, "prompts", None) or p.prompts), "own": (OWN_PROMPT,),
                   "none": (NO_PROMPT,)}[k.prompts]
        defences = tuple(getattr(t, "defences", None) or p.defences) if k.defences else ("none",)
        how = {"kind": t.kind, "prompts": prompts, "defences": defences, "spec": t,
               "strategies": tuple(t.strategies or p.strategies), "drafts": k.drafts(t)}
        model = getattr(t, "model", None)
        if k.each_assistant:
            out += [PlannedTarget(m.label, model=m, **how) for m in assistants if model in ("all", m.label)]
        else:
            mine = next((m for m in assistants if model in (None, m.label)), None) if hasattr(t, "model") else None
            out.append(PlannedTarget(label_of(t), model=mine, **how))
    return out
