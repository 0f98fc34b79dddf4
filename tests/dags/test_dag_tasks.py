"""The produce operator, the await-message sensor, the lag sensor and the window operator in one DAG run
through the real `airflow dags test` (then `airflow tasks test` of one task): templated fields rendered
from params, the deferrable await
sensor's trigger run by Airflow, XComs in the metadata database, and the window's OpenLineage
event written by the OpenLineage provider's listener (file transport). No Spark."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_rocketmq.client import Admin, ClientConfig

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(300)]

AIRFLOW = str(Path(sys.executable).with_name("airflow"))

HELPERS = '''
def orders(prefix, n="3"):
    for i in range(int(n)):
        yield (f"{prefix}-{i}", "T", [f"k{i}"], {"seq": str(i)})


def second_order(message):
    body = message.body.decode()
    return {"body": body, "offset": message.queue_offset} if body.endswith("-1") else None
'''

DAG = '''
from datetime import datetime
from airflow.sdk import DAG
from airflow_provider_rocketmq.operators.produce import RocketMQProduceOperator
from airflow_provider_rocketmq.operators.window import RocketMQConsumeWindowOperator
from airflow_provider_rocketmq.sensors.await_message import RocketMQAwaitMessageSensor
from airflow_provider_rocketmq.sensors.lag import RocketMQLagSensor

with DAG("rocketmq_tasks", schedule=None, start_date=datetime(2024, 1, 1),
         params={"topic": "unset", "group": "unset", "prefix": "unset", "staging": "unset"}):
    produce = RocketMQProduceOperator(
        task_id="produce", topic="{{ params.topic }}", producer_function="rmq_dag_helpers.orders",
        producer_function_kwargs={"prefix": "{{ params.prefix }}", "n": "3"},
        rocketmq_conn_id="{{ 'rocketmq_' ~ 'tpl' }}")
    wait = RocketMQAwaitMessageSensor(
        task_id="await", topic="{{ params.topic }}", consumer_group="{{ params.group }}",
        apply_function="rmq_dag_helpers.second_order", deferrable=True, timeout=60,
        rocketmq_conn_id="rocketmq_tpl")
    lag = RocketMQLagSensor(
        task_id="lag", topic="{{ params.topic }}", consumer_group="{{ params.group }}",
        max_lag="{{ 1 }}", poke_interval=1, timeout=60, deferrable=False, rocketmq_conn_id="rocketmq_tpl")
    window = RocketMQConsumeWindowOperator(
        task_id="window", topic="{{ params.topic }}", consumer_group="{{ params.group }}",
        staging_path="{{ params.staging }}/{{ run_id | replace(':', '_') | replace('+', '_') }}",
        rocketmq_conn_id="rocketmq_tpl")
    produce >> wait >> lag >> window
'''


def test_tasks_render_their_templates_defer_and_report_lineage(embedded_cluster: Any, tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "rmq_dag_helpers.py").write_text(HELPERS)
    (dags / "rmq_dag.py").write_text(DAG)
    home = tmp_path / "home"
    lineage = tmp_path / "ol.jsonl"
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "PYTHONPATH": str(dags),
           "AIRFLOW_CONN_ROCKETMQ_TPL": json.dumps({"conn_type": "rocketmq", "host": embedded_cluster.namesrv_addr}),
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage),
                                                          "append": True}),
           "AIRFLOW__OPENLINEAGE__NAMESPACE": "rmq-tests"}
    env.pop("AIRFLOW__OPENLINEAGE__DISABLED", None)

    def airflow(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True, timeout=240,
                              stdin=subprocess.DEVNULL, check=False)

    migrate = airflow("db", "migrate")
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    parse = airflow("dags", "reserialize")  # Airflow 3.0's `dags test` reads the DAG from the database
    assert parse.returncode == 0, parse.stderr[-3000:]
    with Admin(ClientConfig(namesrv_addr=embedded_cluster.namesrv_addr)) as admin:
        admin.create_topic("dt_orders", queues=1)
    params = {"topic": "dt_orders", "group": "dt_group", "prefix": "ord", "staging": str(tmp_path / "staging")}
    run = airflow("dags", "test", "rocketmq_tasks", "-c", json.dumps(params))
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert "running trigger in line" in out.lower()  # the await sensor deferred; Airflow ran its trigger

    def decoded(value: Any) -> Any:
        while isinstance(value, (str, bytes)):  # Airflow 3.0 stores the JSON text JSON-encoded once more
            value = json.loads(value)
        return value

    xcoms = {task: decoded(value) for task, value in sqlite3.connect(home / "airflow.db").execute(
        "SELECT task_id, value FROM xcom WHERE key = 'return_value'")}
    assert xcoms["produce"]["topic"] == "dt_orders" and xcoms["produce"]["messages"] == 3  # rendered params
    assert xcoms["await"] == {"body": "ord-1", "offset": 1}
    assert xcoms["lag"]["total_lag"] == 1  # max_lag rendered to 1: ord-2 is still waiting
    assert xcoms["window"]["messages"] == 1
    with Admin(ClientConfig(namesrv_addr=embedded_cluster.namesrv_addr)) as admin:
        assert sum(admin.committed_offsets("dt_group", "dt_orders").values()) == 3

    # `airflow tasks test` renders the same templates from --task-params: 3 more on the rendered topic
    single = airflow("tasks", "test", "rocketmq_tasks", "produce", "-t", json.dumps({**params, "prefix": "tt"}))
    assert single.returncode == 0, (single.stdout + single.stderr)[-5000:]
    with Admin(ClientConfig(namesrv_addr=embedded_cluster.namesrv_addr)) as admin:
        assert sum(admin.high_water_marks("dt_orders").values()) == 6

    from airflow import __version__ as airflow_version

    if tuple(int(x) for x in airflow_version.split(".")[:2]) < (3, 1):
        # Airflow 3.0's `dags test` runs tasks through the legacy TaskInstance path, where the
        # OpenLineage listener emits no task datasets for any operator (on a worker it uses the
        # Task SDK runner); test_airflow_assets_lineage.py drives the provider's extractor directly
        return
    events = [json.loads(line) for line in lineage.read_text().splitlines() if line.strip()]
    complete = [e for e in events if e.get("eventType") == "COMPLETE" and e["job"]["name"].endswith(".window")]
    assert complete, [(e.get("eventType"), e["job"]["name"]) for e in events]
    (topic,) = complete[-1]["inputs"]
    (staged,) = complete[-1]["outputs"]
    assert (topic["namespace"], topic["name"]) == (f"rocketmq://{embedded_cluster.namesrv_addr}", "dt_orders")
    assert staged["namespace"] == "file"
    assert staged["name"] == str(Path(xcoms["window"]["manifest"]).parent)
