"""Bounded window (Airflow operator) -> Spark load (spark-submit) -> commit (Airflow operator).

Deselect with ``-m "not spark"`` where no JVM is available.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from .backends import IntegrationCluster
from .helpers import REPO, SEQ, airflow_connection_env, produce

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CONN_ID = "rocketmq_integration"


def _context(run_id: str, task_id: str) -> Any:
    # the operators only read the task identity and run id from the context
    return {"ti": SimpleNamespace(dag_id="integration", task_id=task_id, map_index=-1), "run_id": run_id}


def _spark_env() -> dict[str, str]:
    """The environment scripts/_env.sh exports (SPARK_HOME, JAVA_HOME, PYSPARK_PYTHON...)."""
    proc = subprocess.run(["bash", "-c", "source scripts/_env.sh >/dev/null && env -0"], cwd=REPO,
                          env={**os.environ, "ROCKETMQ_ENV_NO_INSTALL": "1"}, capture_output=True,
                          timeout=60, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        pytest.skip(f"scripts/_env.sh could not prepare Spark: {proc.stderr.decode()[-300:]}")
    return dict(item.split("=", 1) for item in proc.stdout.decode().split("\0") if "=" in item)


def test_window_then_spark_load_then_commit(cluster: IntegrationCluster, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("airflow")
    pq = pytest.importorskip("pyarrow.parquet")
    from airflow_provider_rocketmq.operators.commit import RocketMQCommitWindowOperator
    from airflow_provider_rocketmq.operators.window import RocketMQConsumeWindowOperator
    from airflow_provider_rocketmq.spark import LOAD_WINDOW_APP

    monkeypatch.setenv(*airflow_connection_env(cluster, CONN_ID))
    topic = cluster.new_topic("window", queues=4)
    group = cluster.new_group("window")
    with cluster.producer() as producer:
        sent = produce(producer, topic, range(40), tags="TagW")

    window = RocketMQConsumeWindowOperator(
        task_id="window", topic=topic, consumer_group=group, commit="after_downstream",
        staging_path=str(tmp_path / "staging"), rocketmq_conn_id=CONN_ID, assignment_timeout=60,
    )
    xcom = window.execute(_context("run1", "window"))
    assert xcom["messages"] == 40
    manifest = json.loads(Path(xcom["manifest"]).read_text())
    ends = {(q["broker"], q["queue_id"]): q["end_offset"] for q in manifest["queues"]}
    hw = cluster.admin.high_water_marks(topic)
    assert ends == {(mq.broker_name, mq.queue_id): off for mq, off in hw.items()}

    # messages after the window's high-water marks belong to the next window
    with cluster.producer() as producer:
        produce(producer, topic, range(40, 50))
    # after_downstream: nothing is committed before Spark succeeded
    assert all(cluster.admin.committed_offset(group, mq) < end for mq, end in hw.items() if end > 0)

    out_dir = tmp_path / "loaded"
    env = _spark_env()
    spark_submit = Path(env["VIRTUAL_ENV"]) / "bin" / "spark-submit"
    if not spark_submit.exists():
        pytest.skip(f"{spark_submit} not found")
    proc = subprocess.run(
        [str(spark_submit), "--master", "local[1]", "--driver-memory", "512m",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
         LOAD_WINDOW_APP, "--manifest", xcom["manifest"], "--output", str(out_dir)],
        env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, check=False,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "rows_out=40" in proc.stdout, proc.stdout[-2000:]
    loaded = pq.read_table(out_dir).to_pylist()
    # a map column reads back as (key, value) pairs
    assert sorted(int(dict(r["properties"])[SEQ]) for r in loaded) == list(range(40))
    assert {r["body"] for r in loaded} == {f"message {i}" for i in range(40)}
    # the columns the load derives from the staged properties string: as the broker stored each message
    by_seq = {int(dict(r["properties"])[SEQ]): r for r in loaded}
    assert {seq: (r["msg_id"], r["tags"], r["keys"], r["broker"], r["queue_id"], r["queue_offset"], r["topic"])
            for seq, r in by_seq.items()} == \
        {seq: (s.msg_id, "TagW", f"key-{seq}", s.queue.broker_name, s.queue.queue_id, s.queue_offset, topic)
         for seq, s in enumerate(sent)}

    commit = RocketMQCommitWindowOperator(task_id="commit", manifests=xcom, rocketmq_conn_id=CONN_ID)
    commit.execute(_context("run1", "commit"))
    for mq, end in hw.items():
        assert cluster.admin.committed_offset(group, mq) == end, mq
    # exactly the 10 later messages remain for the next window
    assert cluster.admin.lag(group, topic).total_lag == 10
