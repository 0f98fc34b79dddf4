"""The SPARK_HOME trap: pyspark-client overwrites pyspark; scripts/_env.sh repairs it and sets SPARK_HOME.

`apache-airflow-providers-apache-spark` depends on `pyspark-client`, which unpacks its
(older) Python files into the same `pyspark/` directory as the full `pyspark`. The
result mixes Python files of one Spark version with jars of another, and the venv's
`spark-submit` cannot locate its home. These tests run the real `spark-submit`.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.spark.conftest import REPO, SparkRun

pytestmark = pytest.mark.spark


def _jar_version(spark_home: Path) -> str:
    jars = sorted(spark_home.glob("jars/spark-core_*.jar"))
    assert jars, f"no spark-core jar under {spark_home}/jars"
    m = re.match(r"spark-core_[\d.]+-(.+)\.jar", jars[0].name)
    assert m
    return m.group(1)


def _py_version(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import pyspark; print(pyspark.__version__)"], capture_output=True,
                          text=True, check=True, timeout=60).stdout.strip()


def _submit_version(venv: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "spark-submit"), "--version"], env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)


def test_env_sh_points_spark_submit_at_the_full_pyspark(env_sh_env: dict[str, str]) -> None:
    venv = Path(env_sh_env["VIRTUAL_ENV"])
    spark_home = Path(env_sh_env["SPARK_HOME"])
    assert spark_home.name == "pyspark" and spark_home.is_relative_to(venv)
    assert (spark_home / "bin" / "spark-class").exists()
    assert env_sh_env["PYSPARK_PYTHON"] == str(venv / "bin" / "python")
    assert env_sh_env["PATH"].split(os.pathsep)[0] == str(venv / "bin")
    assert (Path(env_sh_env["JAVA_HOME"]) / "bin" / "java").exists()
    # Python files and jars of one and the same Spark release (the repaired state)
    assert _py_version(venv / "bin" / "python") == _jar_version(spark_home) == md.version("pyspark")
    run = _submit_version(venv, env_sh_env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"version {md.version('pyspark')}" in run.stdout + run.stderr


def _uv_and_bash(env_sh_env: dict[str, str], script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", f"source scripts/_env.sh >/dev/null && {script}"], cwd=REPO,
                          env={**env_sh_env, "ROCKETMQ_ENV_NO_INSTALL": "1"}, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, check=False)


@pytest.mark.slow
def test_repair_step_fixes_a_venv_where_pyspark_client_won(tmp_path: Path, env_sh_env: dict[str, str]) -> None:
    try:
        client_ver = md.version("pyspark-client")
    except md.PackageNotFoundError:
        pytest.skip("pyspark-client is not installed here: the Spark provider no longer pulls it in")
    spark_ver = md.version("pyspark")
    venv = tmp_path / "venv"
    # build the trap: the full pyspark first, pyspark-client over it (offline: from the uv cache)
    build = _uv_and_bash(env_sh_env, f"""
        uv=$(_rmq_find_uv "{sys.executable}") || exit 90
        $uv venv --quiet --python "{sys.executable}" "{venv}" &&
        $uv pip install --quiet --offline --python "{venv}/bin/python" "pyspark=={spark_ver}" &&
        $uv pip install --quiet --offline --python "{venv}/bin/python" --no-deps "pyspark-client=={client_ver}"
    """)
    if build.returncode != 0:
        pytest.skip(f"cannot build an offline trap venv (no uv or no cached wheels): {build.stderr[-300:]}")
    spark_home = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "pyspark"
    if client_ver != spark_ver:
        assert _py_version(venv / "bin" / "python") == client_ver != _jar_version(spark_home)
    if shutil.which("python3") and subprocess.run(["python3", "-c", "import pyspark"], capture_output=True,
                                                  check=False).returncode != 0:
        # without SPARK_HOME, spark-submit asks plain python3 where Spark is and gets nothing back
        bare = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYSPARK_PYTHON",
                                                                  "PYSPARK_DRIVER_PYTHON")}
        assert _submit_version(venv, bare).returncode != 0

    repair = _uv_and_bash(env_sh_env, f'_rmq_repair_pyspark "{venv}" "$(_rmq_find_uv "{sys.executable}")"')
    assert repair.returncode == 0, repair.stderr
    assert _py_version(venv / "bin" / "python") == _jar_version(spark_home) == spark_ver
    run = _submit_version(venv, {**env_sh_env, "SPARK_HOME": str(spark_home),
                                 "PYSPARK_PYTHON": str(venv / "bin" / "python")})
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"version {spark_ver}" in run.stdout + run.stderr


START_APP = """
from pyspark.sql import SparkSession
from pyspark.sql.pandas.utils import require_minimum_pandas_version

spark = SparkSession.builder.appName("start").getOrCreate()
require_minimum_pandas_version()  # PySpark's own check of pandas, as every pandas-backed call runs it
print("rows", spark.range(3).count())
spark.stop()
"""


def test_a_pyspark_start_with_the_spark_extra_prints_no_python_warning(spark_app: Callable[..., SparkRun],
                                                                       tmp_path: Path) -> None:
    # pyspark 4.x warns "does not yet fully support pandas >= 3.0.0" at every start with pandas 3;
    # the spark extra keeps pandas below 3 (pyproject.toml)
    assert int(md.version("pandas").split(".")[0]) < 3, md.version("pandas")
    app = tmp_path / "start.py"
    app.write_text(START_APP)
    run = spark_app(app)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "rows 3" in run.stdout
    # the driver's warnings reach stdout or stderr depending on the Spark version: read both
    assert "does not yet fully support pandas" not in run.output
    assert re.findall(r"\b\w+Warning: .*", run.output) == []


_BYTECODE_PROBE = r"""
import importlib.util, json, os, sys, sysconfig
import numpy, pyarrow.parquet, pyspark.worker  # what a load task's Python worker imports
import airflow_provider_rocketmq.spark.load.direct_plan, airflow_provider_rocketmq.spark.source.range_reader
site = sysconfig.get_path("purelib")

def compiled(src):
    try:
        with open(importlib.util.cache_from_source(src), "rb") as fh:
            head = fh.read(16)
    except OSError:
        return False
    if head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(head[4:8], "little"):  # hash-based: checked against the source another way
        return True
    st = os.stat(src)
    return (int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF)

files = [m.__file__ for m in list(sys.modules.values())
         if (getattr(m, "__file__", None) or "").endswith(".py") and m.__file__.startswith(site)]
print(json.dumps({"modules": len(files), "missing": [f for f in files if not compiled(f)]}))
"""


def test_env_sh_leaves_bytecode_for_what_spark_workers_import(env_sh_env: dict[str, str]) -> None:
    # uv installs no bytecode and PYTHONDONTWRITEBYTECODE (test.sh, some shells) stops Python from
    # caching it, so without _env.sh's compile step every Spark worker compiles numpy, pyarrow and
    # pyspark from source (~1 CPU-s each). The project's own files are left out here: an edit since
    # the install makes theirs stale, which is harmless (Python recompiles in memory).
    python = Path(env_sh_env["VIRTUAL_ENV"]) / "bin" / "python"
    out = subprocess.run([str(python), "-c", _BYTECODE_PROBE], env={**env_sh_env, "PYTHONDONTWRITEBYTECODE": "1"},
                         capture_output=True, text=True, timeout=120, check=True)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    assert probe["modules"] > 100
    assert probe["missing"] == []
