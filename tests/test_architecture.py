"""The package's layers: each module imports only from modules below it, so that no two
modules import each other, directly or around a loop."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pbench"


def imports() -> dict[str, set[str]]:
    """Module name to the pbench modules it imports anywhere in its text (functions included)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.with_suffix("").relative_to(PACKAGE.parent).parts).removesuffix(".__init__")
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "pbench":
                found |= {f"pbench.{a.name}" for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pbench."):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("pbench.")}
        graph[name] = found - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import circle once, as the path that closes it (depth-first search)."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_walk_finds_a_circle_when_there_is_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_module_of_pbench_imports_one_that_imports_it_back():
    graph = imports()
    assert len(graph) > 20 and "pbench.judging" in graph["pbench.judgefit"]  # the walk reads the package
    assert circles(graph) == [], "import circles: " + "; ".join(" -> ".join(c) for c in circles(graph))
