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


def json_list(stdout: str) -> list[Any]:
    """The JSON list an `airflow ... --output json` printed (Airflow 3.0 logs to stdout before it)."""
    return json.loads(stdout[stdout.index("[{"):])


def test_airflow_providers_list_shows_the_provider(tmp_path: Path) -> None:
    out = airflow_cli(tmp_path, "providers", "list", "--output", "json")
    assert out.returncode == 0, out.stderr[-2000:]
    providers = {p["package_name"]: p for p in json_list(out.stdout)}
    assert providers["airflow-provider-rocketmq"]["version"] == "0.1.0"


IMPORT_ERRORS = ("ImportError", "cannot import", "Exception when importing", "ModuleNotFoundError")


def test_airflow_providers_hooks_imports_the_hook_and_the_config_section_is_declared(tmp_path: Path) -> None:
    out = airflow_cli(tmp_path, "providers", "hooks", "--output", "json")
    assert out.returncode == 0, out.stderr[-2000:]
    assert not [e for e in IMPORT_ERRORS if e in out.stdout + out.stderr], out.stderr[-3000:]
    hooks = {h["connection_type"]: h for h in json_list(out.stdout)}
    assert hooks["rocketmq"]["class"] == "airflow_provider_rocketmq.hooks.rocketmq.RocketMQHook"
    # [rocketmq] default_conn_id comes from the provider info's "config" section
    out = airflow_cli(tmp_path, "config", "get-value", "rocketmq", "default_conn_id")
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "rocketmq_default", out.stderr[-2000:]


def test_provider_info_modules_import() -> None:
    """Every module the provider info lists imports (what `airflow providers` lists them from)."""
    from importlib import import_module

    from airflow_provider_rocketmq.get_provider_info import get_provider_info

    info = get_provider_info()
    modules = [m for kind in ("hooks", "operators", "sensors", "triggers") for entry in info[kind]
               for m in entry["python-modules"]]
    dotted = [*info["queues"], *(c["hook-class-name"] for c in info["connection-types"]),
              *(uri[key] for uri in info["asset-uris"] for key in ("handler", "factory", "to_openlineage_converter"))]
    for name in modules:
        import_module(name)
    for path in dotted:
        module, _, attr = path.rpartition(".")
        assert callable(getattr(import_module(module), attr)), path


def test_providers_manager_registers_the_connection_type() -> None:
    from airflow.providers_manager import ProvidersManager

    try:  # how a task resolves the connection type (Airflow >= 3.2; the ProvidersManager before)
        from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime as TaskProviders
    except ImportError:
        TaskProviders = ProvidersManager  # type: ignore[assignment,misc,unused-ignore]

    hook = TaskProviders().hooks["rocketmq"]
    assert hook is not None and hook.hook_class_name.endswith("RocketMQHook")
    widgets = ProvidersManager().connection_form_widgets  # what the UI's connection form shows
    if not widgets:  # Airflow 3.0 builds the form widgets only when flask_appbuilder is installed
        from importlib.util import find_spec

        assert find_spec("flask_appbuilder") is None
        return
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
    # Airflow 3.0 exits 0 after "Connection failed!"; later releases exit 1
    assert "Connection failed" in out.stdout and "extra.request_timeout" in out.stdout, out.stdout[-2000:]
