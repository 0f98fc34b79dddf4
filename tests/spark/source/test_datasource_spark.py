"""The ``rocketmq`` data source through a real ``spark-submit --master local[2]`` (separate Python
workers) against 3 embedded brokers x 8 queues.

One Spark application (`rocketmq_source_app.py`) runs every read, so the module pays for one JVM
start; each test below checks one of its outcomes against what the brokers hold.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_rocketmq.client import ClientConfig, Message, Producer
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from tests.spark.conftest import SparkRun

pytestmark = [pytest.mark.spark, pytest.mark.slow]

APP = Path(__file__).with_name("rocketmq_source_app.py")
ALL, LOST, STREAM = "DsAll", "DsLost", "DsStream"
SECRETS = {"accessKey": "AKIDspark0secret", "secretKey": "SKspark0very0secret", "securityToken": "STSspark0token"}
TAGS = ("A", "B", "C")
BIG_QUEUES = {5, 17}  # 20 KB bodies: pulls come back short of the chunk (256 KiB per pull)
STARTING = {ALL: {"broker-a:0": 10, "broker-b:3": 20, "broker-c:7": -1}}
ENDING = {ALL: {"broker-a:0": 30, "broker-b:3": 21, "broker-a:1": 5}}
MIN_PARTITIONS = 60
EXPRESSION = "A || C"
LOST_QUEUE, LOST_BEFORE = ("broker-b", 2), 40
FIRST_WAVE, SECOND_WAVE, MAX_PER_TRIGGER = 500, 300, 250
COMMIT_GROUP = "ds_stream_group"


def _body(q: int, i: int) -> bytes:
    return random.Random(q * 100_000 + i).randbytes(20_000) if q in BIG_QUEUES else f"body-{q}-{i}".encode()


def _produce(cluster: EmbeddedCluster) -> None:
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), group="ds_test_producer") as producer:
        queues = producer.publish_queues(ALL)
        assert len(queues) == 24
        for q, mq in enumerate(queues):
            msgs = [Message(ALL, _body(q, i), tags=TAGS[i % 3], keys=[f"k{q}-{i}"], properties={"i": str(i)})
                    for i in range(40 + 7 * q)]
            for lo in range(0, len(msgs), 16):
                producer.send_batch(msgs[lo:lo + 16], queue=mq)
        lost = next(mq for mq in producer.publish_queues(LOST) if (mq.broker_name, mq.queue_id) == LOST_QUEUE)
        producer.send_batch([Message(LOST, f"lost-{i}".encode()) for i in range(100)], queue=lost)
        stream_queues = producer.publish_queues(STREAM)
        for i in range(FIRST_WAVE):
            producer.send(Message(STREAM, f"wave1-{i}".encode()), queue=stream_queues[i % len(stream_queues)])
    cluster.broker(LOST_QUEUE[0]).store.delete_before(LOST, LOST_QUEUE[1], LOST_BEFORE)  # retention


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(brokers=3, queues=8) as c:
        for topic in (ALL, LOST, STREAM):
            c.create_topic(topic, 8)
        _produce(c)
        yield c


@pytest.fixture(scope="module")
def app_run(cluster: EmbeddedCluster, spark_app: Any, tmp_path_factory: pytest.TempPathFactory,
            ) -> tuple[SparkRun, dict[str, Any], Path]:
    work = tmp_path_factory.mktemp("ds")
    spec = {"namesrv": cluster.namesrv_addr, "secrets": SECRETS, "all": ALL, "starting": STARTING, "ending": ENDING,
            "min_partitions": MIN_PARTITIONS, "expression": EXPRESSION, "lost": LOST,
            "lost_queue": f"{LOST_QUEUE[0]}:{LOST_QUEUE[1]}", "stream": STREAM, "max_per_trigger": MAX_PER_TRIGGER,
            "commit_group": COMMIT_GROUP, "second_wave": SECOND_WAVE, "sink": str(work / "sink"),
            "checkpoint": str(work / "checkpoint")}
    (work / "spec.json").write_text(json.dumps(spec))
    run = spark_app(APP, str(work / "spec.json"), str(work / "result.json"))
    assert run.returncode == 0, run.output[-6000:]
    return run, json.loads((work / "result.json").read_text()), work


@pytest.fixture(scope="module")
def result(app_run: tuple[SparkRun, dict[str, Any], Path]) -> dict[str, Any]:
    return app_run[1]


def _stored(cluster: EmbeddedCluster, topic: str) -> dict[tuple[str, int, int], Any]:
    return {(m.broker_name, m.queue_id, m.queue_offset): m for m in cluster.messages(topic)}


def test_batch_read_equals_the_brokers_contents(cluster: EmbeddedCluster, result: dict[str, Any]) -> None:
    stored = _stored(cluster, ALL)
    assert len(stored) == sum(40 + 7 * q for q in range(24))
    full = result["full"]
    assert full["partitions"] == 24  # one per queue: 3 brokers x 8 queues
    assert len(full["rows"]) == len({tuple(r[:3]) for r in full["rows"]}) == len(stored)
    expected = sorted(
        [b, q, o, ALL, m.msg_id, m.tags, m.keys, m.properties, m.born_timestamp, m.store_timestamp, 0,
         hashlib.sha256(m.body).hexdigest()] for (b, q, o), m in stored.items())
    got = sorted([*r[:7], json.loads(r[7]), *r[8:]] for r in full["rows"])
    assert got == expected


def test_json_starting_and_ending_offsets_read_exact_sub_ranges(cluster: EmbeddedCluster,
                                                                result: dict[str, Any]) -> None:
    ends = cluster.max_offsets(ALL)
    expected = []
    for (broker, qid), high in ends.items():
        key = f"{broker}:{qid}"
        start = STARTING[ALL].get(key, 0)
        start = high if start == -1 else start
        end = ENDING[ALL].get(key, high)
        expected += [[broker, qid, o] for o in range(start, end)]
    assert sorted(result["subrange"]) == sorted(expected)
    assert [k for k in result["subrange"] if k[:2] == ["broker-a", 0]] == [["broker-a", 0, o] for o in range(10, 30)]


def test_min_partitions_splits_queues_and_reads_each_offset_once(cluster: EmbeddedCluster,
                                                                 result: dict[str, Any]) -> None:
    split = result["split"]
    keys = [tuple(r[1:]) for r in split["rows"]]
    assert sorted(keys) == sorted(_stored(cluster, ALL))  # each offset once
    assert split["partitions"] >= MIN_PARTITIONS
    tasks_per_queue: dict[tuple[str, int], set[int]] = {}
    for pid, broker, qid, _ in split["rows"]:
        tasks_per_queue.setdefault((broker, qid), set()).add(pid)
    # the larger queues were cut into offset sub-ranges, each read by its own task
    split_queues = {q for q, pids in tasks_per_queue.items() if len(pids) > 1}
    assert len(split_queues) >= 12 and ("broker-c", 7) in split_queues  # the largest queue (201 messages)
    queues_per_task: dict[int, set[tuple[str, int]]] = {}
    for pid, broker, qid, _ in split["rows"]:
        queues_per_task.setdefault(pid, set()).add((broker, qid))
    assert all(len(queues) == 1 for queues in queues_per_task.values())  # a task reads one queue's sub-range


def test_tag_filter(cluster: EmbeddedCluster, result: dict[str, Any]) -> None:
    expected = sorted([b, q, o] for (b, q, o), m in _stored(cluster, ALL).items() if m.tags in ("A", "C"))
    assert sorted(result["tags"]) == expected
    assert len(expected) > len(cluster.messages(ALL)) // 2


def test_fail_on_data_loss_both_ways(result: dict[str, Any]) -> None:
    broker, qid = LOST_QUEUE
    assert result["loss_fail"] is not None
    assert (f"{LOST} {broker}:{qid}: offsets [0, {LOST_BEFORE}) of the range [0, 100) are no longer on the broker "
            f"(its min offset is {LOST_BEFORE}; retention deleted them); set failOnDataLoss=false") in result["loss_fail"]
    assert sorted(result["loss_skip"]) == [[broker, qid, o] for o in range(LOST_BEFORE, 100)]


def test_bad_option_names_the_option_and_secrets_never_show(app_run: tuple[SparkRun, dict[str, Any], Path],
                                                            ) -> None:
    run, result, work = app_run
    # Spark lower-cases option names before the source sees them
    assert ("ConfigError: startingoffset: unknown option of the rocketmq data source (did you mean "
            "startingOffsets? known: namesrv, topic, ") in result["typo"]
    assert "BatchScan rocketmq" in result["explain"]
    checkpoint_text = "".join(p.read_text(errors="replace") for p in (work / "checkpoint").rglob("*") if p.is_file())
    assert "DsStream" in checkpoint_text  # the offsets are there ...
    for secret in SECRETS.values():  # ... the credentials are not, nor in plans, errors or Spark's INFO logs
        for where, text in (("stdout", run.stdout), ("stderr", run.stderr), ("explain", result["explain"]),
                            ("errors", result["loss_fail"]), ("checkpoint", checkpoint_text)):
            assert secret not in text, where


def test_streaming_available_now_twice_reads_each_message_once(cluster: EmbeddedCluster,
                                                               result: dict[str, Any]) -> None:
    stored = _stored(cluster, STREAM)
    assert len(stored) == FIRST_WAVE + SECOND_WAVE
    sink = result["sink"]
    assert sorted(tuple(k[:3]) for k in sink) == sorted(stored)  # every message, none twice
    assert {k[3] for k in sink} == {f"wave1-{i}" for i in range(FIRST_WAVE)} | {f"wave2-{i}" for i in
                                                                              range(SECOND_WAVE)}
    # maxOffsetsPerTrigger: several micro-batches per run, none far above the limit (>= 1 per queue)
    assert sum(result["stream_first"]) == FIRST_WAVE and sum(result["stream_second"]) == SECOND_WAVE
    assert len(result["stream_first"]) >= 2 and max(result["stream_first"]) <= MAX_PER_TRIGGER + 24
    # commitGroup: the group's offsets are the sink's (next offset after the last row of each queue)
    sink_next: dict[tuple[str, int], int] = {}
    for b, q, o, _ in sink:
        sink_next[(b, q)] = max(sink_next.get((b, q), 0), o + 1)
    assert cluster.committed_offsets(COMMIT_GROUP, STREAM) == sink_next == cluster.max_offsets(STREAM)
