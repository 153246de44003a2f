"""The ``rag`` target: stage 03's RAG assistant (``pbench.rag.Assistant``: an ``assistant``
model, a system prompt, a defence), one target per ``models.assistant`` entry, run under
every ``probing.prompts`` and ``probing.defences``."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from pbench import rag
from pbench.config import PlannedTarget, TargetSpecBase, target_kind
from pbench.targets import Context, Maker, Target, Turn


class RagTargetSpec(TargetSpecBase):
    """Today's RAG assistant, once per ``probing.prompts`` and ``probing.defences``."""

    kind: Literal["rag"]
    model: str = Field("all", description="the label of a models.assistant entry; all: one target per entry")


@dataclass
class RagTarget:
    """Stage 03's RAG assistant (``rag.Assistant``) behind the interface."""

    assistant: rag.Assistant
    label: str
    kind: str = "rag"

    def ingest(self, documents: list[dict[str, Any]]) -> None:
        """Nothing to do: stage 03 indexed the footprint (``rag.build``), and ``rag.Index``
        reads it."""

    async def reply(self, asker: str, conversation: list[dict[str, str]], at: dt.datetime,
                    seed: int | None = None, reader: str | None = None) -> Turn:
        return await self.assistant.reply(asker, conversation, at, seed=seed, reader=reader)


@target_kind("rag", RagTargetSpec, "RAG assistant", replies="assistant", prompts="ours", defences=True,
             each_assistant=True)
def make(t: PlannedTarget, c: Context) -> Maker:
    """One assistant model's RAG assistant for each owner, prompt and defence."""
    model = c.assistants[t.label]

    def one(owner: str, prompt: str, defence: str) -> Target:
        return RagTarget(rag.Assistant(c.view, c.index, model, owner, prompt, defence, c.cfg.probing.top_k), t.label)

    return Maker(t.label, t.kind, one, (model,))
