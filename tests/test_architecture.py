"""The package's layers: each module imports only from modules below it, so that no two
modules import each other, directly or around a loop."""

from pathlib import Path

from pbench import sources

PACKAGE = Path(__file__).resolve().parents[1] / "pbench"


def imports() -> dict[str, set[str]]:
    """Module name to the pbench modules it imports anywhere in its text (functions included)."""
    return {name: set(found) for name, found in sources.graph(PACKAGE).items()}


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


# --------------------------------------------------------------------------- ARCHITECTURE.md

ARCHITECTURE = PACKAGE.parent / "ARCHITECTURE.md"


def layers(text: str) -> dict[str, int]:
    """Module name (``pbench.x.y``) to its layer, from the first fenced block under "## Layers":
    one line per layer, ``L<n> <title> | <module> ...``, continued on lines starting with ``|``.
    Names are relative to ``pbench/`` (``pbench`` alone is the package's ``__init__``)."""
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    found: dict[str, int] = {}
    layer = None
    for line in block.splitlines()[1:]:  # the first line is the fence's language
        head, bar, names = line.partition("|")
        if not bar:
            continue
        if head.strip():
            layer = int(head.split()[0].removeprefix("L"))
        assert layer is not None, f"ARCHITECTURE.md: a continuation line before any layer: {line!r}"
        for name in names.split():
            full = "pbench" if name == "pbench" else f"pbench.{name}"
            assert full not in found, f"ARCHITECTURE.md names {name} twice (L{found[full]} and L{layer})"
            found[full] = layer
    return found


def upward(graph: dict[str, set[str]], layer: dict[str, int]) -> list[str]:
    """Each import of a module listed in a higher layer than the importer's."""
    return [f"{m} (L{layer[m]}) imports {d} (L{layer[d]})" for m in sorted(graph) for d in sorted(graph[m])
            if m in layer and d in layer and layer[d] > layer[m]]


def test_the_layer_check_finds_an_import_that_reaches_up():
    text = "# A\n\n## Layers\n\n```text\nL2 top    | b\n          | c\nL1 bottom | pbench a\n```\n\n## Next\n"
    assert layers(text) == {"pbench.b": 2, "pbench.c": 2, "pbench": 1, "pbench.a": 1}
    graph = {"pbench.a": {"pbench.b"}, "pbench.b": {"pbench.a", "pbench.c"}, "pbench.c": set(), "pbench": set()}
    assert upward(graph, layers(text)) == ["pbench.a (L1) imports pbench.b (L2)"]


def test_architecture_md_lists_every_module_of_pbench_in_one_layer():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    listed, modules = set(layers(text)), set(imports())
    assert not modules - listed, ("modules missing from ARCHITECTURE.md's layers (add each to the line of "
                                  f"its layer, and a line under '## Modules'): {sorted(modules - listed)}")
    assert not listed - modules, f"ARCHITECTURE.md lists modules that do not exist: {sorted(listed - modules)}"
    described = {m for m in modules if f"\n- `{m.removeprefix('pbench.')}`:" in text}
    assert described == modules, f"modules without their line under '## Modules': {sorted(modules - described)}"


def test_no_module_imports_one_of_a_higher_layer():
    bad = upward(imports(), layers(ARCHITECTURE.read_text(encoding="utf-8")))
    assert not bad, "imports that reach up a layer (ARCHITECTURE.md): " + "; ".join(bad)
