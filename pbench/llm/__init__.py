"""Every LLM call goes through here: roles bound to models, caching, retries, limits, accounting.

Code asks for a role (``generator``, ``assistant``, ``prober``, ``judge``); the parameter
file binds each role to a model spec (``pbench.config.ModelSpec``). Providers:

- ``local``: an embedded GGUF model (``pbench.embedded``) served by xllamacpp, llama.cpp's
  own OpenAI-compatible server, inside this process on 127.0.0.1; started once per process
  per model file and shared by every role bound to it; stopped at exit.
- ``openai``: any OpenAI-compatible endpoint (vLLM, Ollama, LM Studio, llama.cpp, OpenAI).
- ``anthropic``: Anthropic's Messages API, with the ``anthropic`` extra (``pbench[anthropic]``).
- ``langchain``: any provider LangChain's ``init_chat_model`` knows, when its package is installed.

Structured output is enforced with a JSON schema (``response_format``) where the server
supports it, and always validated here. A reply that cannot be parsed is retried with a
new seed a bounded number of times, then returned with ``unparsed=True`` and its raw text,
and counted: never turned into a default value. Transient errors (connection, timeout,
rate limit, server error) are retried with backoff a bounded number of times, then raised
as ``LLMError`` and counted as a give-up. Replies are cached in SQLite keyed by model,
messages, settings, schema, seed and attempt, so rerunning the same work makes no calls.

The rooms, each importing only those above it in this list:

- ``errors``: what is retried, what is refused, what the caller sees (``LLMError``);
- ``replies``: ``RawReply``, ``Completion`` and ``parse_reply``;
- ``ledger``: usage per role and model (``Ledger``, the process's ``LEDGER``);
- ``concurrency``: the one event loop (``run_sync``, ``gather_bounded``) and a server's ``Gate``;
- ``cache``: the response cache (``ResponseCache``, ``cache_key``, ``flush_caches``);
- ``servers``: embedded models served in this process (``LocalServers``, ``SERVERS``);
- ``backends``: transports to a model (``OpenAIBackend``, ``AnthropicBackend``, ``LangChainBackend``,
  ``make_backend``);
- ``batch``: calls made together sent by batch (``BatchBackend``, ``AnthropicBatchBackend``);
- ``faults``: fault injection (``FaultyBackend``);
- ``chat``: the model a role is bound to (``ChatModel``);
- ``roles``: the run's models by role (``Roles``).

Callers import from ``pbench.llm``; modules of this package import each other directly, never
this file.
"""

from pbench.llm.backends import AnthropicBackend, Backend, LangChainBackend, OpenAIBackend, make_backend
from pbench.llm.batch import AnthropicBatchBackend, BatchBackend
from pbench.llm.cache import ResponseCache, cache_key, flush_caches
from pbench.llm.chat import ChatModel
from pbench.llm.concurrency import RUNTIME, Gate, concurrency_of, gather_bounded, run_sync, server_of
from pbench.llm.errors import LLMError, TransientError, refusals, transient_errors
from pbench.llm.faults import FaultyBackend
from pbench.llm.ledger import LEDGER, Ledger, RoleUsage
from pbench.llm.replies import Completion, Message, RawReply, parse_reply
from pbench.llm.roles import ROLES, Roles
from pbench.llm.servers import SERVERS, LocalServers

__all__ = [
    "AnthropicBackend", "Backend", "LangChainBackend", "OpenAIBackend", "make_backend",
    "AnthropicBatchBackend", "BatchBackend",
    "ResponseCache", "cache_key", "flush_caches",
    "ChatModel",
    "RUNTIME", "Gate", "concurrency_of", "gather_bounded", "run_sync", "server_of",
    "LLMError", "TransientError", "refusals", "transient_errors",
    "FaultyBackend",
    "LEDGER", "Ledger", "RoleUsage",
    "Completion", "Message", "RawReply", "parse_reply",
    "ROLES", "Roles",
    "SERVERS", "LocalServers",
]
