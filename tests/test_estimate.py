"""``pbench estimate``: the plan's arithmetic, per-call figures from a calibration, time at each
server's concurrency, cost at given prices; and that how a model is called (concurrency,
prices) never makes a stage rerun."""

import pytest

from pbench import cli, config, estimate, fingerprints, run
from tests.conftest import minimal_params

HOSTED = {"provider": "openai", "model": "gpt-x", "max_concurrency": 8}
CALIBRATION = {
    "source": "test",
    "per": {f"{s}/{r}": {"calls_factor": 1.0, "prompt_per_call": 100.0, "completion_per_call": 10.0,
                         "wall_seconds_per_call": 2.0}
            for s, r in [("01_social_graph", "generator"), ("02_footprint", "generator"), ("04_probing", "prober"),
                         ("04_probing", "assistant"), ("05_scoring", "judge"), ("07_validation", "judge"),
                         ("03_rag_assistant", "assistant")]},
    "structure": {"top_k": 5, "doc_tokens": 50.0, "msg_tokens": 20.0, "mean_turn": 5.5, "mean_rounds": 10.0,
                  "components": 2.0, "completion_per_document": None},
}


def paper_like(**over):
    return config.parse(paper_params(**over))


def paper_params(**over):
    return minimal_params(**{
        "community.size": 10, "footprint.secrets_per_user": 2, "footprint.private_conversations": 20,
        "footprint.group_conversations": 0, "footprint.ai_conversations": 0, "footprint.blog_posts": 0,
        "footprint.purchases": 0, "footprint.docs_per_call": 10,
        "probing.max_rounds": 10, "probing.strategies": ["direct", "indirect"],
        "probing.prompts": ["baseline", "privacy_aware"], "probing.defences": ["none", "audience_filter"],
        "probing.unauthorised_per_secret": 2, "probing.authorised_per_secret": 1, "probing.top_k": 5,
        "probing.conversations_in_flight": 16,
        "models.generator": HOSTED, "models.prober": HOSTED,
        "models.assistant": [{**HOSTED, "model": "a1", "max_concurrency": 4}, {**HOSTED, "model": "a2"}],
        "models.judge": [{**HOSTED, "model": "j1"}, {**HOSTED, "model": "j2"}],
        "validation.dev_cases": 10, "validation.snippets": 4, **over})


def test_conversations_and_calls_follow_the_plan():
    cfg = paper_like()
    est = estimate.estimate(cfg, "p.yaml", CALIBRATION, latency_s=1.0)
    v = est.volumes
    # 20 secrets; outsiders 2 x 2 strategies, a confidant 1 x 1; x 2 prompts x 2 defences x 2 targets
    assert v["secrets"] == 20 and v["conversations"] == 20 * (2 * 2 + 1) * 2 * 2 * 2 == 800
    assert v["confidant_conversations"] == 160 and v["turns"] == 8000
    calls = {(x.stage, x.role, x.model): x.calls for x in est.lines}
    assert calls[("01_social_graph", "generator", "gpt-x")] == 12  # a profile per person, relationships, groups
    assert calls[("02_footprint", "generator", "gpt-x")] == 10 * 2 + 20 * estimate.TELLINGS_PER_SECRET
    # A prober turn each, but an opening once per asker (20 x 5), heard by its 8 cells.
    assert calls[("04_probing", "prober", "gpt-x")] == 8000 - (800 - 20 * (2 * 2 + 1))
    assert calls[("04_probing", "assistant", "a1")] == calls[("04_probing", "assistant", "a2")] == 4000
    # Each conversation, a confidant's twice, and the dev cases that measure the panel (match: the confidant ones).
    dev = sum(r.authorised for r in estimate.dev_rows(cfg))
    assert calls[("05_scoring", "judge", "j1")] == calls[("05_scoring", "judge", "j2")] == 800 + 160 + dev
    assert ("04_probing", "judge", "j1") not in calls  # match: the per-turn check is code
    verdict = estimate.estimate(paper_like(**{"judging.method": "verdict"}), "p.yaml", CALIBRATION)
    calls = {(x.stage, x.role, x.model): x.calls for x in verdict.lines}
    assert calls[("04_probing", "judge", "j1")] == 8000 * 2  # a question per component per turn
    # verdict: the dev cases are asked per component and exchange, in stage 05; stage 07 asks of snippets.
    assert calls[("05_scoring", "judge", "j2")] > 800 + 160 + 10
    assert calls[("07_validation", "judge", "j2")] > 0
    # combined with 5 sampled answers per question (a provider without log-probabilities): 1 + 5 a question.
    sampled = estimate.estimate(paper_like(**{"judging.method": "combined", "judging.samples": 5}), "p.yaml", CALIBRATION)
    calls = {(x.stage, x.role, x.model): x.calls for x in sampled.lines}
    assert calls[("04_probing", "judge", "j1")] == 8000 * 2 * 6


def test_prompts_grow_with_documents_and_the_conversation():
    base = estimate.estimate(paper_like(), "p", CALIBRATION)
    more_docs = estimate.estimate(paper_like(**{"probing.top_k": 8}), "p", CALIBRATION)
    shorter = estimate.estimate(paper_like(**{"probing.max_rounds": 2}), "p", CALIBRATION)

    def per_call(est, role):
        line = next(x for x in est.lines if x.stage == "04_probing" and x.role == role)
        return line.prompt_tokens / line.calls

    assert per_call(base, "assistant") == 100  # the calibration's own setting: its own figure
    assert per_call(more_docs, "assistant") == 100 + 3 * 50
    assert per_call(shorter, "assistant") == 100 - 2 * (5.5 - 1.5) * 20
    assert per_call(shorter, "prober") == 100 - 2 * (5.5 - 1.5) * 20
    capped = estimate.estimate(paper_like(**{"models.prober": {**HOSTED, "max_tokens": 3, "parse_retries": 0}}),
                               "p", CALIBRATION)
    line = next(x for x in capped.lines if x.role == "prober")
    assert line.completion_tokens == line.calls * 3  # never more than max_tokens a call


def test_time_is_set_by_each_servers_concurrency_and_the_turns_in_sequence():
    est = estimate.estimate(paper_like(), "p", CALIBRATION, latency_s=2.0)
    by = {(x.stage, x.role, x.model): x for x in est.lines}
    assert by[("04_probing", "assistant", "a1")].seconds == 4000 * 2.0 / 4
    # prober and generator share gpt-x's server (8 at once); a1 is slowest on its own server
    assert est.stage_seconds["04_probing"] == max(8000 * 2.0 / 8, 4000 * 2.0 / 4, 800 / 16 * 10 * 2 * 2.0)
    slow = estimate.estimate(paper_like(**{"probing.conversations_in_flight": 1}), "p", CALIBRATION, latency_s=2.0)
    assert slow.stage_seconds["04_probing"] == 800 * 10 * 2 * 2.0  # one conversation at a time, turn after turn


def test_cost_at_the_specs_prices_or_the_flags_and_says_what_is_unpriced(capsys):
    priced = {**HOSTED, "price_per_mtok": {"input": 1.0, "output": 10.0}}
    cfg = paper_like(**{"models.generator": priced, "models.prober": priced})
    est = estimate.estimate(cfg, "p", CALIBRATION)
    gen = next(x for x in est.lines if x.role == "generator")
    assert gen.cost == pytest.approx((gen.prompt_tokens * 1.0 + gen.completion_tokens * 10.0) / 1e6)
    assert est.unpriced() == ["a1", "a2", "j1", "j2"] and "no price for a1, a2, j1, j2" in est.table()
    flagged = estimate.estimate(cfg, "p", CALIBRATION, prices={"a1": (0, 0), "a2": (0, 0), "j1": (0, 0), "j2": (1, 1)})
    assert flagged.unpriced() == [] and flagged.cost > est.cost


def test_cost_live_against_batch_where_the_model_has_a_batch_price():
    halved = {**HOSTED, "price_per_mtok": {"input": 1.0, "output": 10.0, "batch": 0.5}}
    live = estimate.estimate(paper_like(**{"models.generator": halved, "models.prober": halved}), "p", CALIBRATION)
    gen = next(x for x in live.lines if x.role == "generator")
    assert gen.cost == gen.live_cost and gen.batch_cost == pytest.approx(gen.live_cost / 2) and not gen.by_batch
    sent = estimate.estimate(paper_like(**{"models.generator": {**halved, "batch": True}, "models.prober": halved}),
                             "p", CALIBRATION)
    gen_sent = next(x for x in sent.lines if x.role == "generator")
    assert gen_sent.by_batch and gen_sent.cost == pytest.approx(gen.live_cost / 2)
    generating = sum(x.live_cost for x in live.lines if x.role == "generator")  # stages 01 and 02
    assert sent.cost == pytest.approx(live.cost - generating / 2)  # only the model set to batch: true
    every_live, batched_where_offered = sent.costs()
    assert every_live == pytest.approx(live.cost)
    assert batched_where_offered == pytest.approx(live.cost - sum(x.live_cost / 2 for x in live.lines
                                                                   if x.batch_cost is not None))
    by_batch = sum(x.calls for x in sent.lines if x.role == "generator")
    assert f"{estimate._n(by_batch)} of {estimate._n(sent.calls)} calls by batch" in sent.table()


def test_the_cli_prints_the_breakdown_and_names_a_bad_price(tmp_path, capsys):
    import yaml

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(paper_params()))
    cal = tmp_path / "cal.json"
    cal.write_text(__import__("json").dumps(CALIBRATION))
    assert cli.main(["estimate", str(path), "--calibration", str(cal), "--price", "a1=0.05,0.40"]) == 0
    out = capsys.readouterr().out
    assert "800 conversations (160 with a confidant), at most 8,000 turns" in out and "04_probing" in out
    with pytest.raises(SystemExit) as exc:
        cli.main(["estimate", str(path), "--price", "a1=cheap"])
    assert exc.value.code == 2 and "write MODEL=IN,OUT" in capsys.readouterr().err


def test_how_a_model_is_called_never_makes_a_stage_rerun(tmp_path):
    stage = run.STAGES[3]  # 04_probing reads every role it calls
    nb = tmp_path / "nb.ipynb"
    nb.write_text("{}")
    first = fingerprints.fingerprint(paper_like(), stage, nb, [])
    calls_differently = paper_like(**{"models.prober": {**HOSTED, "max_concurrency": 64, "timeout_s": 30,
                                                        "price_per_mtok": {"input": 1, "output": 2}}})
    assert fingerprints.fingerprint(calls_differently, stage, nb, []) == first
    answers_differently = paper_like(**{"models.prober": {**HOSTED, "temperature": 0.1}})
    assert fingerprints.fingerprint(answers_differently, stage, nb, []) != first


def test_a_manifests_requests_count_cache_hits_and_not_transient_retries():
    models = {"m1": {"calls": 14, "retries": 4, "give_ups": 0, "cache_hits": 0, "prompt_tokens": 900,
                     "completion_tokens": 100, "reused_prompt_tokens": 600},
              "m2": {"calls": 3, "retries": 0, "give_ups": 1, "cache_hits": 6, "prompt_tokens": 50,
                     "completion_tokens": 5, "cached_prompt_tokens": 300, "cached_completion_tokens": 30}}
    u = estimate.usage(models)
    assert u == {"requests": 10 + 2 + 6, "live": 12, "prompt_tokens": 1250, "completion_tokens": 135,
                 "live_prompt_tokens": 950, "live_completion_tokens": 105,  # the model's own work: no cache hits
                 "live_reused_prompt_tokens": 600}  # of which the server's prefix cache held 600


def local_like(**over):
    return config.parse(minimal_params(**{"probing.max_rounds": 4, "validation.dev_cases": 10, **over}))


def test_local_time_is_the_bound_at_this_machines_rates_times_the_calibration_runs_ratio():
    from pbench import machine
    from pbench.llm import server_of

    cfg = local_like()
    cal = {**CALIBRATION, "rates": {"prompt": 50.0, "generation": 5.0},
           "per": {k: {**v, "bound_factor": 1.5} for k, v in CALIBRATION["per"].items()}}
    key = server_of(cfg.models.generator)

    def at(prompt, generation):
        rates = {key: machine.Rates(prompt=prompt, generation=generation, slots=2, measured_at="t", seconds=3.0)}
        return estimate.estimate(cfg, "t.yaml", cal, rates=rates)

    here = at(100.0, 10.0)
    for line in here.lines:
        assert line.seconds == pytest.approx(1.5 * (line.prompt_tokens / 100.0 + line.completion_tokens / 10.0))
    assert "on this machine (100 prompt tok/s, 10.0 generated tok/s)" in here.one_line()
    assert at(50.0, 5.0).seconds == pytest.approx(2 * here.seconds)  # a machine half as fast takes twice as long
    # Without this machine's rates: the calibration run's seconds per call, and the line says so.
    blind = estimate.estimate(cfg, "t.yaml", cal)
    assert all(line.seconds == pytest.approx(line.calls * 2.0) for line in blind.lines)
    assert "at the calibration run's seconds per call (no rates measured on this machine)" in blind.one_line()
    # A calibration from before rates were kept cannot turn a bound into seconds: the same fallback.
    old = estimate.estimate(cfg, "t.yaml", CALIBRATION, rates={key: machine.Rates(100.0, 10.0, 2, "t", 3.0)})
    assert old.seconds == pytest.approx(blind.seconds) and "the calibration recorded no rates" in old.one_line()
    # Hosted models keep their per-call figure, and no machine is named.
    assert "machine" not in estimate.estimate(paper_like(), "p", CALIBRATION).one_line()


def test_rates_are_measured_once_per_machine_and_setting_and_a_damaged_file_is_measured_again(tmp_path, monkeypatch):
    from pbench import machine

    measured = []

    def fake(spec):
        measured.append(spec.n_parallel)
        return machine.Rates(prompt=120.0, generation=12.0, slots=spec.n_parallel, measured_at="t", seconds=4.0)

    monkeypatch.setattr(machine, "measure", fake)
    path = tmp_path / "rates.json"
    spec = config.ModelSpec(provider="local", model="qwen2.5-0.5b")
    first = machine.rates(spec, path=path)
    assert machine.rates(spec, path=path) == first and measured == [2]  # read back, not measured again
    assert machine.rates(spec.model_copy(update={"n_parallel": 4}), path=path).slots == 4 and measured == [2, 4]
    path.write_text('{"cut sho')
    assert machine.known(spec, path) is None and machine.rates(spec, path=path, measure_now=False) is None
    assert machine.rates(spec, path=path) == first and measured == [2, 4, 2]
    assert machine.rates(config.ModelSpec(**HOSTED), path=path) is None and measured == [2, 4, 2]


def test_a_calibration_from_a_run_on_a_world_keeps_the_earlier_figures_of_the_stages_it_did_not_call():
    earlier = estimate.load_calibration(estimate.CALIBRATION)
    on_world = {"source": "demo run", "rates": None, "structure": {**earlier["structure"], "completion_per_document": None},
                "per": {k: {**v, "prompt_per_call": 1.0} for k, v in earlier["per"].items()
                        if not k.startswith(("01_", "02_"))}}
    got = estimate.merged(on_world, earlier)
    assert set(got["per"]) == set(earlier["per"])
    assert got["per"]["02_footprint/generator"] == earlier["per"]["02_footprint/generator"]
    assert got["per"]["04_probing/assistant"]["prompt_per_call"] == 1.0  # the new run's own figures win
    assert got["structure"]["completion_per_document"] == earlier["structure"]["completion_per_document"]
    assert got["source"] == f"demo run; stages 01, 02 from {earlier['source']}"
    assert estimate.merged(earlier, on_world) == earlier  # nothing missing: nothing taken
