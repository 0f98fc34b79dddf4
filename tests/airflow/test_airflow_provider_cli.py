"""The provider as Airflow sees it: `airflow providers list`, connection metadata, `airflow connections test`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(180)

AIRFLOW = str(Path(sys.executable).with_name("airflow"))


def airflow_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                **env}
    return subprocess.run([AIRFLOW, *args], env=full_env, capture_output=True, text=True, timeout=150,
                          stdin=subprocess.DEVNULL, check=False)


def test_airflow_providers_list_shows_the_provider(tmp_path: Path) -> None:
    out = airflow_cli(tmp_path, "providers", "list", "--output", "json")
    assert out.returncode == 0, out.stderr[-2000:]
    providers = {p["package_name"]: p for p in json.loads(out.stdout[out.stdout.index("["):])}
    assert providers["airflow-provider-rocketmq"]["version"] == "0.1.0"


def test_providers_manager_registers_the_connection_type() -> None:
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    hook = ProvidersManagerTaskRuntime().hooks["rocketmq"]  # how a task resolves the connection type
    assert hook is not None and hook.hook_class_name.endswith("RocketMQHook")
    widgets = ProvidersManager().connection_form_widgets  # what the UI's connection form shows
    assert {"extra__rocketmq__namesrv", "extra__rocketmq__tls", "extra__rocketmq__client_options"} <= set(widgets)
    assert widgets["extra__rocketmq__security_token"].is_sensitive


def test_airflow_connections_test_round_trips_to_the_embedded_broker(tmp_path: Path, embedded_cluster: Any) -> None:
    good = json.dumps({"conn_type": "rocketmq", "host": embedded_cluster.namesrv_addr})
    out = airflow_cli(tmp_path, "connections", "test", "rmq_cli", AIRFLOW__CORE__TEST_CONNECTION="Enabled",
                      AIRFLOW_CONN_RMQ_CLI=good)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Connection success" in out.stdout
    bad = json.dumps({"conn_type": "rocketmq", "host": embedded_cluster.namesrv_addr,
                      "extra": {"request_timeout": "soon"}})
    out = airflow_cli(tmp_path, "connections", "test", "rmq_cli", AIRFLOW__CORE__TEST_CONNECTION="Enabled",
                      AIRFLOW_CONN_RMQ_CLI=bad)
    assert out.returncode != 0 and "extra.request_timeout" in out.stdout
