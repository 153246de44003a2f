"""The ``memory`` target: a memory-layer assistant (``pbench.memory``). Its model extracts
short facts from each document of the owner's footprint before probing (``Maker.prepare``);
a turn retrieves facts, not documents, under the same defences (on each fact's source
document), and answers as the RAG assistant does."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from pbench import memory, rag
from pbench.config import Defence, PlannedTarget, PromptVariant, TargetSpecBase, target_kind
from pbench.targets import Context, Maker, Target


class MemoryTargetSpec(TargetSpecBase):
    """A memory-layer assistant: memories extracted from the footprint by its model, retrieved
    in place of raw documents, answered by the same model (``pbench.memory``)."""

    kind: Literal["memory"]
    model: str | None = Field(None, description="the label of a models.assistant entry; null: the first")
    top_k: Annotated[int, Field(ge=1, le=100)] | None = Field(None, description="memories retrieved a turn; null: probing.top_k")
    prompts: Annotated[list[PromptVariant], Field(min_length=1)] | None = Field(
        None, description="the system prompts it is probed under; default: probing.prompts")
    defences: Annotated[list[Defence], Field(min_length=1)] | None = Field(
        None, description="the defences it is probed under (on each memory's source document); default: probing.defences")


@target_kind("memory", MemoryTargetSpec, "memory-layer assistant", replies="assistant", prompts="ours",
             defences=True, reads_footprint=True)
def make(t: PlannedTarget, c: Context) -> Maker:
    """One ``memory.Memories`` for the run, filled by ``prepare``; a target per owner, prompt
    and defence."""
    assert t.model is not None  # plan_targets gives a memory target its model
    model = c.assistants[t.model.label]
    k = t.spec.top_k or c.cfg.probing.top_k
    memories = memory.Memories(c.index, model, c.view)

    def one(owner: str, prompt: str, defence: str) -> Target:
        return memory.MemoryTarget(memories, rag.Assistant(c.view, c.index, model, owner, prompt, defence, k), t.label)

    return Maker(t.label, t.kind, one, (model,), memories.prepare,
                 report=lambda: {"kind": "memory", **(memory.summary(c.index.run_dir) or {})})
