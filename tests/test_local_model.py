"""The embedded local provider, for real: the 0.5B model served by xllamacpp in-process."""

import pytest
from pydantic import BaseModel

from pbench import config, embedded, llm


class Person(BaseModel):
    name: str
    age: int
    city: str


@pytest.mark.slow
def test_embedded_model_answers_a_schema_constrained_request(tmp_path):
    spec = config.ModelSpec(provider="local", model="qwen2.5-0.5b", n_ctx=2048, n_parallel=1, max_tokens=80)
    model = llm.ChatModel(spec, "generator", llm.make_backend(spec), None, seed=3, ledger=llm.Ledger())
    c = model.complete([{"role": "user", "content": "Invent a person who lives in Peru."}], Person)
    assert not c.unparsed, c.text
    assert isinstance(c.parsed, Person) and c.parsed.name
    assert c.prompt_tokens > 0 and c.completion_tokens > 0
    assert embedded.ensure("qwen2.5-0.5b").stat().st_size == embedded.EMBEDDED["qwen2.5-0.5b"].size


@pytest.mark.slow
def test_this_machines_rates_are_measured_on_the_model_and_its_server_is_stopped_after():
    from pbench import machine

    spec = config.ModelSpec(provider="local", model="smollm2-135m", n_ctx=2048, n_parallel=1)  # the fastest
    llm.SERVERS.stop(spec)  # an earlier test may have left it served
    assert not llm.SERVERS.running(spec)
    r = machine.measure(spec)
    assert r.prompt > r.generation > 0 and r.slots == 1
    assert not llm.SERVERS.running(spec)  # started for the measurement, so stopped after it


@pytest.mark.slow
def test_a_turn_that_extends_a_served_prefix_is_counted_as_reused_not_read_again():
    spec = config.ModelSpec(provider="local", model="smollm2-135m", n_ctx=2048, n_parallel=1, max_tokens=4,
                            temperature=0.0)
    ledger = llm.Ledger()
    model = llm.ChatModel(spec, "prober", llm.make_backend(spec), None, seed=3, ledger=ledger)
    first = [{"role": "system", "content": "You keep notes for a gardener. " * 30},
             {"role": "user", "content": "What should I plant in May?"}]
    model.complete(first)
    model.complete([*first, {"role": "assistant", "content": "Beans."}, {"role": "user", "content": "And in June?"}])
    u = ledger.snapshot()["prober"]["smollm2-135m"]
    assert u["calls"] == 2 and u["prompt_tokens"] > 2 * 150
    # The second request's prompt opens with the whole first one, which its slot still holds.
    assert 150 < u["reused_prompt_tokens"] < u["prompt_tokens"] / 2
