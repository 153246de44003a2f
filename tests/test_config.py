from pathlib import Path

import pytest
import yaml

from pbench import cli, config
from tests.conftest import minimal_params

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["tiny.yaml", "paper.yaml"])
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
