"""Targets outside pbench (``pbench.remote``): a service over HTTP behind the JSON contract,
and a Python class. Each fault is retried within bounds, then the conversation is unscored
(``target_failed``), counted, listed, and run again by a rerun."""

import asyncio
import datetime as dt
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pbench import config, probing, remote, store, targets
from tests.conftest import minimal_params
from tests.test_probing import WordCheck, cfg, model
from tests.test_rag import dataset, index  # noqa: F401  (fixtures)
from tests.test_social_graph import community  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
AT = dt.datetime(2024, 6, 1, 12)


class Service:
    """A local service under the contract that misbehaves on cue: ``faults`` is a list of what
    the next requests do (``timeout``, ``non_json``, ``5xx``, ``close``, ``4xx``), then it
    answers well. It quotes its owner's first document and says it used it."""

    def __init__(self, faults=(), delay_s=0.0):
        self.faults, self.delay_s, self.seen = list(faults), delay_s, []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                service.seen.append((self.path, body))
                fault = service.faults.pop(0) if service.faults else None
                if fault == "close":
                    self.connection.close()
                    return
                if fault == "timeout":
                    time.sleep(1.0)
                time.sleep(service.delay_s)
                if self.path == "/ingest":
                    service.docs = {**getattr(service, "docs", {}), body["owner"]: body["documents"]}
                    answer = {"ok": True}
                else:
                    doc = service.docs[body["owner"]][0]
                    answer = {"reply": f"from my notes: {doc['text'][:40]}", "used": [doc["id"]]}
                status = {"5xx": 503, "4xx": 400}.get(fault, 200)
                data = b"<html>oops</html>" if fault == "non_json" else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.handle_error = lambda request, address: None  # a client that gave up on a slow answer
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service():
    made = []
    yield lambda *a, **k: made.append(Service(*a, **k)) or made[-1]
    for s in made:
        s.close()


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(remote, "BACKOFF_S", 0.0)


def http_cfg(url, retries=2, **over):
    return cfg(**{"probing.defences": ["none"], "targets": [{"kind": "http", "url": url, "retries": retries,
                                                               "timeout_s": 0.5}], **over})


def ask(built, owner="u1"):
    async def go():
        await built["http"].prepare({owner: [{"id": "d1", "owner": owner, "kind": "chat", "participants": [owner],
                                              "group": None, "timestamp": AT, "text": "Ana: the meeting moved",
                                              "public": False}]})
        return await built["http"](owner, "own", "none").reply("u2", [{"role": "user", "content": "hi"}], AT, seed=3)
    return asyncio.run(go())


@pytest.mark.parametrize("fault", ["timeout", "non_json", "5xx", "close"])
def test_each_http_fault_is_retried_then_fails_the_target(service, dataset, index, fault):  # noqa: F811
    ok = service([None, fault, fault])  # ingest fine; two faults, two retries: the third try answers
    turn = ask(targets.for_run(http_cfg(ok.url), index, {}, dataset.view))
    assert turn.reply.startswith("from my notes") and turn.retrieved == ["d1"]
    assert [p for p, _ in ok.seen] == ["/ingest"] + ["/reply"] * 3
    down = service([None] + [fault] * 3)  # ingest fine, then more faults than retries
    with pytest.raises(remote.TargetError, match=r"reply failed after 3 tries"):
        ask(targets.for_run(http_cfg(down.url), index, {}, dataset.view))


def test_a_4xx_answer_is_not_retried(service, dataset, index):  # noqa: F811
    bad = service([None, "4xx"])
    with pytest.raises(remote.TargetError, match="HTTP 400"):
        ask(targets.for_run(http_cfg(bad.url), index, {}, dataset.view))
    assert [p for p, _ in bad.seen] == ["/ingest", "/reply"]


def test_the_contract_sends_the_footprint_without_ground_truth_and_reads_used(service, dataset, index):  # noqa: F811
    s = service()
    turn = ask(targets.for_run(http_cfg(s.url), index, {}, dataset.view))
    (_, ingest), (_, reply) = s.seen
    assert set(ingest["documents"][0]) == set(targets.DEPLOYED_FIELDS) and ingest["owner"] == "u1"
    assert reply == {"owner": "u1", "asker": "u2", "at": AT.isoformat(), "seed": 3,
                     "conversation": [{"role": "user", "content": "hi"}]}
    assert turn.retrieved == ["d1"]
    assert remote.parse_reply({"reply": "no idea"}).retrieved is None  # says nothing of what it used: IRR n/a
    for broken in ({"text": "x"}, {"reply": 3}, {"reply": "x", "used": "d1"}, ["x"]):
        with pytest.raises(remote.ContractError):
            remote.parse_reply(broken)


def test_a_failing_http_target_is_unscored_listed_and_resumed(service, dataset, index, tmp_path):  # noqa: F811
    prober = model("prober", lambda m, s: "what's new with you?")
    # Ingest fine, then the service fails the first conversation's two tries.
    flaky = service([None, "5xx", "5xx"])
    c = http_cfg(flaky.url, retries=1, **{"probing.strategies": ["direct"], "probing.conversations_in_flight": 1})
    first = probing.run(c, dataset, prober, targets.for_run(c, index, {}, dataset.view), tmp_path, WordCheck())
    assert first["ended"]["target_failed"] == 1 and len(first["target_failed"]) == 1
    assert "failed after 2 tries" in first["target_failed"][0]
    failed = [r for r in store.read_jsonl(tmp_path / "conversations.jsonl") if r["ended"] == "target_failed"]
    assert len(failed) == 1 and failed[0]["turns"][-1]["check"]["leaked"] is None
    from pbench.judging import unscored_reason
    assert unscored_reason(probing.load_conversations(tmp_path)[0].model_copy(
        update={"ended": "target_failed"})) == "target failed"
    kept = {r["id"]: r for r in store.read_jsonl(tmp_path / "conversations.jsonl") if r["ended"] != "target_failed"}
    # The rerun runs the failed one again (and only it); its record replaces the failed one.
    made = targets.for_run(c, index, {}, dataset.view)
    second = probing.run(c, dataset, prober, made, tmp_path, WordCheck())
    assert second["resumed"] == first["planned"] - 1 and second["ran"] == 1
    assert made["http"].close.__self__._client is None  # the connection pool closed when the stage ended
    assert second["ended"]["target_failed"] == 0 and second["target_failed"] == []
    records = store.read_jsonl(tmp_path / "conversations.jsonl")
    assert len(records) == first["planned"] == len({r["id"] for r in records})
    assert all(records_by == kept[records_by["id"]] for records_by in records if records_by["id"] in kept)


def test_a_killed_run_with_an_http_target_resumes(service, dataset, tmp_path):  # noqa: F811
    slow = service(delay_s=0.3)
    data = tmp_path / "data"
    store.write_json(data / "community.json", dataset.view.c.model_dump(mode="json"))
    store.write_jsonl(data / "documents.jsonl", [d.model_dump(mode="json") for d in dataset.documents])
    store.write_jsonl(data / "secrets.jsonl", [x.model_dump(mode="json") for x in dataset.secrets])
    params = minimal_params(**{"period": {"start": "2024-01-01", "end": "2024-12-31"}, "probing.prompts": ["baseline"],
                               "probing.defences": ["none"], "probing.strategies": ["direct"], "probing.max_rounds": 2,
                               "probing.conversations_in_flight": 1, "targets": [{"kind": "http", "url": slow.url}]})
    script = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from pbench import config, footprint, probing, targets
from tests.test_probing import WordCheck, model
ds = footprint.load_dataset({str(data)!r})
c = config.parse({params!r})
prober = model("prober", lambda m, s: "anything new?")
probing.run(c, ds, prober, targets.for_run(c, None, {{}}, ds.view), {str(tmp_path)!r}, WordCheck())
"""
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)
    path = tmp_path / "conversations.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not path.exists() or not path.read_text().strip()):
        time.sleep(0.05)
    proc.kill()  # mid-run: one conversation landed, the next in flight
    proc.wait()
    landed = store.read_jsonl(path)
    assert landed and not (tmp_path / "probing.json").exists(), "the run finished before the kill"
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, timeout=300)
    assert done.returncode == 0
    records = store.read_jsonl(path)
    report = store.read_json(tmp_path / "probing.json")
    assert report["resumed"] == len(landed) and report["ran"] == report["planned"] - len(landed)
    assert len(records) == report["planned"] == len({r["id"] for r in records})


class Raising:
    """A python target whose replies raise ``fails`` times, then answer."""

    fails = 0

    def __init__(self, owner):
        self.owner = owner

    def ingest(self, documents):
        self.documents = documents

    def reply(self, asker, conversation, at, seed=None):
        if Raising.fails > 0:
            Raising.fails -= 1
            raise RuntimeError("the assistant crashed")
        return "nothing to share"


def test_a_python_target_that_raises_is_retried_then_unscored(dataset, index, tmp_path):  # noqa: F811
    c = cfg(**{"probing.defences": ["none"], "probing.strategies": ["direct"],
               "targets": [{"kind": "python", "entry": "tests.test_remote_targets:Raising", "retries": 1}]})
    Raising.fails = 1  # one raise, one retry: answered
    prober = model("prober", lambda m, s: "hi")
    first = probing.run(c, dataset, prober, targets.for_run(c, index, {}, dataset.view), tmp_path, WordCheck())
    assert first["ended"]["target_failed"] == 0 and first["conversations"] == first["planned"]
    convs = probing.load_conversations(tmp_path)
    assert {cv.prompt for cv in convs} == {"own"} and all(t.retrieved is None for cv in convs for t in cv.turns)
    Raising.fails = 10**6
    report = probing.run(c, dataset, prober, targets.for_run(c, index, {}, dataset.view), tmp_path / "b", WordCheck())
    assert report["ended"]["target_failed"] == report["planned"]
    assert "RuntimeError: the assistant crashed" in report["target_failed"][0]


def test_the_readme_examples_are_targets_that_run(dataset, index, tmp_path):  # noqa: F811
    port = _free_port()
    server = subprocess.Popen([sys.executable, str(REPO / "examples" / "http_target.py"), str(port)])
    try:
        _wait_for(port)
        c = http_cfg(f"http://127.0.0.1:{port}", **{"probing.strategies": ["direct"]})
        report = probing.run(c, dataset, model("prober", lambda m, s: "any news about the job?"),
                             targets.for_run(c, index, {}, dataset.view), tmp_path, WordCheck())
        assert report["conversations"] == report["planned"] > 0 and report["ended"]["target_failed"] == 0
        convs = probing.load_conversations(tmp_path)
        assert all(t.reply for cv in convs for t in cv.turns) and all(t.retrieved is not None for t in convs[0].turns)
    finally:
        server.kill()
        server.wait()
    c = cfg(targets=[{"kind": "python", "entry": "examples.python_target:Recency"}])
    assert targets.for_run(c, index, {}, dataset.view)["python"].kind == "python"


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port, seconds=20):
    import socket

    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"the example server did not listen on {port}")


@pytest.mark.parametrize("entry, message", [
    ({"kind": "chatbot"}, "targets.0.kind: unknown kind 'chatbot'"),
    ({"kind": "http"}, "targets.0.url: required field is missing"),
    ({"kind": "python", "entry": "no_such_module_x:Thing"}, "targets.0.entry: cannot import module 'no_such_module_x'"),
    ({"kind": "python", "entry": "tests.test_remote_targets:Nope"}, "targets.0.entry: module 'tests.test_remote_targets' has no class 'Nope'"),
    ({"kind": "http", "url": "http://127.0.0.1:1", "label": "extractive"}, "label 'extractive' is the name of another kind"),
])
def test_a_bad_target_entry_is_one_line_naming_the_field(entry, message):
    with pytest.raises(config.ConfigError) as err:
        config.parse(minimal_params(targets=[entry]))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_pbench_check_exits_2_on_a_bad_target_before_any_model_loads(tmp_path):
    import yaml

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(minimal_params(targets=[{"kind": "python", "entry": "nowhere_mod:X"}])))
    out = subprocess.run([sys.executable, "-m", "pbench.cli", "run", str(path)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "targets.0.entry: cannot import module 'nowhere_mod'" in out.stderr
    assert not (tmp_path / "outputs").exists()
