"""The errors of a model call: what is retried (transient), what is not (refusals), and what
the caller sees when retries run out (``LLMError``)."""

from __future__ import annotations

import asyncio

import httpx


class LLMError(RuntimeError):
    """A model call failed after its bounded retries (named in the message)."""


class TransientError(RuntimeError):
    """Raised by backends for failures worth retrying that have no library exception."""


def _transient_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [TransientError, httpx.TransportError, asyncio.TimeoutError]
    try:
        import openai

        errors += [openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError]
    except ImportError:  # pragma: no cover - openai is a dependency
        pass
    try:  # only when the anthropic extra (or a LangChain Anthropic binding) is installed
        import anthropic

        errors += [anthropic.APIConnectionError, anthropic.RateLimitError, anthropic.InternalServerError]
    except ImportError:
        pass
    return tuple(errors)


TRANSIENT_ERRORS = _transient_errors()


def _refusals() -> tuple[type[BaseException], ...]:
    # Errors the endpoint answers with that a retry cannot mend: a bad key (401), no access
    # (403), an unknown model (404), a malformed request (400). A status error that is
    # transient (429, 5xx) is a subclass of these, caught first as transient.
    errors: list[type[BaseException]] = []
    try:
        import openai

        errors.append(openai.APIStatusError)
    except ImportError:  # pragma: no cover - openai is a dependency
        pass
    try:  # only when the anthropic extra is installed
        import anthropic

        errors.append(anthropic.APIStatusError)
    except ImportError:
        pass
    return tuple(errors)


REFUSALS = _refusals()
