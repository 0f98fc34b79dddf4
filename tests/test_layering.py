"""The client imports neither Airflow nor Spark; the codec imports no I/O module."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import airflow_provider_rocketmq.client as client_pkg

ROOT = Path(__file__).resolve().parents[1]  # run the probes from the repository root

PROBE = """
import importlib, json, pkgutil, sys
import airflow_provider_rocketmq.client as pkg
names = [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
failed = {}
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = repr(exc)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("airflow", "pyspark"))
print(json.dumps({"modules": names, "failed": failed, "loaded": loaded}))
"""


def test_client_never_imports_airflow_or_spark() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                         check=True, cwd=ROOT)
    report = json.loads(out.stdout)
    assert "airflow_provider_rocketmq.client.mqclient" in report["modules"]
    assert report["failed"] == {}
    assert report["loaded"] == []


CODEC_PROBE = """
import importlib, json, pkgutil, sys
import airflow_provider_rocketmq.client.protocol as pkg
names = [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
for name in names:
    importlib.import_module(name)
io = sorted(m for m in ("asyncio", "socket", "ssl", "selectors", "select", "threading", "subprocess",
                        "concurrent.futures", "multiprocessing") if m in sys.modules)
print(json.dumps({"modules": names, "io": io}))
"""


def test_codec_is_sans_io() -> None:
    """Importing every module of client/protocol loads no I/O or concurrency module."""
    out = subprocess.run([sys.executable, "-c", CODEC_PROBE], capture_output=True, text=True, timeout=60,
                         check=True, cwd=ROOT)
    report = json.loads(out.stdout)
    assert {f"airflow_provider_rocketmq.client.protocol.{m}" for m in ("command", "message", "send_wire",
                                                                     "columnar", "fastjson")} <= set(report["modules"])
    assert report["io"] == []


def test_probe_sees_the_whole_package() -> None:
    names = {m.name for m in pkgutil.walk_packages(client_pkg.__path__, client_pkg.__name__ + ".")}
    assert {"airflow_provider_rocketmq.client.producer", "airflow_provider_rocketmq.client.admin"} <= names
