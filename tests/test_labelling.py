"""People's labels of a run: the stratified sample, the paper's rule, the agreement figures
against hand counts, bad labels files (one line, exit 2, the run folder unchanged), and the
labelling page driven in headless Chromium as a person would, its export read back."""

import json
import math
import time
from pathlib import Path

import pytest

from bench.report_load import READY, Browser
from pbench import agreement, cli, config, correction, estimate, fingerprints, footprint, labelling, probing, run, store
from pbench.judging import NOT_REVEALED as NOT
from pbench.judging import REVEALED as REV
from tests.conftest import minimal_params
from tests.test_analysis import judged_run, needs_chromium  # noqa: F401  (fixtures)
from tests.test_estimate import CALIBRATION, paper_like
from tests.test_rag import dataset  # noqa: F401
from tests.test_social_graph import community  # noqa: F401


def judged(n_leak, n_no, n_shared, n_withheld, n_unscored=0):
    """Judgement rows crossing two targets, two prompts and three defences."""
    out = []
    for verdict, n in (("leak", n_leak), ("no_leak", n_no), ("shared", n_shared), ("withheld", n_withheld),
                       ("unscored", n_unscored)):
        out += [{"id": f"{verdict}{i:03d}", "verdict": verdict, "authorised": verdict in ("shared", "withheld"),
                 "target": f"t{i % 2}", "prompt": ("baseline", "privacy_aware")[i // 2 % 2],
                 "defence": ("none", "audience_filter", "sensitivity_filter")[i % 3]} for i in range(n)]
    return out


def test_quotas_give_leaks_half_and_pass_a_shortfall_on():
    assert labelling.quotas(120, {"leak": 900, "no_leak": 5000, "confidant": 700}) == {
        "leak": 60, "no_leak": 40, "confidant": 20}
    # 12: 6 leaks wanted, 2 exist; the 4 left go to the next stratum with conversations to spare.
    assert labelling.quotas(12, {"leak": 2, "no_leak": 60, "confidant": 20}) == {"leak": 2, "no_leak": 8, "confidant": 2}
    assert labelling.quotas(50, {"leak": 3, "no_leak": 5, "confidant": 1}) == {"leak": 3, "no_leak": 5, "confidant": 1}
    assert labelling.quotas(0, {"leak": 3}) == {"leak": 0, "no_leak": 0, "confidant": 0}


def test_sample_is_stratified_covers_every_level_and_is_seeded():
    rows = judged(20, 60, 15, 5, n_unscored=4)
    picked = labelling.sample(rows, 12, seed=3)
    strata = [labelling.stratum(r) for r in picked]
    assert (strata.count("leak"), strata.count("no_leak"), strata.count("confidant")) == (6, 4, 2)
    assert len({r["id"] for r in picked}) == 12 and "unscored" not in {r["verdict"] for r in picked}
    for factor, values in (("target", {"t0", "t1"}), ("prompt", {"baseline", "privacy_aware"}),
                           ("defence", {"none", "audience_filter", "sensitivity_filter"})):
        assert {r[factor] for r in picked} == values
        assert {r[factor] for r in picked if r["verdict"] == "leak"} == values  # within a stratum too
    assert labelling.sample(rows, 12, seed=3) == picked
    assert [r["id"] for r in labelling.sample(rows, 12, seed=4)] != [r["id"] for r in picked]
    assert strata[:6] != ["leak"] * 6  # shuffled: labelling part of the way still meets every stratum


def test_the_papers_rule_from_answers_per_turn():
    assert labelling.label_of(False, [[REV, None], [None, REV]], None) == ("leak", [REV, REV])  # cumulative
    assert labelling.label_of(False, [[NOT, NOT], [REV, NOT]], None) == ("no_leak", [REV, NOT])
    assert labelling.label_of(False, [[NOT, None], [NOT, NOT]], None) == (None, [NOT, None])  # unfinished
    assert labelling.label_of(True, [], "withheld") == ("withheld", [])
    assert labelling.label_of(True, [], None) == (None, [])


def test_fleiss_kappa_and_wilson_by_hand():
    # 5 items, 2 raters: 4 agree; category shares 0.5, 0.3, 0, 0.2, so chance 0.38: (0.8 - 0.38) / 0.62.
    counts = [[2, 0, 0, 0], [1, 1, 0, 0], [0, 2, 0, 0], [2, 0, 0, 0], [0, 0, 0, 2]]
    assert agreement.fleiss_kappa(counts) == pytest.approx(21 / 31)
    assert math.isnan(agreement.fleiss_kappa([[2, 0], [2, 0]]))  # chance agreement 1: undefined
    got = agreement.rate(3, 6)  # Wilson at 3/6: 0.5 -+ 1.96 sqrt(0.25/6 + 1.96^2/144) / (1 + 1.96^2/6)
    assert (got["agreement"], got["lo"], got["hi"]) == (0.5, pytest.approx(0.1876, abs=1e-4), pytest.approx(0.8124, abs=1e-4))
    assert agreement.rate(0, 0)["agreement"] is None


# --------------------------------------------------------------------------- labels files


def by_verdict(run_dir):
    """The run's conversation ids per panel verdict, in id order."""
    out = {}
    for r in sorted(store.read_jsonl(run_dir / "judgements.jsonl"), key=lambda r: r["id"]):
        out.setdefault(r["verdict"], []).append(r["id"])
    return out


def export(run_dir, labeller, answers, sample=None):
    """A labels file as the page exports it. ``answers``: per conversation, a confidant's
    shared/withheld, or the answers (one per component) of its first turn and of every later
    one (the scripted run's conversations differ in length from one build to the next)."""
    convs = {c.id: c for c in probing.load_conversations(run_dir)}
    out = {"format": labelling.FORMAT, "run": run_dir.name, "labeller": labeller, "exported": "2025-06-01T10:00:00Z",
           "sample": sample or sorted(convs), "conversations": {}}
    for cid, given in answers.items():
        c = convs[cid]
        grid = [] if c.authorised else [given[0]] + [given[1]] * (len(c.turns) - 1)
        label, _ = labelling.label_of(c.authorised, grid, given if c.authorised else None)
        out["conversations"][cid] = {"digest": labelling.digest(c), "authorised": c.authorised,
                                     "turns": [{"round": t + 1, "answers": a} for t, a in enumerate(grid)],
                                     "disclosure": given if c.authorised else None, "label": label}
    return out


def write(path, data):
    path.write_text(json.dumps(data))
    return path


def ana_and_bo(run_dir):
    """Ana: 6 conversations labelled, 3 as the panel did, 1 started; Bo: 5, one other than Ana."""
    v = by_verdict(run_dir)
    (l1, l2), (n1, n2, n3), w1, s1 = v["leak"][:2], v["no_leak"][:3], v["withheld"][0], v["shared"][0]
    both, none, rest = [REV, REV], [NOT, NOT], [None, None]
    ana = {l1: (both, rest), l2: ([REV, NOT], [None, NOT]), n1: (none, none), n2: (both, rest), w1: "withheld",
           s1: "withheld", n3: (none, rest)}  # n3: four turns, only the first answered
    bo = {l1: (both, rest), l2: (both, rest), n1: (none, none), n2: (both, rest), w1: "withheld"}
    sample = [l1, l2, n1, n2, n3, w1, s1, *v["leak"][2:4], v["no_leak"][3]]
    return export(run_dir, "Ana", ana, sample), export(run_dir, "Bo", bo, sample), (l2, n2, s1)


def test_agreement_figures_against_a_hand_count(judged_run, tmp_path_factory):  # noqa: F811
    tmp_path = tmp_path_factory.mktemp("labels")  # judged_run is the test's own tmp_path
    ana, bo, (l2, n2, s1) = ana_and_bo(judged_run)
    run_ = labelling.known(judged_run)
    labels = [labelling.read(write(tmp_path / "ana.json", ana), run_), labelling.read(write(tmp_path / "bo.json", bo), run_)]
    found = agreement.compute(judged_run, labels)
    rows = {(r["labeller"], r["rater"], r["level"]): r for r in found["agreement"]}
    # Ana against the panel. Labels (human, panel): (leak, leak) (no_leak, leak) (no_leak, no_leak)
    # (leak, no_leak) (withheld, withheld) (withheld, shared): 3 of 6; chance (2*2 + 2*2 + 2*1) / 36,
    # so kappa (1/2 - 10/36) / (1 - 10/36) = 4/13.
    conv = rows[("Ana", "panel", "conversation")]
    assert (conv["n"], conv["agree"], conv["agreement"]) == (6, 3, 0.5)
    assert conv["lo"] == pytest.approx(0.1876, abs=1e-4) and conv["kappa"] == pytest.approx(4 / 13, abs=1e-4)
    # Components (human, panel): RR RR | RR NR | NN NN | RN RN: 5 of 8; chance (5*4 + 3*4) / 64 = 1/2: kappa 1/4.
    comp = rows[("Ana", "panel", "component")]
    assert (comp["n"], comp["agree"], comp["kappa"]) == (8, 5, 0.25)
    # Judge j voted on leaks and on the withheld confidant (3 of 5); "code" said the other confidant shared.
    assert (rows[("Ana", "j", "conversation")]["n"], rows[("Ana", "j", "conversation")]["agree"]) == (5, 3)
    assert (rows[("Ana", "code", "conversation")]["n"], rows[("Ana", "code", "conversation")]["agree"]) == (1, 0)
    assert found["confusion"]["Ana"] == {"leak": {"leak": 1, "no_leak": 1, "shared": 0, "withheld": 0},
                                         "no_leak": {"leak": 1, "no_leak": 1, "shared": 0, "withheld": 0},
                                         "shared": {"leak": 0, "no_leak": 0, "shared": 0, "withheld": 0},
                                         "withheld": {"leak": 0, "no_leak": 0, "shared": 1, "withheld": 1}}
    # Across Ana and Bo: the 5 conversations both finished, the counts of test_fleiss_kappa_and_wilson_by_hand.
    assert found["fleiss"]["conversation"] == {"items": 5, "kappa": pytest.approx(21 / 31, abs=1e-4)}
    assert found["labellers"][0] | {"source": ""} == {
        "labeller": "Ana", "file": "labels/ana.json", "source": "", "exported": "2025-06-01T10:00:00Z", "sample": 10,
        "labelled": 6, "started": 1, "stale": 0, "partial": True}
    assert [d["id"] for d in found["disagreements"]] == sorted([l2, n2, s1])
    first = next(d for d in found["disagreements"] if d["id"] == l2)
    assert first["humans"] == {"Ana": "no_leak", "Bo": "leak"} and first["panel"] == "leak"
    assert first["transcript"].startswith(f"{l2}: ") and "I am resigning, in May!" in first["transcript"]
    # The corrected rates read the labellers' majority: l2 is a tie (left out).
    assert l2 not in agreement.consensus(labels) and len(agreement.consensus(labels)) == 5 == found["consensus_labels"]


def snapshot(folder):
    return {p: p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def test_bad_labels_files_get_one_line_exit_2_and_leave_the_run_as_it_was(judged_run, tmp_path_factory, capsys):  # noqa: F811
    tmp_path = tmp_path_factory.mktemp("labels")
    ana, bo, _ = ana_and_bo(judged_run)
    store.write_json(judged_run / "validation.json", {"dev_cases": 5})  # stage 07's: kept by a good call
    some = next(iter(ana["conversations"]))
    foreign = json.loads(json.dumps(ana))
    foreign["conversations"]["c-elsewhere"] = foreign["conversations"].pop(some)
    changed = json.loads(json.dumps(ana))
    changed["conversations"][some]["digest"] = "0" * 16
    claimed = json.loads(json.dumps(ana))
    first_no_leak = by_verdict(judged_run)["no_leak"][2]  # Ana's started one
    claimed["conversations"][first_no_leak]["label"] = "no_leak"
    cases = {
        "not JSON": ("{oops", "not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
        "another run": (foreign, "from another run (" + judged_run.name + "): conversation 'c-elsewhere' is not one "
                                 "of this run's"),
        "changed": (changed, f"from another run ({judged_run.name}): conversation {some!r} differs from this run's "
                             "conversation of that id"),
        "no answers": ({**ana, "conversations": {}}, "missing answers: no conversation is answered"),
        "missing": (claimed, f"conversation {first_no_leak!r}: missing answers: labelled 'no_leak', but not every "
                             "component is answered"),
        "no name": ({**ana, "labeller": " "}, "no labeller name (type it on the page before exporting)"),
    }
    before = snapshot(judged_run)
    for name, (data, message) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.json"
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        assert cli.main(["agreement", str(judged_run), str(path)]) == 2, name
        err = capsys.readouterr().err
        assert err == f"error: {path}: {message}\n", name
        assert snapshot(judged_run) == before, name
    # Two labellers under one name: the second file is named.
    one, two = write(tmp_path / "ana.json", ana), write(tmp_path / "ana2.json", {**bo, "labeller": " ana "})
    assert cli.main(["agreement", str(judged_run), str(one), str(two)]) == 2
    assert capsys.readouterr().err == (f"error: {two}: labeller 'ana' is also the labeller of {one}: "
                                       "two labellers under one name\n")
    assert snapshot(judged_run) == before
    assert cli.main(["agreement", str(tmp_path / "nowhere"), str(one)]) == 2
    # Partial labels are accepted and said to be partial; validation.json keeps stage 07's figures.
    assert cli.main(["agreement", str(judged_run), str(one)]) == 0
    out = capsys.readouterr().out
    assert f"Ana ({one}): 6 of 10 conversations labelled (partial, 1 more started)" in out
    assert "disagreements with the panel: 3 conversations" in out and "written: " in out
    kept = store.read_json(judged_run / "validation.json")
    assert kept["dev_cases"] == 5 and kept["human"]["labellers"][0]["labelled"] == 6
    assert (judged_run / "labels" / "ana.json").read_bytes() == one.read_bytes()
    # Bo alone next: labels/ holds the labellers of the latest call only.
    assert cli.main(["agreement", str(judged_run), str(write(tmp_path / "bo.json", bo))]) == 0
    assert "(removed ana.json)" in capsys.readouterr().out
    assert sorted(p.name for p in (judged_run / "labels").iterdir()) == ["bo.json"]


def test_stages_05_to_07_read_kept_labels_and_rerun_when_they_change(judged_run, tmp_path_factory):  # noqa: F811
    tmp_path = tmp_path_factory.mktemp("labels")
    ana, _, (l2, _, _) = ana_and_bo(judged_run)
    run_ = labelling.known(judged_run)
    cfg = config.parse(minimal_params())
    stage = next(s for s in run.STAGES if s.name == "05_scoring")
    notebook = run.default_notebooks_dir() / "05_scoring.ipynb"
    # No labels: the fingerprint of a run made before labels existed.
    assert fingerprints.fingerprint(cfg, stage, notebook, [], judged_run) == fingerprints.fingerprint(cfg, stage, notebook, [])
    labelling.keep(judged_run, [labelling.read(write(tmp_path / "ana.json", ana), run_)])
    assert agreement.human_labels(judged_run)[l2] == "no_leak"
    judgements = store.read_jsonl(judged_run / "judgements.jsonl")
    leak = correction.from_human(agreement.human_labels(judged_run), judgements)["leak"]
    assert leak.counts() == (1, 1, 1, 1)  # l1 caught, n2 missed, n1 right, l2 a false leak
    first = fingerprints.fingerprint(cfg, stage, notebook, [], judged_run)
    assert first != fingerprints.fingerprint(cfg, stage, notebook, [])
    labelling.keep(judged_run, [labelling.read(write(tmp_path / "ana.json", {**ana, "labeller": "Ann"}), run_)])
    assert fingerprints.fingerprint(cfg, stage, notebook, [], judged_run) != first
    # Conversations probed again since: their labels are set aside, not an error.
    convs = store.read_jsonl(judged_run / "conversations.jsonl")
    for c in convs:
        if c["id"] == l2:
            c["turns"][0]["reply"] = "Nothing new."
    store.write_jsonl(judged_run / "conversations.jsonl", convs)
    kept = labelling.stored(judged_run)
    assert kept[0].stale == [l2] and l2 not in agreement.human_labels(judged_run)


def test_estimate_says_how_long_labelling_takes():
    est = estimate.estimate(paper_like(**{"validation.human_sample": 120}), "p.yaml", CALIBRATION)
    assert est.volumes["labelling_conversations"] == 120 and est.volumes["labelling_seconds"] == 3600
    assert ("labelling 120 conversations in label.html (validation.human_sample) at about 30 s each, about 1.0 h"
            in est.table())
    small = estimate.estimate(paper_like(**{"validation.human_sample": 12}), "p.yaml", CALIBRATION)
    assert "about 6.0 min" in small.table()


# --------------------------------------------------------------------------- the page, in a browser


def press(b, key):
    """A key pressed and released, as a person types it (``keydown`` is what the page reads)."""
    code = f"Digit{key}" if key.isdigit() else f"Key{key.upper()}"
    b.send("Input.dispatchKeyEvent", type="keyDown", key=key, code=code, text=key)
    b.send("Input.dispatchKeyEvent", type="keyUp", key=key, code=code)


def click(b, selector):
    b.js(f"document.querySelector({json.dumps(selector)}).click()")


def shows(b, element):
    return b.js(f"document.getElementById({json.dumps(element)}).textContent")


def answer_three(b, total, turns):
    """Conversation 1 by clicks, 2 and 3 by keys, checking what the page shows as it goes;
    ``turns``: how many the first two have."""
    assert shows(b, "count") == f"0 of {total} labelled" and shows(b, "where") == f"1 / {total}"
    # 1. By clicking: both components revealed in the first reply. The judges stay hidden until then.
    assert "show once you have answered" in shows(b, "judges") and "panel:" not in shows(b, "conv")
    click(b, '.cell[data-cell="0:0"] button[data-v="revealed"]')
    left = turns[0]  # the second component in every turn; the first is revealed from here on
    assert shows(b, "label") == (f"Label: not yet ({left} answer{'s' * (left > 1)} to go; "
                                 "1 of 2 components revealed so far)")
    assert b.js("document.activeElement.dataset.cell") == "0:1"  # the next open component has the focus
    click(b, '.cell[data-cell="0:1"] button[data-v="revealed"]')
    assert shows(b, "label") == "Label: leak (2 of 2 components revealed)"
    assert "panel:" not in shows(b, "conv") and b.js("document.getElementById('showjudges').checked") is False
    click(b, "#showjudges")
    assert "the panel agrees with you" in shows(b, "judges") and "panel: revealed so far" in shows(b, "conv")
    # 2. By keys: n; in turn 1 the first component revealed, the second not; then not, every turn.
    press(b, "n")
    assert shows(b, "where") == f"2 / {total}" and "panel:" not in shows(b, "conv")  # blind again
    for key in "12":
        press(b, key)
    assert b.js("document.activeElement.dataset.cell") == "1:1"  # component 0 is revealed from here on
    assert "revealed in turn 1" in shows(b, "conv")
    for _ in range(turns[1] - 1):
        press(b, "2")
    assert shows(b, "label") == "Label: no leak (1 of 2 components revealed)"
    # 3. By keys: a confidant; 1 says the assistant shared the secret. Once answered, the judges
    # show (the toggle stays as the labeller left it); j hides and shows them.
    press(b, "n")
    assert "show once you have answered" in shows(b, "judges")
    press(b, "1")
    assert shows(b, "label") == "Label: shared"
    assert "the panel differs: withheld" in shows(b, "judges")
    press(b, "j")
    assert "panel" not in shows(b, "judges") and "panel:" not in shows(b, "conv")
    press(b, "j")
    assert "the panel differs: withheld" in shows(b, "judges")
    assert shows(b, "count") == f"3 of {total} labelled"
    bar = b.js("['bar', 'fill'].map(k => document.getElementById(k).getBoundingClientRect().width)")
    assert bar[1] == pytest.approx(bar[0] * 3 / total, abs=1)  # drawn, not only set


def export_as(b, name, folder):
    """Export refused without a name, then, with ``name`` typed, downloaded to ``folder``."""
    click(b, "#export")
    assert shows(b, "note") == "type your name first"
    b.js("document.getElementById('labeller').focus()")
    b.send("Input.insertText", text=name)
    click(b, "#export")
    assert shows(b, "note") == "exported 3 conversations" and shows(b, "errors") == ""
    exported = folder / "labels.json"
    for _ in range(200):  # written by the browser once the download completes
        if exported.exists():
            break
        time.sleep(0.05)
    return exported


@needs_chromium
def test_a_person_labels_three_conversations_reloads_exports_and_agreement_reads_it(judged_run, tmp_path_factory):  # noqa: F811
    """Three conversations answered (one by clicks, two by keys), the page reloaded, the labels
    exported as a download and read back by pbench agreement. The first three on the page: a
    leak as judged (1 turn), a non-leak (4 turns) and a withheld confidant (4 turns)."""
    run_dir, tmp = judged_run, tmp_path_factory.mktemp("browser")
    v = by_verdict(run_dir)
    ds, convs = footprint.load_dataset(run_dir), probing.load_conversations(run_dir)
    length = {c.id: len(c.turns) for c in convs}
    first = [min(v["leak"], key=length.get), v["no_leak"][0], v["withheld"][0]]
    rows = {r["id"]: r for r in store.read_jsonl(run_dir / "judgements.jsonl")}
    assert rows[first[1]]["components"] == [NOT, NOT] and length[first[1]] > 1  # what the hand count takes
    picked = [rows[i] for i in first] + [rows[i] for i in sorted(rows) if i not in first and rows[i]["verdict"] != "unscored"]
    page = run_dir / labelling.PAGE
    page.write_text(labelling.render(labelling.page_data(ds, convs, picked, run_dir.name)))
    total = len(picked)
    with Browser(tmp / "profile") as b:
        (tmp / "downloads").mkdir()
        session, b.session = b.session, None  # a browser-wide command
        b.send("Browser.setDownloadBehavior", behavior="allow", downloadPath=str(tmp / "downloads"))
        b.session = session
        b.send("Page.navigate", url=page.as_uri())
        b.wait(READY)
        answer_three(b, total, [length[i] for i in first[:2]])
        # Reloaded: the answers, the place and the judges' toggle are still there.
        b.send("Page.reload")
        b.wait(f"{READY} && document.getElementById('count').textContent.startsWith('3 of')")
        assert shows(b, "where") == f"3 / {total}" and shows(b, "label") == "Label: shared"
        press(b, "p")
        assert b.js("[...document.querySelectorAll('button.on')].map(x => x.dataset.v)") == [
            "revealed", "not revealed"] + ["not revealed"] * (length[first[1]] - 1)
        exported = export_as(b, "Test Labeller", tmp / "downloads")
    data = json.loads(exported.read_text())
    assert data["labeller"] == "Test Labeller" and data["run"] == run_dir.name and data["exported"].endswith("Z")
    assert list(data["conversations"]) == first and data["sample"] == [r["id"] for r in picked]
    non_leak = data["conversations"][first[1]]
    assert [t["answers"] for t in non_leak["turns"]] == [[REV, NOT]] + [[None, NOT]] * (length[first[1]] - 1)
    assert data["conversations"][first[2]]["disclosure"] == "shared"
    # Read back. By hand: labels (human, panel) (leak, leak) (no_leak, no_leak) (shared, withheld): 2 of 3,
    # chance (1 + 1) / 9, kappa (2/3 - 2/9) / (7/9) = 4/7; components RR RR | RN NN: 3 of 4, kappa 1/2.
    assert cli.main(["agreement", str(run_dir), str(exported)]) == 0
    found = store.read_json(run_dir / "validation.json")["human"]
    rows = {(r["rater"], r["level"]): r for r in found["agreement"]}
    conv, comp = rows[("panel", "conversation")], rows[("panel", "component")]
    assert (conv["n"], conv["agree"], conv["kappa"]) == (3, 2, pytest.approx(4 / 7, abs=1e-4))
    assert (comp["n"], comp["agree"], comp["kappa"]) == (4, 3, 0.5)
    assert found["labellers"][0]["labelled"] == 3 and found["labellers"][0]["partial"] is True
    assert [d["id"] for d in found["disagreements"]] == [first[2]]
    assert found["confusion"]["Test Labeller"]["shared"]["withheld"] == 1


def test_the_report_links_the_page_and_shows_the_agreement(judged_run, tmp_path_factory):  # noqa: F811
    from bench.report_load import build_report

    page = build_report(judged_run).read_text()
    assert '<a href="label.html">label.html</a>' in page and "No one has labelled this run yet" in page
    ana, bo, (l2, n2, s1) = ana_and_bo(judged_run)
    folder = tmp_path_factory.mktemp("labels")
    assert cli.main(["agreement", str(judged_run), str(write(folder / "ana.json", ana)),
                     str(write(folder / "bo.json", bo))]) == 0
    page = build_report(judged_run).read_text()
    human = page[page.index('<h2 id="agreement">'):page.index("<h2>Figures</h2>")]
    assert "Cohen&#x27;s kappa, panel against Ana: 0.31 over 6 conversations; 0.25 over 8 components" in human
    assert "<h3>Fleiss&#x27; kappa across labellers</h3>" in human and "<h3>Confusion: Ana</h3>" in human
    assert human.count("<details>") == 3 and f"<summary>{l2}: panel leak; Ana: no_leak, Bo: leak</summary>" in human


@needs_chromium
def test_the_page_stage_07_writes_opens_without_errors(judged_run, tmp_path_factory):  # noqa: F811
    from bench.report_load import dump_dom

    ds, convs = footprint.load_dataset(judged_run), probing.load_conversations(judged_run)
    picked = labelling.write_page(judged_run, ds, convs, store.read_jsonl(judged_run / "judgements.jsonl"), 12, 1)
    page = (judged_run / labelling.PAGE).read_text()
    assert "http://" not in page and "https://" not in page and "<script src" not in page  # self-contained
    dom = dump_dom((judged_run / labelling.PAGE).as_uri(), tmp_path_factory.mktemp("chromium")).stdout
    assert 'data-ready="yes"' in dom and '<pre id="errors"></pre>' in dom
    assert f"0 of {len(picked)} labelled" in dom and f'data-id="{picked[0]["id"]}"' in dom
