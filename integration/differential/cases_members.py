"""Group membership and what the broker asks clients: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), NOTIFY_CONSUMER_IDS_CHANGED (40), LOCK/UNLOCK_BATCH_MQ (41/42),
GET_CONSUMER_CONNECTION_LIST (203), relayed GET_CONSUMER_RUNNING_INFO (307) and
CONSUME_MESSAGE_DIRECTLY (309), INVOKE_BROKER_TO_RESET_OFFSET (222 -> 220)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.message import decode_messages

from .cases_namesrv import create_topic, routed
from .cases_pull import fill, group_known
from .frames import heartbeat, lock_body, mq, pull, subscription
from .session import Session, case

NOTIFY_WAIT = 3.0  # how long a case waits for a NOTIFY_CONSUMER_IDS_CHANGED that should come


@case("members.heartbeat")
async def heartbeats(s: Session) -> None:
    topic, g = s.name("T"), s.name("g")
    admin = await s.broker()
    await s.setup(admin, 17, create_topic(topic, 2, 2))
    a = await s.broker()
    await s.step("consumer", a, 34, body=heartbeat(s.name("cidA"), g, [subscription(topic, "A || B")]))
    await s.step("list-one", admin, 38, {"consumerGroup": g})
    await routed(s, "%RETRY%" + g, lazily=True)
    await s.step("retry-topic-made", await s.namesrv(), 105, {"topic": "%RETRY%" + g,
                                                               "acceptStandardJsonOnly": "true"})
    await s.step("connections", admin, 203, {"consumerGroup": g})
    b = await s.broker()
    await s.step("second-member", b, 34, body=heartbeat(s.name("cidB"), g, [subscription(topic, "A || B")]))
    notified = await a.wait_inbound(40, 1, NOTIFY_WAIT)
    s.observe_inbound("notify-first-member", notified[0] if notified else None)
    await s.step("list-two", admin, 38, {"consumerGroup": g})
    await s.step("same-again", b, 34, body=heartbeat(s.name("cidB"), g, [subscription(topic, "A || B")]))
    await asyncio.sleep(0.5)
    s.note("notified-after-repeat", count=len(await a.wait_inbound(40, 2, 0.5)))
    await s.step("unregister", b, 35, {"clientID": s.name("cidB"), "consumerGroup": g})
    await s.step("list-after-unregister", admin, 38, {"consumerGroup": g})
    await s.step("producer-only", admin, 34, body=heartbeat(s.name("cidP"), producer_group=s.name("pg")))
    await s.step("unknown-group-list", admin, 38, {"consumerGroup": s.name("nobody")})
    await s.step("connections-offline", admin, 203, {"consumerGroup": s.name("nobody")})
    await s.step("not-json", admin, 34, body=b"{not json")
    await s.step("no-body", admin, 34)
    await s.step("broadcasting", admin, 34, body=heartbeat(s.name("cidC"), s.name("bg"),
                                                             [subscription(topic)], model="BROADCASTING"))
    await routed(s, "%RETRY%" + s.name("bg"), lazily=True)
    await s.step("broadcast-retry-topic", await s.namesrv(), 105, {"topic": "%RETRY%" + s.name("bg"),
                                                                    "acceptStandardJsonOnly": "true"})
    await a.close()
    await asyncio.sleep(0.5)

    async def gone() -> bool:
        r = await admin.call(38, {"consumerGroup": g})
        return r is not None and r.code != 0
    await s.wait_until("the closed member to leave", gone, 10)
    await s.step("list-after-close", admin, 38, {"consumerGroup": g})


@case("members.locks")
async def locks(s: Session) -> None:
    topic, g = s.name("T"), s.name("g")
    admin = await s.broker()
    await s.setup(admin, 17, create_topic(topic, 4, 4, order=True))
    a, b = await s.broker(), await s.broker()
    ca, cb = s.name("cidA"), s.name("cidB")
    for conn, cid in ((a, ca), (b, cb)):
        await s.setup(conn, 34, body=heartbeat(cid, g, [subscription(topic)], consume_type="CONSUME_ACTIVELY"))
    q = [mq(topic, s.target.broker_name, i) for i in range(4)]
    await s.step("a-locks-0-1", a, 41, body=lock_body(g, ca, q[:2]))
    await s.step("b-wants-all", b, 41, body=lock_body(g, cb, q))
    await s.step("a-renews-0", a, 41, body=lock_body(g, ca, q[:1]))
    await s.step("b-unlocks-a-queue", b, 42, body=lock_body(g, cb, q[:1]))
    await s.step("b-still-refused-0", b, 41, body=lock_body(g, cb, q[:1]))
    await s.step("a-unlocks-0", a, 42, body=lock_body(g, ca, q[:1]))
    await s.step("b-gets-0", b, 41, body=lock_body(g, cb, q[:1]))
    await s.step("unknown-group", a, 41, body=lock_body(s.name("nobody"), ca, q[:1]))
    await s.step("empty-set", a, 41, body=lock_body(g, ca, []))
    await s.step("not-json", a, 41, body=b"[")
    await s.step("no-body", a, 41)
    await s.step("unlock-not-json", a, 42, body=b"[")


def running_info_body() -> bytes:
    return json.dumps({"properties": {"PROP_CONSUMER_START_TIMESTAMP": "1"}, "subscriptionSet": [],
                       "mqTable": {}, "statusTable": {}, "jstack": None}).encode()


@case("members.relay")
async def relay(s: Session) -> None:
    """307 / 309 from an admin are relayed to the member's connection and its answer comes back."""
    topic, g = s.name("T"), s.name("g")
    admin = await s.broker()
    await s.setup(admin, 17, create_topic(topic, 1, 1))
    await fill(s, admin, topic, 0, ["A"])
    member = await s.broker()
    cid = s.name("cid")

    async def running_info(cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(0, body=running_info_body())

    async def directly(cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(0, body=json.dumps({"consumeResult": "CR_SUCCESS", "order": False,
                                                     "autoCommit": True, "spentTimeMills": 1}).encode())
    member.responders[307] = running_info
    member.responders[309] = directly
    await s.setup(member, 34, body=heartbeat(cid, g, [subscription(topic)]))
    await s.step("running-info", admin, 307, {"consumerGroup": g, "clientId": cid, "jstackEnable": False})
    asked = await member.wait_inbound(307, 1, 5)
    s.observe_inbound("running-info-as-relayed", asked[0] if asked else None)
    await s.step("running-info-unknown-client", admin, 307, {"consumerGroup": g, "clientId": s.name("ghost"),
                                                             "jstackEnable": False})
    pulled = await admin.call(11, {"consumerGroup": s.name("reader"), "topic": topic, "queueId": 0,
                                   "queueOffset": 0, "maxMsgNums": 1, "sysFlag": 4, "commitOffset": 0,
                                   "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
                                   "expressionType": "TAG"})
    m = decode_messages(pulled.body)[0] if pulled is not None and pulled.body else None
    ext: dict[str, Any] = {"consumerGroup": g, "clientId": cid, "msgId": m.offset_msg_id if m else "",
                           "brokerName": s.target.broker_name}
    await s.step("consume-directly", admin, 309, ext, timeout=15)
    asked = await member.wait_inbound(309, 1, 5)
    s.observe_inbound("consume-directly-as-relayed", asked[0] if asked else None)
    silent = await s.broker()
    await s.setup(silent, 34, body=heartbeat(s.name("cidS"), g, [subscription(topic)]))
    await s.step("running-info-no-answer", admin, 307, {"consumerGroup": g, "clientId": s.name("cidS"),
                                                        "jstackEnable": False}, timeout=15)


@case("members.reset-offset")
async def reset_offset(s: Session) -> None:
    topic, g = s.name("T"), s.name("g")
    admin = await s.broker()
    await s.setup(admin, 17, create_topic(topic, 2, 2))
    await fill(s, admin, topic, 0, ["", "", ""])
    await group_known(s, admin, g, topic)
    await s.setup(admin, 15, {"consumerGroup": g, "topic": topic, "queueId": 0, "commitOffset": 3})
    await s.setup(admin, 15, {"consumerGroup": g, "topic": topic, "queueId": 1, "commitOffset": 0})
    reset = {"topic": topic, "group": g, "timestamp": 0, "isForce": True}
    await s.step("offline", admin, 222, reset)
    member = await s.broker()
    await s.setup(member, 34, body=heartbeat(s.name("cid"), g, [subscription(topic)]))
    await s.step("online-force-to-0", admin, 222, reset)
    told = await member.wait_inbound(220, 1, 5)
    s.observe_inbound("told-member", told[0] if told else None)
    await s.step("committed-after", admin, 14, {"consumerGroup": g, "topic": topic, "queueId": 0})
    # how a member that was not told learns of the reset: its next pull from the old offset
    await s.step("member-pulls-old-offset", member, 11, pull(g, topic, 0, 3))
    await s.step("not-forced-ahead", admin, 222, {**reset, "timestamp": -1, "isForce": False})
    await s.step("unknown-topic", admin, 222, {**reset, "topic": s.name("missing")})
    await s.step("group-without-offsets", admin, 222, {**reset, "group": s.name("fresh")})
    await s.step("missing-timestamp", admin, 222, {"topic": topic, "group": g, "isForce": True})
