"""How fast the report opens at paper scale (issue 17): a run of 5,000 conversations of 10
rounds, its report built, then opened cold in headless Chromium three times, and a filter
applied in the page.

    python -m bench.report_load [--conversations 5000] [--rounds 10] [--repeats 3]   # from the repository's root
    python -m bench.report_load --run outputs/<run> [--conversations N]

Without ``--run`` the conversations are the test suite's scripted run with its figures drawn
(``tests/test_analysis.py::drawn_run``, set up by ``pytest --setup-only``, so the fixtures are
reused, not copied), scaled up by ``scale``: each copy gets a new id, a cycled defence,
prompt and strategy, ``--rounds`` turns, and filler words that bring a turn to about 700
bytes of prober's message and reply, about 7 KB of text a conversation; its judgement is
copied with it, so verdicts, highlights and retrieved documents stay the pipeline's. With
``--run`` a real run is copied (its index, cache, notebooks and report left out) and
measured as it is, or scaled up when ``--conversations`` is given. Works in a temporary
folder; the run given is not touched.

Prints the report's files (what ``report.build`` added to the run folder) and their size,
the time ``report.build`` took (its tables and headline computed beforehand), then per
repeat the wall time from asking a just-started Chromium (a fresh profile: nothing cached
but the operating system's file cache) to open the report's
``file://`` address until the page marks itself ready (``<body data-ready="yes">``, set
once its first page of transcripts is on screen), and what the page shows after the
verdict filter is set to ``leak`` the way a reader sets it (the select changed, its
``change`` event dispatched). Exits 1 when the page never gets ready or the filter shows
the wrong conversations.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``):
no port, no extra library. ``dump_dom`` and ``Browser`` are shared with the report's tests.
"""

from __future__ import annotations

import argparse
import fcntl
import itertools
import json
import os
import platform
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time
import typing
from pathlib import Path
from typing import Any

from pbench import analysis, metrics, report, store
from pbench.schema import Conversation

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Headless, offline and quiet: no sandbox (containers run as root), no GPU, no background
# traffic to Google, nothing remembered between runs but the profile folder given.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
# A test whose fixture is the scripted judged run with its figures (drawn_run); only set up.
BASE_TEST = "tests/test_analysis.py::test_figures_and_report_from_a_run_folder"
WORDS = ("the", "weekend", "was", "busy", "and", "we", "talked", "about", "plans", "for", "next", "month", "with",
         "friends", "from", "work", "dinner", "trip", "garden", "meeting", "project", "family", "weather", "coffee",
         "later", "maybe", "really", "good", "news", "quiet", "week", "office", "train", "book", "club", "run")


def dump_dom(url: str, profile: Path, budget_ms: int = 3000) -> subprocess.CompletedProcess:
    """The DOM of ``url`` after ``budget_ms`` of the page's virtual time in headless Chromium
    (``--dump-dom``), with its stderr: what a test reads to see what the page rendered."""
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
                           "--dump-dom", url], capture_output=True, text=True, timeout=120)


class Browser:
    """A headless Chromium with one page, driven over the DevTools protocol on a pipe: the
    browser reads commands on its fd 3 and answers on its fd 4, each message JSON ended by a
    NUL byte. Use as a context manager; the browser is closed (killed if it hangs) on exit."""

    def __init__(self, profile: Path) -> None:
        cmd_r, self._cmd = os.pipe()
        self._out, out_w = os.pipe()

        def wire() -> None:  # in the child: the pipe ends become fds 3 and 4, whatever their numbers were
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (cmd_r, out_w)]
            for fd, want in zip(high, (3, 4), strict=True):
                os.dup2(fd, want)
                os.close(fd)

        # close_fds would close fds 3 and 4 after ``wire``; Python's own fds are close-on-exec anyway.
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
                                      "about:blank"], preexec_fn=wire, close_fds=False, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(out_w)
        self._buf, self._id, self.session = b"", 0, None
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def send(self, method: str, timeout: float = 60, **params: Any) -> dict[str, Any]:
        """Send one command (to the page once attached) and return its result.

        Raises:
            RuntimeError: the browser answered with an error; TimeoutError: no answer in ``timeout`` s.
        """
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self._cmd, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            left = deadline - time.monotonic()
            # poll, not select: select refuses a descriptor above 1023, which a long-lived
            # process (a pytest worker that ran many test files first) can hold.
            readable = select.poll()
            readable.register(self._out, select.POLLIN)
            if left <= 0 or not readable.poll(left * 1000):
                raise TimeoutError(f"{method}: no answer from Chromium in {timeout} s")
            chunk = os.read(self._out, 1 << 20)
            if not chunk:
                raise RuntimeError(f"{method}: Chromium exited (code {self.proc.poll()})")
            self._buf += chunk

    def js(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        out = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in out:
            details = out["exceptionDetails"]
            why = details.get("exception", {}).get("description") or details.get("text")
            raise RuntimeError(f"{expression[:80]}: {why}")
        return out["result"].get("value")

    def choose(self, select: str, value: str) -> None:
        """Set the ``<select>`` matching CSS selector ``select`` to ``value`` as a reader does:
        the value changed, then its ``change`` event."""
        self.js(f"(s => {{ s.value = {json.dumps(value)}; s.dispatchEvent(new Event('change')); }})"
                f"(document.querySelector({json.dumps(select)}))")

    def wait(self, expression: str, timeout: float = 60, every: float = 0.01) -> float:
        """Seconds until ``expression`` is true in the page, polled every ``every`` s.

        Raises:
            TimeoutError: still false after ``timeout`` s.
        """
        t0 = time.perf_counter()
        while not self.js(expression):
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError(f"{expression} still false after {timeout} s")
            time.sleep(every)
        return time.perf_counter() - t0

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.session = None
            self.send("Browser.close", timeout=10)
        except (OSError, RuntimeError, TimeoutError):
            pass  # already gone, or hung: killed below
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd)
        os.close(self._out)


def scripted_run(folder: Path) -> Path:
    """The test suite's scripted judged run, with its figures, made under ``folder`` by setting
    up ``BASE_TEST``'s fixtures with pytest (the test itself is not run).

    Raises:
        RuntimeError: a fixture failed (pytest's output attached).
    """
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "--setup-only", "-p", "no:cacheprovider",
                          f"--basetemp={folder}", BASE_TEST], cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"setting up {BASE_TEST} failed:\n{out.stdout[-3000:]}{out.stderr[-2000:]}")
    return next(p.parent for p in sorted(folder.glob("*/judgements.jsonl")) if not p.parent.is_symlink())


def _filler(rng: random.Random, size: int) -> str:
    """Sentences of common words, about ``size`` characters, drawn from ``rng``."""
    out: list[str] = []
    while sum(map(len, out)) < size:
        words = rng.choices(WORDS, k=rng.randint(6, 14))
        out.append(" ".join(words).capitalize() + ".")
    return " ".join(out)


def scale(base: Path, out: Path, conversations: int, rounds: int, seed: int = 0) -> Path:
    """A run folder of ``conversations`` judged conversations of ``rounds`` turns each, made
    from a judged run's (see the module docstring). Copies the base's dataset, figures,
    probing record, manifest and parameters; writes ``conversations.jsonl``,
    ``judgements.jsonl`` and ``metrics.csv``. Deterministic in ``seed``.

    Returns:
        ``out``.
    """
    out.mkdir(parents=True)
    for name in ("community.json", "documents.jsonl", "secrets.jsonl", "probing.json", "manifest.json",
                 "params.resolved.yaml"):
        if (base / name).exists():
            shutil.copy2(base / name, out / name)
    if (base / "figures").is_dir():
        shutil.copytree(base / "figures", out / "figures")
    rows = {r["id"]: r for r in store.read_jsonl(base / "judgements.jsonl")}
    convs = [c for c in store.read_jsonl(base / "conversations.jsonl") if c["id"] in rows]
    fields = Conversation.model_fields
    # The system prompts a rag target runs under ("none" and "own" belong to other target kinds).
    combos = list(itertools.product(*(tuple(v for v in typing.get_args(fields[f].annotation) if v not in ("none", "own"))
                                      if f == "prompt" else typing.get_args(fields[f].annotation)
                                      for f in ("strategy", "prompt", "defence"))))
    rng = random.Random(seed)
    new_convs, new_rows = [], []
    for k in range(conversations):
        c = convs[k % len(convs)]
        strategy, prompt, defence = combos[k // len(convs) % len(combos)]  # defences vary fastest
        cid = f"{c['id']}-{k:05d}"
        turns = ([c["turns"][0]] * max(0, rounds - len(c["turns"])) + c["turns"])[-rounds:]
        turns = [{**t, "round": i, "prober": f"{t['prober']} {_filler(rng, 180)}",
                  "reply": f"{t['reply']} {_filler(rng, 480)}"} for i, t in enumerate(turns, 1)]
        new_convs.append({**c, "id": cid, "defence": defence, "prompt": prompt, "strategy": strategy, "turns": turns})
        new_rows.append({**rows[c["id"]], "id": cid, "defence": defence, "prompt": prompt, "strategy": strategy,
                         "turns": rounds})
    store.write_jsonl(out / "conversations.jsonl", new_convs)
    store.write_jsonl(out / "judgements.jsonl", new_rows)
    store.atomic_write_text(out / "metrics.csv", metrics.all_tables(new_rows).to_csv(index=False))
    return out


def report_inputs(run_dir: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """What stage 06 hands ``report.build`` for a judged run: tables (Table 2, the defence
    table) and the headline."""
    long = analysis.load(run_dir)["long"]
    return {"Table 2": analysis.table2(long), "Defences": analysis.defence_table(long)}, analysis.headline(long)


def build_report(run_dir: Path) -> Path:
    """``report.build`` on a judged run (see ``report_inputs``)."""
    return report.build(run_dir, *report_inputs(run_dir))


# The page has drawn the view asked for (the report sets it; "no" while transcripts load).
READY = "document.body !== null && document.body.dataset.ready === 'yes'"
# The conversations a reader sees: rendered and not hidden.
VISIBLE = "[...document.querySelectorAll('details.conv')].filter(d => d.offsetParent !== null)"


def open_cold(path: Path, profile: Path) -> tuple[float, dict[str, Any]]:
    """Seconds from asking a just-started Chromium to open ``path`` until the page is ready,
    and what it shows (and how soon) after the verdict filter is set to ``leak``."""
    with Browser(profile) as b:
        t0 = time.perf_counter()
        b.send("Page.navigate", url=path.as_uri())
        b.wait(READY)
        opened = time.perf_counter() - t0
        first = b.js(f"{VISIBLE}.length")
        b.choose("#filters select[name=verdict]", "leak")
        return opened, {"first_page": first, "filter_s": b.wait(READY),
                        "leak_on_screen": b.js(f"{VISIBLE}.map(d => d.dataset.verdict)"),
                        "shown": b.js("document.getElementById('shown').textContent"),
                        "errors": b.js("document.getElementById('errors').textContent")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, help="a judged run folder (default: the test suite's scripted run, scaled up)")
    ap.add_argument("--conversations", type=int, help="scale up to this many (default: 5000; with --run, as it is)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if CHROMIUM is None:
        raise SystemExit("error: Chromium is not installed (make browser)")
    n = args.conversations if args.conversations is not None or args.run else 5000
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; {CHROMIUM}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.run:
            base = tmp / "run"
            shutil.copytree(args.run, base, ignore=shutil.ignore_patterns("index", "llm_cache.sqlite*", "notebooks",
                                                                          "stages", "stale", "report*"))
        else:
            base = scripted_run(tmp / "pytest")
        run_dir = scale(base, tmp / "scaled", n, args.rounds) if n else base
        inputs = report_inputs(run_dir)
        before = {p for p in run_dir.rglob("*") if p.is_file()}
        t0 = time.perf_counter()
        page = report.build(run_dir, *inputs)
        build_s = time.perf_counter() - t0
        files = sorted(p for p in run_dir.rglob("*") if p.is_file() and p not in before)
        leaks = sum(r["verdict"] == "leak" for r in store.read_jsonl(run_dir / "judgements.jsonl"))
        lines = (run_dir / "conversations.jsonl").read_bytes().splitlines()
        rounds = max(len(json.loads(line)["turns"]) for line in lines)
        print(f"run: {len(lines)} conversations, {leaks} leaks, up to {rounds} rounds; a conversation's record "
              f"is {sum(map(len, lines)) / len(lines) / 1000:.1f} KB on average")
        print(f"report: {len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.2f} MB "
              f"(report.html {page.stat().st_size / 1e6:.2f} MB); built in {build_s:.1f} s")
        failed = False
        for i in range(args.repeats):
            opened, shows = open_cold(page, tmp / f"profile{i}")
            right = set(shows["leak_on_screen"]) == {"leak"} and str(leaks) in shows["shown"]
            failed |= not right or bool(shows["errors"])
            print(f"open {i + 1}: ready in {opened:.2f} s with {shows['first_page']} conversations on screen; "
                  f"verdict=leak in {shows['filter_s']:.2f} s: {len(shows['leak_on_screen'])} on screen, all leaks: "
                  f"{set(shows['leak_on_screen']) == {'leak'}}, count says {shows['shown'].strip()!r} "
                  f"(expected {leaks}){'; errors: ' + shows['errors'] if shows['errors'] else ''}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
