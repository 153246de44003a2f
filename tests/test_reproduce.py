"""Comparing two run folders' data files (pbench.reproduce): wall-clock fields and attempt
records aside, any difference is named with its file and first differing line."""

import json
import sqlite3

from pbench import llm, report, reproduce, store


def _run(folder, seconds, verdict="leak", path_note=""):
    store.write_json(folder / "probing.json", {"planned": 2, "seconds": seconds, "conversations_per_minute": 60 / seconds})
    store.write_jsonl(folder / "judgements.jsonl", [{"id": "a", "verdict": verdict}, {"id": "b", "verdict": "no_leak"}])
    (folder / "report.html").write_text(f"<p>run at {folder}{path_note}</p>\n"
                                        + report.attempt(f"<table><td>{seconds}</td></table>", block=True))
    store.write_json(folder / "stages" / "04_probing.json", {"seconds": seconds})  # an attempt's record
    (folder / "manifest.json").write_text(json.dumps({"last_run_seconds": seconds}))


def test_runs_differing_only_in_time_and_place_agree(tmp_path):
    _run(tmp_path / "a" / "tiny", 10.0)
    _run(tmp_path / "b" / "tiny", 99.0)
    assert reproduce.data_files(tmp_path / "a" / "tiny") == ["judgements.jsonl", "probing.json", "report.html"]
    assert reproduce.differences(tmp_path / "a" / "tiny", tmp_path / "b" / "tiny") == {}


def test_a_changed_record_or_a_missing_file_is_named(tmp_path):
    _run(tmp_path / "a" / "tiny", 10.0)
    _run(tmp_path / "b" / "tiny", 10.0, verdict="no_leak")
    (tmp_path / "b" / "tiny" / "extra.csv").write_text("x\n")
    diff = reproduce.differences(tmp_path / "a" / "tiny", tmp_path / "b" / "tiny")
    assert set(diff) == {"judgements.jsonl", "extra.csv"}
    assert diff["judgements.jsonl"].startswith("1 lines differ; first, line 1:") and "only in" in diff["extra.csv"]


def test_copy_cache_takes_what_is_still_in_the_write_ahead_log(tmp_path):
    cache = llm.ResponseCache(tmp_path / "a.sqlite")  # WAL mode, left open as a running stage would
    cache.put("k", llm.RawReply("hello", 3, 1))
    cache.flush()  # committed to the write-ahead log, not yet to the database file
    assert reproduce.copy_cache(tmp_path / "a.sqlite", tmp_path / "copy" / "b.sqlite") == 1
    with sqlite3.connect(tmp_path / "copy" / "b.sqlite") as db:
        assert json.loads(db.execute("SELECT reply FROM replies").fetchone()[0])["text"] == "hello"
    cache.close()
