from pathlib import Path

import pytest
import yaml

from pbench import cli, config, run
from tests.conftest import minimal_params

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "params").glob("*.yaml")))
def test_shipped_parameter_files_validate(name):
    cfg = config.load(ROOT / "params" / name)
    assert cfg.run_name == name.removesuffix(".yaml")


def test_paper_file_carries_appendix_a_volumes():
    f = config.load(ROOT / "params" / "paper.yaml").footprint
    assert f.private_conversations == (1500, 2000)
    assert f.group_conversations == (300, 500)
    assert f.ai_conversations == (50, 50)
    assert f.blog_posts == (20, 40)
    assert f.purchases == (40, 70)
    assert (f.conversation_noise_ratio, f.blog_noise_ratio, f.attribute_reveal_prob) == (0.3, 0.3, 0.8)


def _write(tmp_path, data) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_misspelled_key_names_its_full_path(tmp_path):
    data = minimal_params(**{"footprint.noise_ratoi": 0.3})
    with pytest.raises(config.ConfigError) as err:
        config.load(_write(tmp_path, data))
    assert "footprint.noise_ratoi: unknown field" in str(err.value)


def test_unknown_key_inside_a_model_list_names_the_index(tmp_path):
    data = minimal_params()
    data["models"]["judge"] = [{"provider": "local", "model": "qwen2.5-0.5b", "temprature": 0}]
    with pytest.raises(config.ConfigError, match=r"models\.judge\.0\.temprature: unknown field"):
        config.load(_write(tmp_path, data))


def test_wrong_type_names_field_and_value(tmp_path):
    with pytest.raises(config.ConfigError, match=r"seed: .*integer.*\(got 'abc'\)"):
        config.load(_write(tmp_path, minimal_params(seed="abc")))


def test_missing_required_field(tmp_path):
    data = minimal_params()
    del data["models"]["prober"]
    with pytest.raises(config.ConfigError, match=r"models\.prober: required field is missing"):
        config.load(_write(tmp_path, data))


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(config.ConfigError, match="no such parameter file"):
        config.load(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("run_name: x\nmodels: [\n")
    with pytest.raises(config.ConfigError, match=r"bad\.yaml: line \d+: invalid YAML"):
        config.load(bad)


def test_ranges_accept_int_or_pair_and_reject_reversed():
    cfg = config.parse(minimal_params(**{"footprint.blog_posts": 3, "footprint.purchases": [2, 5]}))
    assert cfg.footprint.blog_posts == (3, 3)
    assert cfg.footprint.purchases == (2, 5)
    with pytest.raises(config.ConfigError, match=r"footprint\.purchases: .*min <= max"):
        config.parse(minimal_params(**{"footprint.purchases": [5, 2]}))


def test_period_and_fraction_bounds():
    with pytest.raises(config.ConfigError, match=r"period: end .* must come after start"):
        config.parse(minimal_params(period={"start": "2024-05-01", "end": "2024-01-01"}))
    with pytest.raises(config.ConfigError, match=r"footprint\.attribute_reveal_prob"):
        config.parse(minimal_params(**{"footprint.attribute_reveal_prob": 1.5}))


def test_model_spec_rules():
    bad_local = minimal_params()
    bad_local["models"]["generator"] = {"provider": "local", "model": "gpt-4o"}
    with pytest.raises(config.ConfigError, match="neither one of"):
        config.parse(bad_local)
    stray = minimal_params()
    stray["models"]["prober"] = {"provider": "openai", "model": "m", "n_parallel": 4}
    with pytest.raises(config.ConfigError, match="n_parallel only apply to provider 'local'"):
        config.parse(stray)
    clash = minimal_params()
    clash["models"]["judge"] = [{"provider": "local", "model": "qwen2.5-0.5b", "n_parallel": 8}]
    with pytest.raises(config.ConfigError, match="different n_ctx/n_parallel/n_threads"):
        config.parse(clash)


def test_single_model_accepted_where_a_list_is_expected():
    data = minimal_params()
    data["models"]["judge"] = {"provider": "openai", "model": "m", "base_url": "http://x/v1"}
    cfg = config.parse(data)
    assert [s.model for s in cfg.models.judge] == ["m"]


def test_check_command_exit_codes(tmp_path, capsys):
    assert cli.main(["check", str(ROOT / "params" / "tiny.yaml")]) == 0
    bad = _write(tmp_path, minimal_params(**{"probing.max_round": 3}))
    assert cli.main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "probing.max_round: unknown field" in err
    assert cli.main(["check", str(tmp_path / "missing.yaml")]) == 2


BAD_INPUT = {  # case: (overrides, what the one-line error must name)
    "misspelled key": ({"footprint.noise_ratoi": 0.3}, "footprint.noise_ratoi: unknown field"),
    "unknown top-level key": ({"colour": "blue"}, "colour: unknown field"),
    "wrong type": ({"probing.top_k": "five"}, "probing.top_k"),
    "reversed range": ({"footprint.blog_posts": [5, 2]}, "footprint.blog_posts"),
    "fraction above 1": ({"footprint.conversation_noise_ratio": 1.5}, "footprint.conversation_noise_ratio"),
    "more groups than people": ({"community.size": 3, "community.initial_seed": 2, "community.groups": 5},
                                "groups cannot be formed"),
    "seed larger than community": ({"community.size": 3, "community.initial_seed": 5}, "initial_seed (5)"),
    "period reversed": ({"period": {"start": "2024-12-31", "end": "2024-01-01"}}, "period"),
    "unknown provider": ({"models.prober": {"provider": "magic", "model": "x"}}, "models.prober.provider"),
    "unknown embedded model": ({"models.prober": {"provider": "local", "model": "gpt-9"}}, "models.prober"),
    "no judges": ({"models.judge": []}, "models.judge"),
    "zero rounds": ({"probing.max_rounds": 0}, "probing.max_rounds"),
    "unknown strategy": ({"probing.strategies": ["sneaky"]}, "probing.strategies.0"),
    "unknown judging method": ({"judging.method": "vibes"}, "judging.method"),
    "threshold above 1": ({"judging.match_threshold": 1.5}, "judging.match_threshold"),
    "missing personas file": ({"community.personas_path": "no/such/personas.jsonl"}, "personas_path: no such file"),
    "missing dev set": ({"validation.dev_set": "no/such/dev.jsonl"}, "dev_set: no such file"),
    "fault rate above 1": ({"llm.faults": {"rate": 1.3}}, "llm.faults.rate"),
    "unknown fault kind": ({"llm.faults": {"rate": 0.3, "kinds": ["gremlins"]}}, "llm.faults.kinds.0"),
    "checksum on an embedded model": ({"models.prober": {"provider": "local", "model": "qwen2.5-0.5b",
                                                         "sha256": "0" * 64}}, "models.prober"),
    "missing model file": ({"models.prober": {"provider": "local", "model": "no/such/model.gguf"}},
                           "does not exist"),
    "missing API key variable name": ({"models.prober": {"provider": "openai", "model": "m", "api_key_env": ""}},
                                      "models.prober"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_parameter_files_fail_in_one_line_and_touch_no_run_folder(case, tmp_path, capsys):
    """Each malformed file: exit 2, one line naming the problem, and an existing run folder
    with the same run name stays byte for byte as it was."""
    overrides, named = BAD_INPUT[case]
    run_dir = tmp_path / "out" / "t"
    run_dir.mkdir(parents=True)
    (run_dir / "conversations.jsonl").write_text('{"id": "c1"}\n')
    before = {p: p.read_bytes() for p in run_dir.rglob("*")}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(minimal_params(outputs_dir=str(tmp_path / "out"), **overrides)))
    assert cli.main(["run", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and named in err, err
    assert {p: p.read_bytes() for p in run_dir.rglob("*")} == before


def test_input_files_are_relative_to_the_parameter_file(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dev.jsonl").write_text("")
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(minimal_params(**{"validation.dev_set": "data/dev.jsonl"})))
    assert config.load(path).validation.dev_set == (tmp_path / "data" / "dev.jsonl").resolve()


def test_a_shared_cache_is_named_from_where_the_run_starts_as_outputs_dir_is(tmp_path, monkeypatch):
    """A notebook loads the parameters from notebooks/: a relative cache_path read from there
    would open a new, empty cache (params/memory.yaml shares tiny's)."""
    path = _write(tmp_path, minimal_params(**{"llm.cache_path": "outputs/tiny/llm_cache.sqlite"}))
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    monkeypatch.setenv(config.START_DIR, str(tmp_path))  # what pbench run sets for its notebooks
    assert config.load(path).llm.cache_path == tmp_path.resolve() / "outputs" / "tiny" / "llm_cache.sqlite"
    monkeypatch.delenv(config.START_DIR)  # no run: from the working directory, as outputs_dir
    assert config.load(path).llm.cache_path == (tmp_path / "notebooks").resolve() / "outputs/tiny/llm_cache.sqlite"


def test_an_old_embedded_model_name_still_works_with_one_deprecation_line(capsys, monkeypatch):
    monkeypatch.setattr("pbench.config.models._warned", set())
    old = {"provider": "local", "model": "qwen2.5-1.5b"}
    cfg = config.parse(minimal_params(**{"models.generator": old, "models.prober": old}))
    assert cfg.models.generator.model == cfg.models.prober.model == "qwen2.5-coder-1.5b"
    err = capsys.readouterr().err
    assert err.count("deprecated") == 1 and "'qwen2.5-coder-1.5b'" in err


def test_the_dump_of_a_run_with_hosted_models_parses_back():
    cfg = config.load(run.repo_root() / "params" / "paper.yaml")
    again = config.parse(cfg.dump())  # params.resolved.yaml, as pbench estimate --calibrate reads it
    assert again.dump() == cfg.dump() and "n_parallel" not in cfg.dump()["models"]["prober"]


def test_targets_default_to_one_rag_target_per_assistant_model():
    cfg = config.parse(minimal_params())
    assert [(t.label, t.kind, t.prompts) for t in cfg.planned_targets()] == [
        ("qwen2.5-0.5b", "rag", ("baseline", "privacy_aware"))]
    cfg = config.parse(minimal_params(targets=[{"kind": "rag"}, {"kind": "extractive",
                                                                  "defences": ["none", "sensitivity_filter"]}]))
    extractive = cfg.planned_targets()[1]
    assert (extractive.label, extractive.prompts, extractive.defences, extractive.spec.budget_words) == (
        "extractive", ("none",), ("none", "sensitivity_filter"), 60)
    assert cfg.tags_wanted  # the extractive target's sensitivity filter needs the tagger's verdicts


@pytest.mark.parametrize("targets, error", [
    ([{"kind": "mem"}], r"targets\.0\.kind: unknown kind 'mem'; known: 'rag', 'extractive', 'memory', 'http', 'python'"),
    ([{"kind": "rag", "model": "gpt-x"}], r"targets: item 0: model 'gpt-x' is not the label of a models\.assistant"),
    ([{"kind": "extractive", "budget_words": 0}], r"targets\.0\.budget_words: .*greater than 0"),
    ([{"kind": "extractive", "budget_words": -5}], r"targets\.0\.budget_words: .*greater than 0"),
    ([{"kind": "extractive", "defences": ["firewall"]}], r"targets\.0\.defences\.0: "),
    ([{"kind": "rag"}, {"kind": "extractive", "budjet_words": 40}], r"targets\.1\.budjet_words: unknown field"),
    ([{"kind": "extractive"}, {"kind": "extractive"}], r"targets: item 1: target 'extractive' is listed twice"),
    ([], r"targets: .*at least 1 item"),
])
def test_bad_targets_are_one_line_errors_naming_the_field(tmp_path, targets, error):
    with pytest.raises(config.ConfigError, match=error) as err:
        config.load(_write(tmp_path, minimal_params(targets=targets)))
    assert len(str(err.value).splitlines()) == 1
