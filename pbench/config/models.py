"""The ``models`` section: each role bound to a model (``ModelSpec``), keys from environment
variables, never from the file; an embedded model's old name still read, with a note."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from pbench.config.base import Strict
from pbench.embedded import ALIASES, EMBEDDED


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, dict) else value


EMBEDDED_MODELS = tuple(EMBEDDED)
_warned: set[str] = set()
LOCAL_ONLY = ("n_ctx", "n_parallel", "n_threads", "sha256")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONVERSING = "04_probing"
BATCH_STAGES = ("01_social_graph", "02_footprint", "03_rag_assistant", "05_scoring", "07_validation")
"""The stages whose calls do not wait on each other's answers, which ``batch:`` may name (06 calls no model)."""
BATCH_PROVIDERS = ("openai", "anthropic")
"""The providers whose batch API ``pbench.llm.batch`` speaks (``batch:``)."""


class Price(Strict):
    """Dollars per million tokens, for ``pbench estimate``'s cost (state the date and source
    beside it in the file: prices change)."""

    input: Annotated[float, Field(ge=0)]
    output: Annotated[float, Field(ge=0)]
    batch: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None, description="a call by batch as a share of the live price (OpenAI's Batch API and Anthropic's "
                          "Message Batches: 0.5); null: none offered")


CALL_ONLY = ("max_concurrency", "timeout_s", "max_retries", "price_per_mtok", "batch", "batch_poll_s", "batch_failed")
"""Spec fields that say how to call a model, not what it answers: they never make a stage rerun."""


class ModelSpec(Strict):
    """One model bound to a role. Keys come from environment variables, never from the file."""

    provider: Literal["local", "openai", "anthropic", "langchain"]
    model: str = Field(
        description="local: an embedded name or a path to a .gguf file; openai: the served "
        "model name; anthropic: the model name (the anthropic extra); langchain: 'provider:model' "
        "as init_chat_model takes it"
    )
    name: str | None = Field(None, description="label in tables and figures; defaults to model")
    base_url: str | None = None
    api_key_env: str | None = Field(None, description="name of the environment variable holding the key")
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.7
    max_tokens: Annotated[int, Field(ge=1)] = 512
    timeout_s: Annotated[float, Field(gt=0)] = 180.0
    max_concurrency: Annotated[int, Field(ge=1)] = 4
    max_retries: Annotated[int, Field(ge=0, le=20)] = 4
    parse_retries: Annotated[int, Field(ge=0, le=10)] = 2
    n_ctx: Annotated[int, Field(ge=512)] = 8192
    n_parallel: Annotated[int, Field(ge=1, le=64)] = 2
    n_threads: Annotated[int, Field(ge=1)] | None = None
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = Field(
        None, description="local .gguf files: the file's expected sha256, checked before the run starts")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="extra provider arguments")
    price_per_mtok: Price | None = Field(None, description="dollars per million input and output tokens (estimate only)")
    batch: bool | list[str] = Field(False, description="openai, anthropic: send the calls made together through the "
                                                       "provider's batch API (half price, answers within 24 hours; "
                                                       "pbench.llm.batch): true in every stage, or a list of the stages")
    batch_poll_s: Annotated[float, Field(gt=0)] = Field(30.0, description="seconds between polls of a batch's status")
    batch_failed: Literal["resubmit", "live"] = Field(
        "resubmit", description="an item a batch failed, expired or cancelled: in the next batch, or sent live")

    @field_validator("batch")
    @classmethod
    def _batch_provider(cls, value: bool | list[str], info: ValidationInfo) -> bool | list[str]:
        if value and info.data.get("provider") not in BATCH_PROVIDERS:
            raise ValueError(f"a batch API is offered for providers {' and '.join(BATCH_PROVIDERS)} only, "
                             f"not {info.data.get('provider')!r}")
        if isinstance(value, list):
            if CONVERSING in value:
                raise ValueError(f"{CONVERSING} converses: each turn would wait for a batch; "
                                 f"batch the stages that do not: {', '.join(BATCH_STAGES)}")
            if unknown := [x for x in value if x not in BATCH_STAGES]:
                raise ValueError(f"unknown stage {unknown[0]!r}; the stages that can batch: {', '.join(BATCH_STAGES)}")
        return value

    def batched(self, stage: str | None = None) -> bool:
        """Whether this model's calls in ``stage`` go by batch: ``batch: true``, or a list of
        stages that names it (None, outside a stage: only ``true``)."""
        return self.batch is True or (isinstance(self.batch, list) and stage in self.batch)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        """An embedded model's old name still works, with one deprecation line per process."""
        if isinstance(data, dict) and data.get("provider") == "local" and data.get("model") in ALIASES:
            old, new = data["model"], ALIASES[data["model"]]
            if old not in _warned:
                _warned.add(old)
                print(f"note: local model {old!r} is deprecated; it is {new!r} ({EMBEDDED[new].description}): "
                      f"write that in the parameter file", file=sys.stderr)
            data = {**data, "model": new}
        return data

    @model_validator(mode="after")
    def _provider_fields(self) -> ModelSpec:
        if self.provider != "local":
            stray = [f for f in LOCAL_ONLY if f in self.model_fields_set]
            if stray:
                raise ValueError(f"{', '.join(stray)} only apply to provider 'local'")
        elif self.model not in EMBEDDED_MODELS and not self.model.endswith(".gguf"):
            raise ValueError(
                f"local model {self.model!r} is neither one of {', '.join(EMBEDDED_MODELS)} nor a .gguf path"
            )
        elif self.model.endswith(".gguf") and not Path(self.model).is_file():
            raise ValueError(f"local model file {self.model} does not exist")
        if self.sha256 is not None and self.model in EMBEDDED_MODELS:
            raise ValueError("sha256 applies to .gguf files; embedded models carry their own pinned hash")
        if self.provider == "langchain" and ":" not in self.model:
            raise ValueError("langchain models are written 'provider:model', e.g. 'anthropic:claude-sonnet-4-5'")
        if self.api_key_env is not None and not _ENV_NAME.match(self.api_key_env):
            raise ValueError(f"api_key_env must name an environment variable, got {self.api_key_env!r}")
        return self

    @property
    def label(self) -> str:
        return self.name or self.model


ModelList = Annotated[list[ModelSpec], BeforeValidator(_as_list), Field(min_length=1)]


class Models(Strict):
    """Roles bound to models (DESIGN.md, Models)."""

    generator: ModelSpec
    assistant: ModelList = Field(description="target assistants under test; one row each in Table 2")
    prober: ModelSpec
    judge: ModelList = Field(description="the judge panel: majority vote for verdicts, mean for scores")
    tagger: ModelSpec | None = Field(
        None, description="marks documents sensitive at indexing (sensitivity_filter); default: the first assistant")

    @model_validator(mode="after")
    def _one_server_per_local_model(self) -> Models:
        # Roles bound to the same local model share one in-process server, so they must agree on it.
        seen: dict[str, tuple[str, tuple]] = {}
        for role in ("generator", "assistant", "prober", "judge", "tagger"):
            value = getattr(self, role)
            if value is None:
                continue
            for i, spec in enumerate(value if isinstance(value, list) else [value]):
                if spec.provider != "local":
                    continue
                where = f"{role}[{i}]" if isinstance(value, list) else role
                server = (spec.n_ctx, spec.n_parallel, spec.n_threads)
                first = seen.setdefault(spec.model, (where, server))
                if first[1] != server:
                    raise ValueError(
                        f"{where} and {first[0]} bind {spec.model} with different n_ctx/n_parallel/n_threads; "
                        "one local server serves both, so give them the same values"
                    )
        return self
