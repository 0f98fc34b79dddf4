"""The consumer package's shape: no import cycle, and no module reading another object's privates.

Both are read from the source with `ast` (TYPE_CHECKING imports count: a cycle that only
the type checker sees is still two modules that cannot be understood apart).
"""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_provider_rocketmq.client.consumer as consumer_pkg

PKG_DIR = Path(next(iter(consumer_pkg.__path__)))
PKG = consumer_pkg.__name__


def _modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text("utf-8"), str(p)) for p in sorted(PKG_DIR.glob("*.py"))
            if p.stem != "__init__"}


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of this package it imports (anywhere in the file)."""
    mods = _modules()
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, tree in mods.items():
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    base = node.module or ""
                    targets = [base.split(".")[0]] if base else [a.name for a in node.names]
                elif node.level == 0 and node.module and node.module.startswith(PKG + "."):
                    targets = [node.module[len(PKG) + 1:].split(".")[0]]
                elif node.level == 0 and node.module == PKG:
                    targets = [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name[len(PKG) + 1:].split(".")[0] for a in node.names if a.name.startswith(PKG + ".")]
            graph[name].update(t for t in targets if t in mods and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_consumer_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert {"core", "pull", "rebalance", "consume_concurrent"} <= set(graph)
    assert "pull" in graph["core"]  # the graph is really read
    assert cycles(graph) == []


def test_only_the_composition_root_and_the_facades_import_core() -> None:
    graph = import_graph()
    assert sorted(m for m, deps in graph.items() if "core" in deps) == ["push"]


def _private_reads(tree: ast.Module) -> list[str]:
    """``x._name`` with ``x`` other than self/cls, and ``getattr(x, "_name")``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            if not (isinstance(base, ast.Name) and base.id in ("self", "cls")):
                found.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_") \
                and not str(node.args[1].value).startswith("__"):
            found.append(f"line {node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def test_no_module_reads_another_objects_private_attributes() -> None:
    # a module's own slotted helper classes (ProcessQueue's batches) are the module's business
    allowed = {"process_queue"}
    offenders = {name: reads for name, tree in _modules().items() if name not in allowed
                 for reads in [_private_reads(tree)] if reads}
    assert offenders == {}
