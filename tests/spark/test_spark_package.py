"""`rocketmq-airflow spark-package`: the --py-files zip is what lets plain spark-submit read RocketMQ
with Python interpreters that have pyspark's and pyarrow's files but not this package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy
import pyarrow
import pytest

from airflow_provider_rocketmq.client import ClientConfig, Message, Producer
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.spark.package import build_package

APP = Path(__file__).with_name("packaged_app.py")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow_provider_rocketmq.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd, check=False)


def test_zip_holds_client_spark_and_manifest_only(tmp_path: Path) -> None:
    run = _cli("spark-package", "--output", str(tmp_path / "out") + "/", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    info = json.loads(run.stdout)
    path = Path(info["path"])
    assert path == tmp_path / "out" / "rocketmq-spark.zip" and info["bytes"] == path.stat().st_size
    names = zipfile.ZipFile(path).namelist()
    assert len(names) == info["files"]
    pkg = {n.split("/")[1] for n in names if n.startswith("airflow_provider_rocketmq/") and n.count("/") > 1}
    assert pkg == {"client", "spark", "window"}
    window = {n.rsplit("/", 1)[1] for n in names if n.startswith("airflow_provider_rocketmq/window/")}
    # the manifest format and what it imports; not the consuming side of the window
    assert {"__init__.py", "manifest.py"} <= window and not window & {"runner.py", "collector.py", "cli.py",
                                                                       "snapshot.py"}
    assert "airflow_provider_rocketmq/client/consumer/__init__.py" in names  # zipimport needs the marker
    assert "tenacity/__init__.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # nothing in the zip imports Airflow
    for n in names:
        if n.endswith(".py"):
            text = zipfile.ZipFile(path).read(n).decode()
            assert "import airflow\n" not in text and "from airflow " not in text and "from airflow." not in text, n
    # reproducible: the same sources give the same bytes
    again = build_package(tmp_path / "again.zip")
    assert (tmp_path / "again.zip").read_bytes() == path.read_bytes() and again["files"] == info["files"]
    bad = _cli("spark-package", "--output", str(tmp_path / "x.tar"), cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("error: output: ") and "must end in .zip" in bad.stderr


def _stripped_python(tmp_path: Path) -> Path:
    """A Python that sees the standard library, pyarrow and numpy only (no site-packages, so neither
    this package nor tenacity); Spark adds its own pyspark.zip and py4j to PYTHONPATH."""
    site = tmp_path / "site"
    site.mkdir()
    for module in (pyarrow, numpy):
        (site / module.__name__).symlink_to(Path(module.__file__).parent)
    for libs in Path(numpy.__file__).parent.parent.glob("numpy.libs"):  # manylinux wheels keep BLAS here
        (site / libs.name).symlink_to(libs)
    exe = tmp_path / "python"
    exe.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" exec {sys.executable} -S "$@"\n')
    exe.chmod(0o755)
    return exe


@pytest.mark.spark
@pytest.mark.slow
def test_spark_submit_with_the_zip_and_workers_without_the_package(tmp_path: Path, spark_app: Any) -> None:
    python = _stripped_python(tmp_path)
    probe = subprocess.run([str(python), "-c", "import airflow_provider_rocketmq"], capture_output=True, text=True,
                           cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                           timeout=60, check=False)
    assert probe.returncode == 1 and "No module named 'airflow_provider_rocketmq'" in probe.stderr
    zip_path = Path(str(build_package(tmp_path / "rocketmq-spark.zip")["path"]))

    with EmbeddedCluster(brokers=3, queues=8) as cluster:
        cluster.create_topic("Packaged", 8)
        with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), group="pkg_p") as producer:
            queues = producer.publish_queues("Packaged")
            for i in range(96):
                producer.send(Message("Packaged", f"p{i}".encode()), queue=queues[i % len(queues)])
        result = tmp_path / "result.json"
        run = spark_app(APP, cluster.namesrv_addr, "Packaged", str(tmp_path / "work"), str(result),
                        # the streaming source's own Python process ignores --py-files (Spark looks in a
                        # "streaming_job" files directory): the documented extra setting covers it
                        options=["--py-files", str(zip_path),
                                 "--conf", f"spark.executorEnv.PYTHONPATH={zip_path}"], cwd=tmp_path,
                        env={"PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)})
        assert run.returncode == 0, run.output[-6000:]
        stored = sorted([m.broker_name, m.queue_id, m.queue_offset] for m in cluster.messages("Packaged"))

    out = json.loads(result.read_text())
    for side in ("driver", "worker"):
        # from the zip (the driver's path, or Spark's copy of it for workers), not from site-packages
        assert out[side]["datasource"].endswith("rocketmq-spark.zip/airflow_provider_rocketmq/spark/source/datasource.py")
        assert out[side]["tenacity"].endswith("rocketmq-spark.zip/tenacity/__init__.py")
        assert out[side]["airflow"] is False
    assert sorted(out["batch"]) == stored and len(stored) == 96
    assert out["stream"] == 96
