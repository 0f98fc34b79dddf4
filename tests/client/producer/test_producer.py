"""Producer: recorded Java frames reproduced, queue choice, compression, retries (scripted brokers)."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import zlib
from typing import Any

import pytest

from airflow_provider_rocketmq.client import connection
from airflow_provider_rocketmq.client.config import ClientConfig
from airflow_provider_rocketmq.client.connection import RemotingProtocol
from airflow_provider_rocketmq.client.producer import AsyncProducer, Producer
from airflow_provider_rocketmq.client.protocol.codes import RequestCode
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand, decode_frame
from airflow_provider_rocketmq.client.protocol.errors import (
    BrokerError,
    ConfigError,
    RequestTimeoutError,
    RouteNotFoundError,
)
from airflow_provider_rocketmq.client.protocol.message import Message, decode_batch, string_to_properties
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.client.protocol.send_wire import (
    build_batch_request,
    build_send_request,
    prepare_batch,
)
from airflow_provider_rocketmq.client.route import PERM_READ, PERM_WRITE
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from tests import recorded_vectors as vectors

from ..peer import ScriptedPeer, route_body

SEND = RequestCode.SEND_MESSAGE_V2


# -- recorded frames ---------------------------------------------------------------------

def test_single_sends_reproduce_recorded_java_frames_byte_for_byte() -> None:
    sends = [r for r in vectors.load("producer") if r["code"] == SEND and r["rpc"] == "request"]
    for rec in sends:
        raw = bytes.fromhex(rec["frame_hex"])
        rcmd = decode_frame(raw)
        body = rcmd.body or b""
        if int(rcmd.ext["f"]) & 1:
            body = zlib.decompress(body)  # give the producer the user's 5120-byte body
        msg = Message("CapProducerTopic3", body)
        msg.properties = string_to_properties(rcmd.ext["i"])
        cmd = build_send_request(msg, MessageQueue("CapProducerTopic3", "broker-a", int(rcmd.ext["e"])),
                                 "cap_producer_group", born_timestamp=int(rcmd.ext["g"]))
        cmd.opaque, cmd.language = rcmd.opaque, "JAVA"
        assert cmd.encode() == raw  # incl. zlib level 5 bytes and sysFlag 769 for the big body


def test_batch_send_reproduces_recorded_java_frame() -> None:
    rec = next(r for r in vectors.load("producer") if r["code"] == 320 and r["rpc"] == "request")
    raw = bytes.fromhex(rec["frame_hex"])
    rcmd = decode_frame(raw)
    items = decode_batch(rcmd.body or b"")
    msgs = []
    for it in items:
        m = Message("CapProducerTopic3", it.body)
        m.properties = dict(it.properties)
        msgs.append(m)
    cmd = build_batch_request(msgs, MessageQueue("CapProducerTopic3", "broker-a", int(rcmd.ext["e"])),
                              "cap_producer_group", born_timestamp=int(rcmd.ext["g"]))
    cmd.opaque, cmd.language = rcmd.opaque, "JAVA"
    assert cmd.ext == rcmd.ext
    assert cmd.body == rcmd.body
    assert cmd.encode() == raw


# -- scripted brokers ----------------------------------------------------------------------

class Brokers:
    """A name server and N brokers; each broker stores what it accepts per queue."""

    def __init__(self) -> None:
        self.ns = ScriptedPeer()
        self.brokers: dict[str, ScriptedPeer] = {}
        self.stored: list[tuple[str, dict[str, str], bytes]] = []
        self.answer: dict[str, int] = {}  # broker name -> forced response code
        self.hold: dict[str, asyncio.Event] = {}

    async def start(self, names: tuple[str, ...] = ("broker-a", "broker-b"), queues: int = 4) -> Brokers:
        for name in names:
            peer = ScriptedPeer()
            for code in (SEND, RequestCode.SEND_BATCH_MESSAGE):
                peer.on(code, self._handler(name))
            self.brokers[name] = await peer.start()
        self.ns.reply(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                      body=route_body(queues, {n: p.addr for n, p in self.brokers.items()}))
        await self.ns.start()
        return self

    def _handler(self, name: str) -> Any:
        offsets: dict[int, int] = {}

        async def h(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
            if name in self.hold:
                await self.hold[name].wait()
            code = self.answer.get(name, 0)
            if code:
                return cmd.make_response(code, remark=f"forced {code}")
            qid = int(cmd.ext["e"])
            off = offsets.get(qid, 0)
            offsets[qid] = off + 1
            self.stored.append((name, cmd.ext, cmd.body or b""))
            return cmd.make_response(0, {"msgId": f"7F00000100002A9F{len(self.stored):016X}",
                                         "queueId": qid, "queueOffset": off,
                                         "MSG_REGION": "DefaultRegion"})
        return h

    def config(self, **kw: Any) -> ClientConfig:
        return ClientConfig(namesrv_addr=self.ns.addr, **kw)

    async def stop(self) -> None:
        for p in (*self.brokers.values(), self.ns):
            await p.stop()


@pytest.fixture
async def cluster():  # type: ignore[no-untyped-def]
    c = await Brokers().start()
    yield c
    await c.stop()


async def test_send_sets_java_fields_and_round_robins(cluster: Brokers) -> None:
    async with AsyncProducer(cluster.config(), "pg") as p:
        results = [await p.send(Message("T", f"m{i}", tags="TagA", keys=["k1", "k2"],
                                        properties={"color": "red", "note": "值"})) for i in range(8)]
    placed = [(r.queue.broker_name, r.queue.queue_id) for r in results]
    assert sorted(placed) == sorted((b, q) for b in ("broker-a", "broker-b") for q in range(4))
    for (broker, ext, body), r in zip(cluster.stored, results, strict=True):
        props = string_to_properties(ext["i"])
        assert props["TAGS"] == "TagA" and props["KEYS"] == "k1 k2" and props["note"] == "值"
        assert props["WAIT"] == "true" and props["UNIQ_KEY"] == r.msg_id
        assert (ext["a"], ext["b"], ext["c"], ext["d"], ext["f"], ext["m"], ext["n"]) == \
            ("pg", "T", "TBW102", "4", "0", "false", broker)
        assert body.decode() == f"m{results.index(r)}"
    assert len({r.msg_id for r in results}) == 8
    assert results[0].queue_offset == 0 and results[0].offset_msg_id.startswith("7F000001")


async def test_big_body_is_zlib_compressed_with_sysflag_0x301(cluster: Brokers) -> None:
    big = bytes(range(256)) * 20  # 5120 bytes
    async with AsyncProducer(cluster.config()) as p:
        await p.send(Message("T", big))
        await p.send(Message("T", b"x" * 4095))
    (_, ext, body), (_, ext_small, body_small) = cluster.stored
    assert ext["f"] == "769" and zlib.decompress(body) == big
    assert ext_small["f"] == "0" and body_small == b"x" * 4095


def _java_hash(s: str) -> int:
    h = 0
    for unit in s.encode("utf-16-be").hex(" ", 2).split():
        h = (h * 31 + int(unit, 16)) % 2**32
    return h - 2**32 if h >= 2**31 else h


async def test_key_hash_picks_a_stable_queue(cluster: Brokers) -> None:
    async with AsyncProducer(cluster.config()) as p:
        queues = await p.publish_queues("T")
        for key in ("order-1", "order-2", "客户-7"):
            picks = {(await p.send(Message("T", b"x"), key=key)).queue for _ in range(3)}
            java_remainder = int(math.fmod(_java_hash(key), len(queues)))  # sign of the dividend
            expected = queues[abs(java_remainder)]
            assert picks == {expected}


async def test_retriable_code_moves_to_another_broker(cluster: Brokers) -> None:
    cluster.answer["broker-a"] = 2  # SYSTEM_BUSY: nothing stored
    async with AsyncProducer(cluster.config(), retry_times=2) as p:
        results = [await p.send(Message("T", b"x")) for _ in range(4)]
    assert {r.queue.broker_name for r in results} == {"broker-b"}
    assert len(cluster.stored) == 4
    # same UNIQ_KEY on the rejected and the accepted attempt
    rejected = [c for c in cluster.brokers["broker-a"].received]
    accepted_ids = {string_to_properties(e["i"])["UNIQ_KEY"] for _, e, _ in cluster.stored}
    assert {string_to_properties(c.ext["i"])["UNIQ_KEY"] for c in rejected} <= accepted_ids


async def test_non_retriable_code_is_raised_without_retry(cluster: Brokers) -> None:
    cluster.answer["broker-a"] = cluster.answer["broker-b"] = 13  # MESSAGE_ILLEGAL
    async with AsyncProducer(cluster.config(), retry_times=2) as p:
        with pytest.raises(BrokerError) as info:
            await p.send(Message("T", b"x"))
    assert info.value.code == 13
    assert sum(len(b.received) for b in cluster.brokers.values()) == 1


async def test_retries_are_bounded(cluster: Brokers) -> None:
    cluster.answer["broker-a"] = cluster.answer["broker-b"] = 215  # FLOW_CONTROL everywhere
    async with AsyncProducer(cluster.config(), retry_times=2) as p:
        with pytest.raises(BrokerError) as info:
            await p.send(Message("T", b"x"))
    assert info.value.code == 215
    assert sum(len(b.received) for b in cluster.brokers.values()) == 3


async def test_timeout_is_not_retried(cluster: Brokers) -> None:
    cluster.hold["broker-a"] = cluster.hold["broker-b"] = asyncio.Event()  # never answers
    async with AsyncProducer(cluster.config(), send_timeout=0.3, retry_times=2) as p:
        with pytest.raises(RequestTimeoutError):
            await p.send(Message("T", b"x"))
    assert sum(len(b.received) for b in cluster.brokers.values()) == 1
    cluster.hold["broker-a"].set()


async def test_connect_failure_moves_to_another_broker(cluster: Brokers, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing was written when the connect fails, so the send goes to the other broker."""
    down = cluster.brokers["broker-a"].addr
    real_open = connection.open_connection

    async def open_or_time_out(addr: str, **kw: Any) -> RemotingProtocol:
        if addr == down:
            raise RequestTimeoutError(f"connect to {addr} timed out")
        return await real_open(addr, **kw)

    monkeypatch.setattr(connection, "open_connection", open_or_time_out)
    async with AsyncProducer(cluster.config(), retry_times=1) as p:
        timed_out = [await p.send(Message("T", b"x")) for _ in range(4)]
        await cluster.brokers["broker-a"].stop()  # now the connect is refused
        monkeypatch.setattr(connection, "open_connection", real_open)
        refused = [await p.send(Message("T", b"y")) for _ in range(4)]
    assert {r.queue.broker_name for r in timed_out + refused} == {"broker-b"}
    assert [b for _, _, b in cluster.stored] == [b"x"] * 4 + [b"y"] * 4


async def test_batch_lands_in_one_queue_with_own_uniq_keys(cluster: Brokers) -> None:
    msgs = [Message("T", f"b{i}", tags="TagA", keys=f"bk{i}") for i in range(3)]
    async with AsyncProducer(cluster.config()) as p:
        r = await p.send_batch(msgs)
    (_, ext, body), = cluster.stored
    assert ext["m"] == "true" and ext["i"] == "WAIT\x01true"
    items = decode_batch(body)
    assert [i.body for i in items] == [b"b0", b"b1", b"b2"]
    assert [i.properties["UNIQ_KEY"] for i in items] == r.msg_ids
    assert all(i.properties["WAIT"] == "true" and i.properties["TAGS"] == "TagA" for i in items)


async def test_bad_input_is_a_config_error_naming_the_field(cluster: Brokers) -> None:
    async with AsyncProducer(cluster.config()) as p:
        for msg, fld in [(Message("bad topic!", b"x"), "topic"), (Message("T", b""), "body"),
                         (Message("TBW102", b"x"), "topic"), (Message("T", b"x" * (4 * 1024 * 1024 + 1)), "body")]:
            with pytest.raises(ConfigError) as info:
                await p.send(msg)
            assert info.value.field == fld
        with pytest.raises(ConfigError) as info:
            await p.send(Message("T", b"x"), queue=MessageQueue("U", "broker-a", 0))
        assert info.value.field == "queue"
        with pytest.raises(ConfigError) as info:
            await p.send(Message("T", b"x"), queue=("T", "broker-a", 0))  # type: ignore[arg-type]
        assert info.value.field == "queue"
        with pytest.raises(ConfigError) as info:
            await p.send(Message("T", b"x"), key=42)  # type: ignore[arg-type]
        assert info.value.field == "key"
        with pytest.raises(ConfigError, match="one topic"):
            await p.send_batch([Message("T", b"a"), Message("U", b"b")])
    with pytest.raises(ConfigError) as info:
        AsyncProducer(cluster.config(), retry_times=-1)
    assert info.value.field == "retry_times"
    assert cluster.stored == []


async def test_missing_topic_falls_back_to_default_topic_route() -> None:
    broker = ScriptedPeer()
    broker.reply(SEND, {"msgId": "7F00000100002A9F0000000000000001", "queueId": "1", "queueOffset": "0"})
    await broker.start()
    ns = ScriptedPeer()

    async def route(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.ext["topic"] == "TBW102":
            return cmd.make_response(0, body=route_body(8, {"broker-a": broker.addr}, perm=7))
        return cmd.make_response(17, remark="No topic route info")

    ns.on(RequestCode.GET_ROUTEINFO_BY_TOPIC, route)
    await ns.start()
    try:
        async with AsyncProducer(ClientConfig(namesrv_addr=ns.addr)) as p:
            queues = await p.publish_queues("NewTopic")
            assert queues == [MessageQueue("NewTopic", "broker-a", i) for i in range(4)]
            await p.send(Message("NewTopic", b"x"))
        async with AsyncProducer(ClientConfig(namesrv_addr=ns.addr), auto_create_topic=False) as p:
            with pytest.raises(RouteNotFoundError):
                await p.send(Message("NewTopic", b"x"))
        assert broker.received[0].ext["b"] == "NewTopic" and broker.received[0].ext["c"] == "TBW102"
    finally:
        await ns.stop()
        await broker.stop()


async def test_read_only_topic_fails_with_no_route_and_never_falls_back(embedded_cluster: EmbeddedCluster) -> None:
    # Java's tryToFindTopicPublishInfo: a route without a writable queue is final; only a topic
    # without any route goes to TBW102's brokers (which would store into the read-only topic).
    await embedded_cluster.create_topic("ReadOnly", 2, perm=PERM_READ)
    async with AsyncProducer(ClientConfig(namesrv_addr=embedded_cluster.namesrv_addr)) as p:
        with pytest.raises(RouteNotFoundError, match="No route info of this topic: 'ReadOnly'"):
            await p.send(Message("ReadOnly", b"x"))
        with pytest.raises(RouteNotFoundError, match="No route info"):
            await p.publish_queues("ReadOnly")
        assert embedded_cluster.messages("ReadOnly") == []
        # a cached route without a writable queue is fetched again (Java: !topicPublishInfo.ok())
        await embedded_cluster.create_topic("ReadOnly", 2, perm=PERM_READ | PERM_WRITE)
        r = await p.send(Message("ReadOnly", b"y"))
    assert r.queue.topic == "ReadOnly" and [m.body for m in embedded_cluster.messages("ReadOnly")] == [b"y"]


async def test_default_topic_route_uses_min_of_4_and_read_queue_nums() -> None:
    ns = ScriptedPeer()
    body = json.dumps({"brokerDatas": [{"brokerAddrs": {"0": "127.0.0.1:1"}, "brokerName": "broker-a",
                                        "cluster": "DefaultCluster"}], "filterServerTable": {},
                       "queueDatas": [{"brokerName": "broker-a", "perm": 7, "readQueueNums": 2,
                                       "topicSysFlag": 0, "writeQueueNums": 8}]}).encode()

    async def route(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.ext["topic"] == "TBW102":
            return cmd.make_response(0, body=body)
        return cmd.make_response(17, remark="No topic route info")

    ns.on(RequestCode.GET_ROUTEINFO_BY_TOPIC, route)
    await ns.start()
    try:
        async with AsyncProducer(ClientConfig(namesrv_addr=ns.addr)) as p:
            assert await p.publish_queues("NewTopic") == [MessageQueue("NewTopic", "broker-a", i) for i in range(2)]
    finally:
        await ns.stop()


async def test_retry_topic_moves_reconsume_properties_to_header() -> None:
    msg = Message("%RETRY%g", b"x", properties={"RECONSUME_TIME": "3", "MAX_RECONSUME_TIMES": "16",
                                                 "RETRY_TOPIC": "T"})
    cmd = build_send_request(msg, MessageQueue("%RETRY%g", "broker-a", 0), "pg")
    assert cmd.ext["j"] == "3" and cmd.ext["l"] == "16"
    props = string_to_properties(cmd.ext["i"])
    assert "RECONSUME_TIME" not in props and props["RETRY_TOPIC"] == "T"


def test_sync_producer_facade() -> None:
    loop = asyncio.new_event_loop()
    cluster = loop.run_until_complete(Brokers().start(("broker-a",)))
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        with Producer(cluster.config(), "sync_pg") as p:
            r = p.send(Message("T", b"hello", tags="X"))
            assert r.queue.topic == "T" and r.status == "SEND_OK"
            rb = p.send_batch([Message("T", b"a"), Message("T", b"b")])
            assert len(rb.msg_ids) == 2
        assert json.loads(json.dumps(r.to_dict()))["broker"] == "broker-a"
        assert len(cluster.stored) == 2
    finally:
        asyncio.run_coroutine_threadsafe(cluster.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        loop.close()


async def test_pipelined_batches_are_the_frames_send_batch_builds(cluster: Brokers) -> None:
    msgs = [Message("T", f"b{i}", tags="TagA", keys=f"k{i}", properties={"n": str(i)}) for i in range(7)]
    async with AsyncProducer(cluster.config(), "pg") as p:
        outcomes = [o async for o in p.send_many(msgs, max_batch=3, max_in_flight=1)]
    assert all(o.ok for o in outcomes) and [o.message for o in outcomes] == msgs
    ids = iter(o.result.msg_id for o in outcomes if o.result is not None)
    for _, ext, body in cluster.stored:
        n = len(decode_batch(body)) if ext["m"] == "true" else 1
        chunk = [msgs.pop(0) for _ in range(n)]
        uniq = [next(ids) for _ in range(n)]
        copies = []
        for m, u in zip(chunk, uniq, strict=True):
            c = Message(m.topic, m.body, flag=m.flag)
            c.properties = {**m.properties, "UNIQ_KEY": u}
            copies.append(c)
        mq = MessageQueue("T", ext["n"], int(ext["e"]))
        if n == 1:
            ref = build_send_request(copies[0], mq, "pg", born_timestamp=int(ext["g"]))
        else:
            ref = build_batch_request(prepare_batch(copies, lambda: 'unused'), mq, "pg", born_timestamp=int(ext["g"]))
        assert ref.ext == ext and (ref.body or b"") == body
    assert msgs == []


def test_sync_send_reconnects_after_the_broker_closed_an_idle_connection() -> None:
    """A broker closes idle connections (FIN, as 4.x does after 120 s): the next synchronous send must
    open a new one, not write into the closed one and report a lost answer."""
    loop = asyncio.new_event_loop()
    cluster = loop.run_until_complete(Brokers().start(("broker-a",)))
    closed = threading.Event()
    handler = cluster.brokers["broker-a"].handlers[SEND]

    async def answer_then_close(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand | None:
        resp = await handler(conn, cmd)
        if len(cluster.stored) == 2:  # after the second message: a graceful close (FIN) of that connection
            assert conn.transport is not None
            loop.call_soon(conn.transport.close)  # after the answer is written
            asyncio.ensure_future(conn.wait_closed()).add_done_callback(lambda _: closed.set())
        return resp

    cluster.brokers["broker-a"].handlers[SEND] = answer_then_close
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        with Producer(cluster.config(), "idle_pg") as p:
            first = [p.send(Message("T", f"m{i}")) for i in range(2)]
            assert closed.wait(10)
            third = p.send(Message("T", b"m2"))
        assert [b for _, _, b in cluster.stored] == [b"m0", b"m1", b"m2"]
        assert third.msg_id not in {r.msg_id for r in first}
    finally:
        asyncio.run_coroutine_threadsafe(cluster.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        loop.close()
