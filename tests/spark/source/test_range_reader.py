"""The data source's task-side reader against the embedded broker (no Spark): exact ranges, short
answers, tags, retention during a read, lost answers and broker back-pressure."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

import pytest

from airflow_provider_rocketmq.client import ClientConfig, Message, Producer
from airflow_provider_rocketmq.client.mqclient import MQClient
from airflow_provider_rocketmq.client.protocol.errors import RequestTimeoutError
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.spark.source import range_reader
from airflow_provider_rocketmq.spark.source.options import SourceOptions, parse_options
from airflow_provider_rocketmq.spark.source.range_reader import SpanPuller, read_span
from airflow_provider_rocketmq.spark.source.ranges import DataLossError, QueueSpan, plan_batch

TOPIC = "RangeT"


def _fill(cluster: EmbeddedCluster, count: int, body: Callable[[int], bytes], *, namespace: str = "",
          topic: str = TOPIC) -> None:
    """``count`` messages into queue 0 of broker-a, tags A/B alternating, keys k<i>."""
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, namespace=namespace)
    with Producer(cfg, group="range_p") as producer:
        q0 = next(q for q in producer.publish_queues(topic) if q.queue_id == 0)
        for lo in range(0, count, 50):
            producer.send_batch([Message(topic, body(i), tags="A" if i % 2 == 0 else "B", keys=[f"k{i}"],
                                         properties={"n": str(i)}) for i in range(lo, min(count, lo + 50))],
                                queue=q0)


def _rows(opts: SourceOptions, span: QueueSpan) -> list[dict]:
    return [row for batch in read_span(opts, span) for row in batch.to_pylist()]


@pytest.fixture
def cluster(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> EmbeddedCluster:
    c = embedded_cluster_factory(queues=2)
    c.create_topic(TOPIC, 2)
    return c


def test_exact_range_with_short_answers_and_compressed_bodies(cluster: EmbeddedCluster,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # every 3rd body is 20 KB of noise: 32 of them exceed the broker's 256 KiB per pull, so chunks come
    # back short and are re-pulled before later answers are used; every 7th is text the producer compresses
    def body(i: int) -> bytes:
        if i % 3 == 0:
            return random.Random(i).randbytes(20_000)
        return (f"{i:06d}".encode() * 2000) if i % 7 == 0 else f"m{i}".encode()
    _fill(cluster, 400, body)
    monkeypatch.setattr(range_reader, "FLUSH_OFFSETS", 64)  # several record batches per span
    opts = parse_options({"namesrv": cluster.namesrv_addr, "topic": TOPIC, "pullBatchSize": "32",
                          "pullsInFlight": "4"})
    span = QueueSpan(TOPIC, "broker-a", 0, 7, 391)
    batches = list(read_span(opts, span))
    assert len(batches) > 3
    rows = [r for b in batches for r in b.to_pylist()]
    assert [r["queue_offset"] for r in rows] == list(range(7, 391))  # each offset once, in order
    assert all(r["body"] == body(r["queue_offset"]) for r in rows)
    stored = {m.queue_offset: m for m in cluster.messages(TOPIC) if m.queue_id == 0}
    r = rows[0]
    m = stored[7]
    assert (r["topic"], r["broker"], r["queue_id"], r["msg_id"], r["tags"], r["keys"]) == \
        (TOPIC, "broker-a", 0, m.msg_id, "B", "k7")
    assert dict(r["properties"])["n"] == "7" and r["born_timestamp"] == m.born_timestamp \
        and r["store_timestamp"] == m.store_timestamp and r["reconsume_times"] == 0

    async def count_pulls() -> int:
        client = MQClient(opts.client_config())
        try:
            puller = SpanPuller(client, opts, span)
            n = sum([b.num_rows async for b in puller.batches()])
            assert n == 384 and puller.offsets_read == 384
            return puller.pulls
        finally:
            await client.close()
    assert asyncio.run(count_pulls()) > (391 - 7) // 32 + 1  # short answers were pulled again


def _read_recording_depth(opts: SourceOptions, span: QueueSpan) -> tuple[list[int], int, int]:
    """Offsets read, the most pulls ever outstanding and the largest answer body, via a real SpanPuller."""
    async def go() -> tuple[list[int], int, int]:
        client = MQClient(opts.client_config())
        most = biggest = 0
        puller = SpanPuller(client, opts, span)
        fill, answer = puller._fill, puller._answer

        def recording_fill(conn):  # type: ignore[no-untyped-def]
            nonlocal most
            fill(conn)
            most = max(most, len(puller._inflight))

        def recording_answer(conn, front, resp):  # type: ignore[no-untyped-def]
            nonlocal biggest
            biggest = max(biggest, len(resp.body or b""))
            return answer(conn, front, resp)

        puller._fill, puller._answer = recording_fill, recording_answer  # type: ignore[method-assign]
        try:
            offsets = [o async for b in puller.batches() for o in b.column("queue_offset").to_pylist()]
        finally:
            await client.close()
        return offsets, most, biggest
    return asyncio.run(go())


def test_pulls_in_flight_bounded_by_answer_bytes(cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    # small answers: the default 256 pulls go out at once after the first answers; 20 KB bodies: the
    # broker answers ~240 KB per pull (its 256 KiB cap), so a 600 KB budget allows 2 outstanding
    _fill(cluster, 10_000, lambda i: f"m{i}".encode())
    opts = parse_options({"namesrv": cluster.namesrv_addr, "topic": TOPIC})
    offsets, most, _ = _read_recording_depth(opts, QueueSpan(TOPIC, "broker-a", 0, 0, 10_000))
    assert offsets == list(range(10_000))
    assert most == opts.pulls_in_flight == 256

    _fill(cluster, 200, lambda i: random.Random(i).randbytes(20_000))
    monkeypatch.setattr(range_reader, "IN_FLIGHT_BYTES", 600_000)
    offsets, most, biggest = _read_recording_depth(opts, QueueSpan(TOPIC, "broker-a", 0, 10_000, 10_200))
    assert offsets == list(range(10_000, 10_200))
    assert biggest > 200_000  # the broker's byte cap, not the 32 messages asked for, ended each answer
    assert most == 600_000 // biggest == 2


def test_tag_filter_and_namespace(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = embedded_cluster_factory(queues=1)
    cluster.create_topic(f"ns1%{TOPIC}", 1)
    _fill(cluster, 100, lambda i: f"m{i}".encode(), namespace="ns1")
    opts = parse_options({"namesrv": cluster.namesrv_addr, "topic": TOPIC, "namespace": "ns1", "expression": "A"})
    rows = _rows(opts, QueueSpan(TOPIC, "broker-a", 0, 0, 100))
    assert [r["queue_offset"] for r in rows] == list(range(0, 100, 2))
    assert {r["topic"] for r in rows} == {TOPIC} and {r["tags"] for r in rows} == {"A"}


def test_plan_then_retention_then_read(cluster: EmbeddedCluster, caplog: pytest.LogCaptureFixture) -> None:
    _fill(cluster, 200, lambda i: f"m{i}".encode())
    opts = parse_options({"namesrv": cluster.namesrv_addr, "topic": TOPIC})

    async def plan() -> list[QueueSpan]:
        client = MQClient(opts.client_config())
        try:
            return await plan_batch(client, opts)
        finally:
            await client.close()
    spans = asyncio.run(plan())
    assert spans == [QueueSpan(TOPIC, "broker-a", 0, 0, 200)]  # the empty queue 1 has no span
    cluster.broker("broker-a").store.delete_before(TOPIC, 0, 120)  # retention strikes after planning

    with pytest.raises(DataLossError) as info:
        _rows(opts, spans[0])
    assert str(info.value).startswith(f"{TOPIC} broker-a:0: offsets [0, ") and "min offset is 120" in str(info.value)
    assert "failOnDataLoss=false" in str(info.value)

    lenient = parse_options({"namesrv": cluster.namesrv_addr, "topic": TOPIC, "failOnDataLoss": "false"})
    with caplog.at_level(logging.WARNING, logger="airflow_provider_rocketmq.spark.source.range_reader"):
        rows = _rows(lenient, spans[0])
    assert [r["queue_offset"] for r in rows] == list(range(120, 200))
    assert [rec.getMessage() for rec in caplog.records] == [
        (f"{TOPIC} broker-a:0: offsets [0, 120) of the range [0, 200) are no longer on the broker (its min "
         "offset is 120; retention deleted them); skipping them (failOnDataLoss=false)")]
    # planned after retention: the driver applies the same policy before any task runs ("earliest" is
    # whatever the broker still holds, so name the lost offset explicitly)
    opts = parse_options({"namesrv": cluster.namesrv_addr, "topic": TOPIC,
                          "startingOffsets": f'{{"{TOPIC}": {{"broker-a:0": 100}}}}'})
    with pytest.raises(DataLossError, match=r"offsets \[100, 120\) of the range \[100, 200\)"):
        asyncio.run(plan())


def test_lost_answers_and_flow_control_are_retried(cluster: EmbeddedCluster, caplog: pytest.LogCaptureFixture) -> None:
    _fill(cluster, 300, lambda i: f"m{i}".encode())
    opts = parse_options({"namesrv": cluster.namesrv_addr, "topic": TOPIC, "requestTimeout": "0.5"})
    span = QueueSpan(TOPIC, "broker-a", 0, 0, 300)
    cluster.drop_responses(11, times=2)  # two pull answers never arrive: timeout, re-send from the gap
    assert [r["queue_offset"] for r in _rows(opts, span)] == list(range(300))
    cluster.clear_faults()
    cluster.flow_control(11, times=3)  # 215 to three pulls: retried after a jittered pause
    assert [r["queue_offset"] for r in _rows(opts, span)] == list(range(300))
    cluster.clear_faults()
    cluster.flow_control(11)  # forever: the task fails after its bounded retries, with the broker's code
    with pytest.raises(Exception, match="broker error 215"):
        _rows(opts, span)
    cluster.clear_faults()
    cluster.drop_responses(11)  # no answer ever: each try waits out its timeout, the last one's error ends the read
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=range_reader.__name__), \
            pytest.raises(RequestTimeoutError, match=r"no answer to the pull of .* at offset 0 within 0.5s"):
        _rows(opts, span)
    tries = [r for r in caplog.records if "failed (no answer" in r.getMessage()]
    assert len(tries) == range_reader.RETRY_ATTEMPTS  # bounded: the first try and its retries, then the error


ACL = {"accounts": [
    {"accessKey": "rmq_admin", "secretKey": "admin-secret-0001", "admin": True},
    {"accessKey": "spark_reader", "secretKey": "reader-secret-0002", "admin": False, "defaultTopicPerm": "DENY",
     "defaultGroupPerm": "DENY", "topicPerms": [f"{TOPIC}=SUB"], "groupPerms": ["rocketmq_spark_reader=SUB"]},
]}


def test_acl_signed_pulls_and_refusals_without_secrets(embedded_cluster_factory: Callable[..., EmbeddedCluster],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    cluster = embedded_cluster_factory(queues=1, acl=ACL)
    admin = ClientConfig(namesrv_addr=cluster.namesrv_addr, access_key="rmq_admin", secret_key="admin-secret-0001")
    with Producer(admin, group="range_p") as producer:
        producer.send_batch([Message(TOPIC, f"m{i}".encode()) for i in range(40)])
    span = QueueSpan(TOPIC, "broker-a", 0, 0, 40)
    opts = parse_options({"namesrv": cluster.namesrv_addr, "topic": TOPIC, "accessKey": "spark_reader",
                          "secretKey": "reader-secret-0002"})
    assert [r["queue_offset"] for r in _rows(opts, span)] == list(range(40))

    wrong = parse_options({"namesrv": cluster.namesrv_addr, "topic": TOPIC, "accessKey": "spark_reader",
                           "secretKey": "not-the-secret-0003"})
    with caplog.at_level(logging.DEBUG), pytest.raises(Exception) as info:
        _rows(wrong, span)
    text = str(info.value) + "".join(r.getMessage() for r in caplog.records)
    # the broker's refusal names the account; the data source shows "***" instead
    assert "Check signature failed for accessKey=***" in str(info.value)
    assert "spark_reader" not in text and "not-the-secret-0003" not in text
