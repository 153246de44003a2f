"""A kind of target shipped as its own package: ``refuser``, an assistant that declines every
question with one fixed line. It is the floor a privacy defence is read against: it never
leaks (LR 0) and answers no one (its over-secrecy is every confidant's question).

The whole kind is this file: its spec, its factory, its cost and its name, registered with
``pbench.config.target_kind``. ``pyproject.toml`` beside it names the module in the entry
point group ``pbench.targets``; once the package is installed, a parameter file may say::

    targets:
      - {kind: refuser, line: "I'd rather not say."}
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pbench.config import PlannedTarget, TargetSpecBase, target_kind
from pbench.targets import Context, Maker, Turn


class RefuserSpec(TargetSpecBase):
    """An assistant that says ``line`` to everyone."""

    kind: Literal["refuser"]
    label: str = "refuser"
    line: str = "I'd rather not say."


class Refuser:
    """One owner's refuser (``pbench.targets.Target``)."""

    kind = "refuser"

    def __init__(self, label: str, line: str):
        self.label, self.line = label, line

    def ingest(self, documents: list[dict[str, Any]]) -> None:
        """It reads nothing."""

    async def reply(self, asker: str, conversation: list[dict[str, str]], at: dt.datetime,
                    seed: int | None = None, reader: str | None = None) -> Turn:
        return Turn(self.line, [])


@target_kind("refuser", RefuserSpec, "declines everything", replies="none")
def make(t: PlannedTarget, c: Context) -> Maker:
    return Maker(t.label, t.kind, lambda owner, prompt, defence: Refuser(t.label, t.spec.line))
