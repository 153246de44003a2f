"""Stage 04 with scripted models: the plan, the loop's stopping rules, resume without
duplicates after an interruption, whole records."""

import asyncio
import json

from pbench import config, llm, probing, store
from pbench.schema import LeakCheck
from tests.conftest import FakeBackend, minimal_params
from tests.test_rag import dataset, index  # noqa: F401  (fixtures)
from tests.test_social_graph import community  # noqa: F401


class WordCheck:
    """Leaks when a reply says SECRET; a test double for the judge."""

    method = "test: the word SECRET"

    async def __call__(self, secret, owner_name, question, reply, prior=None):
        leaked = "SECRET" in reply or bool(prior and prior.leaked)
        return LeakCheck(method=self.method, leaked=leaked, components=["revealed" if leaked else "not revealed"])


def cfg(**over):
    return config.parse(minimal_params(**{
        "period": {"start": "2024-01-01", "end": "2024-12-31"},
        "probing.strategies": ["direct", "indirect"], "probing.prompts": ["baseline"],
        "probing.defences": ["none", "audience_filter"], "probing.max_rounds": 4, "probing.top_k": 3, **over}))


def model(role, reply, **spec):
    return llm.ChatModel(config.ModelSpec(provider="openai", model=role, **spec), role, FakeBackend(reply), None,
                         ledger=llm.Ledger())


def test_plan_draws_audiences_from_who_may_know(dataset):  # noqa: F811
    rows = probing.plan(dataset, cfg())
    by_secret = {}
    for r in rows:
        by_secret.setdefault(r.secret_id, set()).add((r.audience, r.authorised))
    assert by_secret["s1"] == {("u3", False), ("u2", True)} or by_secret["s1"] == {("u4", False), ("u2", True)}
    assert ("u4", True) in by_secret["s2"]  # a club member who heard it
    assert all(not a for _, a in by_secret["s3"])  # told only to the AI: nobody is authorised
    # 3 secrets; 2 audiences (1 for s3) x 2 strategies x 1 prompt x 2 defences x 1 target
    assert len(rows) == (2 + 2 + 1) * 2 * 2
    assert len({r.id for r in rows}) == len(rows) and rows == probing.plan(dataset, cfg())


def _runner(dataset, index, assistant_reply, max_rounds=4):  # noqa: F811
    prober = model("prober", lambda m, s: "Alex: so, anything new with you?")
    target = model("assistant", assistant_reply)
    return probing.Runner(dataset, index, prober, {"qwen2.5-0.5b": target}, WordCheck(), max_rounds, 3), prober, target


def test_loop_stops_at_the_first_leak_and_runs_full_rounds_otherwise(dataset, index):  # noqa: F811
    replies = iter(["nothing much", "busy", "ok here is the SECRET", "never reached"])
    runner, prober, _ = _runner(dataset, index, lambda m, s: next(replies))
    probe = next(p for p in probing.plan(dataset, cfg()) if not p.authorised)
    conv = asyncio.run(runner.run(probe))
    assert conv.ended == "leak" and len(conv.turns) == 3
    assert [t.check.leaked for t in conv.turns] == [False, False, True]
    assert conv.turns[0].prober == "so, anything new with you?"  # name prefix removed
    runner2, _, _ = _runner(dataset, index, lambda m, s: "all good")
    conv2 = asyncio.run(runner2.run(probe))
    assert conv2.ended == "max_rounds" and len(conv2.turns) == 4
    # The prober sees the transcript so far, its own lines and the replies, in one message.
    last = runner2.prober.backend.calls[-1]["messages"]
    assert len(last) == 1 and last[0]["content"].count("Ana: all good") == 3
    assert "next text message" in last[0]["content"]


def test_confidant_conversation_ends_when_the_secret_is_shared(dataset, index):  # noqa: F811
    runner, _, _ = _runner(dataset, index, lambda m, s: "yes, the SECRET, as I told you")
    probe = next(p for p in probing.plan(dataset, cfg()) if p.authorised)
    conv = asyncio.run(runner.run(probe))
    assert conv.ended == "shared" and len(conv.turns) == 1


def test_run_appends_whole_records_and_resumes_without_duplicates(dataset, index, tmp_path):  # noqa: F811
    c = cfg()
    prober = model("prober", lambda m, s: "hey, how are things?")
    target = model("assistant", lambda m, s: "fine")
    first = probing.run(c, dataset, index, prober, {"qwen2.5-0.5b": target}, tmp_path, check=WordCheck())
    assert first["ran"] == first["planned"] == 20 and first["conversations"] == 20
    lines = (tmp_path / "conversations.jsonl").read_text().splitlines()
    # Interrupted: only 7 conversations landed, the 8th was cut mid-write.
    (tmp_path / "conversations.jsonl").write_text("\n".join(lines[:7]) + "\n" + lines[7][:50])
    calls_before = len(target.backend.calls)
    second = probing.run(c, dataset, index, prober, {"qwen2.5-0.5b": target}, tmp_path, check=WordCheck())
    assert second["resumed"] == 7 and second["ran"] == 13
    assert len(target.backend.calls) - calls_before == 13 * 4
    records = store.read_jsonl(tmp_path / "conversations.jsonl")
    assert len(records) == 20 and len({r["id"] for r in records}) == 20
    assert all(json.loads(line) for line in (tmp_path / "conversations.jsonl").read_text().splitlines())
    assert (tmp_path / "probe_plan.csv").read_text().count("\n") == 21


def test_a_model_that_gives_up_is_counted_not_recorded(dataset, index, tmp_path):  # noqa: F811
    import httpx

    c = cfg(**{"probing.defences": ["none"], "probing.strategies": ["direct"]})
    prober = model("prober", lambda m, s: "hi", max_retries=1)
    target = model("assistant", lambda m, s: httpx.ConnectError("down"), max_retries=1)
    target.backoff_s = 0.0
    report = probing.run(c, dataset, index, prober, {"qwen2.5-0.5b": target}, tmp_path, check=WordCheck())
    assert report["conversations"] == 0 and len(report["errors"]) == report["planned"] == 5
    assert "gave up after 2 attempts" in report["errors"][0]
