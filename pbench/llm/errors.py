"""The errors of a model call: what is retried (transient), what is not (refusals), and what
the caller sees when retries run out (``LLMError``)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import httpx


class LLMError(RuntimeError):
    """A model call failed after its bounded retries (named in the message)."""


class TransientError(RuntimeError):
    """Raised by backends for failures worth retrying that have no library exception."""


CLIENTS = ("openai", "anthropic")
"""The client libraries whose errors are sorted here. Each is read from ``sys.modules``: a
backend imports its library before its first call, so every error a call can raise is known
by then, and a process that never calls a provider never pays for importing its client
(anthropic's takes 2-4 s on 2 cores, and every stage's kernel imports this module)."""


def _clients() -> list[Any]:
    return [sys.modules[name] for name in CLIENTS if name in sys.modules]


def transient_errors() -> tuple[type[BaseException], ...]:
    """The failures worth retrying: ours, the transport's, a timeout, and each imported client's
    connection, rate-limit and server errors (429, 5xx, Anthropic's 529 overloaded)."""
    errors: list[type[BaseException]] = [TransientError, httpx.TransportError, asyncio.TimeoutError]
    for client in _clients():
        errors += [client.APIConnectionError, client.RateLimitError, client.InternalServerError]
    return tuple(errors)


def refusals() -> tuple[type[BaseException], ...]:
    """Errors the endpoint answers with that a retry cannot mend: a bad key (401), no access
    (403), an unknown model (404), a malformed request (400). A status error that is transient
    (429, 5xx) is a subclass of these, caught first as transient."""
    return tuple(client.APIStatusError for client in _clients())
