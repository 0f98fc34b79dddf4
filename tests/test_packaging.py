"""Packaging and layering: what imports what, entry points, no Airflow side effects on import."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata as md
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "airflow_provider_rocketmq"
# modules that perform I/O or concurrency; the sans-IO codec must not touch them
IO_MODULES = {"asyncio", "socket", "ssl", "selectors", "select", "threading", "subprocess", "concurrent",
              "multiprocessing", "http", "urllib", "requests", "aiohttp"}


def _imports(path: Path) -> set[str]:
    """Absolute top-level names and resolved package-relative modules imported anywhere in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    pkg_parts = list(path.relative_to(REPO).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[: len(pkg_parts) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                names.add(mod)
                names.update(f"{mod}.{a.name}" for a in node.names)
            elif node.module:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _py_files(directory: Path) -> list[Path]:
    files = sorted(directory.rglob("*.py"))
    assert files, f"no Python files under {directory}"
    return files


@pytest.mark.parametrize("area", ["client", "window", "spark", "embedded"])
def test_core_areas_never_import_airflow(area: str) -> None:
    if not (PKG / area).is_dir():
        pytest.skip(f"{area}/ does not exist yet")
    offenders = {
        str(f.relative_to(REPO)): sorted(n for n in _imports(f) if n.split(".")[0] == "airflow")
        for f in _py_files(PKG / area)
    }
    assert {f: n for f, n in offenders.items() if n} == {}


@pytest.mark.parametrize("area", ["client", "window", "embedded"])
def test_core_areas_never_import_spark(area: str) -> None:
    if not (PKG / area).is_dir():
        pytest.skip(f"{area}/ does not exist yet")
    offenders = {str(f.relative_to(REPO)): sorted(n for n in _imports(f) if n.split(".")[0] in ("pyspark", "py4j"))
                 for f in _py_files(PKG / area)}
    assert {f: n for f, n in offenders.items() if n} == {}


def test_protocol_codec_is_sans_io() -> None:
    """client/protocol/ stays bytes-in, objects-out: no I/O or concurrency module, no connection."""
    seen = []
    for f in _py_files(PKG / "client" / "protocol"):
        seen.append(f.name)
        names = _imports(f)
        io = sorted(n for n in names if n.split(".")[0] in IO_MODULES)
        conn = sorted(n for n in names if n.startswith("airflow_provider_rocketmq.client.connection"))
        assert not io and not conn, f"{f.relative_to(REPO)} imports {io + conn}"
    assert {"command.py", "fastjson.py", "codes.py"} <= set(seen)


def test_the_import_scanner_sees_relative_and_nested_imports() -> None:
    # guard against a scanner that silently finds nothing (which would make the tests above vacuous)
    names = _imports(PKG / "client" / "connection.py")
    assert "asyncio" in names and "ssl" in names


@pytest.mark.parametrize("module", [
    "airflow_provider_rocketmq",
    "airflow_provider_rocketmq.client",
    "airflow_provider_rocketmq.window",
    "airflow_provider_rocketmq.spark",
])
def test_importing_core_modules_loads_no_airflow_or_spark(module: str) -> None:
    code = (f"import sys, importlib; importlib.import_module({module!r}); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark', 'py4j')); "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"importing {module} loaded {out.stdout.strip()}"


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _resolve(target: str) -> object:
    module, _, attr = target.partition(":")
    obj: object = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def test_entry_points_declared_and_resolvable() -> None:
    project = _pyproject()["project"]
    script = project["scripts"]["rocketmq-airflow"]
    provider = project["entry-points"]["apache_airflow_provider"]["provider_info"]
    assert script == "airflow_provider_rocketmq.cli:main"
    assert provider == "airflow_provider_rocketmq.get_provider_info:get_provider_info"
    assert callable(_resolve(script))
    info = _resolve(provider)()  # type: ignore[operator]
    assert info["package-name"] == project["name"]
    assert any(ct.get("connection-type") == "rocketmq" for ct in info.get("connection-types", []))


def test_installed_distribution_registers_the_entry_points() -> None:
    try:
        dist = md.distribution("airflow-provider-rocketmq")
    except md.PackageNotFoundError:
        pytest.skip("project not pip-installed in this interpreter (scripts/_env.sh installs it editable)")
    eps = {(ep.group, ep.name): ep.value for ep in dist.entry_points}
    assert eps[("console_scripts", "rocketmq-airflow")] == "airflow_provider_rocketmq.cli:main"
    assert eps[("apache_airflow_provider", "provider_info")] == \
        "airflow_provider_rocketmq.get_provider_info:get_provider_info"
    # the editable install points at this tree, not a stale copy
    import airflow_provider_rocketmq

    assert Path(airflow_provider_rocketmq.__file__).resolve().parent == PKG.resolve()


def test_console_script_runs_when_installed() -> None:
    exe = Path(sys.executable).parent / "rocketmq-airflow"
    if not exe.exists():
        pytest.skip("console script not installed in this interpreter's bin/")
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120, check=False,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout
