import asyncio

import httpx
import pytest
from pydantic import BaseModel

from pbench import config, llm
from tests.conftest import FakeBackend, minimal_params


class Verdict(BaseModel):
    leaked: bool
    reason: str


MSG = [{"role": "user", "content": "Did it leak?"}]


def make(backend, tmp_path=None, **spec_over):
    spec = config.ModelSpec(provider="openai", model="m", max_retries=2, parse_retries=2, **spec_over)
    cache = llm.ResponseCache(tmp_path / "c.sqlite") if tmp_path is not None else None
    return llm.ChatModel(spec, "judge", backend, cache, seed=5, backoff_s=0.0, ledger=llm.Ledger())


def test_schema_reply_is_parsed_and_counted():
    b = FakeBackend(['{"leaked": true, "reason": "said it"}'])
    m = make(b)
    c = m.complete(MSG, Verdict)
    assert c.parsed == Verdict(leaked=True, reason="said it")
    assert not c.unparsed
    u = m.ledger.snapshot()["judge"]["m"]
    assert (u["calls"], u["prompt_tokens"], u["completion_tokens"]) == (1, 10, 5)  # the fake counts words
    assert b.calls[0]["schema"]["properties"]["leaked"]["type"] == "boolean"


def test_fenced_json_is_accepted():
    m = make(FakeBackend(['```json\n{"leaked": false, "reason": "no"}\n```']))
    assert m.complete(MSG, Verdict).parsed.leaked is False


def test_unparsable_reply_is_retried_with_new_seeds_then_recorded_unparsed():
    b = FakeBackend(["No leak.", "", '{"leaked": "maybe"}'])
    m = make(b)
    c = m.complete(MSG, Verdict)
    assert c.unparsed is True and c.parsed is None  # never a default verdict
    assert c.text == '{"leaked": "maybe"}' and c.attempts == 3
    assert [call["settings"]["seed"] for call in b.calls] == [5, 6, 7]
    u = m.ledger.snapshot()["judge"]["m"]
    assert (u["parse_failures"], u["unparsed"], u["calls"]) == (3, 1, 3)


def test_parse_retry_recovers():
    m = make(FakeBackend(["not json", '{"leaked": true, "reason": "r"}']))
    c = m.complete(MSG, Verdict)
    assert c.parsed.leaked and c.attempts == 2 and not c.unparsed


def test_empty_free_text_reply_is_unparsed():
    m = make(FakeBackend(["", " ", "\n"]))
    assert m.complete(MSG).unparsed


def test_cache_hit_makes_no_call(tmp_path):
    b = FakeBackend(['{"leaked": false, "reason": "a"}'])
    model = make(b, tmp_path)
    first = model.complete(MSG, Verdict)
    model.cache.close()  # as when its process ends
    again = make(b, tmp_path)  # a new process would build a new model over the same file
    second = again.complete(MSG, Verdict)
    assert len(b.calls) == 1
    assert second.cached and not first.cached and second.parsed == first.parsed
    assert again.ledger.snapshot()["judge"]["m"]["cache_hits"] == 1


def test_identical_requests_in_flight_are_answered_by_one_call(tmp_path):
    """The prober's opening message is the same request for every cell of one asker: asked by
    four conversations at once, it reaches the model once and all four read its reply."""
    b = FakeBackend(lambda messages, settings: f"reply to {messages[0]['content']}", delay_s=0.05)
    model = make(b, tmp_path)

    async def ask(text, seed=5):
        return await model.acomplete([{"role": "user", "content": text}], seed=seed)

    async def main():
        return await asyncio.gather(*(ask("same") for _ in range(4)), ask("other"), ask("same", seed=9))

    replies = llm.run_sync(main())
    assert [r.text for r in replies] == ["reply to same"] * 4 + ["reply to other", "reply to same"]
    assert len(b.calls) == 3  # "same" once per seed, "other" once
    assert [r.cached for r in replies] == [False, True, True, True, False, False]
    u = model.ledger.snapshot()["judge"]["m"]
    assert (u["calls"], u["cache_hits"]) == (3, 3)
    assert not model._flying  # nothing left waiting


def test_requests_waiting_on_one_that_fails_get_its_error_once(tmp_path):
    b = FakeBackend([httpx.ConnectError("down")] * 3, delay_s=0.02)  # max_retries 2: three attempts
    model = make(b, tmp_path)

    async def main():
        return await asyncio.gather(*(model.acomplete(MSG) for _ in range(3)), return_exceptions=True)

    errors = llm.run_sync(main())
    assert all(isinstance(e, llm.LLMError) for e in errors) and len(b.calls) == 3
    assert model.ledger.snapshot()["judge"]["m"]["give_ups"] == 1


def test_cache_misses_when_settings_or_messages_change(tmp_path):
    b = FakeBackend(lambda messages, settings: "hello")
    m = make(b, tmp_path)
    m.complete(MSG)
    m.complete(MSG, temperature=0.0)
    m.complete([{"role": "user", "content": "other"}])
    m.complete(MSG, seed=99)
    m.complete(MSG)
    assert len(b.calls) == 4


def test_transient_errors_are_retried_within_bounds():
    b = FakeBackend([httpx.ConnectError("down"), llm.TransientError("503"), "fine"])
    m = make(b)
    assert m.complete(MSG).text == "fine"
    u = m.ledger.snapshot()["judge"]["m"]
    assert (u["calls"], u["retries"], u["give_ups"]) == (3, 2, 0)


def test_persistent_transient_errors_give_up_with_a_named_error():
    b = FakeBackend(lambda messages, settings: httpx.ReadTimeout("slow"))
    m = make(b)
    with pytest.raises(llm.LLMError, match=r"gave up after 3 attempts \(ReadTimeout"):
        m.complete(MSG)
    assert len(b.calls) == 3
    assert m.ledger.snapshot()["judge"]["m"]["give_ups"] == 1


def test_a_clients_errors_are_sorted_once_it_is_imported_and_importing_pbench_imports_no_client():
    """Every stage's kernel imports pbench.llm: it must not pay for the openai and anthropic
    clients (3 s together on 2 cores) unless a backend of theirs is used, which imports them."""
    import subprocess
    import sys

    probe = ("import sys, pbench.llm as llm; before = [m for m in ('openai', 'anthropic') if m in sys.modules]; "
             "import openai; print(before, openai.RateLimitError in llm.transient_errors(), "
             "openai.APIStatusError in llm.refusals(), len(llm.refusals()))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["[]", "True", "True", "1"]


def test_a_local_models_server_starts_at_the_first_request_that_reaches_it(tmp_path, monkeypatch):
    """A stage answered from its response cache never loads the model; the first live call does,
    once, and the settings of every role bound to the model are checked when it is bound."""
    from bench import latency_server
    from pbench.llm import backends

    started = []
    with latency_server.serve(0.0) as server:
        class Servers:  # the model file is there, and the latency server stands for llama.cpp's
            def check(self, spec):
                if spec.n_ctx != 2048:
                    raise llm.LLMError("already served with other settings")
                return tmp_path / "model.gguf"

            def url(self, spec):
                started.append(spec.model)
                return server.url.removesuffix("/v1"), tmp_path / "model.gguf"

        monkeypatch.setattr(backends, "SERVERS", Servers())
        spec = config.ModelSpec(provider="local", model="qwen2.5-0.5b", n_ctx=2048)
        cache = llm.ResponseCache(tmp_path / "c.sqlite")
        model = lambda: llm.ChatModel(spec, "judge", llm.make_backend(spec), cache, seed=5,  # noqa: E731
                                      ledger=llm.Ledger())
        first = model()
        assert started == []  # bound, not served
        reply = first.complete(MSG).text
        first.complete([{"role": "user", "content": "another"}])
        assert started == ["qwen2.5-0.5b"]  # one start for the backend's calls
        assert model().complete(MSG).text == reply and started == ["qwen2.5-0.5b"]  # from the cache: no start
        with pytest.raises(llm.LLMError, match="other settings"):
            llm.make_backend(spec.model_copy(update={"n_ctx": 4096}))


def test_a_model_bound_with_other_settings_than_an_earlier_binding_is_refused_before_it_is_served(tmp_path):
    gguf = tmp_path / "own.gguf"
    gguf.write_bytes(b"GGUF")
    servers = llm.LocalServers()
    spec = config.ModelSpec(provider="local", model=str(gguf), n_ctx=2048, n_parallel=2)
    assert servers.check(spec) == gguf and servers.check(spec) == gguf and not servers.running(spec)
    with pytest.raises(llm.LLMError, match=r"already served with n_ctx, n_parallel, n_threads = \(2048, 2,"):
        servers.check(spec.model_copy(update={"n_parallel": 4}))
    servers.stop(spec)  # the promise goes with the server
    assert servers.check(spec.model_copy(update={"n_parallel": 4})) == gguf
    with pytest.raises(llm.LLMError, match="does not exist"):
        servers.check(spec.model_copy(update={"model": str(tmp_path / "missing.gguf")}))


def test_other_errors_are_not_retried():
    b = FakeBackend([KeyError("bug"), "never"])
    with pytest.raises(KeyError):
        make(b).complete(MSG)
    assert len(b.calls) == 1


def test_concurrency_is_bounded_per_model():
    b = FakeBackend(lambda messages, settings: "ok", delay_s=0.05)
    m = make(b, max_concurrency=3)

    async def many():
        return await asyncio.gather(*(m.acomplete([{"role": "user", "content": str(i)}]) for i in range(12)))

    out = asyncio.run(many())
    assert len(out) == 12 and b.max_in_flight == 3


def test_roles_bound_to_one_server_share_its_limit(tmp_path):
    vllm = {"provider": "openai", "model": "qwen3", "base_url": "http://localhost:8000/v1"}
    other = {"provider": "openai", "model": "other", "base_url": "http://localhost:8000/v1", "max_concurrency": 2}
    cfg = config.parse(minimal_params(**{
        "models.prober": {**vllm, "max_concurrency": 5}, "models.assistant": [{**vllm, "max_concurrency": 3}],
        "models.judge": [other], "models.generator": other}))
    backend = FakeBackend(lambda messages, settings: "ok", delay_s=0.05)
    roles = llm.Roles(cfg, tmp_path, backend_factory=lambda spec: backend)
    prober, assistant, judge = roles.role("prober"), roles.panel("assistant")[0], roles.panel("judge")[0]
    assert prober.gate is assistant.gate and prober.concurrency == 3  # the smaller declared limit
    assert judge.gate is not prober.gate and judge.concurrency == 2

    async def many(models, round_):
        return await asyncio.gather(*(m.acomplete([{"role": "user", "content": f"{m.role} {round_}.{i}"}])
                                      for m in models for i in range(8)))

    llm.run_sync(many([prober, assistant], 1))
    assert backend.max_in_flight == 3  # not 5 + 3: the server's slots are shared
    backend.max_in_flight = 0
    llm.run_sync(many([prober, judge], 2))
    assert backend.max_in_flight == 5  # two servers: 3 + 2


def test_cache_writes_wait_for_the_writer_and_none_is_lost_on_close(tmp_path):
    import sqlite3

    path = tmp_path / "c.sqlite"
    cache = llm.ResponseCache(path, flush_s=30.0)  # a batch gathers for up to 30 s
    for i in range(50):
        cache.put(f"k{i}", llm.RawReply(f"reply {i}", 3, 2))
    on_disk = sqlite3.connect(path)
    assert on_disk.execute("SELECT COUNT(*) FROM replies").fetchone()[0] == 0  # put did not wait for the disk
    assert cache.get("k7").text == "reply 7"  # a pending reply is found
    cache.put("k7", llm.RawReply("newer", 1, 1))
    cache.close()  # commits the batch at once, not after 30 s
    assert on_disk.execute("SELECT COUNT(*) FROM replies").fetchone()[0] == 50
    reopened = llm.ResponseCache(path)
    assert reopened.get("k7").text == "newer" and reopened.get("k49").text == "reply 49" and len(reopened) == 50
    with pytest.raises(ValueError, match="closed"):
        cache.put("k", llm.RawReply("late"))
    reopened.close()


def test_roles_bind_models_and_share_backends(tmp_path):
    cfg = config.parse(minimal_params())
    built = []

    def factory(spec):
        built.append(spec)
        return FakeBackend(lambda messages, settings: "x")

    roles = llm.Roles(cfg, tmp_path, backend_factory=factory)
    gen = roles.role("generator")
    judges = roles.panel("judge")
    assert gen.role == "generator" and [j.role for j in judges] == ["judge"]
    assert gen.backend is judges[0].backend and len(built) == 1  # one model, one backend
    assert gen.concurrency == cfg.models.generator.n_parallel  # local: as many as server slots
    with pytest.raises(ValueError, match="use panel"):
        roles.role("judge")
    assert roles.bindings_of(cfg)["judge"][0]["sha256"].startswith("1d9614")


def test_missing_api_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("PBENCH_TEST_KEY", raising=False)
    spec = config.ModelSpec(provider="openai", model="m", api_key_env="PBENCH_TEST_KEY")
    with pytest.raises(llm.LLMError, match="PBENCH_TEST_KEY is not set"):
        llm.make_backend(spec)


def test_cache_keys_are_the_ones_every_existing_cache_holds(tmp_path):
    # Computed on the code before llm.py became a package: a change here would make every
    # response cache on disk miss, and a rerun call every model again.
    assert llm.cache_key({"provider": "openai", "model": "m", "base_url": None}, MSG,
                         {"temperature": 0.7, "max_tokens": 256, "kwargs": {}, "seed": 0, "attempt": 0, "schema": None}) \
        == "d51cc9702c3e8d3566449295914baa5d50698f63f67a8bc8b3bb5d5fd8abb3ac"
    spec = config.ModelSpec(provider="openai", model="m", parse_retries=1, temperature=0.3, max_tokens=99,
                            kwargs={"top_p": 0.9})
    cache = llm.ResponseCache(tmp_path / "c.sqlite")
    b = FakeBackend(["not json", '{"leaked": true, "reason": "r"}', "free text", "with top"])
    m = llm.ChatModel(spec, "judge", b, cache, seed=5, backoff_s=0.0, ledger=llm.Ledger())
    m.complete(MSG, Verdict)  # a parse retry: a second attempt with the next seed
    m.complete([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], seed=11, temperature=0.0)
    m.complete([{"role": "user", "content": "Yes or no?"}], max_tokens=1, top_logprobs=5)
    expected = {
        "5961497185f0da24744a308db375653636e951938c9844dad42a0dc1449c9d0b": "not json",
        "244af1646dd766abec79fa3562a18ccd342d787555f15a3b9e97af1d67473523": '{"leaked": true, "reason": "r"}',
        "e20a828f67d12354c4ceabdf0d85d84aedf8463e3ba4ac485351565aaeb2703d": "free text",
        "026f2e713acd26c9acfab3656187b4273891a7a19c60261e3592b6114d8f99e2": "with top",
    }
    assert len(cache) == len(expected)
    assert {k: cache.get(k).text for k in expected} == expected
    cache.close()
