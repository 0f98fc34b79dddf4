"""The cached byte count through real pulls: what byte flow control (pull_threshold_size_for_queue)
and running info read. The pull loop takes the total from the decoder's tally; a batch that was
trimmed (tag re-filter) is summed again."""

from __future__ import annotations

import threading

import pytest

from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.protocol.message import Message

from .cluster import FAST, TestCluster, wait_until


def _body(i: int) -> bytes:
    # 100 B to ~8.8 KiB; from 4 KiB on the producer compresses them, and the cache must count the
    # decompressed length (Java's msgSize counts the body the listener gets)
    return bytes([65 + i % 26]) * (100 + 97 * i)


def _send_each(cluster: TestCluster, topic: str, bodies: list[bytes], tags: list[str | None]) -> None:
    """One SEND_MESSAGE each: unlike batch sends, single sends compress bodies of 4 KiB and more."""
    async def go() -> None:
        for body, tag in zip(bodies, tags, strict=True):
            await cluster.producer.send(Message(topic, body, tags=tag))
    cluster.run(go(), timeout=120)


def _held_consumer(cluster: TestCluster, group: str, topic: str, expression: str,
                   release: threading.Event, **config: object) -> PushConsumer:
    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        release.wait(60)  # every call waits: nothing leaves the cache until the test releases it
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **{**FAST, **config})
    c.subscribe(topic, expression)
    c.register_listener(listener)
    return c


# "Aa" and "BB" share a Java hashCode (2112): the broker's tag-code filter passes both, the
# consumer's exact re-filter drops "BB" from the pulled batch
@pytest.mark.parametrize("expression", ["*", "Aa"])
def test_cached_bytes_are_the_decoded_bodies_of_the_cached_messages(cluster: TestCluster, expression: str) -> None:
    topic, group = f"CachedBytes{'All' if expression == '*' else expression}", f"g_cached_bytes_{expression != '*'}"
    cluster.create_topic(topic, 2)
    n = 90
    _send_each(cluster, topic, [_body(i) for i in range(n)], ["Aa" if i % 3 else "BB" for i in range(n)])
    expect = [i for i in range(n) if expression == "*" or i % 3]
    release = threading.Event()
    c = _held_consumer(cluster, group, topic, expression, release)
    c.start()
    try:
        wait_until(lambda: c.stats()["pulled_messages"] == len(expect), 30, "every matching message pulled")
        s = c.stats()
        assert s["cached_messages"] == len(expect)
        assert s["cached_bytes"] == sum(len(_body(i)) for i in expect)
        release.set()
        wait_until(lambda: c.stats()["consumed_ok"] == len(expect), 30, "every message consumed")
        s = c.stats()
        assert (s["cached_messages"], s["cached_bytes"]) == (0, 0)
    finally:
        release.set()
        c.shutdown()


def test_byte_flow_control_holds_a_queue_at_the_decompressed_size(cluster: TestCluster) -> None:
    """64 KiB bodies are stored compressed (a few hundred bytes each); 1 MiB per queue is reached
    after 16 of them only if the cache counts what they decompress to."""
    topic, group = "CachedBytesFlow", "g_cached_bytes_flow"
    cluster.create_topic(topic, 1)
    n = 200
    _send_each(cluster, topic, [b"%08d" % i * 8192 for i in range(n)], [None] * n)
    release = threading.Event()
    c = _held_consumer(cluster, group, topic, "*", release, pull_threshold_size_for_queue=1, pull_batch_size=32)
    c.start()
    try:
        wait_until(lambda: c.stats()["flow_control_delays"] >= 2, 30, "byte flow control on the queue")
        s = c.stats()
        # one pull of at most 32 went past 1 MiB; the loop has not pulled again since
        assert s["cached_messages"] == s["pulled_messages"] <= 32 and s["cached_bytes"] > 1024 * 1024
        assert s["cached_bytes"] == s["cached_messages"] * 65536
        release.set()
        wait_until(lambda: c.stats()["consumed_ok"] == n, 30, "every message consumed once released")
        assert c.stats()["cached_bytes"] == 0
    finally:
        release.set()
        c.shutdown()
