"""The fixed-latency OpenAI-compatible server of the benchmarks, spoken to through pbench.llm."""

from __future__ import annotations

import asyncio
import time
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

from bench import latency_server  # bench/ is a folder of scripts; pytest puts the repository on sys.path
from pbench import config, footprint, judging, llm, rag, social_graph


def chat_model(url: str, **spec: object) -> llm.ChatModel:
    model_spec = config.ModelSpec(provider="openai", model="latency-server", base_url=url, max_retries=2, **spec)
    return llm.ChatModel(model_spec, "judge", llm.make_backend(model_spec), cache=None, seed=3, backoff_s=0.01,
                         ledger=llm.Ledger())


class Choice(BaseModel):
    label: Literal["alpha", "beta"]
    weight: float | None
    rank: int = Field(ge=3, le=9)
    tags: list[str] = Field(min_length=2, max_length=4)


class Nested(BaseModel):
    choices: list[Choice] = Field(min_length=1)
    best: Choice
    note: str = Field(min_length=12, max_length=20)


class Listing(BaseModel):
    items: list[str]  # no minimum: the smallest instance is empty


@pytest.mark.parametrize("schema", [judging.Disclosure, judging.Evidence, judging.Score, judging.Components,
                                    rag.TagBatch, social_graph.ProfileDraft, footprint.exchange_schema(["Ana", "Ben"]), Nested])
@pytest.mark.parametrize("array_items", [0, 2])
def test_schema_requests_get_an_instance_that_validates(schema, array_items):
    with latency_server.serve(0.0, array_items=array_items) as server:
        out = chat_model(server.url, parse_retries=0).complete([{"role": "user", "content": "list the facts"}], schema)
    assert not out.unparsed, out.error
    assert isinstance(out.parsed, schema)
    assert schema.model_validate_json(out.text) == out.parsed
    assert out.prompt_tokens == 3 and out.completion_tokens == len(out.text.split())
    assert server.requests == 1


def test_arrays_are_minimal_unless_asked_for_more():
    ask = lambda url, schema: chat_model(url).complete([{"role": "user", "content": "q"}], schema).parsed  # noqa: E731
    with latency_server.serve(0.0) as server:
        listing, comps, nested = (ask(server.url, s) for s in (Listing, judging.Components, Nested))
        disclosure = ask(server.url, judging.Disclosure)
    assert listing.items == [] and len(comps.components) == 1  # minItems 0 and 1
    assert len(nested.choices) == 1 and len(nested.best.tags) == 2 and nested.best.rank == 3
    assert nested.best.label == "alpha" and nested.best.weight == 0.0
    assert disclosure.answer == "answered"  # an enum gets its first value
    with latency_server.serve(0.0, array_items=3) as server:
        listing, comps = ask(server.url, Listing), ask(server.url, judging.Components)
    assert len(listing.items) == 3 and all(f.strip() for f in listing.items)
    assert len(comps.components) == 3 and len(set(comps.components)) == 3
    with latency_server.serve(0.0, array_items=9) as server:
        comps = ask(server.url, judging.Components)
    assert len(comps.components) == 5  # never past maxItems


def test_free_text_replies_vary_with_the_request():
    with latency_server.serve(0.0) as server:
        model = chat_model(server.url)
        replies = {model.complete([{"role": "user", "content": f"question {i}"}]).text for i in range(12)}
        again = model.complete([{"role": "user", "content": "question 0"}]).text
    assert len(replies) == 12
    assert again in replies
    assert all(r.endswith("?") and "{" not in r for r in replies)


def test_a_wrong_key_gets_401_once_and_pbench_raises_without_retrying(monkeypatch):
    monkeypatch.setenv("PBENCH_TEST_KEY", "sk-wrong")
    with latency_server.serve(0.0, require_key="sk-canary") as server:
        model = chat_model(server.url, api_key_env="PBENCH_TEST_KEY")
        with pytest.raises(llm.LLMError, match=r"judge model latency-server: .*HTTP 401.*not retried") as err:
            model.complete([{"role": "user", "content": "hello"}])
    assert isinstance(err.value.__cause__, openai.AuthenticationError)
    assert server.rejected == 1  # not retried: a wrong key is not a transient error
    assert server.requests == 0
    totals = model.ledger.totals()
    assert (totals.calls, totals.retries, totals.give_ups) == (1, 0, 1)


def test_the_right_key_is_sent_with_every_request(monkeypatch):
    monkeypatch.setenv("PBENCH_TEST_KEY", "sk-canary")
    with latency_server.serve(0.0, require_key="sk-canary") as server:
        model = chat_model(server.url, api_key_env="PBENCH_TEST_KEY")
        for i in range(3):
            assert model.complete([{"role": "user", "content": f"hello {i}"}]).text
    assert (server.requests, server.rejected) == (3, 0)


@pytest.mark.parametrize(("requests", "limit"), [(8, 8), (8, 3)])
def test_max_in_flight_counts_concurrent_requests(requests, limit):
    latency = 0.3
    with latency_server.serve(latency) as server:
        model = chat_model(server.url, max_concurrency=limit)

        async def all_at_once():
            return await asyncio.gather(*(model.acomplete([{"role": "user", "content": f"r{i}"}])
                                          for i in range(requests)))

        t0 = time.perf_counter()
        llm.run_sync(all_at_once())
        seconds = time.perf_counter() - t0
    assert server.max_in_flight == limit
    assert server.requests == requests
    waves = -(-requests // limit)
    assert waves * latency <= seconds < waves * latency + 0.5
