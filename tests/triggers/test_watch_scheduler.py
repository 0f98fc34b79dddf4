"""A real `airflow dag-processor` + `airflow scheduler` + `airflow triggerer` (SQLite, LocalExecutor, a
throw-away AIRFLOW_HOME) schedule a DAG on an Asset whose AssetWatcher is
`MessageQueueTrigger(scheme="rocketmq")`: exactly one DAG run per arrival of messages (10 waiting, then
5 more), none while nothing new arrives. About a minute on 2 shared cores. Re-creation of the trigger
from its serialized form is covered in test_airflow_watch_trigger.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, Producer

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.timeout(420)]

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
DAG_ID = "rocketmq_on_arrival"
POLL = 1.0

DAG = f'''
from datetime import datetime
from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import DAG, Asset, AssetWatcher

trigger = MessageQueueTrigger(scheme="rocketmq", topic="sw_orders", consumer_group="sw_loader", poll_interval={POLL})
orders = Asset("rocketmq://rocketmq_default/sw_orders",
               watchers=[AssetWatcher(name="sw_orders_arrivals", trigger=trigger)])

with DAG("{DAG_ID}", schedule=[orders], start_date=datetime(2024, 1, 1), catchup=False):
    pass
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def produce(namesrv: str, n: int) -> None:
    with Producer(ClientConfig(namesrv_addr=namesrv)) as producer:
        for i in range(n):
            producer.send(Message("sw_orders", f"order-{i}".encode()))


def wait_until(what: str, check: Callable[[], bool], timeout: float, logs: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{logs()}")
        time.sleep(0.5)


@pytest.fixture
def airflow_components(embedded_cluster: Any, tmp_path: Path) -> Iterator[tuple[Path, Callable[[], str]]]:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "watch_dag.py").write_text(DAG)
    home = tmp_path / "home"
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
           "AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
           # the components' log servers on ports of their own: other suites may run on this machine
           "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
           "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
           "AIRFLOW_CONN_ROCKETMQ_DEFAULT": json.dumps({"conn_type": "rocketmq",
                                                        "host": embedded_cluster.namesrv_addr})}
    migrate = subprocess.run([AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, timeout=240,
                             stdin=subprocess.DEVNULL, check=False)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for component in ("dag-processor", "scheduler", "triggerer"):
        # the child holds its own copy of the descriptor: ours is closed as soon as it started
        with open(tmp_path / f"{component}.log", "wb") as log:
            procs[component] = subprocess.Popen([AIRFLOW, component], env=env, stdout=log,
                                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True)

    def logs() -> str:
        return "\n".join(f"--- {c} ---\n" + (tmp_path / f"{c}.log").read_text(errors="replace")[-3000:]
                         for c in procs)
    try:
        yield home / "airflow.db", logs
    finally:
        for proc in procs.values():  # each component leads its own process group (executor, trigger runner)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def test_asset_watcher_schedules_exactly_one_run_per_arrival(embedded_cluster: Any,
                                                              airflow_components: tuple[Path, Any]) -> None:
    db, logs = airflow_components
    with Admin(ClientConfig(namesrv_addr=embedded_cluster.namesrv_addr)) as admin:
        admin.create_topic("sw_orders", queues=4)
    produce(embedded_cluster.namesrv_addr, 10)  # waiting before anything runs

    def query(sql: str) -> list[Any]:
        try:
            with sqlite3.connect(db, timeout=10) as conn:
                return list(conn.execute(sql))
        except sqlite3.OperationalError:  # tables not there yet / locked: ask again
            return []

    def runs() -> int:
        rows = query(f"SELECT count(*) FROM dag_run WHERE dag_id = '{DAG_ID}'")
        return int(rows[0][0]) if rows else 0

    def payloads() -> list[dict[str, Any]]:
        return [json.loads(extra)["payload"] for (extra,) in query("SELECT extra FROM asset_event ORDER BY id")]

    wait_until("the first run", lambda: runs() >= 1, 240, logs)
    time.sleep(6 * POLL)  # several polls, and the re-created trigger, with nothing new
    assert runs() == 1, logs()
    assert [p["messages"] for p in payloads()] == [10]

    produce(embedded_cluster.namesrv_addr, 5)
    wait_until("the second run", lambda: runs() >= 2, 120, logs)
    time.sleep(6 * POLL)
    assert runs() == 2, logs()
    first, second = payloads()
    assert second["messages"] == 5
    ends = {r["queue_id"]: r["end_offset"] for r in first["ranges"]}
    assert all(r["start_offset"] == ends.get(r["queue_id"], 0) for r in second["ranges"])
