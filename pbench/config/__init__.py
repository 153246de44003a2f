"""Typed run parameters: one pydantic model of a run, validated before anything runs.

Reads a YAML file (``params/*.yaml``); writes nothing. Every model forbids unknown
keys, so a typo stops the run with the field's full path (``footprint.noise_ratoi:
unknown field``) before any model is loaded. Defaults follow the paper's Appendix A.

The rooms, each importing only those above it in this list:

- ``base``: ``ConfigError``, the strict base model, ranges and fractions;
- ``models``: the ``models`` section, a model bound to each role (``ModelSpec``, ``Models``);
- ``sections``: period, community, footprint, probing, judging, validation, llm;
- ``targets``: the ``targets`` section, the registry of target kinds (``target_kind``,
  ``kinds``), and the targets the plan crosses (``PlannedTarget``);
- ``runconfig``: the whole run (``RunConfig``);
- ``loading``: a YAML file read and validated (``load``, ``parse``, ``verify_model_files``).

Callers import from ``pbench.config``; modules of this package import each other directly,
never this file.
"""

from pbench.config.base import ConfigError, Fraction, IntRange, Strict
from pbench.config.loading import FILE_FIELDS, WORLD_ENV, load, parse, verify_model_files
from pbench.config.models import (BATCH_STAGES, CALL_ONLY, EMBEDDED_MODELS, LOCAL_ONLY, ModelList, Models, ModelSpec,
                                  Price)
from pbench.config.runconfig import RunConfig
from pbench.config.sections import (
    CHAT_STRATEGIES,
    PACKAGE_FILES,
    DRAFT_ROUNDS,
    DRAFTING,
    Community,
    Defence,
    FaultKind,
    Faults,
    Footprint,
    Judging,
    LLMSettings,
    Period,
    Probing,
    PromptVariant,
    Strategy,
    Validation,
)
from pbench.config.targets import (
    BUILT_IN,
    ENTRY_POINTS,
    NO_PROMPT,
    OWN_PROMPT,
    START_DIR,
    PlannedTarget,
    TargetKind,
    TargetSpec,
    TargetSpecBase,
    check_targets,
    kind,
    kinds,
    label_of,
    plan_targets,
    target_kind,
)

__all__ = [
    "ConfigError", "Fraction", "IntRange", "Strict",
    "FILE_FIELDS", "WORLD_ENV", "load", "parse", "verify_model_files",
    "BATCH_STAGES", "CALL_ONLY", "EMBEDDED_MODELS", "LOCAL_ONLY", "ModelList", "Models", "ModelSpec", "Price",
    "RunConfig",
    "CHAT_STRATEGIES", "PACKAGE_FILES", "DRAFT_ROUNDS", "DRAFTING", "Community", "Defence", "FaultKind", "Faults", "Footprint", "Judging", "LLMSettings", "Period", "Probing",
    "PromptVariant", "Strategy", "Validation",
    "BUILT_IN", "ENTRY_POINTS", "NO_PROMPT", "OWN_PROMPT", "START_DIR", "PlannedTarget", "TargetKind", "TargetSpec",
    "TargetSpecBase", "check_targets", "kind", "kinds", "label_of", "plan_targets", "target_kind",
]
