"""The files stages hand each other are written by the package, not put together in notebook
cells: judge_error.json and scoring.json (stage 05), validation.json (07), and the count of
work stage 04 gave up on, which makes the next run try the stage again."""

import json
import math

import pandas as pd

from pbench import agreement, correction, judging, probing, stage, validation


def test_judge_error_json_is_read_back_as_it_was_written(tmp_path):
    errors = {"leak": correction.from_labels("leak", "12 dev cases", [("a", "leak", "leak"), ("b", "no_leak", "leak"),
                                                                       ("c", "no_leak", "no_leak")])}
    path = correction.save(tmp_path, errors, ["disclosure judge: no positive case"])
    assert path == tmp_path / "judge_error.json"
    back = correction.load(tmp_path)
    assert back["leak"].to_json() == errors["leak"].to_json() and back["leak"].source == "12 dev cases"
    assert json.loads(path.read_text())["passed_over"] == ["disclosure judge: no positive case"]


def test_scoring_json_counts_verdicts_votes_and_what_the_dev_set_cost(tmp_path):
    rows = [{"verdict": "leak", "unparsed_votes": 1}, {"verdict": "no_leak", "unparsed_votes": 0},
            {"verdict": "no_leak"}, {"verdict": "unscored", "unscored_reason": "gave up after retries"}]
    counts = pd.DataFrame({"count": {"conversations": 4, "unscored": 1}})
    report = judging.write_scoring(tmp_path, rows, {"calls": 9, "unparsed": 2}, 5,
                                   {"seconds": 12.345, "calls": 7}, counts)
    assert json.loads((tmp_path / "scoring.json").read_text()) == report
    assert report["verdicts"] == {"no_leak": 2, "leak": 1, "unscored": 1}  # most common first
    assert (report["unparsed_votes"], report["pc_unparsed"], report["judge_calls_stage05"]) == (1, 2, 9)
    assert (report["dev_cases"], report["dev_seconds"], report["dev_calls"]) == (5, 12.3, 7)
    assert report["counts"] == {"conversations": 4, "unscored": 1}


def test_validation_json_keeps_undefined_figures_as_null_and_the_human_section(tmp_path):
    agree = pd.DataFrame([{"task": "leak", "judge": "panel", "agreement": 0.9, "agreement_lo": 0.8, "agreement_hi": 0.95,
                           "recall": math.nan, "precision": 1.0, "false_positive_rate": 0.0, "false_positives": 0,
                           "missed": 0, "scored": 10}])
    by_cat = pd.DataFrame([{"task": "leak", "category": "direct", "agreement": 1.0, "agreement_lo": 0.7,
                            "agreement_hi": 1.0, "cases": 4}])
    by_family = pd.DataFrame([{"task": "leak", "family": "chat", "agreement": 1.0, "agreement_lo": 0.7,
                               "agreement_hi": 1.0, "cases": 4, "false_positives": 0, "missed": 0}])
    report = validation.write_report(tmp_path, 10, 3.21, 5, "heldout", agree, by_cat, by_family, pd.DataFrame(),
                                     {"calls": 3, "unparsed": 0}, None)
    saved = json.loads((tmp_path / "validation.json").read_text())
    assert saved == {**report, agreement.SECTION: None}
    assert saved["dev_agreement"]["leak"]["panel"]["recall"] is None  # NaN is no number: null
    assert saved["dev_by_category"] == {"leak/direct": {"agreement": 1.0, "agreement_lo": 0.7, "agreement_hi": 1.0,
                                                        "cases": 4}}
    assert saved["dev_calls_per_case"] == 0.5 and saved["snippets"] == {}
    # pbench agreement later fills the human section and leaves the rest as it was.
    agreement.record(tmp_path, [], {"labelled": 0})
    assert json.loads((tmp_path / "validation.json").read_text()) == {**report, agreement.SECTION: {"labelled": 0}}


def test_stage_04_counts_the_conversations_it_gave_up_on_and_the_runner_retries_while_any(tmp_path):
    report = {"errors": ["c1: prober failed", "c2: prober failed"], "ended": {"target_failed": 1}}
    assert probing.given_up(report) == 3
    ctx = stage.StageContext("04_probing", cfg=None, run_dir=tmp_path)
    assert ctx.finish(incomplete=3, turns=4)["metrics"] == {"turns": 4, stage.INCOMPLETE: 3}
    assert ctx.finish(incomplete=0, turns=4)["metrics"] == {"turns": 4}
