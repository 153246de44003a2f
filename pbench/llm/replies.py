"""What a model call returns: the backend's raw reply, the answered request, and the check
that a reply parses against its schema."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

Message = dict[str, str]


@dataclass(frozen=True)
class RawReply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Prompt tokens the server found in its prefix cache and did not read again (llama.cpp and
    # OpenAI report them as usage.prompt_tokens_details.cached_tokens); a fact of the live call,
    # never kept in the response cache.
    reused_tokens: int = 0
    injected: bool = False  # a fault made on purpose (``FaultyBackend``): never cached as the model's answer
    # The first generated token's most likely alternatives, (token, log-probability), when the
    # request asked for them (``top_logprobs``) and the provider returns them; else None.
    top: tuple[tuple[str, float], ...] | None = None


@dataclass
class Completion:
    """One answered request.

    ``parsed`` holds the validated schema object; when a schema was asked for and no
    attempt parsed, ``unparsed`` is True and ``text`` keeps the last raw reply.
    """

    text: str
    parsed: Any = None
    unparsed: bool = False
    error: str | None = None
    attempts: int = 1
    cached: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    top: tuple[tuple[str, float], ...] | None = None  # the first token's alternatives (``RawReply.top``)


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_reply(text: str, schema: type[BaseModel]) -> BaseModel:
    """Validate a reply against a pydantic model (a fenced ```json block is accepted).

    Raises:
        ValueError: empty, not JSON, or not matching the schema.
    """
    if not text.strip():
        raise ValueError("empty reply")
    m = _FENCE.match(text)
    body = m.group(1) if m else text
    try:
        return schema.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "reply"
        raise ValueError(f"{where}: {first['msg']}") from None
