"""Issue 9, kill at any moment: stage 02 and stage 04 killed with SIGKILL mid-work, then
rerun, end with the files of an uninterrupted run: no record lost, duplicated or torn
(stage 04 records are compared without their wall-clock ``seconds``). The child processes
and the comparison live in ``tests.killable``; ``bench/kill_stress.py`` kills at random points."""

import json
import shutil

import pytest

from tests import killable

pytestmark = pytest.mark.slow  # a dozen child processes: 30-40 s on 2 cores


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    return killable.references(tmp_path_factory.mktemp("kill"))


@pytest.mark.parametrize("stage", killable.STAGES)
def test_killed_late_then_rerun_equals_an_uninterrupted_run(refs, stage, tmp_path):
    ref = refs[stage]
    t = killable.trial(ref, tmp_path / "run", [0.7 * ref.seconds])
    assert t.runs[0].killed and t.differences == []
    assert t.runs[-1].calls < ref.calls  # the replies made before the kill were still cached


@pytest.mark.parametrize("stage", killable.STAGES)
def test_killed_twice_with_a_torn_line_and_a_stale_temp_file(refs, stage, tmp_path):
    ref = refs[stage]
    t = killable.trial(ref, tmp_path / "run", [0.3 * ref.seconds, 0.2 * ref.seconds], damaged=True)
    assert t.runs[0].killed and t.differences == []
    assert list((tmp_path / "run").rglob(".*.tmp"))  # the stale file was there and did not matter


def test_the_comparison_catches_a_lost_a_duplicated_a_torn_and_a_changed_record(refs, tmp_path):
    ref = refs["probing"]
    lines = (ref.run_dir / "conversations.jsonl").read_text().splitlines(keepends=True)
    run = tmp_path / "probing"
    run.mkdir()

    def differences(*lines):
        (run / "conversations.jsonl").write_text("".join(lines))
        return killable.differences("probing", ref.run_dir, run)

    slower = json.dumps({**json.loads(lines[0]), "seconds": 99.0}, sort_keys=True) + "\n"
    assert differences(slower, *lines[1:]) == []
    assert differences(*lines, lines[3])[0].startswith("duplicated")
    assert differences(*lines[1:])[0].startswith("lost")
    assert differences(*lines, lines[0][:40]) == ["torn last line"]
    assert differences(lines[1], lines[0], *lines[2:]) == ["line 1 differs"]
    fp_ref = refs["footprint"].run_dir
    shutil.copytree(fp_ref, tmp_path / "footprint")
    user = tmp_path / "footprint" / "footprint" / "users" / "u2.json"
    user.write_text(user.read_text().replace("mundane", "mundanE", 1))
    assert killable.differences("footprint", fp_ref, tmp_path / "footprint") == ["footprint/users/u2.json differs"]
