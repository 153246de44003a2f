"""Anthropic's Messages API (``provider: anthropic``, the anthropic extra) and its Message
Batches (``batch: true``, pbench.llm.batch.AnthropicBatchBackend) against the simulated
endpoint's ``/v1/messages`` and ``/v1/messages/batches``: live replies read as Anthropic writes
them (system, forced tool call, usage), one batch for the calls made together with the live
answers under the live cache keys, a run killed while it polls re-attaching without submitting
anything twice, and items a batch errored, expired or cancelled answered later, each counted."""

import asyncio
from pathlib import Path

import pytest
from pydantic import BaseModel

from bench.latency_server import serve
from pbench import config, estimate, llm
from pbench.llm import AnthropicBackend, AnthropicBatchBackend, ChatModel, Gate, ResponseCache
from tests.conftest import minimal_params
from tests.test_batch import QUESTIONS, _killed_while_polling, keys

pytest.importorskip("anthropic")

ROOT = Path(__file__).resolve().parents[1]


class Verdict(BaseModel):
    leaked: bool
    reason: str


def spec(root: str, **more) -> config.ModelSpec:
    return config.ModelSpec(provider="anthropic", model="claude-sim", base_url=root, api_key_env="SIM_ANTHROPIC_KEY",
                            max_retries=0, parse_retries=0, **more)


def batch_model(root: str, folder: Path, cache: Path, failed: str = "resubmit") -> ChatModel:
    s = spec(root, batch=True, batch_failed=failed)
    backend = AnthropicBatchBackend(AnthropicBackend(s), folder, poll_s=0.05, failed=failed, window_s=0.2,
                                    progress=False)
    return ChatModel(s, "judge", backend, ResponseCache(cache), seed=3, ledger=llm.Ledger(), gate=Gate(1000))


def live_model(root: str, cache: Path | None) -> ChatModel:
    s = spec(root)
    return ChatModel(s, "judge", llm.make_backend(s), cache and ResponseCache(cache), seed=3, ledger=llm.Ledger())


def ask_all(model: ChatModel) -> list[str]:
    """QUESTIONS, each with a system message, and half of them for a ``Verdict``."""
    async def go():
        return await asyncio.gather(*(model.acomplete([{"role": "system", "content": "Answer briefly."},
                                                       {"role": "user", "content": q}], Verdict if i % 2 else None)
                                      for i, q in enumerate(QUESTIONS)))
    got = llm.run_sync(go())
    model.cache.flush()
    return [c.text for c in got]


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("SIM_ANTHROPIC_KEY", "sk-sim")


def test_a_live_reply_reads_the_system_the_tool_call_and_the_usage_as_anthropic_writes_them():
    with serve(latency_s=0.0, require_key="sk-sim") as server:
        model = live_model(server.root, None)
        free = model.complete([{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Hi."}])
        judged = model.complete([{"role": "user", "content": "Hi."}], Verdict, top_logprobs=5)
        assert server.requests == 2 and server.rejected == 0  # the key went in Anthropic's x-api-key header
    assert free.text.startswith("I was just thinking") and free.completion_tokens == len(free.text.split())
    assert free.prompt_tokens == 3  # "Answer briefly." read from system, "Hi." from the user's message
    assert isinstance(judged.parsed, Verdict) and judged.text.startswith('{"leaked": false')
    assert judged.top is None  # no log-probabilities from Anthropic: the judge reads None as none given
    body = model.backend.request([{"role": "system", "content": "S."}, {"role": "user", "content": "U."}],
                                 Verdict.model_json_schema(), {"temperature": 0.2, "max_tokens": 9, "seed": 4})
    assert body["system"] == "S." and body["messages"] == [{"role": "user", "content": "U."}]
    assert body["tool_choice"] == {"type": "tool", "name": "Verdict"} and body["tools"][0]["name"] == "Verdict"
    assert "seed" not in body and "temperature" not in body and body["max_tokens"] == 9
    assert model.backend.identity == {"provider": "anthropic", "model": "claude-sim", "base_url": server.root}


def test_a_refused_key_is_not_retried_and_an_overloaded_endpoint_is_():
    import anthropic

    assert issubclass(anthropic.InternalServerError, llm.transient_errors())  # 500, 503, 529 overloaded
    assert issubclass(anthropic.RateLimitError, llm.transient_errors())
    assert issubclass(anthropic.APIConnectionError, llm.transient_errors())
    with serve(latency_s=0.0, require_key="another") as server:
        model = live_model(server.root, None)
        with pytest.raises(llm.LLMError, match=r"refused the request \(HTTP 401, AuthenticationError\)"):
            model.complete([{"role": "user", "content": "Hi."}])
        assert server.rejected == 1


def test_calls_made_together_go_in_one_batch_with_the_live_answers_and_cache_keys(tmp_path):
    with serve(latency_s=0.0) as server:
        live = ask_all(live_model(server.root, tmp_path / "live.sqlite"))
        assert server.requests == len(QUESTIONS) and not server.message_batches
        batched = batch_model(server.root, tmp_path / "batches", tmp_path / "batch.sqlite")
        assert ask_all(batched) == live and any(t.startswith("{") for t in live)  # free text and tool calls
        assert len(server.message_batches) == 1 and server.batch_items == len(QUESTIONS)
        assert keys(tmp_path / "batch.sqlite") == keys(tmp_path / "live.sqlite")  # the same cache keys
        usage = batched.ledger.snapshot()["judge"]["claude-sim"]
        assert usage["batched"] == usage["calls"] == len(QUESTIONS)
        again = batch_model(server.root, tmp_path / "batches", tmp_path / "batch.sqlite")
        assert ask_all(again) == live and len(server.message_batches) == 1  # a rerun reads the cache
    log = (tmp_path / "batches" / "batches.jsonl").read_text().splitlines()
    assert len(log) == 2 and '"batch"' in log[0] and '"collected": true' in log[1]  # no upload: submitted, collected


def test_a_parse_retry_is_a_new_item_not_the_answer_it_replaces(tmp_path):
    """Anthropic's request carries no seed, so the item id adds it: the retry's answer is asked for."""
    with serve(latency_s=0.0) as server:
        backend = batch_model(server.root, tmp_path / "batches", tmp_path / "c.sqlite").backend
        body = backend.live.request([{"role": "user", "content": "Hi."}], None, {"temperature": 0.7, "max_tokens": 9})
        first, retry = ({"seed": 3, "attempt": 0}, {"seed": 4, "attempt": 1})
        assert backend._key(body, first) != backend._key(body, retry)
        assert backend._key(body, first) == backend._key(dict(body), dict(first))  # the same in any process
        assert len(backend._key(body, first)) <= 64  # Anthropic's limit on a custom_id
        messages = [{"role": "user", "content": "Hi."}]  # and ChatModel's cache keys them apart too
        assert llm.cache_key(backend.identity, messages, first) != llm.cache_key(backend.identity, messages, retry)


KILLED = """
import os, sys
from pathlib import Path
os.environ["SIM_ANTHROPIC_KEY"] = "sk-sim"
from tests.test_anthropic_batch import ask_all, batch_model
ask_all(batch_model(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
"""


def test_a_run_killed_while_it_polls_reattaches_and_submits_nothing_twice(tmp_path):
    folder, cache = tmp_path / "batches", tmp_path / "c.sqlite"
    with serve(latency_s=0.0) as server:
        _killed_while_polling(server, folder, cache, KILLED, server.root, lambda server: server.message_batches)
        resumed = batch_model(server.root, folder, cache)
        answers = ask_all(resumed)
        assert len(server.message_batches) == 1 and server.batch_items == len(QUESTIONS)  # 0 resubmitted
        assert resumed.backend.stats["reattached"] == len(QUESTIONS) and not resumed.backend.stats["submitted"]
        assert answers == ask_all(live_model(server.root, tmp_path / "live.sqlite"))


@pytest.mark.parametrize(("end", "reason"), [("completed", "errored"), ("expired", "expired"),
                                             ("cancelled", "canceled")])
def test_items_a_batch_did_not_answer_go_into_the_next_round_counted_by_their_result(tmp_path, end, reason):
    with serve(latency_s=0.0) as server:
        server.batch_end = lambda n: end if n == 1 else "completed"
        server.unanswered = lambda n, custom_id: n == 1 and int(custom_id, 16) % 2 == 0
        model = batch_model(server.root, tmp_path / "batches", tmp_path / "c.sqlite")
        answers = ask_all(model)
        assert answers == ask_all(live_model(server.root, tmp_path / "live.sqlite"))  # none dropped
        stats = model.backend.stats
        assert len(server.message_batches) == 2 and stats["batches"] == 2
        assert stats["resubmitted"] == stats[f"unanswered_{reason}"] == server.batch_items - len(QUESTIONS) > 0
        first = next(iter(server.message_batches.values()))
        assert (first["cancel_initiated_at"] is not None) == (end == "cancelled")
    collected = [line for line in (tmp_path / "batches" / "batches.jsonl").read_text().splitlines() if "collected" in line]
    assert ('"status": "canceled"' in collected[0]) == (end == "cancelled")


def test_with_failed_live_the_unanswered_items_are_sent_live(tmp_path):
    with serve(latency_s=0.0) as server:
        server.unanswered = lambda n, custom_id: int(custom_id, 16) % 2 == 0
        model = batch_model(server.root, tmp_path / "batches", tmp_path / "c.sqlite", failed="live")
        answers = ask_all(model)
        assert server.requests == len(QUESTIONS)  # answered in the batch, or live: each once
        stats = model.backend.stats
        assert len(server.message_batches) == 1 and stats["sent_live"] == stats["unanswered_errored"] > 0
        assert answers == ask_all(live_model(server.root, tmp_path / "live.sqlite"))


def test_a_failed_download_of_the_results_is_tried_again(tmp_path):
    with serve(latency_s=0.0) as server:
        server.failed_downloads = 1
        model = batch_model(server.root, tmp_path / "batches", tmp_path / "c.sqlite")
        assert ask_all(model) == ask_all(live_model(server.root, tmp_path / "live.sqlite"))
        assert model.backend.stats["download_errors"] == 1 and len(server.message_batches) == 1


def test_provider_anthropic_may_batch_and_a_provider_that_cannot_is_refused_in_one_line(tmp_path):
    claude = {"provider": "anthropic", "model": "claude-sim", "base_url": "http://127.0.0.1:9",
              "api_key_env": "SIM_ANTHROPIC_KEY", "batch": True,
              "price_per_mtok": {"input": 1.0, "output": 5.0, "batch": 0.5}}
    cfg = config.parse(minimal_params(**{"models.judge": [claude]}))
    judge = llm.Roles(cfg, tmp_path).panel("judge")[0]
    assert isinstance(judge.backend, AnthropicBatchBackend) and judge.backend.folder == tmp_path / "batches"
    assert judge.concurrency >= 10_000  # requests wait in the batch, not in the gate
    lines = [x for x in estimate.estimate(cfg, "p.yaml").lines if x.role == "judge" and x.calls]
    assert lines and all(x.by_batch and x.cost == pytest.approx(x.live_cost * 0.5) for x in lines)
    chain = {"provider": "langchain", "model": "anthropic:claude-sim", "batch": True}
    with pytest.raises(config.ConfigError, match=r"^[^\n]*models\.judge\.0\.batch: a batch API is offered for "
                                                 r"providers openai and anthropic only, not 'langchain' \(got True\)$"):
        config.parse(minimal_params(**{"models.judge": [chain]}))
