"""MQClient against scripted name servers and brokers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl

import pytest

from airflow_provider_rocketmq.client.config import ClientConfig
from airflow_provider_rocketmq.client.connection import RemotingProtocol
from airflow_provider_rocketmq.client.mqclient import MQClient
from airflow_provider_rocketmq.client.protocol.acl import sign
from airflow_provider_rocketmq.client.protocol.codes import RequestCode
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.errors import (
    ClientStateError,
    ConnectionClosedError,
    RequestTimeoutError,
    RouteNotFoundError,
    SubscriptionError,
    SystemError_,
    TopicNotExistError,
)
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from tests import recorded_vectors as vectors

from .peer import ScriptedPeer, route_body


async def _cluster() -> tuple[ScriptedPeer, ScriptedPeer]:
    broker = await ScriptedPeer().start()
    ns = await ScriptedPeer().start()
    ns.reply(RequestCode.GET_ROUTEINFO_BY_TOPIC, body=route_body(4, {"broker-a": broker.addr}))
    return ns, broker


async def test_route_and_offset_helpers_send_java_headers() -> None:
    ns, broker = await _cluster()
    broker.reply(RequestCode.GET_MAX_OFFSET, {"offset": "42"})
    broker.reply(RequestCode.GET_MIN_OFFSET, {"offset": "3"})
    broker.reply(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"offset": "7"})
    broker.reply(RequestCode.QUERY_CONSUMER_OFFSET, resp_code=22, remark="Not found")
    broker.reply(RequestCode.UPDATE_CONSUMER_OFFSET)
    client = MQClient(ClientConfig(namesrv_addr=ns.addr))
    try:
        route = await client.get_route("T")
        mqs = route.subscribe_queues("T")
        assert mqs == [MessageQueue("T", "broker-a", i) for i in range(4)]
        mq = mqs[2]
        assert await client.max_offset(mq) == 42
        assert await client.min_offset(mq) == 3
        assert await client.search_offset(mq, 1795244528000) == 7
        assert await client.query_consumer_offset(mq, "g") == -1
        await client.update_consumer_offset(mq, "g", 11)
        # the route was fetched once and cached
        assert ns.codes() == [RequestCode.GET_ROUTEINFO_BY_TOPIC]
        assert ns.received[0].ext == {"topic": "T", "acceptStandardJsonOnly": "true"}
        by_code = {c.code: c.ext for c in broker.received}
        assert by_code[RequestCode.GET_MAX_OFFSET] == {"topic": "T", "queueId": "2", "bname": "broker-a"}
        assert by_code[RequestCode.SEARCH_OFFSET_BY_TIMESTAMP]["timestamp"] == "1795244528000"
        assert by_code[RequestCode.UPDATE_CONSUMER_OFFSET] == {
            "topic": "T", "queueId": "2", "bname": "broker-a", "consumerGroup": "g", "commitOffset": "11"}
    finally:
        await client.close()
        await ns.stop()
        await broker.stop()


async def test_a_group_a_5x_broker_does_not_know_is_made_known_by_a_pull_then_committed() -> None:
    # 5.3.3 answers 26 "Group g not exist!" to UPDATE_CONSUMER_OFFSET of a group it never saw (4.9.7
    # creates it): the commit is retried once after a pull at the queue's max offset made the broker
    # auto-create the group (nothing read, nothing committed)
    ns, broker = await _cluster()
    known: set[str] = set()

    async def commit(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.ext["consumerGroup"] not in known:
            return cmd.make_response(26, remark=f"Group {cmd.ext['consumerGroup']} not exist!")
        return cmd.make_response(0)

    async def pull(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.ext["consumerGroup"] != "nocreate":  # autoCreateSubscriptionGroup=false for this one
            known.add(cmd.ext["consumerGroup"])
            return cmd.make_response(19, {"nextBeginOffset": "42", "minOffset": "0", "maxOffset": "42"},
                                     remark="OFFSET_OVERFLOW_ONE")
        return cmd.make_response(26, remark="subscription group [nocreate] does not exist")

    broker.on(RequestCode.UPDATE_CONSUMER_OFFSET, commit)
    broker.on(RequestCode.PULL_MESSAGE, pull)
    broker.reply(RequestCode.GET_MAX_OFFSET, {"offset": "42"})
    client = MQClient(ClientConfig(namesrv_addr=ns.addr))
    mq = MessageQueue("T", "broker-a", 1)
    try:
        await client.update_consumer_offset(mq, "g", 7)
        assert known == {"g"}
        assert [c.code for c in broker.received][-4:] == [RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.GET_MAX_OFFSET,
                                                          RequestCode.PULL_MESSAGE, RequestCode.UPDATE_CONSUMER_OFFSET]
        p = next(c for c in broker.received if c.code == RequestCode.PULL_MESSAGE).ext
        assert (p["consumerGroup"], p["queueOffset"], p["maxMsgNums"], p["sysFlag"], p["commitOffset"]) == (
            "g", "42", "1", "4", "0")  # at the end of the queue, subscription in the request, no commit flag
        with pytest.raises(SubscriptionError, match="Group nocreate not exist!"):
            await client.update_consumer_offset(mq, "nocreate", 7)
    finally:
        await client.close()
        await ns.stop()
        await broker.stop()


async def test_namesrv_failover_skips_dead_server() -> None:
    ns, broker = await _cluster()
    dead = await ScriptedPeer().start()
    dead_addr = dead.addr
    await dead.stop()  # nothing listens there any more
    client = MQClient(ClientConfig(namesrv_addr=f"{dead_addr};{ns.addr}"))
    try:
        for _ in range(3):  # whichever server is tried first, every lookup succeeds
            route = await client.get_route("T", refresh=True)
            assert route.master_addrs() == {"broker-a": broker.addr}
        assert client.namesrv.current == ns.addr
    finally:
        await client.close()
        await ns.stop()
        await broker.stop()


async def test_all_namesrv_dead_is_a_typed_error() -> None:
    dead = await ScriptedPeer().start()
    addr = dead.addr
    await dead.stop()
    client = MQClient(ClientConfig(namesrv_addr=addr, request_timeout=1.0))
    try:
        with pytest.raises(ConnectionClosedError, match="no name server reachable"):
            await client.get_route("T")
    finally:
        await client.close()


async def test_missing_topic_and_consumer_list_errors() -> None:
    ns = await ScriptedPeer().start()
    ns.reply(RequestCode.GET_ROUTEINFO_BY_TOPIC, resp_code=17, remark="No topic route info")
    client = MQClient(ClientConfig(namesrv_addr=ns.addr))
    try:
        with pytest.raises(RouteNotFoundError, match="'Nope'"):
            await client.get_route("Nope")
    finally:
        await client.close()
        await ns.stop()
    ns, broker = await _cluster()
    broker.reply(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {}, resp_code=1,
                 remark="no consumer for this group, g")
    client = MQClient(ClientConfig(namesrv_addr=ns.addr))
    try:
        with pytest.raises(SystemError_):
            await client.consumer_ids("g", "T")
        broker.reply(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {},
                     body=b'{"consumerIdList":["1.2.3.4@a","1.2.3.4@b"]}')
        assert await client.consumer_ids("g", "T") == ["1.2.3.4@a", "1.2.3.4@b"]
        broker.reply(RequestCode.GET_MAX_OFFSET, resp_code=17, remark="topic not exist")
        with pytest.raises(TopicNotExistError):
            await client.max_offset(MessageQueue("T", "broker-a", 0))
    finally:
        await client.close()
        await ns.stop()
        await broker.stop()


async def test_acl_and_namespace_applied_to_every_request() -> None:
    ns, broker = await _cluster()
    broker.reply(RequestCode.GET_MAX_OFFSET, {"offset": "1"})
    cfg = ClientConfig(namesrv_addr=ns.addr, access_key="ak", secret_key="sk", namespace="prod")
    client = MQClient(cfg)
    try:
        assert await client.max_offset(MessageQueue("T", "broker-a", 1)) == 1
        route_req = ns.received[0]
        assert route_req.ext["topic"] == "prod%T"
        req = broker.received[0]
        assert req.ext["topic"] == "prod%T" and req.ext["AccessKey"] == "ak"
        unsigned = {k: v for k, v in req.ext.items() if k != "Signature"}
        assert req.ext["Signature"] == sign("sk", unsigned, req.body)
    finally:
        await client.close()
        await ns.stop()
        await broker.stop()
    assert "sk" not in repr(cfg)


async def test_server_initiated_request_reaches_registered_handler() -> None:
    ns, broker = await _cluster()
    broker.reply(RequestCode.GET_MAX_OFFSET, {"offset": "5"})
    client = MQClient(ClientConfig(namesrv_addr=ns.addr))
    seen: asyncio.Queue[str] = asyncio.Queue()

    async def on_notify(conn, cmd):  # type: ignore[no-untyped-def]
        await seen.put(cmd.ext["consumerGroup"])

    client.register_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    try:
        await client.max_offset(MessageQueue("T", "broker-a", 0))  # opens the broker connection
        broker.connections[-1].oneway(RemotingCommand.request(40, {"consumerGroup": "g1"}))
        assert await asyncio.wait_for(seen.get(), 5) == "g1"
    finally:
        await client.close()
        await ns.stop()
        await broker.stop()
    with pytest.raises(ClientStateError):
        await client.get_route("T")


def _self_signed_context(tmp_path) -> ssl.SSLContext:  # type: ignore[no-untyped-def]
    """A server context with a throw-away self-signed certificate for 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rocketmq-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


async def test_tls_connection_with_self_signed_broker(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("cryptography")
    ctx = _self_signed_context(tmp_path)
    broker = await ScriptedPeer(ssl_context=ctx).start()
    ns = await ScriptedPeer(ssl_context=ctx).start()
    ns.reply(RequestCode.GET_ROUTEINFO_BY_TOPIC, body=route_body(2, {"broker-a": broker.addr}))
    broker.reply(RequestCode.GET_MAX_OFFSET, {"offset": "9"})
    client = MQClient(ClientConfig(namesrv_addr=ns.addr, use_tls=True))
    plain = MQClient(ClientConfig(namesrv_addr=ns.addr, request_timeout=1.0))
    try:
        assert await client.max_offset(MessageQueue("T", "broker-a", 1)) == 9
        with pytest.raises((ConnectionClosedError, RequestTimeoutError)):
            await plain.get_route("T")  # a plain-text client cannot talk to a TLS server
    finally:
        await client.close()
        await plain.close()
        await ns.stop()
        await broker.stop()


async def test_helpers_send_the_headers_java_recorded() -> None:
    """Our requests carry exactly the extFields the Java 4.9.7 client/tools sent (ACL fields aside)."""
    from airflow_provider_rocketmq.client.admin import AsyncAdmin

    recorded: dict[int, dict[str, str]] = {}
    for name in ("admin", "push_concurrent"):
        for rec in vectors.load(name):
            if rec["rpc"] != "response" and rec["language"] == "JAVA" and rec["code"] not in recorded:
                ext = json.loads(rec["header"]).get("extFields", {})
                recorded[rec["code"]] = {k: v for k, v in ext.items() if k not in ("AccessKey", "Signature")}
    ns, broker = await _cluster()
    for code in (30, 31, 29):
        broker.reply(code, {"offset": "1"})
    broker.reply(14, {"offset": "1"})
    broker.reply(15)
    broker.reply(35)
    broker.reply(38, {}, b'{"consumerIdList":[]}')
    broker.reply(208, body=b'{"consumeTps":0.0,"offsetTable":{}}')
    broker.reply(202, body=b'{"offsetTable":{}}')
    broker.reply(203, body=b'{"connectionSet":[]}')
    client = MQClient(ClientConfig(namesrv_addr=ns.addr))
    admin = AsyncAdmin(mqclient=client)
    mq = MessageQueue("CapProducerTopic3", "broker-a", 3)
    try:
        await client.max_offset(mq)
        await client.min_offset(mq)
        await client.search_offset(mq, int(recorded[29]["timestamp"]))
        await client.query_consumer_offset(MessageQueue("CapProducerTopic3", "broker-a", 1), "cap_push_group")
        await client.update_consumer_offset(MessageQueue("CapProducerTopic3", "broker-a", 1), "cap_push_group",
                                            int(recorded[15]["commitOffset"]))
        await client.consumer_ids("cap_push_group", "CapProducerTopic3")
        await client.unregister(broker.addr, recorded[35]["clientID"], producer_group="CLIENT_INNER_PRODUCER")
        await admin.consume_stats("cap_push_group")
        await admin.topic_stats("CapProducerTopic3")
        await admin.consumer_connections("cap_push_group")
        sent = {c.code: c.ext for c in broker.received}
        for code in (30, 31, 29, 14, 15, 38, 35, 208, 202, 203):
            assert sent[code] == recorded[code], code
        assert {c.ext["topic"] for c in ns.received} >= {"CapProducerTopic3", "%RETRY%cap_push_group"}
    finally:
        await client.close()
        await ns.stop()
        await broker.stop()


async def test_heartbeat_body_is_the_recorded_java_body() -> None:
    from airflow_provider_rocketmq.client.protocol.command import decode_frame

    recorded = [decode_frame(bytes.fromhex(r["frame_hex"])).body for r in vectors.load("push_concurrent")
                if r["code"] == RequestCode.HEART_BEAT and r["rpc"] == "request"]
    ns, broker = await _cluster()
    broker.reply(RequestCode.HEART_BEAT)
    client = MQClient(ClientConfig(namesrv_addr=ns.addr))
    try:
        for body in recorded:
            assert body is not None
            await client.heartbeat(broker.addr, json.loads(body))
        assert [c.body for c in broker.received] == recorded and recorded
    finally:
        await client.close()
        await ns.stop()
        await broker.stop()


async def test_lag_reproduces_mqadmin_consumer_progress_on_the_recorded_answer() -> None:
    import re

    from airflow_provider_rocketmq.client.admin import AsyncAdmin

    rec = next(r for r in vectors.load("admin") if r["rpc"] == "response" and r["request_code"] == 208)
    text = rec["body_text"]
    # expected figures straight from the recorded text, independent of our fastjson reader
    rows = re.findall(r'\{"brokerName":"([^"]+)","queueId":(\d+),"topic":"([^"]+)"\}:'
                      r'\{"brokerOffset":(\d+),"consumerOffset":(\d+),"lastTimestamp":(\d+)\}', text)
    assert rows
    expected = sorted((t, b, int(q), int(bo), int(co), int(bo) - int(co), int(ts)) for b, q, t, bo, co, ts in rows)
    ns, broker = await _cluster()
    broker.reply(208, body=text.encode())
    client = MQClient(ClientConfig(namesrv_addr=ns.addr))
    try:
        snap = await AsyncAdmin(mqclient=client).lag("cap_push_group")
        got = [(q.topic, q.broker, q.queue_id, q.broker_offset, q.consumer_offset, q.lag, q.last_timestamp)
               for q in snap.queues]
        assert got == expected
        assert snap.total_lag == sum(r[5] for r in expected)
        assert snap.source == "consume_stats"
    finally:
        await client.close()
        await ns.stop()
        await broker.stop()


@pytest.mark.parametrize("rpc", ["max_offset", "update_consumer_offset"])
async def test_offset_rpc_follows_a_moved_broker_on_retry(rpc: str) -> None:
    ns, old = await _cluster()
    new = await ScriptedPeer().start()
    new.reply(RequestCode.GET_MAX_OFFSET, {"offset": "77"})
    new.reply(RequestCode.UPDATE_CONSUMER_OFFSET, {})
    client = MQClient(ClientConfig(namesrv_addr=ns.addr))
    mq = MessageQueue("T", "broker-a", 0)
    try:
        await client.get_route("T")  # cached: broker-a at the old address
        await old.stop()
        ns.reply(RequestCode.GET_ROUTEINFO_BY_TOPIC, body=route_body(4, {"broker-a": new.addr}))
        if rpc == "max_offset":
            assert await client.max_offset(mq) == 77
        else:
            await client.update_consumer_offset(mq, "g", 5)
            assert [(c.code, c.ext["commitOffset"]) for c in new.received] == [(15, "5")]
        assert client.broker_addr("broker-a") == new.addr
    finally:
        await client.close()
        await ns.stop()
        await new.stop()


async def test_a_short_call_deadline_also_bounds_the_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connect that hangs costs the call's own budget, not the (longer) request_timeout."""
    from airflow_provider_rocketmq.client import connection

    async def hanging_connect(addr: str, *, timeout: float = 3.0, **kw: object) -> connection.RemotingProtocol:
        await asyncio.sleep(timeout)  # like a SYN nobody answers, cut off by the connect timeout
        raise RequestTimeoutError(f"connect to {addr} timed out after {timeout}s")

    monkeypatch.setattr(connection, "open_connection", hanging_connect)
    client = MQClient(ClientConfig(namesrv_addr="127.0.0.1:9", request_timeout=10))
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        with pytest.raises(RequestTimeoutError):
            await client.invoke("10.0.0.1:10911", RemotingCommand.request(RequestCode.GET_MAX_OFFSET), timeout=0.2)
        assert loop.time() - started < 5
    finally:
        await client.close()
