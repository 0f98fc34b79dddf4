"""Group membership (unregister, channel close, expiry), queue locks, broker-initiated requests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from airflow_provider_rocketmq.client.connection import RemotingProtocol, open_connection
from airflow_provider_rocketmq.client.protocol import fastjson
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.message import decode_messages, parse_offset_msg_id
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.embedded import EmbeddedCluster

from .rawclient import RawClient, heartbeat_body, send_ext


def _lock_body(client: str, group: str, *queues: int, topic: str = "OT") -> bytes:
    return json.dumps({"clientId": client, "consumerGroup": group,
                       "mqSet": [{"brokerName": "broker-a", "queueId": q, "topic": topic} for q in queues]}).encode()


def _locked(resp: RemotingCommand) -> list[int]:
    return sorted(m["queueId"] for m in fastjson.loads(resp.body)["lockOKMQSet"])


async def test_unregister_notifies_the_remaining_members(embedded_cluster: EmbeddedCluster) -> None:
    addr = embedded_cluster.brokers[0].addr
    a, b = await RawClient().connect(addr), await RawClient().connect(addr)
    try:
        await a.call(34, body=heartbeat_body("A", "gu", {"T": "*"}))
        await b.call(34, body=heartbeat_body("B", "gu", {"T": "*"}))
        await a.wait_inbound(40, 2)
        r = await b.call(35, {"clientID": "B", "consumerGroup": "gu", "producerGroup": "CLIENT_INNER_PRODUCER"})
        assert (r.code, r.ext_fields) == (0, {})
        await a.wait_inbound(40, 3)
        assert sum(1 for c in b.inbound if c.code == 40) == 1
        assert embedded_cluster.brokers[0].consumer_ids("gu") == ["A"]
        # a new subscribed topic is a change too
        await a.call(34, body=heartbeat_body("A", "gu", {"T": "*", "T2": "*"}))
        await a.wait_inbound(40, 4)
    finally:
        await a.close()
        await b.close()


async def test_silent_channels_expire(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = embedded_cluster_factory(channel_expiry=0.4)
    addr = cluster.brokers[0].addr
    a, b = await RawClient().connect(addr), await RawClient().connect(addr)
    try:
        await a.call(34, body=heartbeat_body("A", "ge", {"T": "*"}))
        await b.call(34, body=heartbeat_body("B", "ge", {"T": "*"}))
        deadline = time.monotonic() + 3
        while True:  # A keeps heartbeating, B goes silent
            await a.call(34, body=heartbeat_body("A", "ge", {"T": "*"}))
            if cluster.brokers[0].consumer_ids("ge") == ["A"]:
                break
            assert time.monotonic() < deadline, "B never expired"
            await asyncio.sleep(0.1)
        assert b.conn is not None
        await asyncio.wait_for(b.conn.wait_closed(), 3)  # the broker closed B's channel
        await a.wait_inbound(40, 3)  # A joined, B joined, B expired
    finally:
        await a.close()
        await b.close()


async def test_queue_locks_expire(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = embedded_cluster_factory(lock_expiry=0.3)
    c = await RawClient().connect(cluster.brokers[0].addr)
    broker = cluster.brokers[0]
    try:
        r = await c.call(41, body=_lock_body("A", "go", 0, 1))
        assert (r.code, r.ext_fields, _locked(r)) == (0, None, [0, 1])
        assert _locked(await c.call(41, body=_lock_body("B", "go", 1, 2))) == [2]
        assert _locked(await c.call(41, body=_lock_body("A", "go", 0, 1))) == [0, 1]  # renewal by the owner
        assert broker.lock_owner("go", MessageQueue("OT", "broker-a", 1)) == "A"
        # B cannot unlock A's queue; A can
        assert (await c.call(42, body=_lock_body("B", "go", 0))).code == 0
        assert broker.lock_owner("go", MessageQueue("OT", "broker-a", 0)) == "A"
        r = await c.call(42, body=_lock_body("A", "go", 0))
        assert (r.code, r.ext_fields, r.body) == (0, None, None)
        assert _locked(await c.call(41, body=_lock_body("B", "go", 0))) == [0]
        # A stops renewing queue 1: after the expiry B gets it
        deadline = time.monotonic() + 3
        while _locked(await c.call(41, body=_lock_body("B", "go", 1))) != [1]:
            assert time.monotonic() < deadline, "the lock never expired"
            await asyncio.sleep(0.05)
        assert time.monotonic() - (deadline - 3) >= 0.25
        r = await c.call(41, body=b"{not json")
        assert r.code == 1 and "LOCK_BATCH_MQ body is not JSON" in r.remark
    finally:
        await c.close()


async def test_a_restarted_broker_forgets_its_locks(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = embedded_cluster_factory()  # locks last 60 s: only the restart can release A's
    broker = cluster.brokers[0]
    a = await RawClient().connect(broker.addr)
    try:
        assert _locked(await a.call(41, body=_lock_body("A", "go", 0))) == [0]
    finally:
        await a.close()
    assert broker.lock_owner("go", MessageQueue("OT", "broker-a", 0)) == "A"  # a closed channel keeps its lock
    await cluster.restart_broker("broker-a")
    assert broker.lock_owner("go", MessageQueue("OT", "broker-a", 0)) is None
    b = await RawClient().connect(broker.addr)
    try:
        assert _locked(await b.call(41, body=_lock_body("B", "go", 0))) == [0]
    finally:
        await b.close()


async def test_broker_initiated_requests(embedded_cluster: EmbeddedCluster) -> None:
    broker = embedded_cluster.brokers[0]
    seen: list[RemotingCommand] = []
    reset_seen = asyncio.Event()

    async def answer(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        seen.append(cmd)
        return cmd.make_response(0, body=b'{"properties":{}}', language="PYTHON")

    async def record(conn: RemotingProtocol, cmd: RemotingCommand) -> None:
        seen.append(cmd)
        if cmd.code == 220:
            reset_seen.set()

    conn = await open_connection(broker.addr, handlers={307: answer, 309: answer, 220: record, 40: record})
    producer = await RawClient().connect(broker.addr)
    try:
        r = await conn.request(RemotingCommand(34, body=heartbeat_body("C1", "gb", {"BT": "*"})), 5)
        assert r.code == 0
        sent = await producer.call(310, send_ext("BT", queue_id=2), b"direct")
        phy = parse_offset_msg_id(sent.ext["msgId"])[1]

        info = await broker.get_consumer_running_info("gb", "C1", jstack=True)
        assert info.code == 0 and seen[-1].code == 307
        assert seen[-1].ext == {"consumerGroup": "gb", "clientId": "C1", "jstackEnable": "true"}

        direct = await broker.consume_message_directly("gb", "C1", phy)
        assert direct.code == 0 and seen[-1].code == 309
        (m,) = decode_messages(seen[-1].body)
        assert m.body == b"direct" and seen[-1].ext["msgId"] == sent.ext["msgId"]

        told = await broker.reset_consumer_offset("gb", "BT", {2: 0, 3: 5})
        assert told == ["C1"]
        await asyncio.wait_for(reset_seen.wait(), 3)  # oneway: it arrives after the call returned
        reset = next(c for c in seen if c.code == 220)
        assert reset.ext["group"] == "gb" and reset.ext["topic"] == "BT" and reset.is_oneway
        table = {MessageQueue.from_json(fastjson.parse_key(k)): v
                 for k, v in fastjson.loads(reset.body)["offsetTable"].items()}
        assert table == {MessageQueue("BT", "broker-a", 2): 0, MessageQueue("BT", "broker-a", 3): 5}
        assert broker.committed_offset("gb", "BT", 3) == 5
    finally:
        await conn.close()
        await producer.close()


def test_close_client_connections_from_sync_code(embedded_cluster: EmbeddedCluster) -> None:
    async def scenario() -> None:
        c = await RawClient().connect(embedded_cluster.brokers[0].addr)
        await c.call(34, body=heartbeat_body("Z", "gz", {"T": "*"}))
        loop = asyncio.get_running_loop()
        closed = await loop.run_in_executor(None, embedded_cluster.close_client_connections, "Z")
        assert closed == 1
        assert c.conn is not None
        await asyncio.wait_for(c.conn.wait_closed(), 3)
        assert embedded_cluster.brokers[0].consumer_ids("gz") == []

    asyncio.run(scenario())


async def test_admin_reset_and_relay_to_clients(embedded_cluster: EmbeddedCluster) -> None:
    broker = embedded_cluster.brokers[0]
    seen: list[RemotingCommand] = []

    async def answer(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        seen.append(cmd)
        return cmd.make_response(0, body=b'{"jstack":"none"}', language="PYTHON")

    async def record(conn: RemotingProtocol, cmd: RemotingCommand) -> None:
        seen.append(cmd)

    consumer = await open_connection(broker.addr, handlers={307: answer, 220: record, 40: record})
    admin = await RawClient().connect(broker.addr)
    try:
        for i in range(4):
            await admin.call(310, send_ext("RS", queue_id=0), f"r{i}".encode())
        r = await admin.call(222, {"topic": "RS", "group": "gr", "timestamp": -1, "isForce": "true"})
        assert (r.code, r.remark) == (1, "THe consumer group <gr> not exist")
        for qid in range(8):
            await admin.call(15, {"consumerGroup": "gr", "topic": "RS", "queueId": qid, "commitOffset": 0})
        r = await admin.call(222, {"topic": "RS", "group": "gr", "timestamp": -1, "isForce": "true"})
        assert r.code == 206 and r.remark.startswith("Consumer not online, so can not reset offset")
        await consumer.request(RemotingCommand(34, body=heartbeat_body("C9", "gr", {"RS": "*"})), 5)
        r = await admin.call(222, {"topic": "RS", "group": "gr", "timestamp": -1, "isForce": "true"})
        assert r.code == 0
        table = {MessageQueue.from_json(fastjson.parse_key(k)).queue_id: v
                 for k, v in fastjson.loads(r.body)["offsetTable"].items()}
        assert table[0] == 4 and table[1] == 0
        r = await admin.call(307, {"consumerGroup": "gr", "clientId": "C9", "jstackEnable": "false"})
        assert (r.code, r.body) == (0, b'{"jstack":"none"}')
        r = await admin.call(307, {"consumerGroup": "gr", "clientId": "nobody", "jstackEnable": "false"})
        assert (r.code, r.remark) == (1, "The Consumer <gr> <nobody> not online")
        assert [c.code for c in seen if c.code in (220, 307)] == [220, 307]
    finally:
        await consumer.close()
        await admin.close()
