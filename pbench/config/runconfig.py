"""The whole of one run (``RunConfig``): its sections, checked together."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from pbench.config.base import Strict
from pbench.config.models import LOCAL_ONLY, Models
from pbench.config.sections import Community, Footprint, Judging, LLMSettings, Period, Probing, Validation
from pbench.config.targets import PlannedTarget, TargetSpec, check_targets, plan_targets


class RunConfig(Strict):
    """The whole of one run. Its schema is built when it first validates (``defer_build``), so
    that ``targets`` knows every kind registered by then (``pbench.config.targets.kinds``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    run_name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    seed: int = 0
    outputs_dir: Path = Path("outputs")
    world: Path | None = Field(None, description="a packed world (pbench world pack): stages 01-02 read it")
    period: Period = Period()
    community: Community = Community()
    footprint: Footprint = Footprint()
    probing: Probing = Probing()
    models: Models
    targets: Annotated[list[TargetSpec], Field(min_length=1)] | None = Field(
        None, description="the systems under test; default: one rag target per models.assistant entry")
    judging: Judging = Judging()
    validation: Validation = Validation()
    llm: LLMSettings = LLMSettings()

    @field_validator("targets")
    @classmethod
    def _targets_known(cls, value: list[Any] | None, info: ValidationInfo) -> list[Any] | None:
        models = info.data.get("models")
        if value is None or models is None:
            return value
        check_targets(value, [m.label for m in models.assistant])
        probing = info.data.get("probing")
        for i, t in enumerate(value):
            extra = [x for x in t.strategies or [] if probing is not None and x not in probing.strategies]
            if extra:  # a target's strategies narrow the run's; the plan crosses probing.strategies only
                raise ValueError(f"item {i}: strategy {extra[0]} is not in probing.strategies")
        return value

    def planned_targets(self) -> list[PlannedTarget]:
        """The targets the plan crosses, in order: ``targets`` as listed (a rag entry with
        ``model: all`` is one target per ``models.assistant`` entry), or without ``targets``
        one rag target per ``models.assistant`` entry, as before targets existed."""
        return plan_targets(self.targets, self.probing, self.models.assistant)

    @property
    def tags_wanted(self) -> bool:
        """Whether stage 03 asks the tagger: only the sensitivity filter reads its tags, under
        any target."""
        return any("sensitivity_filter" in t.defences for t in self.planned_targets())

    def run_dir(self, base: Path | None = None) -> Path:
        """The run folder, ``<outputs_dir>/<run_name>``, relative to ``base`` when given."""
        root = self.outputs_dir if base is None or self.outputs_dir.is_absolute() else base / self.outputs_dir
        return root / self.run_name

    def dump(self) -> dict[str, Any]:
        """The parameters as plain data that ``parse`` reads back (a hosted model's spec
        without the fields only local models take)."""
        data = self.model_dump(mode="json")
        for value in data["models"].values():
            for spec in value if isinstance(value, list) else [value]:
                if spec is not None and spec["provider"] != "local":
                    for key in LOCAL_ONLY:
                        spec.pop(key, None)
        return data
