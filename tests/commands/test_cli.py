"""The command line's assembly: every command module is there or the CLI fails loudly; a missing
optional extra is named when a command needs it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from airflow_provider_rocketmq import cli

REPO = Path(__file__).resolve().parents[2]


def _plant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_a_command_module_that_cannot_be_imported_is_an_error_not_a_missing_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = _plant(tmp_path, monkeypatch, "planted_broken_command",
                    "from airflow_provider_rocketmq.client import NoSuchName\n")
    monkeypatch.setattr(cli, "COMMAND_MODULES", [*cli.COMMAND_MODULES, broken])
    with pytest.raises(ImportError, match="NoSuchName"):
        cli.build_parser()
    with pytest.raises(ImportError, match="NoSuchName"):
        cli.main(["lag", "--group", "g"])


def test_a_command_missing_an_optional_package_names_the_extra_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    needs_arrow = _plant(tmp_path, monkeypatch, "planted_arrow_command", """
        def run(args):
            import pyarrow.parquet  # what a command imports when it runs
            return 0

        def register(subparsers):
            subparsers.add_parser("arrow-thing").set_defaults(func=run)
    """)
    monkeypatch.setattr(cli, "COMMAND_MODULES", [needs_arrow])
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # not installed, as far as import knows
    assert cli.main(["arrow-thing"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err == ("error: `arrow-thing` needs pyarrow, which is not installed: "
                   "pip install 'airflow-provider-rocketmq[columnar]'\n")


def test_any_other_missing_module_is_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = _plant(tmp_path, monkeypatch, "planted_typo_command", """
        def run(args):
            import no_such_module_anywhere
            return 0

        def register(subparsers):
            subparsers.add_parser("typo").set_defaults(func=run)
    """)
    monkeypatch.setattr(cli, "COMMAND_MODULES", [planted])
    with pytest.raises(ModuleNotFoundError, match="no_such_module_anywhere"):
        cli.main(["typo"])


PROBE = """
import importlib, json, sys
blocked = set(sys.argv[1].split(","))

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Block())
from airflow_provider_rocketmq import cli
parser = cli.build_parser()
subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
print(json.dumps(sorted(subparsers.choices)))
"""


def test_every_command_is_there_without_the_optional_extras() -> None:
    blocked = sorted({*cli.OPTIONAL_PACKAGES, "airflow", "rich", "fsspec", "yaml"})
    out = subprocess.run([sys.executable, "-c", PROBE, ",".join(blocked)], capture_output=True, text=True,
                         timeout=120, check=True, cwd=REPO)
    assert json.loads(out.stdout) == ["broker", "consume", "lag", "produce", "spark-package", "topic", "window",
                                     "window-commit"]


def test_the_optional_packages_are_the_ones_their_extras_install() -> None:
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]["optional-dependencies"]
    for package, extra in cli.OPTIONAL_PACKAGES.items():
        names = {req.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
                 for req in extras[extra]}
        assert package in names, f"{package} is not in the {extra!r} extra"
