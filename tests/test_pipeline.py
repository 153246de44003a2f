"""The real thing, with the embedded model, through the runner, as `make demo` runs it.

- Stages 01-02 generate a (smaller) world live; it packs, verifies, and reproduces from its cache.
- Stages 03-07 of params/tiny.yaml run on the shipped world, worlds/tiny-v1, as `make demo` runs
  them; then a rerun that must skip every stage with no model call, and a reproduction from the
  response cache.

Every role of stages 03-07 reaches one llama.cpp server of the embedded model, started in this
process, as the demo's roles share one in theirs: the assistant and the judges through its
OpenAI-compatible endpoint, the prober through a proxy that demands an API key, so the run also
shows that a key taken from the environment is written nowhere. (With a second server in the
stage's kernel, the two fought over the 2 cores: stage 04 took 1.47 and 1.55 times its bound at
the machine's rates, the prompt tokens the prefix cache held not counted; on one server, 1.26.
Roles bound with ``provider: local`` in a stage's kernel are the live generation test's, below.)"""

import contextlib
import functools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pandas as pd
import pytest
import yaml

from pbench import cli, config, embedded, estimate, footprint as fp, llm, probing as pr, reproduce, run, social_graph as sg
from pbench import world as worlds

SHIPPED = run.repo_root() / "worlds" / "tiny-v1"

CANARY = "sk-canary-5f1c0e7d9b2a4c3e8d6f"


@contextlib.contextmanager
def key_checking_proxy(upstream: str, key: str):
    """An endpoint on 127.0.0.1 that refuses requests without ``Bearer key`` and forwards the
    rest to ``upstream``; yields its base URL and the count of requests with and without the key."""
    seen = {"with_key": 0, "without": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Authorization") != f"Bearer {key}":
                seen["without"] += 1
                self.send_response(401)
                self.end_headers()
                return
            seen["with_key"] += 1
            r = httpx.post(upstream + self.path, content=body, headers={"Content-Type": "application/json"},
                           timeout=600)
            self.send_response(r.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(r.content)))
            self.end_headers()
            self.wfile.write(r.content)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    finally:
        server.shutdown()


@pytest.mark.slow
def test_tiny_pipeline_end_to_end(tmp_path, monkeypatch, capfd, request):
    data = yaml.safe_load(open(run.repo_root() / "params" / "tiny.yaml"))
    data["outputs_dir"] = str(tmp_path)
    data["world"] = str(SHIPPED)  # stages 01-02 are tested live in the test below
    local = data["models"]["prober"]
    upstream, _ = llm.SERVERS.url(config.ModelSpec(**local))
    monkeypatch.setenv("PBENCH_CANARY_KEY", CANARY)
    # One proxy for the whole test: its address is part of the prober's cache key.
    stack = contextlib.ExitStack()
    request.addfinalizer(stack.close)
    url, seen = stack.enter_context(key_checking_proxy(upstream, CANARY))
    def served(spec, **how):  # the role's settings, sent to the one server
        return {**{k: v for k, v in spec.items() if k not in ("provider", *config.LOCAL_ONLY)}, "provider": "openai",
                **how}

    data["models"]["prober"] = served(local, base_url=url, api_key_env="PBENCH_CANARY_KEY", max_concurrency=2)
    for role in ("assistant", "judge"):
        data["models"][role] = [served(m, base_url=upstream + "/v1", max_concurrency=4) for m in data["models"][role]]
    # The judge measured on 59 held-out dev cases, the same number from every category (2 of them
    # a confidant's, which call the model), not on all 209: the 14 calls more are 100-200 s of
    # this test on 2 cores, and the demo measures on all of them (test_validation: the sample).
    data["validation"]["dev_cases"] = 60
    params = tmp_path / "tiny.yaml"
    params.write_text(yaml.safe_dump(data))
    # The estimate at rates kept on this machine, or from per-call figures: measuring the 1.5B's
    # rates takes 70-110 s on 2 cores, and test_local_model measures them (on the 135M, the same code).
    monkeypatch.setattr(estimate, "machine_rates", functools.partial(estimate.machine_rates, measure_now=False))
    results = run.run(params, progress=False)
    assert [r.status for r in results] == ["world"] * 2 + ["ran"] * (len(run.STAGES) - 2)
    assert seen["with_key"] > 0 and seen["without"] == 0
    _nothing_holds(CANARY, tmp_path, capfd)
    out = tmp_path / "tiny"

    # 01-02: the world as read from the pack, the same checks as a generated one passes.
    assert worlds.world_id(out) == worlds.verify(SHIPPED).id
    view = sg.load(out)
    assert len(view.people) == 8 and len(view.c.groups) >= 2
    _world_passes_its_checks(out)

    # 03: an index per user, the tagger's verdicts, and a real assistant turn in the notebook.
    index = json.loads((out / "index.json").read_text())
    assert index["users"] == 8 and index["tagged"] == 0  # tiny has no sensitivity_filter: nothing to tag

    # 04: every planned conversation finished whole (or was counted as an error), and each turn
    # was judged by the panel, every judge's vote kept.
    plan = (out / "probe_plan.csv").read_text().strip().splitlines()
    probing = json.loads((out / "probing.json").read_text())
    convs = pr.load_conversations(out)
    assert len(convs) + len(probing["errors"]) == len(plan) - 1 and convs
    # (a reply that did not parse or was empty stops its conversation, unjudged and unscored)
    assert all(t.check.method.startswith("judge panel") and t.check.votes or
               (c.ended == "reply_failed" and t.check.leaked is None) for c in convs for t in c.turns)
    assert all(c.ended != "leak" or c.turns[-1].check.leaked for c in convs)
    assert {c.strategy for c in convs if not c.authorised} == {"direct", "indirect", "pretext", "delegation"}
    # The owner's drafts (a request, then one revision) and the outsider who cites someone who may know.
    assert all(len(c.turns) <= 2 and c.setup in pr.TASKS for c in convs if c.strategy == "delegation")
    assert {c.target for c in convs if c.strategy == "pretext"} == {"qwen2.5-coder-1.5b"}  # tiny: rag only
    assert set(probing["quality"]) == {"prober_assertions", "prober_third_person", "prober_self_address",
                                        "assistant_echoes", "assistant_third_person", "assistant_owner_address",
                                        "empty_replies"}

    # 05: one judgement per planned conversation (given-up ones unscored), and the metrics with their counts.
    rows = [json.loads(line) for line in (out / "judgements.jsonl").read_text().splitlines()]
    assert {c.id for c in convs} <= {r["id"] for r in rows} and len(rows) == len(plan) - 1
    assert all(r["verdict"] in ("leak", "no_leak", "shared", "withheld", "unscored") for r in rows)
    assert all(bool(r["unscored_reason"]) == (r["verdict"] == "unscored") for r in rows)
    mets = pd.read_csv(out / "metrics.csv")
    overall = mets[mets["by"] == "all"].set_index("metric")
    chat = [r for r in rows if r["strategy"] in ("direct", "indirect")]  # the headline: the paper's protocol
    assert overall.loc["LR", "conversations"] + overall.loc["LR", "unscored"] == sum(not r["authorised"] for r in chat)
    every = mets[mets["scope"] == "all"]
    drafts = [r for r in rows if r["strategy"] == "delegation"]
    assert every[(every["strategy"] == "delegation") & (every["metric"] == "LR")]["n"].sum() == \
        sum(r["verdict"] != "unscored" for r in drafts)
    assert (out / "figures" / "rates_by_defence.png").stat().st_size > 10_000
    # ... measured against the dev set's held-out split, so that LR, OSR and the catch rate are
    # also given corrected for the judge (or say why not), never silently as if it were perfect.
    judged_by = json.loads((out / "judge_error.json").read_text())["judges"]
    assert judged_by["leak"]["source"] == "57 heldout dev cases" and judged_by["disclosure"]["tp"] + judged_by["disclosure"]["fn"] > 0
    assert {"corrected", "corrected_lo", "corrected_hi", "correction"} <= set(mets.columns)
    assert overall.loc["LR", "correction"].startswith(("corrected for the judge (recall", "judge too weak"))
    assert len((out / "validation" / "dev_verdicts.jsonl").read_text().splitlines()) == 59

    # 06: tables, figures and the self-contained report, from the records alone.
    assert (out / "tables" / "table2_metrics.tex").read_text().startswith("\\begin{tabular}")
    assert (out / "report.html").stat().st_size > 50_000 and (out / "figures" / "tradeoff.png").exists()
    found = (out / "findings.md").read_text()  # the findings, built from this run's numbers
    assert "### Overall" in found and "### What cannot be concluded" in found and "The run is small" in found
    assert "### Attack surfaces" in found and "Delegation LR" in found and "Pretext LR" in found
    assert (out / "tables" / "strategies.csv").exists() and (out / "figures" / "surfaces.png").stat().st_size > 10_000
    assert 'id="findings"' in (out / "report.html").read_text()
    assert "as judged;" in found and "permutation test" in found
    # Every notebook ends with "What this shows", computed and displayed, never an error.
    for nb_path in sorted((out / "notebooks").glob("*.ipynb")):
        last = json.loads(nb_path.read_text())["cells"][-1]
        assert "narrate" in "".join(last["source"]) or "findings.markdown" in "".join(last["source"]), nb_path.name
        assert [o["output_type"] for o in last["outputs"]] == ["execute_result"], nb_path.name
        assert "text/markdown" in last["outputs"][0]["data"], nb_path.name

    # 07: the dev set as stage 05's panel judged it, C.1 snippets, the labelling page.
    validation = json.loads((out / "validation.json").read_text())
    assert validation["dev_split"] == "heldout" and validation["dev_cases"] == 59
    assert validation["dev_agreement"]["leak"]["panel"]["scored"] == 57
    assert validation["dev_agreement"]["disclosure"]["panel"]["scored"] > 0
    assert validation["human"] is None  # nobody has labelled yet
    page = (out / "label.html").read_text()
    assert '"format":"pbench-labels/1"' in page and not re.search("https?://", page)

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["world_id"] == worlds.world_id(out)

    # The estimate, made from the parameters and the shipped calibration (another live run), against
    # what this run asked for and spent. The target is 25%; the community drawn varies between live
    # runs (how many secrets, how many tellings regenerated), so the test holds it to 40% and
    # writes the figures beside the reproduction's.
    calibrated = estimate.calibrate(out)
    assert {"04_probing/prober", "04_probing/assistant", "05_scoring/judge"} <= set(calibrated["per"])
    against = estimate.compare(estimate.estimate(config.load(params), "tiny.yaml"), manifest)
    with open(tmp_path / "reproduction.txt", "a") as fh:
        for what, guess, actual in against:
            fh.write(f"estimate: {what} {guess:,.0f}, actual {actual:,.0f} ({100 * (guess - actual) / actual:+.0f}%)\n")
    assert all(abs(guess - actual) <= 0.4 * actual for _, guess, actual in against), against

    # A rerun of a finished run skips every stage and calls no model.
    again = run.run(params, progress=False)
    assert [r.status for r in again] == ["skipped"] * len(run.STAGES)
    _reproduces(out, data, tmp_path, run.STAGES[2:])


@pytest.mark.slow
def test_stages_01_02_generate_a_world_live_that_packs_verifies_and_reproduces(tmp_path):
    """Stages 01-02 as tiny runs them, on a community of 5 with one group and no blog post:
    every check passes, the world packs and verifies, and it reproduces from its cache."""
    data = yaml.safe_load(open(run.repo_root() / "params" / "tiny.yaml"))
    data["outputs_dir"] = str(tmp_path)
    data["community"].update(size=5, groups=1)
    data["footprint"].update(blog_posts=0)
    params = tmp_path / "tiny.yaml"
    params.write_text(yaml.safe_dump(data))
    results = run.run(params, stages=["01", "02"], progress=False)
    assert [r.status for r in results] == ["ran", "ran"]
    out = tmp_path / "tiny"

    view = sg.load(out)
    assert len(view.people) == 5 and len(view.c.groups) >= 1
    assert (out / "figures" / "01_graph_over_time.png").stat().st_size > 10_000
    assert (out / "figures" / "02_documents_timeline.png").stat().st_size > 10_000
    _world_passes_its_checks(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stages"]["01_social_graph"]["metrics"]["per_person"]["calls"] > 0
    assert manifest["stages"]["02_footprint"]["metrics"]["per_document"]["tokens"] > 0
    for nb_path in sorted((out / "notebooks").glob("*.ipynb")):  # each ends with "What this shows"
        last = json.loads(nb_path.read_text())["cells"][-1]
        assert [o["output_type"] for o in last["outputs"]] == ["execute_result"], nb_path.name

    assert cli.main(["world", "pack", str(out), "--out", str(tmp_path / "pack"), "--name", "live"]) == 0
    assert worlds.verify(tmp_path / "pack").id == worlds.world_id(out) == manifest["world_id"]
    _reproduces(out, data, tmp_path, run.STAGES[:2], stages=["01", "02"])


def _world_passes_its_checks(out):
    """Stage 01's community and stage 02's footprint in ``out`` pass every check the stages make."""
    # 01: a community that passes every check.
    view = sg.load(out)
    assert {k: v for k, v in sg.check(view.c).items() if v} == {}
    saved = json.loads((out / "community.json").read_text())["validation"]
    assert all(n == 0 for n in saved["remaining_after_repair"].values())
    assert saved["quality"] and set(saved["quality"].values()) == {0}  # the content audit: identities by code
    # 02: documents grounded in the graph, secrets pointing at their documents, validation reported.
    ds = fp.load_dataset(out)
    assert {k: v for k, v in fp.check_dataset(ds).items() if v} == {}
    assert ds.secrets and {d.kind for d in ds.documents} >= {"chat", "group_chat", "purchase"}
    report = json.loads((out / "footprint.json").read_text())["validation"]
    assert report["verbatim"] + report["semantic"] + report["missing"] == sum(len(s.sharing) for s in ds.secrets)
    assert (out / "DATASHEET.md").read_text().startswith("# Datasheet")
    quality = json.loads((out / "footprint.json").read_text())["quality"]
    assert quality["first_person_components"] == quality["ungrounded_components"] == 0  # drawn by code
    assert all(s.topic and s.about and 2 <= len(s.core_components) <= 4 for s in ds.secrets)
    return ds


def _reproduces(out, data, tmp_path, ran, stages=None) -> None:
    """The same parameters into another run folder, from a copy of ``out``'s response cache, make
    no model call in the stages that ``ran`` and write the same data files: every one of those
    stages recomputed from scratch, from the cached replies. The figures are written to
    reproduction.txt. (Which stages an edit of their code reruns is test_sources' check, on the
    real notebooks; --force and a rerun after an edit recompute as this run does, and cost another
    run of the notebooks: 150 s here, before.)"""
    other = tmp_path / "again"
    replies = reproduce.copy_cache(out / "llm_cache.sqlite", other / "llm_cache.sqlite")
    params2 = tmp_path / "again.yaml"
    params2.write_text(yaml.safe_dump({**data, "outputs_dir": str(other),
                                       "llm": {**data.get("llm", {}), "cache_path": str(other / "llm_cache.sqlite")}}))
    compared = len(reproduce.data_files(out))
    redone = run.run(params2, stages=stages, progress=False)
    calls = reproduce.model_calls(redone)
    differ = reproduce.differences(out, other / "tiny")
    with open(tmp_path / "reproduction.txt", "a") as fh:  # the figures, for whoever reads the run
        fh.write(f"reproduction (cached): {[r.status for r in redone]}: {sum(calls.values())} model calls with "
                 f"{replies} cached replies; {compared - len(differ)} of {compared} data files identical; {differ}\n")
    assert calls == dict.fromkeys((s.name for s in ran), 0)
    assert differ == {}


def _nothing_holds(secret: str, root, capfd) -> None:
    """No file under ``root`` (outputs, executed notebooks, manifest, logs, response cache), no
    file of the model cache and nothing printed contains ``secret``."""
    needle = secret.encode()
    files = [p for p in root.rglob("*") if p.is_file()]
    files += [p for p in embedded.cache_dir().glob("*") if p.is_file() and p.stat().st_size < 10_000_000]
    holding = [str(p) for p in files if needle in p.read_bytes()]
    assert not holding, f"the API key was written to {holding}"
    out, err = capfd.readouterr()
    assert secret not in out and secret not in err
