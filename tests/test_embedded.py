import hashlib
import importlib

import pytest

from pbench import embedded


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Two tiny 'model part' packages on sys.path and an EmbeddedModel that joins them."""
    data = [b"GGUF-part-one-", b"part-two"]
    for i, chunk in enumerate(data, 1):
        pkg = tmp_path / "site" / f"fakepart{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise ImportError('never import model packages')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    monkeypatch.setenv("PBENCH_MODEL_CACHE", str(tmp_path / "cache"))
    joined = b"".join(data)
    model = embedded.EmbeddedModel(
        name="fake", packages=("fakepart1", "fakepart2"), files=("data/part01.bin", "data/part02.bin"),
        sha256=hashlib.sha256(joined).hexdigest(), size=len(joined), pip="fakepart", description="test",
    )
    monkeypatch.setitem(embedded.EMBEDDED, "fake", model)
    return tmp_path, joined


def test_parts_are_joined_once_and_verified(fake_parts, monkeypatch):
    tmp_path, joined = fake_parts
    path = embedded.ensure("fake")
    assert path == tmp_path / "cache" / "fake.gguf" and path.read_bytes() == joined
    calls = []
    monkeypatch.setattr(embedded, "_sha256", lambda paths: calls.append(paths) or ("x", 0))
    assert embedded.ensure("fake") == path  # stamped: no second hash
    assert calls == []


def test_hash_mismatch_is_refused_and_the_bad_file_removed(fake_parts, monkeypatch):
    tmp_path, _ = fake_parts
    bad = embedded.EMBEDDED["fake"].__class__(**{**embedded.EMBEDDED["fake"].__dict__, "sha256": "0" * 64})
    monkeypatch.setitem(embedded.EMBEDDED, "fake", bad)
    with pytest.raises(embedded.ModelFileError, match="does not match the pinned"):
        embedded.ensure("fake")
    assert not (tmp_path / "cache" / "fake.gguf").exists()


def test_changed_joined_file_is_rebuilt_from_the_parts(fake_parts):
    tmp_path, joined = fake_parts
    path = embedded.ensure("fake")
    path.write_bytes(b"tampered!")
    assert embedded.ensure("fake").read_bytes() == joined


def test_changed_part_is_refused(fake_parts):
    tmp_path, _ = fake_parts
    (tmp_path / "site" / "fakepart2" / "data" / "part02.bin").write_bytes(b"other-bytes")
    with pytest.raises(embedded.ModelFileError, match="does not match"):
        embedded.ensure("fake")


def test_missing_package_names_what_to_install(monkeypatch):
    model = embedded.EmbeddedModel("ghost", ("no_such_pkg_xyz",), ("a.bin",), "0" * 64, 1, "ghost-pkg==1", "t")
    monkeypatch.setitem(embedded.EMBEDDED, "ghost", model)
    with pytest.raises(embedded.ModelFileError, match=r"no_such_pkg_xyz is not installed \(pip install ghost-pkg==1\)"):
        embedded.ensure("ghost")
