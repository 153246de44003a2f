"""The papermill runner on small notebooks made in code."""

import json

import nbformat
import pytest
import yaml

from pbench import cli, fingerprints, run, store
from tests.conftest import minimal_params


def _notebook(path, body: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('params_path = "../params/tiny.yaml"\nrun_dir = "../outputs/tiny"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [
        params,
        nbformat.v4.new_code_cell(f"import pbench.stage\nctx = pbench.stage.stage_context({path.stem!r}, params_path, run_dir)"),
        nbformat.v4.new_code_cell(body),
        nbformat.v4.new_code_cell("ctx.finish()"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture
def project(tmp_path):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    _notebook(nbs / "01_one.ipynb", 'ctx.path("one.txt").write_text(str(ctx.cfg.seed))')
    _notebook(nbs / "02_two.ipynb", 'ctx.path("two.txt").write_text(ctx.path("one.txt").read_text() + "!")')
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump(minimal_params(outputs_dir=str(tmp_path / "out"))))
    stages = (
        run.Stage("01_one", reads=("seed",), outputs=("one.txt",)),
        run.Stage("02_two", reads=("probing",), outputs=("two.txt",)),
    )
    return tmp_path, nbs, params, stages


def _run(project, **kw):
    tmp_path, nbs, params, stages = project
    return run.run(params, notebooks_dir=nbs, all_stages=stages, progress=False, **kw)


@pytest.mark.slow
def test_runs_notebooks_in_order_then_resumes_and_reruns_on_change(project, capsys, monkeypatch):
    tmp_path, nbs, params, stages = project
    out = tmp_path / "out" / "t"
    assert [r.status for r in _run(project)] == ["ran", "ran"]
    assert (out / "two.txt").read_text() == "1!"
    assert (out / "notebooks" / "01_one.ipynb").is_file()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stages"]["02_two"]["status"] == "ran" and manifest["run_name"] == "t"
    assert manifest["models"]["generator"]["model"] == "qwen2.5-0.5b"
    assert yaml.safe_load((out / "params.resolved.yaml").read_text())["seed"] == 1

    assert [r.status for r in _run(project)] == ["skipped", "skipped"]

    # A parameter that only stage 02 reads reruns stage 02 alone.
    params.write_text(yaml.safe_dump(minimal_params(outputs_dir=str(tmp_path / "out"), **{"probing.top_k": 3})))
    assert [r.status for r in _run(project)] == ["skipped", "ran"]
    assert "02_two: its parameters changed since it finished; running it again" in capsys.readouterr().out
    # Editing the pbench code a stage runs reruns it, and the runner says that is why.
    digest = fingerprints.sources.digest
    monkeypatch.setattr(fingerprints.sources, "digest", lambda nb, **kw: digest(nb, **kw) + "edited")
    assert [r.status for r in _run(project)] == ["ran", "ran"]
    said = capsys.readouterr().out
    assert "01_one: the pbench code it runs changed since it finished" in said
    assert "02_two: the pbench code it runs and a stage before it changed since it finished" in said
    monkeypatch.undo()
    assert [r.status for r in _run(project)] == ["ran", "ran"]
    # A parameter stage 01 reads reruns both (02 stands on 01).
    params.write_text(yaml.safe_dump(minimal_params(outputs_dir=str(tmp_path / "out"), seed=2, **{"probing.top_k": 3})))
    assert [r.status for r in _run(project)] == ["ran", "ran"]
    assert (out / "two.txt").read_text() == "2!"
    # A deleted output reruns its stage; --force reruns all; --stages picks one.
    (out / "one.txt").unlink()
    assert [r.status for r in _run(project, stages=["01"])] == ["ran"]
    assert [r.status for r in _run(project, force=True)] == ["ran", "ran"]


@pytest.mark.slow
def test_a_failing_stage_names_notebook_and_cell_and_keeps_earlier_outputs(project, capsys):
    tmp_path, nbs, params, stages = project
    _run(project)
    out = tmp_path / "out" / "t"
    before = (out / "one.txt").read_text()
    _notebook(nbs / "02_two.ipynb", 'raise ValueError("bad record d-17")')
    with pytest.raises(run.StageFailed, match=r"stage 02_two failed in cell \d+ \(ValueError: bad record d-17\)"):
        _run(project)
    assert (out / "one.txt").read_text() == before
    assert store.read_json(out / "stages" / "01_one.json")["fingerprint"]
    assert not (out / "stages" / "02_two.json").exists()
    assert json.loads((out / "manifest.json").read_text())["stages"]["02_two"]["status"] == "failed"


def test_unknown_stage_and_bad_params_fail_before_running(project, tmp_path):
    _, nbs, params, stages = project
    with pytest.raises(Exception, match="unknown stage '09'"):
        _run(project, stages=["09"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(minimal_params(oops=1)))
    assert cli.main(["run", str(bad)]) == 2
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_partial_outputs_resume_only_under_the_same_parameters_and_force_recomputes(project, capsys):
    tmp_path, nbs, params, _ = project
    _notebook(nbs / "01_one.ipynb", 'p = ctx.path("part.txt")\nold = p.read_text() if p.exists() else ""\n'
                                    'p.write_text(old + "x")\nctx.path("one.txt").write_text(p.read_text())')
    stages = (run.Stage("01_one", reads=("seed",), outputs=("one.txt",), partial=("part.txt",)),)
    out = tmp_path / "out" / "t"
    go = lambda **kw: run.run(params, notebooks_dir=nbs, all_stages=stages, progress=False, **kw)  # noqa: E731
    go()
    (out / "stages" / "01_one.json").unlink()  # as if killed before it finished
    go()  # same parameters: resumes from part.txt
    assert (out / "one.txt").read_text() == "xx"
    go(force=True)  # --force recomputes from scratch, and says so; the partial output is kept aside
    assert (out / "one.txt").read_text() == "x"
    assert "01_one: --force: recomputing from scratch" in capsys.readouterr().out
    assert [p.read_text() for p in (out / "stale").glob("01_one-*/part.txt")] == ["xx"]
    params.write_text(yaml.safe_dump(minimal_params(outputs_dir=str(tmp_path / "out"), seed=9)))
    (out / "stages" / "01_one.json").unlink()
    go()  # other parameters: starts afresh; the old partial output is kept aside, not deleted
    assert (out / "one.txt").read_text() == "x"
    stale = sorted(p.read_text() for p in (out / "stale").glob("01_one-*/part.txt"))
    assert stale == ["x", "xx"]


def test_a_stage_prints_its_own_output_and_no_third_party_noise(tmp_path, capfd):
    """The kernel is started with Curve keys (no "over TCP without encryption" warning), tqdm's
    widget warning is ignored, and what the notebook itself writes to stderr still shows."""
    nb = tmp_path / "01_noise.ipynb"
    _notebook(nb, "import sys\nimport tqdm.auto\nfrom tqdm.auto import tqdm as bar\n"
                  "for _ in bar(range(3), desc='our bar'):\n    pass\nprint('our error', file=sys.stderr)")
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump(minimal_params(outputs_dir=str(tmp_path / "out"))))
    run._execute(nb, tmp_path / "out.ipynb", params, tmp_path / "run", progress=True)
    err = capfd.readouterr().err
    assert "our error" in err and "our bar" in err
    assert "without encryption" not in err and "IProgress" not in err and "WARNING" not in err
