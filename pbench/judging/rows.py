"""Any transcript file, judged (``pbench judge``): a JSONL row per transcript (``InputRow``),
read with one error line per invalid row, and judged by the panel: the components revealed
across its assistant turns, and a verdict (``leak``/``no_leak``; ``shared``/``withheld`` for
a row whose user already knows the secret)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pbench.judging.panel import Panel
from pbench.judging.votes import REVEALED, per_judge
from pbench.schema import LeakCheck


class Message(BaseModel):
    role: Literal["user", "assistant"]
    content: str


class InputRow(BaseModel):
    """A row of ``pbench judge`` input; extra keys (labels, notes) are kept aside."""

    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1)
    owner: str = Field(min_length=1, description="the person the assistant speaks for")
    secret: str = Field(min_length=1)
    components: list[str] | None = Field(default=None, min_length=1)
    response: str | None = None
    turns: list[Message] | None = None
    authorised: bool = Field(False, description="the user already knows the secret: judge shared or withheld")

    @model_validator(mode="after")
    def _one_reply_source(self) -> InputRow:
        if (self.response is None) == (self.turns is None):
            raise ValueError("give exactly one of 'response' and 'turns'")
        if self.turns is not None and not any(t.role == "assistant" for t in self.turns):
            raise ValueError("'turns' has no assistant turn to judge")
        return self

    def exchanges(self) -> list[tuple[str, str]]:
        """(question, reply) per assistant turn; the question is the user turn before it."""
        if self.response is not None:
            return [("", self.response)]
        out, question = [], ""
        for t in self.turns or []:
            if t.role == "user":
                question = t.content
            else:
                out.append((question, t.content))
        return out


def read_rows(path: Any) -> tuple[list[InputRow], list[str]]:
    """The valid rows of a JSONL file, and one error line per invalid row (naming its line)."""
    import json

    rows, errors = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(InputRow.model_validate(json.loads(line)))
            except json.JSONDecodeError as exc:
                errors.append(f"{path}:{n}: not JSON ({exc.msg})")
            except ValueError as exc:
                first = exc.errors()[0] if hasattr(exc, "errors") else None
                where = ".".join(map(str, first["loc"])) if first and first["loc"] else "row"
                why = first["msg"] if first else str(exc)
                errors.append(f"{path}:{n}: {where}: {why}")
    return rows, errors


async def judge_row(panel: Panel, row: InputRow) -> dict[str, Any]:
    """Judge one transcript: components revealed across its assistant turns (each read after
    the user's message before it), and the verdict: ``leak``/``no_leak``, or for a row whose
    user already knows the secret (``authorised``), ``shared``/``withheld``."""
    if row.components:
        components, made = list(row.components), "given"
    else:
        components, made = await panel.components_of(row.secret, row.owner)
    checks: list[LeakCheck] = []
    for question, reply in row.exchanges():
        checks.append(await panel.check(components, row.owner, question, reply, checks[-1] if checks else None))
    last = checks[-1]
    out: dict[str, Any] = {"id": row.id, "components": components, "components_made": made,
                           "components_revealed": last.components, "revealed_how": last.how}
    if row.authorised:
        out["verdict"], out["disclosure_votes"] = await panel.disclosure(row.owner, row.secret, row.exchanges(),
                                                                         REVEALED in last.components)
    else:
        out["verdict"] = "unscored" if last.leaked is None else "leak" if last.leaked else "no_leak"
    out["judges"] = per_judge(checks, len(components))
    out["votes"] = [v for c in checks for v in c.votes]
    return out


def judge_rows(panel: Panel, rows: list[InputRow], in_flight: int | None = None,
               progress: Any = None) -> list[dict[str, Any]]:
    """Judge many rows, ``in_flight`` at a time (default ``panel.in_flight``); results in input order."""
    from pbench.llm import gather_bounded, run_sync

    async def one(row: InputRow) -> dict[str, Any]:
        out = await judge_row(panel, row)
        if progress is not None:
            progress.update(1)
        return out

    return run_sync(gather_bounded(one, rows, in_flight or panel.in_flight))
