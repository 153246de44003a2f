"""Kinds of target: the registry (``pbench.config.target_kind``, ``kinds``), and a kind from
another package found through its entry point, in a fresh interpreter as a lab's would be."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest
import yaml

from pbench import config, estimate
from pbench.config import TargetSpecBase, target_kind
from tests.conftest import minimal_params

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "examples" / "toy_kind"


def installed(tmp_path: Path, module: str = "toy_kind", name: str = "refuser") -> Path:
    """A folder that holds the toy kind as pip would install it: its module, and a dist-info
    whose entry point names ``module`` as kind ``name``."""
    site = tmp_path / "site"
    info = site / "pbench_toy_kind-0.1.0.dist-info"
    info.mkdir(parents=True)
    shutil.copy(TOY / "toy_kind.py", site / "toy_kind.py")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pbench-toy-kind\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[pbench.targets]\n{name} = {module}\n")
    return site


def fresh(site: Path | None, code: str, *args: str) -> subprocess.CompletedProcess:
    """``code`` run in a new interpreter from the repository, with ``site`` on its path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (site, ROOT) if p)}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


RUN_TOY = """
import asyncio, json, sys
from pbench import config, estimate, targets
cfg = config.load(sys.argv[1])
made = targets.for_run(cfg, None, {}, None)
turn = asyncio.run(made["refuser"]("u1", "own", "none").reply("u2", [{"role": "user", "content": "Is Ann leaving?"}], None))
v = estimate.volumes(cfg)
print(json.dumps({"kinds": list(config.kinds()), "planned": [[t.label, t.kind, t.prompts, t.defences]
                  for t in cfg.planned_targets()], "reply": turn.reply, "title": config.kind("refuser").title,
                  "assistant_turns": v["assistant_turns"], "outside_turns": v["outside_turns"]}))
"""


def test_a_kind_from_another_package_is_planned_made_and_priced_through_its_entry_point(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump(minimal_params(targets=[{"kind": "refuser", "line": "Not telling."}])))
    got = fresh(installed(tmp_path), RUN_TOY, str(params))
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert out["kinds"] == ["rag", "extractive", "memory", "http", "python", "refuser"]  # ours first, in order
    assert out["planned"] == [["refuser", "refuser", ["own"], ["none"]]]  # its own instructions, no defence of ours
    assert out["reply"] == "Not telling." and out["title"] == "declines everything"
    assert out["assistant_turns"] == 0 and out["outside_turns"] == 0  # replies="none": no model call to price
    check = subprocess.run([sys.executable, "-m", "pbench.cli", "check", str(params)], cwd=ROOT, capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": f"{installed(tmp_path / 'b')}{os.pathsep}{ROOT}"})
    assert check.returncode == 0, check.stderr


def test_without_its_package_the_kind_is_unknown_and_the_error_lists_the_known_ones(tmp_path):
    with pytest.raises(config.ConfigError, match=r"targets\.0\.kind: unknown kind 'refuser'; known: 'rag', "):
        config.parse(minimal_params(targets=[{"kind": "refuser"}]))


@pytest.mark.parametrize("module, name, message", [
    ("no_such_toy", "refuser", "entry point refuser = no_such_toy (pbench-toy-kind): does not load "
                               "(ModuleNotFoundError: No module named 'no_such_toy')"),
    ("toy_kind", "refusenik", "entry point refusenik = toy_kind (pbench-toy-kind): registers no target kind named "
                              "'refusenik' (pbench.config.target_kind)"),
    ("toy_kind", "rag", "entry point rag = toy_kind (pbench-toy-kind): 'rag' is the name of one of pbench's own "
                        "target kinds"),
])
def test_a_broken_entry_point_stops_the_check_with_one_line_naming_it(tmp_path, module, name, message):
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump(minimal_params()))
    got = fresh(installed(tmp_path, module, name), "import sys; from pbench import cli; sys.exit(cli.main(['check', sys.argv[1]]))",
                str(params))
    assert got.returncode == 2, got.stdout + got.stderr
    assert got.stderr.strip().splitlines() == [f"error: {message}"]


def test_a_kind_must_name_itself_in_its_spec_and_once():
    class Misnamed(TargetSpecBase):
        kind: Literal["other"]

    with pytest.raises(ValueError, match=r"its spec Misnamed must declare kind: Literal\['mine'\]"):
        target_kind("mine", Misnamed, "mine")

    class Rag(TargetSpecBase):
        kind: Literal["rag"]

    with pytest.raises(ValueError, match=r"target kind 'rag' is registered twice \(pbench\.targets\.rag and tests\."):
        target_kind("rag", Rag, "another rag")(lambda t, c: None)


def test_our_kinds_declare_what_the_estimate_and_the_plan_read():
    k = config.kinds()
    assert [name for name in k] == ["rag", "extractive", "memory", "http", "python"]
    assert {n: (x.replies, x.prompts, x.defences) for n, x in k.items()} == {
        "rag": ("assistant", "ours", True), "extractive": ("none", "none", True), "memory": ("assistant", "ours", True),
        "http": ("own", "own", False), "python": ("own", "own", False)}
    cfg = config.parse(minimal_params(targets=[{"kind": "rag"}, {"kind": "extractive"}, {"kind": "memory"}]))
    v = estimate.volumes(cfg)
    assert v["assistant_turns"] and v["memory_extractions"] and not v["outside_turns"]
