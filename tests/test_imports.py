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
    assert graph["tfamily.numbers"] == set()  # the number checker sits below every layer


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
    below_nn = {"tfamily.registry", "tfamily.hardware", "tfamily.numbers"}  # numbers.py imports nothing
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
