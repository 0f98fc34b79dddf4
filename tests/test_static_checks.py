"""The static gates CI runs with the tests: mypy --strict on the package, ruff on the repository,
and a reason next to every ``type: ignore`` that remains."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "airflow_provider_rocketmq"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)


def test_mypy_strict_finds_nothing_in_the_package() -> None:
    out = _run("mypy", "--strict", "airflow_provider_rocketmq")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_finds_nothing_in_the_repository() -> None:
    out = _run("ruff", "check", "--no-cache", ".")
    assert out.returncode == 0, out.stdout + out.stderr


# `# type: ignore[code]` followed by `# why` (or ` - why`) on the same line
_IGNORE = re.compile(r"#\s*type:\s*ignore(\[[^\]]*\])?(?P<rest>.*)$")


def test_every_type_ignore_says_why() -> None:
    bare = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            m = _IGNORE.search(line)
            if m is None:
                continue
            rest = m.group("rest").strip()
            if not re.match(r"(#|-)\s*\w", rest):
                bare.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert bare == []


def test_the_reason_check_reads_lines_as_meant() -> None:
    def reason(line: str) -> bool:
        m = _IGNORE.search(line)
        return m is not None and re.match(r"(#|-)\s*\w", m.group("rest").strip()) is not None

    assert reason("x = f()  # type: ignore[no-any-return]  # f is untyped")
    assert not reason("x = f()  # type: ignore[no-any-return]")
    assert not reason("x = f()  # type: ignore")
