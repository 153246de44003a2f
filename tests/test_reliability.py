"""Issue 9, fault tolerance: misbehaving models, damaged run folders, model files that fail
their checksum. (Kills at random moments: tests/test_kill.py; bad parameter files:
tests/test_config.py; a canary API key through a whole run: tests/test_pipeline.py.)"""

import asyncio
import hashlib
import json
import re

import pytest
import yaml
from pydantic import BaseModel

from pbench import cli, config, judging, llm, probing, rag, report, run, store, targets
from tests.conftest import FakeBackend, ShuffledBackend, minimal_params
from tests.test_footprint import bow_embed
from tests.test_probing import cfg
from tests.test_rag import dataset  # noqa: F401  (fixtures)
from tests.test_run import _notebook, project  # noqa: F401
from tests.test_social_graph import community  # noqa: F401

KINDS = ["invalid_json", "empty", "timeout", "rate_limit", "server_error"]


class Answer(BaseModel):
    value: int


def faulty(role, reply, ledger, rate=0.3, seed=0, **spec):
    """A scripted model of which ``rate`` of the calls misbehave, retrying at once."""
    counts = {}

    def on_fault(kind):
        counts[kind] = counts.get(kind, 0) + 1
        ledger.add(role, role, injected=1)

    backend = llm.FaultyBackend(FakeBackend(reply), rate, KINDS, seed, on_fault)
    spec = config.ModelSpec(provider="openai", model=role, **spec)
    return llm.ChatModel(spec, role, backend, None, backoff_s=0.0, ledger=ledger), counts


def test_a_third_of_calls_failing_every_request_ends_bounded_and_counted():
    ledger = llm.Ledger()
    m, kinds = faulty("judge", lambda msgs, s: '{"value": 7}', ledger, max_retries=2, parse_retries=1)

    async def ask(i):
        try:
            return await m.acomplete([{"role": "user", "content": f"q{i}"}], Answer)
        except llm.LLMError as exc:
            return exc

    async def all_of(n):
        return await asyncio.gather(*(ask(i) for i in range(n)))

    n = 300
    out = llm.run_sync(all_of(n))
    u = ledger.snapshot()["judge"]["judge"]
    gave_up = [o for o in out if isinstance(o, llm.LLMError)]
    unparsed = [o for o in out if isinstance(o, llm.Completion) and o.unparsed]
    parsed = [o for o in out if isinstance(o, llm.Completion) and not o.unparsed]
    assert set(kinds) == set(KINDS) and 0.25 < u["injected"] / u["calls"] < 0.35
    assert all(o.parsed.value == 7 for o in parsed)  # a fault never becomes an answer
    assert all(o.parsed is None and o.error for o in unparsed)  # kept raw, with why
    assert u["give_ups"] == len(gave_up) and u["unparsed"] == len(unparsed) > 0 and gave_up
    assert u["calls"] <= n * 2 * 3  # (parse_retries + 1) x (max_retries + 1) attempts at most
    assert "gave up after 3 attempts" in str(gave_up[0])


def test_faults_are_decided_per_call_whatever_the_order_and_never_cached(tmp_path):
    """The same calls answered in two different orders meet the same faults; a faulty reply
    is never stored as the model's answer, so a rerun from the cache gets the real one."""

    def outcomes(order_seed, cache):
        backend = llm.FaultyBackend(ShuffledBackend(FakeBackend(lambda m, s: '{"value": 7}'), order_seed), 0.4,
                                    ["invalid_json", "empty"], seed=3)
        m = llm.ChatModel(config.ModelSpec(provider="openai", model="m", parse_retries=1), "judge", backend, cache,
                          backoff_s=0.0, ledger=llm.Ledger())

        async def all_of():
            return await asyncio.gather(*(m.acomplete([{"role": "user", "content": f"q{i}"}], Answer)
                                          for i in range(60)))

        return [(o.unparsed, o.attempts) for o in llm.run_sync(all_of())]

    first = outcomes(1, None)
    assert first == outcomes(2, None) and any(u for u, _ in first) and any(a == 2 for _, a in first)
    cache = llm.ResponseCache(tmp_path / "cache.sqlite")
    assert outcomes(1, cache) == first  # the same faults, with a cache underneath
    cache.flush()
    stored = [json.loads(r)["text"] for (r,) in cache._db.execute("SELECT reply FROM replies")]
    assert stored and set(stored) == {'{"value": 7}'}  # only real answers were kept
    with pytest.raises(ValueError, match="never cached"):
        cache.put("k", llm.RawReply("", injected=True))


def says(messages, settings):
    """A judge answering the component prompt: stated when the message holds the component's words."""
    prompt = messages[-1]["content"].split("Now this one.")[1]
    fact = re.search(r"^Fact: (.*)$", prompt, re.M).group(1)
    message = re.search(r'^Message: "(.*)"$', prompt, re.M).group(1)
    stated = all(w in message.lower() for w in re.findall(r"\w+", fact.lower()))
    return json.dumps({"evidence": message if stated else "", "stated": stated})


def test_probing_under_faults_finishes_and_counts_every_give_up(dataset, tmp_path):  # noqa: F811
    """30% of prober, assistant and judge calls misbehave: every planned conversation is either
    recorded whole or listed as given up (one give-up each); unparsed judge replies leave
    components unscored, never 'not revealed'; and the report shows the failures."""
    ledger = llm.Ledger()
    prober, _ = faulty("prober", lambda m, s: "any news?", ledger, seed=1, max_retries=1, parse_retries=1)
    assistant, _ = faulty("assistant", lambda m, s: "I am resigning in May.", ledger, seed=2, max_retries=1,
                          parse_retries=1)
    judge, _ = faulty("judge", says, ledger, seed=3, max_retries=1, parse_retries=1)
    panel = judging.Panel([judge], "verdict", embed=bow_embed)  # a model call per component: faults reach the check
    rag.build_index(dataset.documents, dataset.view, tmp_path, {d.id: True for d in dataset.documents},
                    embed=bow_embed)
    c = cfg()
    out = probing.run(c, dataset, prober,
                      targets.for_run(c, rag.Index(tmp_path, embed=bow_embed), {"qwen2.5-0.5b": assistant}, dataset.view),
                      tmp_path, check=panel)
    planned = {p.id for p in probing.plan(dataset, c)}
    convs = probing.load_conversations(tmp_path)
    given_up = {e.split(":")[0] for e in out["errors"]}
    assert {cv.id for cv in convs} | given_up == planned and not {cv.id for cv in convs} & given_up
    assert given_up, "30% faults with one retry should give some conversation up"
    totals = ledger.totals()
    assert totals.give_ups == len(given_up) and totals.injected > 0 and totals.retries > 0
    for t in (t for cv in convs for t in cv.turns):
        judge_failed = all(v["stated"] is None for v in t.check.votes)
        assert not judge_failed or (t.check.leaked is None and "not revealed" not in t.check.components)
        for v in t.check.votes:  # one vote per component asked: an unparsed one never reads as "not revealed"
            assert v["stated"] is not None or t.check.components[v["component"]] != "not revealed"

    manifest = {"stages": {"04_probing": {"llm": ledger.snapshot()}}}
    table = report.usage_table(manifest)
    assert table["give_ups"].sum() == len(given_up) and table["injected"].sum() == totals.injected
    html = "".join(report._failures(tmp_path, manifest))
    assert f"{len(given_up)} conversations were given up" in html


def test_a_rerun_retries_the_conversations_given_up(project):  # noqa: F811
    """A stage that records given-up work is run again by the next `pbench run` until none is left."""
    tmp_path, nbs, params, stages = project
    # The last cell's finish() keeps the metrics given first: a stand-in for stage 04 reporting errors.
    _notebook(nbs / "01_one.ipynb", 'p = ctx.path("one.txt")\nn = len(p.read_text()) if p.exists() else 0\n'
                                    'p.write_text("x" * (n + 1))\nfinish = ctx.finish\n'
                                    'ctx.finish = lambda: finish(incomplete=max(0, 2 - n))')
    one = stages[:1]
    go = lambda: run.run(params, notebooks_dir=nbs, all_stages=one, progress=False)  # noqa: E731
    assert [r.status for r in go()] == ["ran"]  # 2 units given up
    assert [r.status for r in go()] == ["ran"]  # 1 left
    assert [r.status for r in go()] == ["ran"]  # none left
    assert [r.status for r in go()] == ["skipped"]
    assert (tmp_path / "out" / "t" / "one.txt").read_text() == "xxx"


# --------------------------------------------------------------------------- damaged run folders


def test_a_damaged_stage_file_names_the_stage_to_rerun(project, capsys):  # noqa: F811
    tmp_path, nbs, params, stages = project
    go = lambda **kw: run.run(params, notebooks_dir=nbs, all_stages=stages, progress=False, **kw)  # noqa: E731
    go()
    one = tmp_path / "out" / "t" / "one.txt"

    one.write_text(one.read_text()[:-1] + "9")  # changed bytes (a truncation or an edit)
    with pytest.raises(run.StageFailed, match=r"stage 01_one .*one.txt is missing or changed.*--stages 01"):
        go(stages=["02"])
    one.unlink()  # deleted
    with pytest.raises(run.StageFailed, match=r"stage 01_one .*one.txt is missing.*--stages 01"):
        go(stages=["02"])

    # The whole pipeline repairs itself: stage 01 runs again, and stage 02 with it only if
    # stage 01's bytes came out different.
    assert [r.status for r in go()] == ["ran", "skipped"]
    assert "01_one: one.txt missing or changed since the stage finished" in capsys.readouterr().out
    (tmp_path / "out" / "t" / "two.txt").write_bytes(b"")
    assert [r.status for r in go()] == ["skipped", "ran"]
    assert (tmp_path / "out" / "t" / "two.txt").read_text() == "1!"


def test_an_unfinished_stage_before_the_ones_asked_for_is_named(project):  # noqa: F811
    tmp_path, nbs, params, stages = project
    with pytest.raises(run.StageFailed, match=r"stage 01_one is needed .* it has not finished; rerun it: "
                                              r"pbench run p.yaml --stages 01"):
        run.run(params, notebooks_dir=nbs, all_stages=stages, progress=False, stages=["02"])


# --------------------------------------------------------------------------- model files


def test_a_model_file_failing_its_checksum_stops_before_anything_runs(tmp_path, capsys):
    gguf = tmp_path / "models" / "mine.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF" + b"\0" * 1000)
    good = hashlib.sha256(gguf.read_bytes()).hexdigest()
    run_dir = tmp_path / "out" / "t"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text("{}\n")

    def params(sha):
        spec = {"provider": "local", "model": "models/mine.gguf", "sha256": sha}  # relative to the file
        p = tmp_path / "p.yaml"
        p.write_text(yaml.safe_dump(minimal_params(outputs_dir=str(tmp_path / "out"), **{"models.prober": spec})))
        return p

    config.verify_model_files(config.load(params(good)))  # the right bytes pass
    assert cli.main(["run", str(params("0" * 64)), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "models.prober" in err and "mine.gguf fails its checksum" in err
    assert (run_dir / "manifest.json").read_text() == "{}\n" and sorted(p.name for p in run_dir.iterdir()) == [
        "manifest.json"]
    assert cli.main(["check", str(params("0" * 64))]) == 2
    gguf.unlink()
    assert cli.main(["run", str(params(good)), "--quiet"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert store.read_json(run_dir / "manifest.json") == {}


def test_a_rerun_that_only_changes_a_report_leaves_later_stages_alone(project):  # noqa: F811
    """Timings and resume counts in a stage's report differ run to run; later stages rerun only
    when the data they read changes."""
    tmp_path, nbs, params, _ = project
    _notebook(nbs / "01_one.ipynb", 'import time\nctx.path("one.txt").write_text(str(ctx.cfg.seed))\n'
                                    'ctx.path("report.txt").write_text(str(time.time()))')
    stages = (run.Stage("01_one", reads=("seed",), outputs=("one.txt", "report.txt"), reports=("report.txt",)),
              run.Stage("02_two", reads=("probing",), outputs=("two.txt",)))
    go = lambda **kw: run.run(params, notebooks_dir=nbs, all_stages=stages, progress=False, **kw)  # noqa: E731
    go()
    assert [r.status for r in go(stages=["01"], force=True)] == ["ran"]
    assert [r.status for r in go()] == ["skipped", "skipped"]
    (tmp_path / "out" / "t" / "one.txt").write_text("other data")
    assert [r.status for r in go()] == ["ran", "skipped"]  # rewritten with the same bytes as before
