"""The `rocketmq` Spark data source against the integration backend (a real broker when
ROCKETMQ_NAMESRV names one), through spark-submit: batch read, tag filter, streaming with a
commit group. Public surfaces only. Deselect with ``-m "not spark"`` where no JVM is available.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .backends import IntegrationCluster
from .helpers import REPO, produce
from .test_window_spark import _spark_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]

APP = Path(__file__).with_name("spark_source_app.py")


def test_spark_reads_the_topic_through_the_data_source(cluster: IntegrationCluster, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    topic = cluster.new_topic("sparksrc", queues=4)
    group = cluster.new_group("sparksrc")
    with cluster.producer() as producer:
        produce(producer, topic, range(60), tags="odd")
        produce(producer, topic, range(60, 90), tags="even")
    hw = cluster.admin.high_water_marks(topic)
    assert sum(hw.values()) == 90

    env = _spark_env()
    spark_submit = Path(env["VIRTUAL_ENV"]) / "bin" / "spark-submit"
    proc = subprocess.run(
        [str(spark_submit), "--master", "local[2]", "--driver-memory", "512m", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.sql.shuffle.partitions=2", str(APP), cluster.namesrv_addr, topic, group, str(tmp_path)],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=400, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])

    rows = result["batch"]
    assert sorted(r["seq"] for r in rows) == list(range(90))  # every message once
    assert {r["body"] for r in rows} == {f"message {i}" for i in range(90)}
    by_queue: dict[tuple[str, int], list[int]] = {}
    for r in rows:
        by_queue.setdefault((r["broker"], r["queue_id"]), []).append(r["queue_offset"])
    assert {q: sorted(offs) for q, offs in by_queue.items()} == {
        (mq.broker_name, mq.queue_id): list(range(end)) for mq, end in hw.items() if end}
    assert sorted(result["tagged"]) == list(range(60))
    assert sorted(result["streamed"]) == list(range(90)) and result["micro_batches"] >= 2
    # commitGroup: the group's offsets are the stream's end, what lag sensors and mqadmin read
    for mq, end in hw.items():
        assert cluster.admin.committed_offset(group, mq) == end, mq
    assert cluster.admin.lag(group, topic).total_lag == 0
