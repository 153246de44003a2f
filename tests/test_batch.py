"""Calls sent through the Batch API (``batch: true``, pbench.llm.batch) against the simulated
endpoint's ``/v1/files`` and ``/v1/batches``: one batch for the calls made together, the live
answers under the live cache keys, a run killed while it polls re-attaching without submitting
anything twice, and items a batch failed, expired or cancelled answered in a later round or
live, each counted."""

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.latency_server import serve
from pbench import config, estimate, llm, run
from pbench.llm import BatchBackend, ChatModel, Gate, OpenAIBackend, ResponseCache
from tests.conftest import minimal_params

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [f"Say something about day {i}." for i in range(6)]


def spec(url: str, **more) -> config.ModelSpec:
    return config.ModelSpec(provider="openai", model="sim", base_url=url, max_retries=0, parse_retries=0, **more)


def batch_model(url: str, folder: Path, cache: Path, failed: str = "resubmit") -> ChatModel:
    s = spec(url, batch=True, batch_failed=failed)
    live = OpenAIBackend(s, url, {"provider": "openai", "model": "sim", "base_url": url}, api_key="k")
    backend = BatchBackend(live, folder, poll_s=0.05, failed=failed, window_s=0.2, progress=False)
    return ChatModel(s, "judge", backend, ResponseCache(cache), seed=3, ledger=llm.Ledger(), gate=Gate(1000))


def live_model(url: str, cache: Path) -> ChatModel:
    s = spec(url)
    return ChatModel(s, "judge", llm.make_backend(s), ResponseCache(cache), seed=3, ledger=llm.Ledger())


def ask_all(model: ChatModel) -> list[str]:
    async def go():
        return await asyncio.gather(*(model.acomplete([{"role": "user", "content": q}]) for q in QUESTIONS))
    got = llm.run_sync(go())
    model.cache.flush()
    return [c.text for c in got]


def keys(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {k for (k,) in db.execute("SELECT key FROM replies")}


def test_calls_made_together_go_in_one_batch_with_the_live_answers_and_cache_keys(tmp_path):
    with serve(latency_s=0.0) as server:
        live = ask_all(live_model(server.url, tmp_path / "live.sqlite"))
        assert server.requests == len(QUESTIONS) and not server.batches
        batched = batch_model(server.url, tmp_path / "batches", tmp_path / "batch.sqlite")
        assert ask_all(batched) == live  # the live endpoint's answers to the same requests
        assert len(server.batches) == 1 and server.batch_items == len(QUESTIONS)
        assert server.requests == 2 * len(QUESTIONS)  # the batch's items, answered by the server
        assert keys(tmp_path / "batch.sqlite") == keys(tmp_path / "live.sqlite")  # the same cache keys
        usage = batched.ledger.snapshot()["judge"]["sim"]
        assert usage["batched"] == usage["calls"] == len(QUESTIONS)  # the report's model-call table counts them
        again = batch_model(server.url, tmp_path / "batches", tmp_path / "batch.sqlite")
        assert ask_all(again) == live and len(server.batches) == 1  # a rerun reads the cache: no batch
    log = (tmp_path / "batches" / "batches.jsonl").read_text().splitlines()
    assert len(log) == 3 and '"batch"' not in log[0] and '"collected": true' in log[2]  # uploaded, submitted, collected


KILLED = """
import sys
from pathlib import Path
from tests.test_batch import ask_all, batch_model
ask_all(batch_model(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
"""


def _killed_while_polling(server, folder: Path, cache: Path, code: str = KILLED, url: str | None = None,
                          held=lambda server: server.batches) -> None:
    """A child process running ``code`` (by default: submit QUESTIONS) against ``url`` (the
    server's OpenAI one) while ``server`` holds its batches, SIGKILLed once the batch is in the
    log; ``held`` gives the batches the server then holds: one, of every question."""
    server.hold.clear()  # the batch stays in progress
    child = subprocess.Popen([sys.executable, "-c", code, url or server.url, str(folder), str(cache)],
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    log, deadline = folder / "batches.jsonl", time.time() + 60
    while not (log.is_file() and '"batch"' in log.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    assert log.is_file() and '"batch"' in log.read_text(), "the batch was never submitted"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert len(held(server)) == 1 and server.batch_items == len(QUESTIONS)
    server.hold.set()


def test_a_run_killed_while_it_polls_reattaches_and_submits_nothing_twice(tmp_path):
    folder = tmp_path / "batches"
    with serve(latency_s=0.0) as server:
        _killed_while_polling(server, folder, tmp_path / "c.sqlite")
        resumed = batch_model(server.url, folder, tmp_path / "c.sqlite")
        answers = ask_all(resumed)
        assert len(server.batches) == 1 and server.batch_items == len(QUESTIONS)  # 0 resubmitted
        assert resumed.backend.stats["reattached"] == len(QUESTIONS) and not resumed.backend.stats["submitted"]
        assert answers == ask_all(live_model(server.url, tmp_path / "live.sqlite"))


def test_a_kill_after_the_batch_is_created_and_before_it_is_logged_submits_nothing_twice(tmp_path):
    """The log then holds the upload and no batch: the next process finds the batch the
    provider made over that file, waits on it, and submits nothing."""
    folder = tmp_path / "batches"
    with serve(latency_s=0.0) as server:
        _killed_while_polling(server, folder, tmp_path / "c.sqlite")
        log = folder / "batches.jsonl"
        log.write_text("".join(line + "\n" for line in log.read_text().splitlines() if '"batch"' not in line))
        resumed = batch_model(server.url, folder, tmp_path / "c.sqlite")
        answers = ask_all(resumed)
        assert len(server.batches) == 1 and server.batch_items == len(QUESTIONS)  # 0 resubmitted
        stats = resumed.backend.stats
        assert (stats["adopted"], stats["reattached"], stats["submitted"]) == (1, len(QUESTIONS), 0)
        assert answers == ask_all(live_model(server.url, tmp_path / "live.sqlite"))
        assert not BatchBackend(resumed.backend.live, folder)._uploads  # settled in the log: not looked up again


def test_an_upload_no_batch_was_made_of_is_settled_and_its_items_asked_again(tmp_path):
    folder = tmp_path / "batches"
    folder.mkdir()
    upload = {"file": "file-never-batched", "items": ["x"], "at": time.time()}
    (folder / "batches.jsonl").write_text(json.dumps(upload) + "\n")
    with serve(latency_s=0.0) as server:
        model = batch_model(server.url, folder, tmp_path / "c.sqlite")
        assert ask_all(model) == ask_all(live_model(server.url, tmp_path / "live.sqlite"))
        stats = model.backend.stats
        assert (stats["adopted"], stats["submitted"], len(server.batches)) == (0, len(QUESTIONS), 1)
    assert '"settled": true' in (folder / "batches.jsonl").read_text()


@pytest.mark.parametrize("end", ["completed", "expired", "cancelled"])
def test_items_a_batch_did_not_answer_go_into_the_next_round_counted(tmp_path, end):
    with serve(latency_s=0.0) as server:
        server.batch_end = lambda n: end if n == 1 else "completed"
        server.unanswered = lambda n, custom_id: n == 1 and int(custom_id, 16) % 2 == 0
        model = batch_model(server.url, tmp_path / "batches", tmp_path / "c.sqlite")
        answers = ask_all(model)
        assert answers == ask_all(live_model(server.url, tmp_path / "live.sqlite"))  # none dropped
        stats = model.backend.stats
        assert len(server.batches) == 2 and stats["batches"] == 2
        assert stats["resubmitted"] == stats[f"unanswered_{end}"] == server.batch_items - len(QUESTIONS) > 0


def test_a_failed_download_of_the_answers_is_tried_again(tmp_path):
    with serve(latency_s=0.0) as server:
        server.failed_downloads = 1
        model = batch_model(server.url, tmp_path / "batches", tmp_path / "c.sqlite")
        assert ask_all(model) == ask_all(live_model(server.url, tmp_path / "live.sqlite"))
        assert model.backend.stats["download_errors"] == 1 and len(server.batches) == 1


def test_with_failed_live_the_unanswered_items_are_sent_live(tmp_path):
    with serve(latency_s=0.0) as server:
        server.unanswered = lambda n, custom_id: int(custom_id, 16) % 2 == 0
        model = batch_model(server.url, tmp_path / "batches", tmp_path / "c.sqlite", failed="live")
        ask_all(model)
        stats = model.backend.stats
        assert len(server.batches) == 1 and stats["sent_live"] == stats["unanswered_completed"] > 0
        assert server.requests == len(QUESTIONS)  # answered in the batch, or live: each once


def test_batch_is_for_the_openai_provider_only_and_roles_send_it_by_batch(tmp_path):
    local = {"provider": "local", "model": "qwen2.5-0.5b", "batch": True}
    with pytest.raises(config.ConfigError, match=r"models\.judge\.0\.batch: a batch API is offered for providers "
                                                 r"openai and anthropic only, not 'local'") as err:
        config.parse(minimal_params(**{"models.judge": [local]}))
    assert len(str(err.value).splitlines()) == 1
    hosted = {"provider": "openai", "model": "gpt-x", "base_url": "http://127.0.0.1:9/v1", "batch": True}
    cfg = config.parse(minimal_params(**{"models.judge": [hosted]}))
    roles = llm.Roles(cfg, tmp_path)
    judge = roles.panel("judge")[0]
    assert isinstance(judge.backend, BatchBackend) and judge.backend.folder == tmp_path / "batches"
    assert judge.concurrency >= 10_000  # requests wait in the batch, not in the gate


def test_batch_may_name_the_stages_it_batches_and_never_the_one_that_converses(tmp_path):
    hosted = {"provider": "openai", "model": "gpt-x", "base_url": "http://127.0.0.1:9/v1"}
    for stages, error in ((["04_probing"], r"models\.prober\.batch: 04_probing converses: each turn would wait "
                                           r"for a batch; batch the stages that do not: 01_social_graph, "),
                          (["05"], r"models\.prober\.batch: unknown stage '05'; the stages that can batch: ")):
        with pytest.raises(config.ConfigError, match=error) as err:
            config.parse(minimal_params(**{"models.prober": {**hosted, "batch": stages}}))
        assert len(str(err.value).splitlines()) == 1
    cfg = config.parse(minimal_params(**{"models.prober": {**hosted, "batch": ["05_scoring"]},
                                         "models.judge": [{**hosted, "batch": ["05_scoring"]}]}))
    scoring, probing = llm.Roles(cfg, tmp_path, stage="05_scoring"), llm.Roles(cfg, tmp_path, stage="04_probing")
    assert isinstance(scoring.panel("judge")[0].backend, BatchBackend) and scoring.panel("judge")[0].concurrency >= 10_000
    assert isinstance(probing.role("prober").backend, OpenAIBackend) and probing.role("prober").concurrency == 4
    assert set(config.BATCH_STAGES) == {s.name for s in run.STAGES} - {"04_probing", "06_analysis"}
    # The estimate prices each stage as it goes: the judge's stage 05 by batch, the prober's 04 live.
    halved = {**hosted, "price_per_mtok": {"input": 1.0, "output": 10.0, "batch": 0.5}}
    est = estimate.estimate(config.parse(minimal_params(**{"models.prober": {**halved, "batch": ["05_scoring"]},
                                                           "models.judge": [{**halved, "batch": ["05_scoring"]}]})),
                            "p.yaml")
    assert {(x.stage, x.role): x.by_batch for x in est.lines if x.role in ("prober", "judge")} == \
        {("04_probing", "prober"): False, ("05_scoring", "judge"): True}


def test_a_response_body_reads_the_same_live_or_from_a_batch_log_probabilities_included():
    from openai.types.chat import ChatCompletion

    from pbench.llm.backends import reply_of

    top = [{"token": "Yes", "bytes": None, "logprob": -0.1}, {"token": "No", "bytes": None, "logprob": -2.5}]
    body = {"id": "c", "object": "chat.completion", "created": 0, "model": "sim",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Yes"},
                         "logprobs": {"content": [{"token": "Yes", "bytes": None, "logprob": -0.1, "top_logprobs": top}]}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8,
                      "prompt_tokens_details": {"cached_tokens": 5}}}
    live = reply_of(ChatCompletion.model_validate(body).model_dump(), True)  # as OpenAIBackend reads a live reply
    assert live == reply_of(body, True)  # as BatchBackend reads an output line's body
    assert (live.text, live.prompt_tokens, live.completion_tokens, live.reused_tokens) == ("Yes", 7, 1, 5)
    assert live.top == (("Yes", -0.1), ("No", -2.5)) and reply_of(body, False).top is None


@pytest.mark.slow
def test_stages_01_02_by_batch_write_the_world_they_write_live_from_the_same_cache_keys(tmp_path, monkeypatch):
    """The generator by batch: stage 01's community and stage 02's documents and secrets are the
    live run's, byte for byte, from the same cache keys; every call went in a batch."""
    import yaml

    from bench import sim_server
    from bench.latency_server import config_for
    from pbench import footprint, social_graph
    from pbench.llm import batch

    monkeypatch.setattr(batch, "WINDOW_S", 0.1)
    data = yaml.safe_load((ROOT / "params" / "tiny.yaml").read_text())
    data.pop("world", None)
    data["community"].update(size=4, groups=1)
    data["footprint"].update(private_conversations=[2, 2], group_conversations=[1, 1], blog_posts=[0, 0],
                             purchases=[1, 1], secrets_per_user=[1, 1])
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump(data))
    made, stats = {}, {}
    with sim_server.serve(0.0, seed=1) as server:
        for how in ("live", "batch"):
            cfg = config_for(params, server.url, tmp_path / f"{how}.sqlite")
            if how == "batch":
                dumped = cfg.dump()
                dumped["models"]["generator"].update(batch=True, batch_poll_s=0.05)
                cfg = config.parse(dumped)
            out = tmp_path / how
            roles = llm.Roles(cfg, out)
            generator = roles.role("generator")
            community, graph = social_graph.build(cfg, generator)
            social_graph.save(community, graph, out)
            footprint.build(cfg, social_graph.load(out), generator, out)
            roles.cache.flush()
            made[how] = {name: (out / name).read_bytes() for name in ("community.json", "documents.jsonl",
                                                                       "secrets.jsonl")}
            stats[how] = dict(getattr(generator.backend, "stats", {}))
            usage = generator.ledger.snapshot()["generator"]
            stats[how]["usage"] = next(iter(usage.values()))
        batches = len(server.batches)
    print(f"stages 01-02 by batch: {stats['batch']}")
    assert made["batch"] == made["live"]
    assert keys(tmp_path / "batch.sqlite") == keys(tmp_path / "live.sqlite")
    got = stats["batch"]
    assert batches == got["batches"] > 1 and got["submitted"] == len(keys(tmp_path / "batch.sqlite"))
    assert got["usage"]["batched"] == got["usage"]["calls"] - stats["live"]["usage"]["calls"] > 0


@pytest.mark.slow
def test_stages_03_05_with_the_tagger_and_judges_by_batch_write_the_live_runs_records(tmp_path, monkeypatch):
    """A world made live on the simulated endpoint, then stages 03-05 twice on copies of it: all
    live, and with the tagger and the judges by batch in the stages that do not converse
    (``batch: [03_rag_assistant, 05_scoring]``) while stage 04's prober and assistant talk live.
    The tags, conversations and judgements are the live run's (wall times aside), from the same
    cache keys."""
    import shutil

    import yaml

    from bench import sim_server
    from bench.latency_server import config_for
    from pbench import footprint, judging, probing, rag, social_graph, targets
    from pbench.llm import batch

    monkeypatch.setattr(batch, "WINDOW_S", 0.1)
    data = yaml.safe_load((ROOT / "params" / "tiny.yaml").read_text())
    data["community"].update(size=4, groups=1)
    data["footprint"].update(private_conversations=[2, 2], group_conversations=[1, 1], blog_posts=[0, 0],
                             purchases=[1, 1], secrets_per_user=[1, 1])
    data["probing"].update(defences=["none", "sensitivity_filter"], secrets=2)
    data["targets"] = [{"kind": "rag"}]
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump(data))
    world = tmp_path / "world"

    def stripped(path: Path) -> list[dict]:  # a record's wall time is not a record of the run
        return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in path.read_text().splitlines()]

    made, stats = {}, {}
    with sim_server.serve(0.0, seed=1) as server:
        cfg = config_for(params, server.url, tmp_path / "world.sqlite")
        generator = llm.Roles(cfg, world).role("generator")
        social_graph.save(*social_graph.build(cfg, generator), world)
        footprint.build(cfg, social_graph.load(world), generator, world)
        for how in ("live", "batch"):
            out = tmp_path / how
            shutil.copytree(world, out)
            cfg = config_for(params, server.url, tmp_path / f"{how}.sqlite")
            if how == "batch":
                dumped = cfg.dump()
                for role in ("tagger", "judge"):
                    spec = {**dumped["models"]["assistant"][0], "batch": ["03_rag_assistant", "05_scoring"],
                            "batch_poll_s": 0.05}
                    dumped["models"][role] = [spec] if role == "judge" else spec
                cfg = config.parse(dumped)
            ds = footprint.load_dataset(out)
            s03, s04, s05 = (llm.Roles(cfg, out, stage=s) for s in ("03_rag_assistant", "04_probing", "05_scoring"))
            rag.build(cfg, ds, out, s03.role("tagger"))
            built = targets.for_run(cfg, rag.Index(out), {m.label: m for m in s04.panel("assistant")}, ds.view)
            probing.run(cfg, ds, s04.role("prober"), built, out, judging.Panel.from_config(cfg, s04))
            judge = judging.Panel.from_config(cfg, s05)
            judging.judge_run(ds, probing.load_conversations(out), judge, out, planned=probing.plan(ds, cfg))
            for roles in (s03, s04, s05):
                roles.cache.flush()
            made[how] = {name: stripped(out / name) for name in ("sensitivity.jsonl", "conversations.jsonl",
                                                                  "judgements.jsonl")}
            stats[how] = {"tagger": dict(getattr(s03.role("tagger").backend, "stats", {})),
                          "judge": dict(getattr(judge.judges[0].backend, "stats", {}))}
    print(f"stages 03-05 by batch: {stats['batch']}")
    assert made["batch"] == made["live"] and all(made["live"].values())
    assert keys(tmp_path / "batch.sqlite") == keys(tmp_path / "live.sqlite")
    assert stats["batch"]["tagger"]["submitted"] > 0 and stats["batch"]["judge"]["submitted"] > 0
    assert not stats["live"]["tagger"] and not stats["live"]["judge"]  # live: no batch backend at all
