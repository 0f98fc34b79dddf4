"""scripts/_env.sh decisions, run in a scratch copy of the repo with recording stand-ins for uv and apt-get.

Real installs are exercised by every fresh-clone CI run (`bash .ci/run`); here we check the
decisions cheaply: reinstall only when the stamp changes, pyspark reinstalled last, Java
installed with apt-get when missing, the exported variables.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.conftest import REPO

BASH = shutil.which("bash") or "/bin/bash"


def _stub(path: Path, log: Path, extra: str = "") -> None:
    path.write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> "{log}"\n{extra}exit 0\n')
    path.chmod(0o755)


@pytest.fixture
def scratch(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A repo copy with an existing .venv whose python is the test interpreter, and a stub bin dir."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "_env.sh", repo / "scripts" / "_env.sh")
    shutil.copy(REPO / "pyproject.toml", repo / "pyproject.toml")
    venv_bin = repo / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (venv_bin / "python").chmod(0o755)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    log = tmp_path / "calls.log"
    log.touch()
    _stub(stubs / "uv", log)
    return repo, stubs, log


def _source(repo: Path, stubs: Path, path_rest: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("SPARK_HOME", "JAVA_HOME", "VIRTUAL_ENV", "ROCKETMQ_ENV_NO_INSTALL", "ROCKETMQ_ENV_FORCE")}
    base.update(env)
    base["PATH"] = f"{stubs}:{path_rest}"
    base["TMPDIR"] = str(repo.parent)
    return subprocess.run([BASH, "-c", ('source scripts/_env.sh && echo "SPARK_HOME=$SPARK_HOME" '
                           '&& echo "PYSPARK_PYTHON=$PYSPARK_PYTHON" && echo "PATH=$PATH"')],
                          cwd=repo, env=base, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)


def _uv_calls(log: Path) -> list[str]:
    return [ln for ln in log.read_text().splitlines() if ln.startswith("uv ") and "--version" not in ln]


def test_installs_once_then_reuses_until_pyproject_changes(scratch) -> None:
    repo, stubs, log = scratch
    first = _source(repo, stubs, os.environ["PATH"])
    assert first.returncode == 0, first.stderr
    calls = _uv_calls(log)
    assert len(calls) == 3, calls
    assert "pip install" in calls[0] and "-e .[airflow,spark,compression,iceberg-test,test]" in calls[0]
    # pyspark last, same version as installed, without touching its dependencies
    import importlib.metadata as md

    assert calls[1].startswith("uv pip uninstall") and calls[1].endswith(" pyspark")
    assert f"pyspark=={md.version('pyspark')}" in calls[2] and "--no-deps" in calls[2]
    # uv's --reinstall* implies a cache refresh: pyspark's sdist would be rebuilt (~1.5 GB of cache) every time
    assert not any("--reinstall" in c or "--refresh" in c for c in calls)
    out = dict(ln.split("=", 1) for ln in first.stdout.splitlines())
    import pyspark

    assert out["SPARK_HOME"] == os.path.dirname(os.path.realpath(pyspark.__file__))
    assert out["PYSPARK_PYTHON"] == str(repo / ".venv" / "bin" / "python")
    assert out["PATH"].split(":")[0] == str(repo / ".venv" / "bin")

    log.write_text("")
    again = _source(repo, stubs, os.environ["PATH"])
    assert again.returncode == 0, again.stderr
    assert _uv_calls(log) == []  # stamp matches: nothing reinstalled

    with open(repo / "pyproject.toml", "a", encoding="utf-8") as fh:
        fh.write("\n# a dependency changed\n")
    changed = _source(repo, stubs, os.environ["PATH"])
    assert changed.returncode == 0, changed.stderr
    assert len(_uv_calls(log)) == 3

    log.write_text("")
    forced = _source(repo, stubs, os.environ["PATH"], ROCKETMQ_ENV_FORCE="1")
    assert forced.returncode == 0 and len(_uv_calls(log)) == 3


def test_low_disk_space_is_reported_before_installing(scratch) -> None:
    repo, stubs, log = scratch
    # df reporting 200 MiB free wherever it is asked
    (stubs / "df").write_text('#!/bin/sh\necho "Filesystem 1024-blocks Used Available Capacity Mounted on"\n'
                              'echo "/dev/vda 1000000 800000 204800 80% /"\n')
    (stubs / "df").chmod(0o755)
    run = _source(repo, stubs, os.environ["PATH"])
    assert run.returncode == 0, run.stderr
    warnings = [ln for ln in run.stderr.splitlines() if "MiB free under" in ln]
    assert any(f"only 200 MiB free under {repo}" in ln and "building pyspark needs about 2.5 GB" in ln
               for ln in warnings), run.stderr
    assert len(_uv_calls(log)) == 3  # a warning, not a refusal: the install still runs


def test_failed_install_is_reported_and_not_stamped(scratch) -> None:
    repo, stubs, log = scratch
    (stubs / "uv").write_text(f'#!/bin/sh\necho "uv $*" >> "{log}"\n'
                              'case "$*" in *--version*) exit 0;; esac\necho "resolver: no solution" >&2\nexit 1\n')
    run = _source(repo, stubs, os.environ["PATH"])
    assert run.returncode != 0
    assert "_env.sh: error: environment set-up failed" in run.stderr
    assert not (repo / ".venv" / ".rocketmq-env-stamp").exists()


def test_missing_java_is_installed_with_apt_get(scratch, tmp_path: Path) -> None:
    repo, stubs, log = scratch
    # a PATH with the basic tools but no java: only the stubs dir plus symlinks to what bash needs
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("cat", "cut", "dirname", "sha256sum", "readlink", "id", "flock", "printf", "basename", "chmod"):
        found = shutil.which(name)
        if found:
            (tools / name).symlink_to(found)
    assert shutil.which("java", path=f"{stubs}:{tools}") is None
    # apt-get "installs" java by dropping a java stub into the stubs dir, as the real package would
    _stub(stubs / "apt-get", log, extra=f'case "$*" in *install*) printf "#!/bin/sh\\nexit 0\\n" > "{stubs}/java"; '
                                        f'chmod +x "{stubs}/java";; esac\n')
    if os.geteuid() != 0:
        _stub(stubs / "sudo", log, extra='shift; exec "$@"\n')
    run = _source(repo, stubs, str(tools), ROCKETMQ_PYTHON=sys.executable)
    assert run.returncode == 0, run.stderr
    apt = [ln for ln in log.read_text().splitlines() if ln.startswith("apt-get ")]
    assert apt[0].startswith("apt-get update")
    assert "install" in apt[1] and "openjdk-17-jre-headless" in apt[1] and "-y" in apt[1]
    assert "java not found; installing openjdk-17-jre-headless" in run.stderr


def test_no_install_mode_needs_an_existing_venv(tmp_path: Path) -> None:
    repo = tmp_path / "bare"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "_env.sh", repo / "scripts" / "_env.sh")
    run = subprocess.run(["bash", "-c", "source scripts/_env.sh"], cwd=repo, capture_output=True, text=True,
                         env={**os.environ, "ROCKETMQ_ENV_NO_INSTALL": "1"}, timeout=60, check=False)
    assert run.returncode != 0
    assert f"_env.sh: error: no virtual environment at {repo}/.venv" in run.stderr
