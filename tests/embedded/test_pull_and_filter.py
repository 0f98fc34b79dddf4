"""Long polling and tag filtering on the embedded broker."""

from __future__ import annotations

import asyncio
import time

from airflow_provider_rocketmq.client.protocol.message import decode_messages
from airflow_provider_rocketmq.embedded import EmbeddedCluster

from .rawclient import RawClient, heartbeat_body, props, pull_ext, send_ext


async def _wait_parked(cluster: EmbeddedCluster, n: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while cluster.brokers[0].pull.parked() < n:
        assert time.monotonic() < deadline, "pull was never parked"
        await asyncio.sleep(0.01)


async def test_long_poll_is_answered_when_a_message_arrives(embedded_cluster: EmbeddedCluster) -> None:
    await embedded_cluster.create_topic("LP", 1)
    c = await RawClient().connect(embedded_cluster.brokers[0].addr)
    try:
        started = time.monotonic()
        parked = asyncio.ensure_future(c.call(11, pull_ext("g", "LP", 0, 0, sys_flag=6, suspend_ms=15000),
                                              timeout=30))
        await _wait_parked(embedded_cluster, 1)
        assert not parked.done()
        sent = await c.call(310, send_ext("LP", queue_id=0), b"wake up")
        assert sent.code == 0
        resp = await asyncio.wait_for(parked, 10)
        elapsed = time.monotonic() - started
        assert resp.code == 0 and resp.remark == "FOUND"
        assert [m.body for m in decode_messages(resp.body)] == [b"wake up"]
        assert elapsed < 7.5, f"answered after {elapsed:.1f}s, the suspend time was 15s"
        assert embedded_cluster.brokers[0].pull.parked() == 0
    finally:
        await c.close()


async def test_long_poll_times_out_with_pull_not_found(embedded_cluster: EmbeddedCluster) -> None:
    await embedded_cluster.create_topic("LP2", 1)
    c = await RawClient().connect(embedded_cluster.brokers[0].addr)
    try:
        started = time.monotonic()
        resp = await c.call(11, pull_ext("g", "LP2", 0, 0, sys_flag=6, suspend_ms=300))
        assert time.monotonic() - started >= 0.29
        assert (resp.code, resp.remark, resp.ext["nextBeginOffset"]) == (19, "NO_MESSAGE_IN_QUEUE", "0")
        # without the suspend flag the answer is immediate
        resp = await c.call(11, pull_ext("g", "LP2", 0, 0, sys_flag=4, suspend_ms=15000), timeout=2)
        assert resp.code == 19
    finally:
        await c.close()


async def test_parked_pull_ignores_messages_its_tags_do_not_match(embedded_cluster: EmbeddedCluster) -> None:
    await embedded_cluster.create_topic("LP3", 1)
    c = await RawClient().connect(embedded_cluster.brokers[0].addr)
    try:
        parked = asyncio.ensure_future(
            c.call(11, pull_ext("g", "LP3", 0, 0, sys_flag=6, subscription="TagA", suspend_ms=15000), timeout=30))
        await _wait_parked(embedded_cluster, 1)
        await c.call(310, send_ext("LP3", queue_id=0, props=props(TAGS="TagB")), b"b")
        done, _ = await asyncio.wait({parked}, timeout=0.3)
        assert not done, "a TagB message woke a TagA long poll"
        await c.call(310, send_ext("LP3", queue_id=0, props=props(TAGS="TagA")), b"a")
        resp = await asyncio.wait_for(parked, 10)
        assert resp.code == 0
        msgs = decode_messages(resp.body)
        assert [(m.tags, m.queue_offset) for m in msgs] == [("TagA", 1)]
        assert resp.ext["nextBeginOffset"] == "2"
    finally:
        await c.close()


async def test_filter_by_heartbeat_code_set_and_by_subscription_flag(embedded_cluster: EmbeddedCluster) -> None:
    c = await RawClient().connect(embedded_cluster.brokers[0].addr)
    try:
        for i, tag in enumerate(["TagA", "TagB", "TagA", "TagC"]):
            await c.call(310, send_ext("FT", queue_id=0, props=props(TAGS=tag, idx=str(i))), b"x")
        await c.call(310, send_ext("FT", queue_id=0), b"untagged")
        # no heartbeat yet: the group has no subscription to filter by
        resp = await c.call(11, pull_ext("gf", "FT", 0, 0, sys_flag=0))
        assert resp.code == 24 and resp.remark.startswith("the consumer's group info not exist")

        await c.call(34, body=heartbeat_body("cid", "gf", {"FT": "TagA || TagC"}, sub_version=100))
        resp = await c.call(11, pull_ext("gf", "FT", 0, 0, sys_flag=0, sub_version=100))
        assert [m.properties["idx"] for m in decode_messages(resp.body)] == ["0", "2", "3"]
        assert resp.ext["nextBeginOffset"] == "5"  # every entry up to the end was scanned
        # a pull newer than the registered subscription is told so
        resp = await c.call(11, pull_ext("gf", "FT", 0, 0, sys_flag=0, sub_version=101))
        assert (resp.code, resp.remark, resp.ext_fields) == (25, "the consumer's subscription not latest", {})
        # subscription flag: the expression in the request wins over the heartbeat's
        resp = await c.call(11, pull_ext("gf", "FT", 0, 0, sys_flag=4, subscription="TagB"))
        assert [m.tags for m in decode_messages(resp.body)] == ["TagB"]
        resp = await c.call(11, pull_ext("gf", "FT", 0, 0, sys_flag=4, subscription="*"))
        assert len(decode_messages(resp.body)) == 5
        resp = await c.call(11, pull_ext("gf", "FT", 0, 0, sys_flag=4, subscription="TagZ"))
        assert (resp.code, resp.remark, resp.ext["nextBeginOffset"]) == (20, "NO_MATCHED_MESSAGE", "5")
        # the scan is bounded by maxMsgNums matches
        resp = await c.call(11, pull_ext("gf", "FT", 0, 0, sys_flag=4, subscription="TagA", max_nums=1))
        assert len(decode_messages(resp.body)) == 1 and resp.ext["nextBeginOffset"] == "1"
    finally:
        await c.close()


async def test_pull_offsets_out_of_range(embedded_cluster: EmbeddedCluster) -> None:
    c = await RawClient().connect(embedded_cluster.brokers[0].addr)
    broker = embedded_cluster.brokers[0]
    try:
        for i in range(3):
            await c.call(310, send_ext("OR", queue_id=1), f"m{i}".encode())
        cases = {5: (21, "OFFSET_OVERFLOW_BADLY", "3"), 3: (19, "OFFSET_OVERFLOW_ONE", "3")}
        for offset, want in cases.items():
            r = await c.call(11, pull_ext("g", "OR", 1, offset))
            assert (r.code, r.remark, r.ext["nextBeginOffset"]) == want
        r = await c.call(11, pull_ext("g", "OR", 0, 2))  # empty queue, offset != 0
        assert (r.code, r.remark, r.ext["nextBeginOffset"]) == (21, "NO_MESSAGE_IN_QUEUE", "0")
        r = await c.call(11, pull_ext("g", "OR", 99, 0))
        assert r.code == 1 and r.remark.startswith("queueId[99] is illegal, topic:[OR] topicConfig.readQueueNums:[4]")
        r = await c.call(11, pull_ext("g", "NoSuchTopic", 0, 0))
        assert r.code == 17 and r.remark.startswith("topic[NoSuchTopic] not exist, apply first please!")
        # retention emulation: below the min offset the consumer is moved, the group has no offset -> 22
        broker_loop_call = embedded_cluster.loop
        assert broker_loop_call is not None
        fut = asyncio.run_coroutine_threadsafe(_delete_before(broker, "OR", 1, 2), broker_loop_call)
        await asyncio.wrap_future(fut)
        r = await c.call(11, pull_ext("g", "OR", 1, 0))
        assert (r.code, r.remark, r.ext["nextBeginOffset"], r.ext["minOffset"]) == (21, "OFFSET_TOO_SMALL", "2", "2")
        q = await c.call(14, {"consumerGroup": "fresh", "topic": "OR", "queueId": 1})
        assert q.code == 22 and q.ext_fields == {}
        q = await c.call(14, {"consumerGroup": "fresh", "topic": "OR", "queueId": 0})
        assert (q.code, q.ext["offset"]) == (0, "0")
    finally:
        await c.close()


async def _delete_before(broker, topic: str, queue_id: int, offset: int) -> None:  # type: ignore[no-untyped-def]
    broker.store.delete_before(topic, queue_id, offset)


async def test_pull_batches_are_capped_like_a_real_broker(embedded_cluster: EmbeddedCluster) -> None:
    c = await RawClient().connect(embedded_cluster.brokers[0].addr)
    try:
        for _ in range(40):
            await c.call(310, send_ext("CAP", queue_id=0), b"x" * 10)
        r = await c.call(11, pull_ext("g", "CAP", 0, 0, max_nums=100))
        assert len(decode_messages(r.body)) == 32 and r.ext["nextBeginOffset"] == "32"
        for _ in range(3):
            await c.call(310, send_ext("BIG", queue_id=0), b"y" * 100_000)
        r = await c.call(11, pull_ext("g", "BIG", 0, 0))
        assert len(decode_messages(r.body)) == 2  # 256 KiB per pull
    finally:
        await c.close()
