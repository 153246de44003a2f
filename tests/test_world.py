"""Frozen worlds (pbench.world): the shipped pack verifies, a run reads stages 01-02 from it,
and every way a pack or a parameter file can be wrong is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from pbench import cli, config, run, store, world
from tests.conftest import minimal_params

SHIPPED = Path(__file__).resolve().parent.parent / "worlds" / "tiny-v1"


@pytest.fixture
def pack(tmp_path) -> Path:
    copy = tmp_path / "tiny-v1"
    shutil.copytree(SHIPPED, copy)
    return copy


def _params(tmp_path: Path, pack: Path, **overrides) -> Path:
    data = minimal_params(**overrides)
    del data["seed"], data["models"]["generator"]  # the world fixes them; a file naming it may leave them out
    data.update(world=str(pack), outputs_dir=str(tmp_path / "out"))
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_shipped_world_verifies_and_its_id_is_its_content():
    w = world.verify(SHIPPED)
    assert w.id == world.world_id(SHIPPED) and w.id.startswith("w-")
    assert w.manifest["schema_version"] in world.READS
    assert set(w.manifest["files"]) == set(world.WORLD_FILES)
    assert w.id in (SHIPPED / "DATASHEET.md").read_text()  # the datasheet names the pack it belongs to
    assert w.manifest["generator"]["sha256"]  # the model that wrote it, by its file's hash


def test_the_hugging_face_layout_holds_every_record_and_a_dataset_card():
    import pandas as pd

    docs = pd.read_parquet(SHIPPED / "hf" / "documents.parquet")
    assert list(docs["id"]) == [d["id"] for d in store.read_jsonl(SHIPPED / "documents.jsonl")]
    sharing = pd.read_parquet(SHIPPED / "hf" / "sharing.parquet")
    assert len(sharing) == sum(len(s["sharing"]) for s in store.read_jsonl(SHIPPED / "secrets.jsonl"))
    card = (SHIPPED / "hf" / "README.md").read_text()
    header = yaml.safe_load(card.split("---\n")[1])
    assert {c["config_name"] for c in header["configs"]} == set(world.tables(SHIPPED))
    assert world.verify(SHIPPED).id in card


def test_a_parameter_file_naming_a_world_takes_its_stage_01_02_fields(tmp_path, pack):
    cfg = config.load(_params(tmp_path, pack))
    fixed = world.verify(pack).manifest["params"]
    assert cfg.seed == fixed["seed"]
    assert cfg.dump()["community"] == fixed["community"] and cfg.dump()["footprint"] == fixed["footprint"]
    assert cfg.models.generator.model == fixed["models.generator"]["model"]
    assert cfg.world == pack.resolve()


@pytest.mark.parametrize(("override", "field"), [
    ({"community.size": 9}, "community.size"),
    ({"seed": 8}, "seed"),
    ({"footprint.docs_per_call": 2}, "footprint.docs_per_call"),
])
def test_a_field_the_world_fixes_otherwise_is_refused_by_name(tmp_path, pack, capsys, override, field):
    path = _params(tmp_path, pack)
    data = yaml.safe_load(path.read_text())
    for dotted, value in override.items():
        node = data
        *head, last = dotted.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f": {field}: the world tiny 1" in err


def test_how_the_generator_is_called_is_the_files_own_choice(tmp_path, pack):
    path = _params(tmp_path, pack)
    data = yaml.safe_load(path.read_text())
    spec = world.verify(pack).manifest["params"]["models.generator"]
    data["models"]["generator"] = {**spec, "n_parallel": 1, "timeout_s": 30}
    path.write_text(yaml.safe_dump(data))
    assert config.load(path).models.generator.n_parallel == 1


@pytest.mark.parametrize(("damage", "named"), [
    (lambda p: (p / "documents.jsonl").write_text((p / "documents.jsonl").read_text().replace("a", "e", 1)),
     "documents.jsonl: sha256 does not match"),
    (lambda p: (p / "secrets.jsonl").unlink(), "secrets.jsonl: missing from the world"),
    (lambda p: store.write_json(p / "world.json", {**json.loads((p / "world.json").read_text()), "schema_version": 99}),
     "schema version 99; this pbench reads 1"),
    (lambda p: (p / "world.json").unlink(), "world.json: missing; not a packed world"),
    (lambda p: (p / "hf" / "people.parquet").write_bytes(b"PAR1"), "people.parquet: sha256 does not match"),
])
def test_a_damaged_world_is_refused_in_one_line_and_nothing_is_written(tmp_path, pack, capsys, damage, named):
    damage(pack)
    assert cli.main(["world", "verify", str(pack)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err
    path = _params(tmp_path, pack)
    assert cli.main(["run", str(path), "--quiet"]) == 2
    assert named in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_stages_01_02_are_read_from_the_world_then_skipped(tmp_path, pack):
    path = _params(tmp_path, pack)
    first = run.run(path, all_stages=run.STAGES[:2], progress=False)
    assert [r.status for r in first] == ["world", "world"]
    run_dir = tmp_path / "out" / "t"
    for f in world.WORLD_FILES:
        assert (run_dir / f).read_bytes() == (pack / f).read_bytes()
    assert world.world_id(run_dir) == world.verify(pack).id
    manifest = store.read_json(run_dir / "manifest.json")
    assert manifest["world_id"] == world.verify(pack).id and manifest["world"] == "tiny 1 (" + manifest["world_id"] + ")"
    assert [r.status for r in run.run(path, all_stages=run.STAGES[:2], progress=False)] == ["skipped", "skipped"]


def test_a_world_is_never_read_into_a_folder_that_holds_another(tmp_path, pack, capsys):
    path = _params(tmp_path, pack)
    run_dir = tmp_path / "out" / "t"
    run_dir.mkdir(parents=True)
    for f in world.CONTENT:
        (run_dir / f).write_text("{}\n")
    before = {f: (run_dir / f).read_bytes() for f in world.CONTENT}
    assert cli.main(["run", str(path), "--quiet"]) == 2
    assert "holds another world" in capsys.readouterr().err
    assert {f: (run_dir / f).read_bytes() for f in world.CONTENT} == before
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(world.CONTENT)


def test_pack_then_verify_round_trips_a_finished_run(tmp_path, pack):
    path = _params(tmp_path, pack)
    run.run(path, all_stages=run.STAGES[:2], progress=False)
    out = tmp_path / "again"
    assert cli.main(["world", "pack", str(tmp_path / "out" / "t"), "--out", str(out), "--name", "again",
                     "--version", "2"]) == 0
    again = world.verify(out)
    assert again.id == world.verify(pack).id  # the same content, the same world, whatever its name
    assert again.label == f"again 2 ({again.id})"
    assert cli.main(["world", "pack", str(tmp_path / "out" / "t"), "--out", str(out)]) == 2  # never over a pack


def test_pack_refuses_a_run_whose_world_is_unfinished(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    assert cli.main(["world", "pack", str(tmp_path / "run"), "--out", str(tmp_path / "w")]) == 2
    assert "stage 01_social_graph has not finished" in capsys.readouterr().err and not (tmp_path / "w").exists()


def test_a_figure_carries_its_folders_world_id_but_stages_01_02_never_a_stale_one(tmp_path, pack):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pbench import figures
    folder = tmp_path / "run"
    folder.mkdir()
    for name in world.CONTENT:  # an earlier run's world, left in the folder that stage 01 now redraws
        shutil.copy(pack / name, folder / name)
    ident = world.verify(pack).id

    def words(stamp: bool) -> list[str]:
        fig = figures.save(plt.figure(), folder / "figures" / "f", stamp=stamp)
        plt.close(fig)
        return [t.get_text() for t in fig.texts]

    assert words(True) == [f"world {ident}"] and words(False) == []


def test_the_estimate_of_a_run_on_a_world_counts_what_the_world_holds(tmp_path, pack):
    from pbench import estimate

    cfg = config.load(_params(tmp_path, pack))
    v = estimate.volumes(cfg)
    held = world.tables(pack)
    assert (v["users"], v["documents"], v["secrets"], v["tellings"]) == (
        len(held["people"]), len(held["documents"]), len(held["secrets"]), len(held["sharing"]))
    assert v["probed_secrets"] == min(len(held["secrets"]), cfg.probing.secrets or len(held["secrets"]))


def test_check_and_estimate_read_the_demos_file_on_its_world_as_run_does(capsys, monkeypatch):
    """`make demo` runs params/tiny.yaml with --world worlds/tiny-v1; its estimate and check take
    the same flag and count what the world holds, with no stage 01-02 calls."""
    monkeypatch.setenv(config.WORLD_ENV, "")  # restored after the test: --world sets it
    tiny, shipped = str(run.repo_root() / "params" / "tiny.yaml"), str(run.repo_root() / "worlds" / "tiny-v1")
    assert cli.main(["check", tiny, "--world", shipped]) == 0
    assert cli.main(["estimate", tiny, "--world", shipped, "--no-measure"]) == 0
    out = capsys.readouterr().out
    held = world.tables(shipped)
    assert f"{len(held['people'])} people, {len(held['documents'])} documents" in out
    assert "01_social_graph" not in out and "02_footprint" not in out and "04_probing" in out


def test_the_worlds_generator_is_served_as_the_file_serves_its_model_in_other_roles(tmp_path, pack):
    served = {"provider": "local", "model": "qwen2.5-coder-1.5b", "n_parallel": 4, "n_ctx": 16384}
    cfg = config.load(_params(tmp_path, pack, **{"models.assistant": [served]}))  # one server for both
    assert (cfg.models.generator.model, cfg.models.generator.n_parallel, cfg.models.generator.n_ctx) == \
        ("qwen2.5-coder-1.5b", 4, 16384)
