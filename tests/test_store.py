import pytest

from pbench import store


def test_append_and_read_jsonl(tmp_path):
    p = tmp_path / "r.jsonl"
    store.append_jsonl(p, [{"id": 1}, {"id": 2}])
    store.append_jsonl(p, [{"id": 3}])
    assert [r["id"] for r in store.read_jsonl(p)] == [1, 2, 3]


def test_torn_last_line_is_ignored_then_cut_before_the_next_append(tmp_path):
    p = tmp_path / "r.jsonl"
    store.append_jsonl(p, [{"id": 1}])
    with open(p, "a") as fh:
        fh.write('{"id": 2, "tex')  # a writer killed mid-record
    assert [r["id"] for r in store.read_jsonl(p)] == [1]
    store.append_jsonl(p, [{"id": 3}])
    assert [r["id"] for r in store.read_jsonl(p)] == [1, 3]
    assert p.read_text().count("\n") == 2


def test_repair_reads_back_only_over_the_torn_line(tmp_path):
    p = tmp_path / "r.jsonl"
    store.append_jsonl(p, [{"id": i, "text": "x" * 50} for i in range(20)])
    whole = p.read_bytes()
    with open(p, "ab") as fh:
        fh.write(b'{"id": 20, "text": "' + b"y" * 100)  # torn, longer than several chunks
    assert store.repair_jsonl(p, chunk=16) == 120 and p.read_bytes() == whole
    assert store.repair_jsonl(p, chunk=16) == 0
    q = tmp_path / "q.jsonl"
    q.write_bytes(b'{"id": 0, "te')  # a first record torn: nothing to keep
    assert store.repair_jsonl(q, chunk=4) == 13 and q.read_bytes() == b""


def test_corrupt_complete_line_names_file_and_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"id": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"r\.jsonl:2: not a JSON record"):
        store.read_jsonl(p)


def test_atomic_write_leaves_old_file_when_interrupted(tmp_path, monkeypatch):
    p = tmp_path / "f.json"
    store.write_json(p, {"v": 1})

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(store.os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        store.write_json(p, {"v": 2})
    assert store.read_json(p) == {"v": 1}
    assert [x.name for x in tmp_path.iterdir()] == ["f.json"]


def test_update_json_deep_merges(tmp_path):
    p = tmp_path / "m.json"
    store.update_json(p, {"stages": {"a": {"s": 1}}, "x": 1})
    store.update_json(p, {"stages": {"b": {"s": 2}}})
    assert store.read_json(p) == {"stages": {"a": {"s": 1}, "b": {"s": 2}}, "x": 1}
