"""The code in a stage's fingerprint (pbench.sources): editing a module a stage runs reruns
that stage and those after it, and nothing else."""

import shutil

import pytest

from pbench import run, sources
from tests.test_run import _notebook, _run, project  # noqa: F401  (fixture)

NOTEBOOKS = run.default_notebooks_dir()


def test_imports_are_read_from_the_text_functions_included():
    text = "from pbench import store, world as w\nimport pbench.llm.chat\ndef f():\n    from pbench.judging import votes\n"
    assert sources.imports_in(text) == {"pbench.store", "pbench.world", "pbench.llm.chat", "pbench.judging"}


def test_a_stage_runs_what_its_notebook_imports_and_what_those_import():
    judge = sources.stage_modules(NOTEBOOKS / "05_scoring.ipynb")
    assert {"pbench.judging", "pbench.judging.votes", "pbench.metrics.rates", "pbench.stage"} <= set(judge)
    graph = sources.stage_modules(NOTEBOOKS / "01_social_graph.ipynb")
    assert "pbench.community.repair" in graph and "pbench.judging.votes" not in graph
    # The kinds of target are loaded by name, and run in stage 04 only: its code takes in the subpackage.
    probe = sources.stage_modules(NOTEBOOKS / "04_probing.ipynb")
    assert {"pbench.targets.rag", "pbench.targets.extractive", "pbench.memory"} <= set(probe)
    assert "pbench.targets.rag" not in graph and "pbench.targets.rag" not in judge
    # Notebooks open their stage with pbench.stage: the runner and what it imports are no stage's code.
    assert not {"pbench.run", "pbench.cli", "pbench.estimate"} & (set(judge) | set(graph))


@pytest.fixture
def copied(tmp_path):
    copy = tmp_path / "pkg" / "pbench"
    shutil.copytree(sources.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_the_digest_follows_the_bytes_of_the_code_a_stage_runs(copied):
    scoring, graph = NOTEBOOKS / "05_scoring.ipynb", NOTEBOOKS / "01_social_graph.ipynb"
    before = {nb: sources.digest(nb, copied) for nb in (scoring, graph)}
    assert before[scoring] == sources.digest(scoring)  # where the package lies is not part of it
    votes = copied / "judging" / "votes.py"
    votes.write_text(votes.read_text() + "\nTIE_BREAK = 'changed'\n")
    assert sources.digest(scoring, copied) != before[scoring] and sources.digest(graph, copied) == before[graph]
    prompt = next((copied / "prompts").rglob("*.j2"))  # a prompt file is code every stage reads
    prompt.write_text(prompt.read_text() + " ")
    changed = sources.digest(graph, copied)
    assert changed != before[graph]
    (copied / "data" / "calibration.json").write_text("{}")  # the estimate's rates: no stage reads them
    assert sources.digest(graph, copied) == changed


def test_a_file_a_parameter_names_is_read_by_its_stages_only(copied, tmp_path):
    from pbench import config, fingerprints
    from tests.conftest import minimal_params

    dev = (copied / "data" / "judge_dev.jsonl")  # the shipped dev set is no stage's code ...
    graph = NOTEBOOKS / "01_social_graph.ipynb"
    before = sources.digest(graph, copied, fingerprints.PACKAGE_FILES)
    dev.write_text(dev.read_text() + "\n")
    assert sources.digest(graph, copied, fingerprints.PACKAGE_FILES) == before
    mine = tmp_path / "dev.jsonl"  # ... it is a file stages 05 and 07 read, through validation.dev_set
    mine.write_bytes(dev.read_bytes())
    cfg = config.parse(minimal_params(**{"validation.dev_set": str(mine)}))
    stages = {s.name: s for s in run.STAGES}
    fp = {n: fingerprints.fingerprint(cfg, stages[n], NOTEBOOKS / f"{n}.ipynb", []) for n in stages}
    mine.write_text(mine.read_text() + '{"changed": true}\n')
    now = {n: fingerprints.fingerprint(cfg, stages[n], NOTEBOOKS / f"{n}.ipynb", []) for n in stages}
    assert [n for n in stages if now[n] != fp[n]] == ["05_scoring", "07_validation"]
    assert fingerprints.named_file(config.parse(minimal_params()), "community.personas_path").name == "personas.jsonl"


@pytest.mark.slow
def test_editing_a_module_a_stage_imports_reruns_it_and_the_stages_after(project, copied, monkeypatch):  # noqa: F811
    tmp_path, nbs, params, stages = project
    _notebook(nbs / "02_two.ipynb", 'from pbench import tellings\nctx.path("two.txt").write_text("2")')
    monkeypatch.setattr(sources, "PACKAGE", copied)
    assert [r.status for r in _run(project)] == ["ran", "ran"]
    assert [r.status for r in _run(project)] == ["skipped", "skipped"]
    tellings = copied / "tellings.py"
    tellings.write_text(tellings.read_text() + "\n# a changed rule\n")
    assert [r.status for r in _run(project)] == ["skipped", "ran"]
    runner = copied / "run.py"  # the runner is no stage's code ...
    runner.write_text(runner.read_text() + "\n# a changed runner\n")
    assert [r.status for r in _run(project)] == ["skipped", "skipped"]
    opened = copied / "stage.py"  # ... but what every notebook opens its stage with is every stage's
    opened.write_text(opened.read_text() + "\n# a changed context\n")
    assert [r.status for r in _run(project)] == ["ran", "ran"]


def test_fits_and_calibrations_are_the_users_own_read_before_the_packages(tmp_path, monkeypatch):
    from pbench import estimate, judgefit, judging, store

    monkeypatch.setenv(store.HOME_ENV, str(tmp_path / "home"))
    shipped, package_fit = judging.load_fit(), (sources.PACKAGE / "data" / judging.FIT_PATH).read_bytes()
    scoring = NOTEBOOKS / "05_scoring.ipynb"
    before = sources.digest(scoring)
    written = judgefit.write({**(shipped or {}), "cut": 0.123})  # pbench judge --fit
    assert written == tmp_path / "home" / judging.FIT_PATH and judging.load_fit()["cut"] == 0.123
    assert (sources.PACKAGE / "data" / judging.FIT_PATH).read_bytes() == package_fit  # the package untouched
    assert sources.digest(scoring) != before  # verdicts may change: the stages that judge rerun
    assert estimate.load_calibration()["per"]  # none of the user's: the package's
    store.write_json(tmp_path / "home" / "calibration.json", {"per": {"x": 1}, "source": "mine"})
    assert estimate.load_calibration()["source"] == "mine"
