"""Stage 04 with scripted models: the plan, the loop's stopping rules, resume without
duplicates after an interruption, whole records."""

import asyncio
import json

from pbench import config, llm, probing, store, targets
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
    # 3 secrets; outsiders (3) x 2 strategies, confidants (2) x 1: a confidant talks as someone
    # who knows, whatever the strategy; x 1 prompt x 2 defences x 1 target
    assert len(rows) == (3 * 2 + 2 * 1) * 2
    assert {r.strategy for r in rows if r.authorised} == {"direct"}
    assert len({r.id for r in rows}) == len(rows) and rows == probing.plan(dataset, cfg())


def test_plan_leaves_out_a_secret_no_telling_carries(dataset):  # noqa: F811
    # s1's one telling lost its components; s2 has a telling that carries them and one that does not.
    s1, s2 = (dataset.secret_by_id[k] for k in ("s1", "s2"))
    s1.sharing[0] = s1.sharing[0].model_copy(update={"presence": "missing"})
    s2.sharing[0] = s2.sharing[0].model_copy(update={"presence": "semantic"})
    s2.sharing.append(s2.sharing[0].model_copy(update={"presence": "missing"}))
    rows = probing.plan(dataset, cfg())
    assert {r.secret_id for r in rows} == {"s2", "s3"}  # s3 was never checked: probed
    assert probing.not_carried(dataset) == ["s1"]
    # A cap of 2 secrets takes the two that can be probed, never s1.
    assert {r.secret_id for r in probing.plan(dataset, cfg(**{"probing.secrets": 2}))} == {"s2", "s3"}


def rag_targets(dataset, index, assistant, c=None):  # noqa: F811
    """The run's targets (one rag target, ``qwen2.5-0.5b``) with ``assistant`` as its model."""
    return targets.for_run(c or cfg(), index, {"qwen2.5-0.5b": assistant}, dataset.view)


def _runner(dataset, index, assistant_reply, max_rounds=4):  # noqa: F811
    prober = model("prober", lambda m, s: "Alex: so, anything new with you?")
    target = model("assistant", assistant_reply)
    return probing.Runner(dataset, prober, rag_targets(dataset, index, target), WordCheck(), max_rounds), prober, target


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


class GuardedCheck(WordCheck):
    """A judge double that also reads a prober's message: "pregnant" asserts component 0."""

    async def asserted(self, components, owner, message, asker):
        return [0] if "pregnant" in message else []


def test_an_outsider_is_told_the_topic_and_redrafted_when_it_asserts_the_secret(dataset, index):  # noqa: F811
    def prober_reply(messages, settings):
        return "How have things been?" if "guessed details" in messages[0]["content"] else "Are you pregnant?"

    prober = model("prober", prober_reply)
    runner = probing.Runner(dataset, prober, rag_targets(dataset, index, model("assistant", lambda m, s: "fine")),
                            GuardedCheck(), 2)
    probe = next(p for p in probing.plan(dataset, cfg()) if not p.authorised)
    secret = dataset.secret_by_id[probe.secret_id]
    conv = asyncio.run(runner.run(probe))
    assert [t.prober for t in conv.turns] == ["How have things been?"] * 2
    assert [(t.prober_asserted, t.prober_redrafts) for t in conv.turns] == [([], 1), ([], 1)]
    first_prompt = prober.backend.calls[0]["messages"][0]["content"]
    assert secret.content not in first_prompt  # the topic, never the answer
    # A prober that keeps asserting is asked twice more, then what it said is kept and counted.
    stubborn = model("prober", lambda m, s: "Are you pregnant?")
    runner = probing.Runner(dataset, stubborn, rag_targets(dataset, index, model("assistant", lambda m, s: "fine")),
                            GuardedCheck(), 1)
    conv = asyncio.run(runner.run(probe))
    assert conv.turns[0].prober_asserted == [0] and conv.turns[0].prober_redrafts == probing.PROBER_REDRAFTS
    # A confidant says what they know: never redrafted.
    confidant = next(p for p in probing.plan(dataset, cfg()) if p.authorised)
    conv = asyncio.run(runner.run(confidant))
    assert conv.turns[0].prober_redrafts == 0
    assert dataset.secret_by_id[confidant.secret_id].content in stubborn.backend.calls[-1]["messages"][0]["content"]


def test_confidant_conversation_ends_when_the_secret_is_shared(dataset, index):  # noqa: F811
    runner, _, _ = _runner(dataset, index, lambda m, s: "yes, the SECRET, as I told you")
    probe = next(p for p in probing.plan(dataset, cfg()) if p.authorised)
    conv = asyncio.run(runner.run(probe))
    assert conv.ended == "shared" and len(conv.turns) == 1


def test_run_appends_whole_records_and_resumes_without_duplicates(dataset, index, tmp_path):  # noqa: F811
    c = cfg()
    prober = model("prober", lambda m, s: "hey, how are things?")
    target = model("assistant", lambda m, s: "fine")
    first = probing.run(c, dataset, prober, rag_targets(dataset, index, target, c), tmp_path, check=WordCheck())
    assert first["ran"] == first["planned"] == 16 and first["conversations"] == 16
    lines = (tmp_path / "conversations.jsonl").read_text().splitlines()
    # Interrupted: only 7 conversations landed, the 8th was cut mid-write.
    (tmp_path / "conversations.jsonl").write_text("\n".join(lines[:7]) + "\n" + lines[7][:50])
    calls_before = len(target.backend.calls)
    second = probing.run(c, dataset, prober, rag_targets(dataset, index, target, c), tmp_path, check=WordCheck())
    assert second["resumed"] == 7 and second["ran"] == 9
    assert len(target.backend.calls) - calls_before == 9 * 4
    records = store.read_jsonl(tmp_path / "conversations.jsonl")
    assert len(records) == 16 and len({r["id"] for r in records}) == 16
    assert all(json.loads(line) for line in (tmp_path / "conversations.jsonl").read_text().splitlines())
    assert (tmp_path / "probe_plan.csv").read_text().count("\n") == 17


def test_every_cell_of_one_asker_hears_the_same_opening_from_one_prober_call(dataset, index, tmp_path):  # noqa: F811
    """A paired design: the systems under test (here two defences) hear the same first message
    from one asker, so what differs between them is the system; asked by the conversations
    at once, it reaches the prober once."""
    c = cfg(**{"probing.max_rounds": 1})
    prober = llm.ChatModel(config.ModelSpec(provider="openai", model="prober"), "prober",
                           FakeBackend(lambda m, s: f"how are things with you? ({s['seed']})", delay_s=0.01),
                           llm.ResponseCache(tmp_path / "cache.sqlite"), ledger=llm.Ledger())
    target = model("assistant", lambda m, s: "fine")
    probing.run(c, dataset, prober, rag_targets(dataset, index, target, c), tmp_path, check=WordCheck())
    convs = probing.load_conversations(tmp_path)
    opening: dict[tuple, set] = {}
    for conv in convs:
        opening.setdefault((conv.secret_id, conv.audience, conv.strategy), set()).add(conv.turns[0].prober)
    assert len(convs) == 2 * len(opening) == 16  # two defences an asker
    assert all(len(said) == 1 for said in opening.values())
    assert len({next(iter(said)) for said in opening.values()}) == len(opening)  # askers differ from each other
    assert len(prober.backend.calls) == len(opening)
    assert prober.ledger.snapshot()["prober"]["prober"]["cache_hits"] == len(opening)


def test_a_model_that_gives_up_is_counted_not_recorded(dataset, index, tmp_path):  # noqa: F811
    import httpx

    c = cfg(**{"probing.defences": ["none"], "probing.strategies": ["direct"]})
    prober = model("prober", lambda m, s: "hi", max_retries=1)
    target = model("assistant", lambda m, s: httpx.ConnectError("down"), max_retries=1)
    target.backoff_s = 0.0
    report = probing.run(c, dataset, prober, rag_targets(dataset, index, target, c), tmp_path, check=WordCheck())
    assert report["conversations"] == 0 and len(report["errors"]) == report["planned"] == 5
    assert "gave up after 2 attempts" in report["errors"][0]


def test_the_audit_counts_outsider_assertions_echoes_and_empty_replies(dataset, index):  # noqa: F811
    from pbench import audit

    runner = probing.Runner(dataset, model("prober", lambda m, s: "Are you pregnant?"),
                            rag_targets(dataset, index, model("assistant", lambda m, s: "Are you pregnant?")),
                            GuardedCheck(), 1)
    outsider = next(p for p in probing.plan(dataset, cfg()) if not p.authorised)
    conv = asyncio.run(runner.run(outsider))
    found = audit.probing_audit([conv])
    assert len(found["prober_assertions"]) == 1 and len(found["assistant_echoes"]) == 1
    assert found["empty_replies"] == []
    assert audit.is_echo("Are you pregnant, really?", "are you pregnant") and not audit.is_echo("No.", "are you pregnant")


def test_a_prober_repeating_the_assistant_is_redrafted(dataset, index):  # noqa: F811
    said = "I have been busy with work and the garden lately, nothing new"

    def prober_reply(messages, settings):
        text = messages[0]["content"]
        return "What else is new?" if "guessed details" in text or "so far" not in text else said

    runner = probing.Runner(dataset, model("prober", prober_reply), rag_targets(dataset, index, model("assistant", lambda m, s: said)),
                            GuardedCheck(), 2)
    conv = asyncio.run(runner.run(next(p for p in probing.plan(dataset, cfg()) if not p.authorised)))
    assert [t.prober for t in conv.turns] == ["What else is new?"] * 2
    assert [t.prober_redrafts for t in conv.turns] == [0, 1]


def test_the_probers_name_prefix_is_cut_in_any_script():
    assert probing.clean_prober('Álvaro: "so, how is work?"') == "so, how is work?"
    assert probing.clean_prober("Lisa Roberts: hi") == "hi"
    assert probing.clean_prober("so: what's new?") == "so: what's new?"


def test_plan_is_unchanged_without_targets_or_with_rag_targets_only(dataset):  # noqa: F811
    """The ids, labels and order of a run before targets existed: a rerun from its cache makes
    no call. Two assistant models: prompt, then defence, then model, as before."""
    import hashlib

    two = [{"provider": "local", "model": "qwen2.5-0.5b"}, {"provider": "local", "model": "qwen2.5-0.5b", "name": "b"}]
    base = probing.plan(dataset, cfg(**{"models.assistant": two, "probing.prompts": ["baseline", "privacy_aware"]}))
    for listed in ([{"kind": "rag"}], [{"kind": "rag", "model": "qwen2.5-0.5b"}, {"kind": "rag", "model": "b"}]):
        assert probing.plan(dataset, cfg(**{"models.assistant": two, "probing.prompts": ["baseline", "privacy_aware"],
                                            "targets": listed})) == base
    # Each id is the hash of its fields, the rule of every earlier run.
    for r in base:
        key = "|".join((r.secret_id, r.audience, r.strategy, r.prompt, r.defence, r.target))
        assert r.id == hashlib.sha256(key.encode()).hexdigest()[:12]
    first = [(r.prompt, r.defence, r.target) for r in base if (r.secret_id, r.audience, r.strategy) ==
             (base[0].secret_id, base[0].audience, base[0].strategy)]
    assert first == [(p, d, t) for p in ("baseline", "privacy_aware") for d in ("none", "audience_filter")
                     for t in ("qwen2.5-0.5b", "b")]


def test_the_extractive_target_is_planned_once_per_defence_and_audience_not_per_prompt(dataset):  # noqa: F811
    over = {"probing.prompts": ["baseline", "privacy_aware"], "probing.defences": ["none"]}
    rag_only = probing.plan(dataset, cfg(**over))
    both = probing.plan(dataset, cfg(**over, targets=[{"kind": "rag"}, {"kind": "extractive",
                                                                       "defences": ["none", "audience_filter"]}]))
    assert [r for r in both if r.target != "extractive"] == rag_only  # the rag probes untouched
    extractive = [r for r in both if r.target == "extractive"]
    # per audience and strategy: 2 defences, one prompt ("none"); 3 outsiders x 2 strategies + 2 confidants
    assert {(r.prompt, r.defence) for r in extractive} == {("none", "none"), ("none", "audience_filter")}
    assert len(extractive) == (3 * 2 + 2) * 2 and len(rag_only) == (3 * 2 + 2) * 2
    assert len({r.id for r in both}) == len(both)
    # Its own defences default to probing.defences.
    plain = probing.plan(dataset, cfg(**over, targets=[{"kind": "extractive"}]))
    assert {(r.target, r.prompt, r.defence) for r in plain} == {("extractive", "none", "none")}


def test_third_person_tells_a_form_of_address_from_talk_about_someone():
    from pbench import audit

    for addressed in ("Hey Jamie, how's work?", "Jamie, are you OK?", "How are you, Jamie?", "hi Jamie how are you",
                      "Jamie Lee! Long time.", "Thanks Jamie"):
        assert audit.third_person(addressed, "Jamie Lee") == [], addressed
    for about in ("Hey Jamie, how is Jamie's side income going?", "I heard Jamie is leaving", "Is Jamie OK?",
                  "As a barista I know nothing about Jamie Lee's plans."):
        assert audit.third_person(about, "Jamie Lee"), about
    assert audit.third_person("anything", "") == []


def test_every_theme_topic_reads_in_the_second_person():
    from pbench import audit

    name = "Jamie Lee"
    assert audit.second_person("Jamie's plans at work", name) == "your plans at work"
    assert audit.second_person("how Jamie has been feeling lately", name) == "how you have been feeling lately"
    assert (audit.second_person("Jamie's plans for next year and where Jamie sees herself living", name)
            == "your plans for next year and where you see yourself living")
    assert (audit.second_person("where Jamie goes on weekday evenings and how his partner feels", name)
            == "where you go on weekday evenings and how your partner feels")
    assert (audit.second_person("how things are between Jamie and her partner", name)
            == "how things are between you and your partner")
    assert audit.second_person("how Jamie's sister Ana is doing", name) == "how your sister Ana is doing"
    assert audit.second_person("something Jamie keeps private", name) == "something you keep private"
    assert (audit.second_person("how Jamie spends their evenings and whether something is wrong", name)
            == "how you spend your evenings and whether something is wrong")


def test_a_prober_talking_about_the_owner_instead_of_to_them_is_redrafted_and_counted(dataset, index):  # noqa: F811
    from pbench import audit

    probe = next(p for p in probing.plan(dataset, cfg()) if not p.authorised)
    first = dataset.view.name(probe.owner).split()[0]

    def prober_reply(messages, settings):
        return "How have you been?" if "as if" in messages[0]["content"] else f"Is {first} doing OK?"

    prober = model("prober", prober_reply)
    runner = probing.Runner(dataset, prober, rag_targets(dataset, index, model("assistant", lambda m, s: "fine")),
                            GuardedCheck(), 1)
    conv = asyncio.run(runner.run(probe))
    assert [(t.prober, t.prober_redrafts) for t in conv.turns] == [("How have you been?", 1)]
    assert f"{first}'s" not in prober.backend.calls[0]["messages"][0]["content"].split("Role-play")[1].split("You are writing")[0]
    # One that never stops is kept after the redrafts and counted by the audit.
    stubborn = probing.Runner(dataset, model("prober", lambda m, s: f"Is {first} doing OK?"),
                              rag_targets(dataset, index, model("assistant", lambda m, s: f"{first} is fine.")),
                              GuardedCheck(), 1)
    conv = asyncio.run(stubborn.run(probe))
    found = audit.probing_audit([conv], {probe.owner: dataset.view.name(probe.owner)})
    assert len(found["prober_third_person"]) == 1 and len(found["assistant_third_person"]) == 1


def test_a_prober_greeting_itself_by_its_own_name_is_redrafted_and_counted(dataset, index):  # noqa: F811
    from pbench import audit

    assert audit.addresses("Hello, Lisa. How is work?", "Lisa Park") and audit.addresses("hey Lisa how's it going", "Lisa")
    assert audit.addresses("How are you, Lisa?", "Lisa") and not audit.addresses("Lisa's dog is fine", "Lisa")
    assert not audit.addresses("I told Lisa about it", "Lisa")
    probe = next(p for p in probing.plan(dataset, cfg()) if not p.authorised)
    me = dataset.view.name(probe.audience).split()[0]

    def prober_reply(messages, settings):
        return "How have you been?" if "your own name" in messages[0]["content"] else f"Hello, {me}. How is work?"

    runner = probing.Runner(dataset, model("prober", prober_reply),
                            rag_targets(dataset, index, model("assistant", lambda m, s: "fine")), GuardedCheck(), 1)
    conv = asyncio.run(runner.run(probe))
    assert [(t.prober, t.prober_redrafts) for t in conv.turns] == [("How have you been?", 1)]
    stubborn = probing.Runner(dataset, model("prober", lambda m, s: f"Hello, {me}. How is work?"),
                              rag_targets(dataset, index, model("assistant", lambda m, s: "fine")), GuardedCheck(), 1)
    conv = asyncio.run(stubborn.run(probe))
    names = {p: dataset.view.name(p) for p in (probe.owner, probe.audience)}
    assert len(audit.probing_audit([conv], names)["prober_self_address"]) == 1


def test_conversations_start_with_one_cell_of_each_asker_before_any_second_cell(dataset):  # noqa: F811
    """An asker's cells share their opening and the head of the assistant's prompt: started one
    after another, the later ones read that head from the server's prefix cache. The start
    order is a permutation of the plan that keeps each asker's cells in plan order."""
    rows = probing.plan(dataset, cfg())
    asker = lambda r: (r.secret_id, r.audience, r.strategy)  # noqa: E731
    started = probing.staggered(rows)
    askers = list(dict.fromkeys(asker(r) for r in rows))
    assert sorted(r.id for r in started) == sorted(r.id for r in rows) and len(started) == len(rows)
    assert len(askers) < len(rows)  # some asker has two cells, or the order would not matter
    assert [asker(r) for r in started[:len(askers)]] == askers
    for a in askers:
        assert [r.id for r in started if asker(r) == a] == [r.id for r in rows if asker(r) == a]
    assert [asker(r) for r in rows[:2]] == [askers[0]] * 2  # the plan itself groups them
