"""The package's shape: no import cycle anywhere, imports only downwards, no reads of another module's privates.

Read from the source with `ast`; imports under ``TYPE_CHECKING`` and inside functions count (a cycle
only the type checker sees is still two modules that cannot be understood apart). docs/architecture.md
draws the layers this test keeps.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

import airflow_provider_rocketmq

PKG_DIR = Path(next(iter(airflow_provider_rocketmq.__path__)))
PKG = airflow_provider_rocketmq.__name__

# Which areas an area may import (besides itself). An area is a top-level module or package of
# the project, with the client split into its sans-IO codec and the rest. `client` (the package's
# own __init__, its public names) is what the Airflow layer may use of the client; `client.*` is
# everything else of it.
AIRFLOW_BASE = {"airflow_compat", "get_provider_info", "metrics"}
ALLOWED: dict[str, set[str]] = {
    "client.protocol": set(),
    "client.*": {"client.protocol", "client"},
    "client": {"client.protocol", "client.*"},
    "embedded": {"client", "client.*", "client.protocol"},
    "window": {"client", "client.*", "client.protocol"},
    "spark": {"client", "client.*", "client.protocol", "window"},
    "airflow_compat": set(),
    "get_provider_info": set(),
    "metrics": {"airflow_compat"},
    "assets": {"client"} | AIRFLOW_BASE,
    "hooks": {"client"} | AIRFLOW_BASE,
    "triggers": {"client", "hooks"} | AIRFLOW_BASE,
    "sensors": {"client", "hooks", "triggers"} | AIRFLOW_BASE,
    "operators": {"client", "hooks", "assets", "window", "spark"} | AIRFLOW_BASE,
    "queues": {"client", "hooks", "triggers"} | AIRFLOW_BASE,
    "commands": {"client", "client.*", "client.protocol", "window", "embedded", "spark"},
    "cli": {"commands", "client", "client.*", "client.protocol"},
    "": set(),  # the package's own (empty) __init__
}
# stdlib or namedtuple API whose names start with an underscore
PUBLIC_UNDERSCORE = {"_replace", "_asdict", "_fields", "_make", "_exit", "_actions", "_SubParsersAction"}


def module_files(root: Path, package: str) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([package, *parts])] = path
    return out


def _imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The project modules ``module`` imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                yield full if full in known else target
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def import_graph(root: Path = PKG_DIR, package: str = PKG) -> dict[str, set[str]]:
    """module -> the modules of the project it imports (anywhere in the file)."""
    known = module_files(root, package)
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        deps = set()
        for name in _imported(module, path, known):
            while name and name not in known:  # `pkg.mod.Class` -> `pkg.mod`
                name = name.rpartition(".")[0]
            if name and name != module:
                deps.add(name)
        graph[module] = deps
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
        for w in sorted(graph.get(v, ())):
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


def area(module: str, package: str = PKG) -> str:
    rel = module[len(package) + 1:] if module != package else ""
    if rel == "client":
        return "client"
    if rel.startswith("client.protocol"):
        return "client.protocol"
    if rel.startswith("client."):
        return "client.*"
    return rel.split(".")[0]


def upward_imports(graph: dict[str, set[str]], package: str = PKG) -> list[str]:
    bad = []
    for module, deps in graph.items():
        if module.endswith(".__main__"):  # an entry point: a program, nothing imports it
            continue
        here = area(module, package)
        for dep in deps:
            if dep == package:  # the package's empty __init__ (a script run by path imports it first)
                continue
            there = area(dep, package)
            if there != here and there not in ALLOWED[here]:
                bad.append(f"{module} -> {dep}")
    return sorted(bad)


def test_every_area_of_the_package_has_its_rule() -> None:
    assert {area(m) for m in import_graph()} <= set(ALLOWED)


def test_the_graph_is_really_read() -> None:
    graph = import_graph()
    assert f"{PKG}.client.consumer.pull" in graph[f"{PKG}.client.consumer.core"]
    assert f"{PKG}.client.protocol.errors" in graph[f"{PKG}.client.mqclient"]  # a relative import resolved


def _plant(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    root = tmp_path / "planted"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return import_graph(root, "planted")


def test_a_planted_cycle_is_found_through_type_checking_and_relative_imports(tmp_path: Path) -> None:
    graph = _plant(tmp_path, {
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
        "b.py": "def f():\n    from planted.sub import c\n",
        "sub/__init__.py": "",
        "sub/c.py": "from .. import a\n",
    })
    assert cycles(graph) == [["planted.a", "planted.b", "planted.sub.c"]]
    assert cycles({"x": {"y"}, "y": set()}) == []


def test_no_import_cycle_anywhere() -> None:
    assert cycles(import_graph()) == []


def test_a_planted_upward_import_is_found(tmp_path: Path) -> None:
    graph = {f"{PKG}.client.protocol.codes": {f"{PKG}.client.connection"},
             f"{PKG}.window.runner": {f"{PKG}.operators.window", f"{PKG}.client.protocol.codes"}}
    assert upward_imports(graph) == [f"{PKG}.client.protocol.codes -> {PKG}.client.connection",
                                     f"{PKG}.window.runner -> {PKG}.operators.window"]


def test_imports_only_go_down_the_layers() -> None:
    assert upward_imports(import_graph()) == []


def test_only_the_composition_root_and_the_facades_import_the_consumer_core() -> None:
    graph = import_graph()
    core = f"{PKG}.client.consumer.core"
    assert sorted(m for m, deps in graph.items() if core in deps) == [f"{PKG}.client.consumer.push"]


def _defined_privates(tree: ast.Module) -> set[str]:
    """Underscore names a module defines: functions, classes, attributes it assigns, slots."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                  for t in node.targets):
            names.update(c.value for c in ast.walk(node.value)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return {n for n in names if n.startswith("_")}


def private_reads(path: Path) -> list[str]:
    """``x._name`` (x other than self/cls) where this module does not define ``_name`` itself."""
    tree = ast.parse(path.read_text("utf-8"), str(path))
    own = _defined_privates(tree) | PUBLIC_UNDERSCORE
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            if not (isinstance(base, ast.Name) and base.id in ("self", "cls")) and node.attr not in own:
                found.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_") \
                and not str(node.args[1].value).startswith("__") and node.args[1].value not in own:
            found.append(f"line {node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def test_a_planted_private_read_is_found(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("class A:\n    def __init__(self):\n        self._mine = 1\n"
                    "def f(a, b):\n    return a._mine, b._theirs, getattr(b, '_hidden')\n")
    assert private_reads(path) == ["line 5: ._theirs", "line 5: getattr(..., '_hidden')"]


def test_no_module_reads_another_modules_private_attributes() -> None:
    offenders = {module: reads for module, path in module_files(PKG_DIR, PKG).items()
                 for reads in [private_reads(path)] if reads}
    assert offenders == {}
