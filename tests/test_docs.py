"""The README, ARCHITECTURE.md and docs/ point at things that exist: links resolve (anchors
included), the paths they name are in the repository, and the README's two commands are the
Makefile's and CI's."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(r"`((?:params|examples|notebooks|docs|pbench|bench|tests|\.ci)/[\w./-]+)`")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_slug_is_githubs():
    assert slug("The memory target (`pbench/memory.py`)") == "the-memory-target-pbenchmemorypy"
    assert slug("What a run writes") == "what-a-run-writes"


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_path_the_pages_name_exists():
    missing = []
    for page in PAGES:
        for path in PATH.findall(page.read_text(encoding="utf-8")):
            if any(c in path for c in "<*") or ".." in path or "NN" in path:
                continue  # a pattern, not a file
            if not (ROOT / path.rstrip("/.")).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


def test_the_readmes_two_commands_are_the_makefiles_and_ci_runs_the_second():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), flags=re.M))
    assert re.search(r"^make demo ", readme, flags=re.M) and re.search(r"^make test ", readme, flags=re.M)
    assert {"demo", "test"} <= targets
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().endswith("make test")
