"""The import graph of src/tfamily: no cycles among module-level imports, the spec and the
registry never import the parts, data/ never imports nn/, and every module imports in a
fresh interpreter whatever was imported before it."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "src"
PKG = ROOT / "tfamily"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(name: str, path: Path, module_level_only: bool) -> set[str]:
    """tfamily modules ``name`` imports (``from .x import y`` counts x, and x.y when y is a module)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def visit(node, top: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and module_level_only:
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.If) and ast.unparse(child.test) == "__name__ == '__main__'":
                continue  # runs only when the module is the program (`python -m ...`): the CLI's place, not an import
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names if a.name.startswith("tfamily"))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[:len(base) - child.level + 1]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                if not mod.startswith("tfamily"):
                    continue
                subs = {f"{mod}.{a.name}" for a in child.names if f"{mod}.{a.name}" in MODULES}
                out.update(subs)
                if child.module or len(subs) < len(child.names):  # `from . import x` names x only
                    out.add(mod)
            visit(child, top)
    visit(tree, True)
    return {m for m in out if m in MODULES and m != name}


def _graph(module_level_only: bool) -> dict[str, set[str]]:
    return {n: _imports(n, p, module_level_only) for n, p in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state and (c := dfs(v)):
                return c
        state[u] = 2
        stack.pop()
        return None
    for u in sorted(graph):
        if u not in state and (c := dfs(u)):
            return c
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles_among_module_level_imports():
    # Parent packages (tfamily/__init__ re-exporting build) are implicit and not counted.
    assert _cycle(_graph(module_level_only=True)) is None


@pytest.mark.parametrize("package", ["tfamily.data", "tfamily.nn"])
def test_no_import_cycles_inside_data_and_nn_lazy_imports_included(package):
    """An import inside a function hides a cycle without removing it: what two modules share sits
    below both (data/ids.py under tokenizer.py and vocab.py, nn/kernels/tiled.py under sdpa.py and
    blocksparse.py)."""
    graph = {m: {n for n in v if n.startswith(package)} for m, v in _graph(module_level_only=False).items()
             if m.startswith(package)}
    assert _cycle(graph) is None


def _closure(graph, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for m in graph[todo.pop()] - seen:
            seen.add(m)
            todo.append(m)
    return seen


def test_spec_and_registry_never_import_parts():
    graph = _graph(module_level_only=False)  # lazy imports inside functions count here
    assert sorted(m for m in _closure(graph, "tfamily.spec") if m.startswith("tfamily.nn")) == []
    assert graph["tfamily.registry"] == set()
    assert graph["tfamily.base.numbers"] == set()  # the number checker sits below every layer
    assert graph["tfamily.base"] == set()


def test_data_never_imports_nn():
    graph = _graph(module_level_only=False)
    bad = {m: sorted(n for n in _closure(graph, m) if n.startswith("tfamily.nn"))
           for m in graph if m.startswith("tfamily.data")}
    assert {m: v for m, v in bad.items() if v} == {}


def test_no_upward_imports():
    """Layers import only below them, lazy imports included: the parts never reach the trainer,
    the builder never reaches the presets built on it, and benchmarks never reach the
    reproductions (each of these once did, through a lazy import)."""
    graph = _graph(module_level_only=False)
    # base/numbers.py imports nothing; base/__init__.py is a docstring (``from ..base import numbers`` runs it)
    below_nn = {"tfamily.registry", "tfamily.base", "tfamily.base.hardware", "tfamily.base.numbers"}
    bad = {m: sorted(n for n in _closure(graph, m) if not n.startswith("tfamily.nn") and n not in below_nn)
           for m in graph if m.startswith("tfamily.nn")}
    assert {m: v for m, v in bad.items() if v} == {}
    assert "tfamily.members" not in _closure(graph, "tfamily.build")
    assert {m: sorted(n for n in graph[m] if n.startswith("tfamily.repro"))
            for m in graph if m.startswith("tfamily.bench") and any(n.startswith("tfamily.repro") for n in graph[m])} == {}
    assert "tfamily.train.tasks" not in _closure(graph, "tfamily.train.task")


@pytest.mark.parametrize("order", ["sorted", "reversed"])
def test_every_module_imports_in_a_fresh_interpreter(order):
    names = sorted(MODULES) if order == "sorted" else sorted(MODULES, reverse=True)
    names = [n for n in names if not n.endswith("__main__")]
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    r = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


# -- The whole system: layers ---------------------------------------------------------------------
# docs/architecture.md, "The whole system", is this table in words. Bottom first; a module may import
# its own layer or one below it, lazy imports (inside functions) included: an import inside a
# function hides a dependency, it does not remove it. A name is a module or a package (everything
# under it; the root package ``tfamily`` is its __init__ alone); every module has exactly one layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("tfamily", "tfamily.registry", "tfamily.base")),
    ("settings", ("tfamily.settings",)),
    ("nn", ("tfamily.nn",)),
    ("models", ("tfamily.models",)),
    ("objectives", ("tfamily.objectives",)),
    ("specs and builders", ("tfamily.spec", "tfamily.members", "tfamily.build")),
    ("catalogue", ("tfamily.catalogue",)),
    ("data", ("tfamily.data",)),
    ("train", ("tfamily.train",)),
    ("wings", ("tfamily.pretrained", "tfamily.export", "tfamily.rl", "tfamily.compare")),
    ("experiments", ("tfamily.arena", "tfamily.bench", "tfamily.repro")),
    ("cli", ("tfamily.cli",)),
]

def layer_of(module: str) -> int:
    """The index in LAYERS of the longest name that is ``module`` or a package above it."""
    best = None
    for i, (_, names) in enumerate(LAYERS):
        for n in names:
            under = module.startswith(n + ".") and n != "tfamily"
            if (module == n or under) and (best is None or len(n) > len(best[1])):
                best = (i, n)
    if best is None:
        raise KeyError(f"{module} has no layer: add it (or its package) to LAYERS and to docs/architecture.md")
    return best[0]


def upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(m, n) for m, ns in graph.items() for n in ns if layer_of(n) > layer_of(m)}


def package_of(module: str) -> str:
    """The top-level subpackage or module of ``module`` (``tfamily.train.loop`` -> ``tfamily.train``)."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, ns in graph.items():
        out.setdefault(package_of(m), set()).update(package_of(n) for n in ns if package_of(n) != package_of(m))
    return out


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Every group of nodes that reach each other (the strongly connected components of two or more)."""
    reach = {u: _closure(graph, u) for u in graph}
    groups = {frozenset({u} | {v for v in reach[u] if u in reach[v]}) for u in graph if u in reach[u]}
    return sorted((set(g) for g in groups), key=sorted)


def test_every_module_has_one_layer():
    names = [n for _, ns in LAYERS for n in ns]
    assert len(names) == len(set(names))
    assert [m for m in MODULES if not any(m == n or m.startswith(n + ".") and n != "tfamily" for n in names)] == []
    assert [n for n in names if n not in MODULES] == []  # no stale names


def test_the_checks_find_what_they_look_for():
    assert upward({"tfamily.nn.block": {"tfamily.train.loop"}, "tfamily.train.loop": {"tfamily.nn.block"}}) == {
        ("tfamily.nn.block", "tfamily.train.loop")}
    assert layer_of("tfamily.spec") == layer_of("tfamily.build") > layer_of("tfamily.nn.attention")
    assert layer_of("tfamily.settings.run") < layer_of("tfamily.data.vocab") < layer_of("tfamily.train.loop")
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": {"e"}}
    assert cycles(g) == [{"a", "b", "c"}, {"e", "e2"}]
    assert cycles(package_graph({"tfamily.rl.cli": {"tfamily.compare"}, "tfamily.compare": {"tfamily.rl.table"},
                                 "tfamily.rl.table": set()})) == [{"tfamily.rl", "tfamily.compare"}]


def test_no_import_cycles_lazy_imports_included():
    """A function-level import that closes a cycle is still a cycle."""
    assert cycles(_graph(module_level_only=False)) == []


def test_no_cycles_between_top_level_packages():
    """Two subpackages (or top-level modules) never import each other, through any of their modules."""
    assert cycles(package_graph(_graph(module_level_only=False))) == []


def test_each_layer_imports_only_its_own_or_below():
    assert sorted(upward(_graph(module_level_only=False))) == [], "imports above their layer (see LAYERS)"


def test_the_library_never_imports_the_docs_tools():
    """The documentation site's hooks live in scripts/docs_hooks.py: the installed package needs no mkdocs."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            roots = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [(name, r) for r in roots if r.split(".")[0] in ("mkdocs", "mkdocstrings", "griffe")]
    assert found == []


MAP_START, MAP_END = "<!-- import map: python tests/test_imports.py --write -->", "<!-- end of import map -->"
ARCHITECTURE = ROOT.parent / "docs" / "architecture.md"


def import_map() -> str:
    """The package graph as the architecture page draws it: each layer's packages, top layer first,
    with the packages each one imports (lazy imports included)."""
    packages = package_graph(_graph(module_level_only=False))

    def short(p: str) -> str:
        return p if p == "tfamily" else p.removeprefix("tfamily.")
    lines = ["| layer | package | imports |", "|---|---|---|"]
    for layer, names in reversed(LAYERS):
        for name in sorted(p for p in packages if layer_of(p) == [n for n, _ in LAYERS].index(layer)):
            uses = sorted(packages[name], key=lambda p: (layer_of(p), p))
            lines.append(f"| {layer} | `{short(name)}` | {', '.join(f'`{short(p)}`' for p in uses) or '(nothing)'} |")
    return "\n".join(lines)


def _map_in_page() -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    return text[text.index(MAP_START) + len(MAP_START):text.index(MAP_END)].strip()


def test_the_architecture_page_draws_the_import_graph_as_it_is():
    assert _map_in_page() == import_map(), "the page's import map is stale: run python tests/test_imports.py --write"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    page = ARCHITECTURE.read_text(encoding="utf-8")
    start, end = page.index(MAP_START) + len(MAP_START), page.index(MAP_END)
    ARCHITECTURE.write_text(page[:start] + "\n" + import_map() + "\n" + page[end:], encoding="utf-8")
