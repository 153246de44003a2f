"""What a stage notebook opens with: ``stage_context`` validates the parameters and opens the
run folder; its ``StageContext`` gives the notebook its models and records, at the end, what
the stage spent and found, which the runner reads (``pbench.run``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pbench import config as config_mod
from pbench import store
from pbench.config import RunConfig

INCOMPLETE = "incomplete"
"""The key of a stage's metrics counting the work it gave up on (``StageContext.finish``)."""


@dataclass
class StageContext:
    """What a stage notebook works with: its validated parameters, run folder and models."""

    name: str
    cfg: RunConfig
    run_dir: Path
    _roles: Any = None

    @property
    def roles(self):
        """The run's models by role (``pbench.llm.Roles``), created on first use."""
        if self._roles is None:
            from pbench.llm import Roles

            self._roles = Roles(self.cfg, self.run_dir, stage=self.name)
        return self._roles

    def path(self, *parts: str) -> Path:
        p = self.run_dir.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def finish(self, incomplete: int = 0, **metrics: Any) -> dict[str, Any]:
        """Record this stage's model usage and metrics for the manifest. Call once everything the
        stage writes is written (only its "What this shows" cell comes after).

        Args:
            incomplete: units of work the stage gave up on (stage 04: ``probing.given_up``);
                while there are any, the next run runs the stage again instead of skipping it.
            metrics: stage figures worth keeping (e.g. calls per person), JSON-serialisable.
        """
        from pbench.llm import LEDGER

        record = {"llm": LEDGER.snapshot(), "metrics": {**metrics, **({INCOMPLETE: incomplete} if incomplete else {})}}
        store.write_json(self.path("stages", f"{self.name}.usage.json"), record)
        return record


def per_unit(usage: dict[str, Any], n: int) -> dict[str, float]:
    """Model calls, tokens and model seconds per unit of work (per person, per document...)."""
    calls = sum(u["calls"] for models in usage.values() for u in models.values())
    tokens = sum(u["prompt_tokens"] + u["completion_tokens"] for models in usage.values() for u in models.values())
    seconds = sum(u["seconds"] for models in usage.values() for u in models.values())
    n = max(n, 1)
    return {"calls": round(calls / n, 2), "tokens": round(tokens / n, 1), "model_seconds": round(seconds / n, 1)}


def stage_context(name: str, params_path: str | Path, run_dir: str | Path) -> StageContext:
    """Validate the parameters and open the run folder for a stage notebook.

    Args:
        name: the stage, e.g. ``01_social_graph``.
        params_path: the YAML parameter file (papermill passes it).
        run_dir: the run folder (papermill passes it; notebooks opened by hand derive it).
    """
    cfg = config_mod.load(params_path)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return StageContext(name, cfg, run_dir)
