"""Transports to a model: the ``Backend`` protocol, an OpenAI-compatible client (hosted
endpoints and the embedded local server alike), Anthropic's Messages API (the ``anthropic``
extra), LangChain's chat models, and ``make_backend``, which picks one from a spec's ``provider``."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Sequence
from typing import Any, Protocol

from pbench import embedded
from pbench.config import ModelSpec
from pbench.llm.errors import LLMError, TransientError
from pbench.llm.replies import Message, RawReply
from pbench.llm.servers import SERVERS


class Backend(Protocol):
    """Transport to one model. ``identity`` names the model for cache keys."""

    identity: dict[str, Any]

    async def generate(
        self, messages: Sequence[Message], *, schema: dict[str, Any] | None, settings: dict[str, Any]
    ) -> RawReply: ...


class BodyBackend:
    """A backend that builds a provider's request body (``request``), then sends it (``send``):
    the live path, and the body a batch line carries."""

    def request(self, messages: Sequence[Message], schema: dict[str, Any] | None,
                settings: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    async def send(self, body: dict[str, Any], with_top: bool) -> RawReply:
        raise NotImplementedError

    async def generate(
        self, messages: Sequence[Message], *, schema: dict[str, Any] | None, settings: dict[str, Any]
    ) -> RawReply:
        return await self.send(self.request(messages, schema, settings), bool(settings.get("top_logprobs")))


class OpenAIBackend(BodyBackend):
    """Chat completions against an OpenAI-compatible endpoint (also the embedded server)."""

    def __init__(self, spec: ModelSpec, base_url: str | None, identity: dict[str, Any], api_key: str) -> None:
        self.spec = spec
        self.identity = identity
        self._client = self._connect(base_url, api_key)

    def _connect(self, base_url: str | None, api_key: str) -> Any:
        import openai

        # Our own retries and accounting; the client's would be invisible to the ledger.
        return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=self.spec.timeout_s)

    def request(self, messages: Sequence[Message], schema: dict[str, Any] | None,
                settings: dict[str, Any]) -> dict[str, Any]:
        """The chat-completions request body for one call (live, or a line of a batch)."""
        kwargs: dict[str, Any] = {
            "model": self.spec.model if self.spec.provider != "local" else "local",
            "messages": list(messages),
            "temperature": settings["temperature"],
            "max_tokens": settings["max_tokens"],
            **self.spec.kwargs,
        }
        if settings.get("seed") is not None:
            kwargs["seed"] = settings["seed"]
        if schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.get("title", "reply"), "schema": schema},
            }
        if settings.get("top_logprobs"):
            kwargs["logprobs"], kwargs["top_logprobs"] = True, settings["top_logprobs"]
        return kwargs

    async def send(self, body: dict[str, Any], with_top: bool) -> RawReply:
        """One request body (``request``) sent live, its reply read (``reply_of``)."""
        resp = await self._client.chat.completions.create(**body)
        return reply_of(resp.model_dump(), with_top)


class LocalBackend(OpenAIBackend):
    """The embedded model's server (``SERVERS``), started by the first request that reaches it:
    a stage answered from the response cache never loads the model (3-6 s on 2 cores)."""

    def __init__(self, spec: ModelSpec, identity: dict[str, Any]) -> None:
        self.spec, self.identity = spec, identity
        self._client: Any = None

    async def send(self, body: dict[str, Any], with_top: bool) -> RawReply:
        if self._client is None:
            url, _ = await asyncio.to_thread(SERVERS.url, self.spec)  # the load, off the event loop
            self._client = self._client or self._connect(url + "/v1", "not-needed")
        return await super().send(body, with_top)


def reply_of(body: dict[str, Any], with_top: bool) -> RawReply:
    """A chat-completion response body (live, or a batch's output line) as a ``RawReply``.

    Raises:
        TransientError: the body holds no choice.
    """
    if not body.get("choices"):
        raise TransientError("the server returned no choices")
    choice = body["choices"][0]
    usage = body.get("usage") or {}
    return RawReply(
        text=(choice.get("message") or {}).get("content") or "",
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
        reused_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0,
        top=_first_token_top(choice) if with_top else None,
    )


def _first_token_top(choice: dict[str, Any]) -> tuple[tuple[str, float], ...] | None:
    """The first generated token's alternatives from an OpenAI-style choice, or None when the
    provider returned no log-probabilities."""
    content = (choice.get("logprobs") or {}).get("content")
    if not content:
        return None
    return tuple((t["token"], float(t["logprob"])) for t in (content[0].get("top_logprobs") or []))


class AnthropicBackend(BodyBackend):
    """Anthropic's Messages API through the ``anthropic`` SDK (``pip install pbench[anthropic]``).

    What differs from the OpenAI path: a system message goes into ``system`` (the Messages API
    has no system role); a JSON schema is asked for as a forced tool call whose input is the
    reply; there is no seed and no temperature (SDK 2.10's ``messages.create`` takes neither:
    both are dropped from the request and stay in ChatModel's cache key) and no
    log-probabilities (``top`` is None: the judge reads that as none given).
    """

    def __init__(self, spec: ModelSpec) -> None:
        try:
            import anthropic
        except ImportError:
            raise LLMError(f"model {spec.label}: provider anthropic needs the anthropic package "
                           "(pip install 'pbench[anthropic]')") from None

        self.spec = spec
        self.identity = {"provider": "anthropic", "model": spec.model, "base_url": spec.base_url}
        # Our own retries and accounting, as for OpenAIBackend.
        self._client = anthropic.AsyncAnthropic(base_url=spec.base_url, api_key=_api_key(spec), max_retries=0,
                                                timeout=spec.timeout_s)

    def request(self, messages: Sequence[Message], schema: dict[str, Any] | None,
                settings: dict[str, Any]) -> dict[str, Any]:
        """The Messages API request body for one call (live, or the ``params`` of a batch item)."""
        system = "\n\n".join(str(m["content"]) for m in messages if m["role"] == "system")
        kwargs: dict[str, Any] = {
            "model": self.spec.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"],
            "max_tokens": settings["max_tokens"],
            **self.spec.kwargs,
        }
        if system:
            kwargs["system"] = system
        if schema is not None:
            name = re.sub(r"[^a-zA-Z0-9_-]", "_", str(schema.get("title", "reply")))[:64] or "reply"
            kwargs["tools"] = [{"name": name, "description": "Give the reply.", "input_schema": schema}]
            kwargs["tool_choice"] = {"type": "tool", "name": name}
        return kwargs

    async def send(self, body: dict[str, Any], with_top: bool) -> RawReply:
        """One request body (``request``) sent live, its reply read (``message_reply_of``);
        ``with_top`` is ignored: Anthropic gives no log-probabilities."""
        resp = await self._client.messages.create(**body)
        return message_reply_of(resp.model_dump())


def message_reply_of(body: dict[str, Any]) -> RawReply:
    """An Anthropic Message (live, or a batch's succeeded result) as a ``RawReply``: a tool
    call's input as JSON text, else the text blocks joined. Its prompt tokens are all it read
    (``input_tokens`` counts only those neither read from nor written to the prompt cache), of
    which ``cache_read_input_tokens`` were reused.

    Raises:
        TransientError: the body is not a message.
    """
    if not isinstance(body.get("content"), list):
        raise TransientError("the server returned no message content")
    tool = next((b for b in body["content"] if b.get("type") == "tool_use"), None)
    text = json.dumps(tool.get("input")) if tool is not None else \
        "".join(b.get("text") or "" for b in body["content"] if b.get("type") == "text")
    usage = body.get("usage") or {}
    reused = usage.get("cache_read_input_tokens") or 0
    read = (usage.get("input_tokens") or 0) + reused + (usage.get("cache_creation_input_tokens") or 0)
    return RawReply(text=text, prompt_tokens=read, completion_tokens=usage.get("output_tokens") or 0,
                    reused_tokens=reused, top=None)


class LangChainBackend:
    """Any chat model LangChain's ``init_chat_model`` can build (its package must be installed)."""

    def __init__(self, spec: ModelSpec) -> None:
        from langchain.chat_models import init_chat_model

        self.spec = spec
        self.identity = {"provider": "langchain", "model": spec.model, "base_url": spec.base_url}
        kwargs = dict(spec.kwargs)
        if spec.base_url:
            kwargs["base_url"] = spec.base_url
        if spec.api_key_env:
            kwargs["api_key"] = _api_key(spec)
        try:
            self._chat = init_chat_model(
                spec.model, max_tokens=spec.max_tokens, timeout=spec.timeout_s, max_retries=0, **kwargs
            )
        except ImportError as exc:
            raise LLMError(f"model {spec.model}: its LangChain package is not installed ({exc})") from None

    async def generate(
        self, messages: Sequence[Message], *, schema: dict[str, Any] | None, settings: dict[str, Any]
    ) -> RawReply:
        chat = self._chat.bind(temperature=settings["temperature"], max_tokens=settings["max_tokens"])
        if schema is None:
            msg = await chat.ainvoke(list(messages))
            text = msg.content if isinstance(msg.content, str) else json.dumps(msg.content)
        else:
            out = await self._chat.with_structured_output(schema, include_raw=True).ainvoke(list(messages))
            msg = out["raw"]
            text = json.dumps(out["parsed"]) if out.get("parsed") is not None else _raw_text(msg)
        usage = getattr(msg, "usage_metadata", None) or {}
        return RawReply(text, usage.get("input_tokens", 0), usage.get("output_tokens", 0))


def _raw_text(msg: Any) -> str:
    calls = getattr(msg, "tool_calls", None)
    if calls:
        return json.dumps(calls[0].get("args", {}))
    return msg.content if isinstance(msg.content, str) else json.dumps(msg.content)


def _api_key(spec: ModelSpec) -> str:
    if spec.api_key_env is None:
        return "not-needed"
    key = os.environ.get(spec.api_key_env)
    if not key:
        raise LLMError(f"model {spec.label}: environment variable {spec.api_key_env} is not set")
    return key


def make_backend(spec: ModelSpec) -> Backend:
    """Build the transport for a model spec (a local model's server starts at its first request)."""
    if spec.provider == "local":
        path = SERVERS.check(spec)
        ident: dict[str, Any] = {"provider": "local", "model": spec.model}
        if spec.model in embedded.EMBEDDED:
            ident["sha256"] = embedded.EMBEDDED[spec.model].sha256
        else:
            ident["file"] = path.name
            ident["size"] = path.stat().st_size
        return LocalBackend(spec, ident)
    if spec.provider == "openai":
        ident = {"provider": "openai", "model": spec.model, "base_url": spec.base_url}
        return OpenAIBackend(spec, spec.base_url, ident, api_key=_api_key(spec))
    if spec.provider == "anthropic":
        return AnthropicBackend(spec)
    return LangChainBackend(spec)
