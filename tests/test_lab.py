"""`make lab`: JupyterLab on notebooks/ with the project's kernel."""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_make_lab_serves_the_notebooks_with_the_project_kernel(tmp_path):
    if not (ROOT / ".venv" / ".installed").exists():
        pytest.skip("make lab runs the project's .venv, which `make install` has not built here")
    port = _free_port()
    args = f"--no-browser --port {port} --IdentityProvider.token=t --ServerApp.ip=127.0.0.1"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    proc = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def get(path):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}?token=t", timeout=5) as r:
            return json.loads(r.read())

    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                specs = get("/api/kernelspecs")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(proc.stdout.read().decode(errors="replace")[-2000:]) from None
                time.sleep(0.5)
        assert "pbench" in specs["kernelspecs"]
        names = {c["name"] for c in get("/api/contents")["content"]}
        assert {"01_social_graph.ipynb", "06_analysis.ipynb", "07_validation.ipynb"} <= names
        nb = get("/api/contents/06_analysis.ipynb")["content"]
        assert nb["metadata"]["kernelspec"]["name"] == "pbench"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
