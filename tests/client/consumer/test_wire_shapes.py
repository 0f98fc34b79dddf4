"""Our PULL_MESSAGE / HEART_BEAT frames have the shape of the recorded Java 4.9.7 frames."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from airflow_provider_rocketmq.client.consumer.config import ConsumerConfig
from airflow_provider_rocketmq.client.consumer.core import ConsumerCore
from airflow_provider_rocketmq.client.consumer.lifecycle import Lifecycle
from airflow_provider_rocketmq.client.consumer.offset_store import RemoteBrokerOffsetStore
from airflow_provider_rocketmq.client.consumer.ports import FlowLimits, StopOffsets
from airflow_provider_rocketmq.client.consumer.pull import PullService
from airflow_provider_rocketmq.client.consumer.stats import ConsumeStatsTable
from airflow_provider_rocketmq.client.consumer.subscription import build_subscription
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand, decode_frame
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from tests import recorded_vectors as vectors


def java_frames(code: int) -> list[dict[str, Any]]:
    out = []
    for rec in vectors.load("push_concurrent"):
        if rec["code"] == code and rec["direction"] == "c2s" and rec["header"]:
            out.append(rec)
    return out


class CapturingClient:
    """Stands in for MQClient and its pooled connection where only the frame matters (no broker
    could tell us its shape). Pulls arrive pre-rendered (start_encoded) on an unsigned connection
    and as commands (start_request) on a signed one; both are captured as decoded frames."""

    is_closed = False

    def __init__(self, signed: bool = False) -> None:
        self.sent: list[RemotingCommand] = []
        self.pool = self
        self.rpc_hook = (lambda cmd: None) if signed else None

    def broker_addr(self, name: str, broker_id: int = 0, exact: bool = False) -> str:
        return "127.0.0.1:1"

    async def get(self, addr: str) -> CapturingClient:
        return self

    def _answer(self, frame: bytes) -> asyncio.Future[RemotingCommand]:
        cmd = decode_frame(frame)
        self.sent.append(cmd)
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        fut.set_result(cmd.make_response(19, {"nextBeginOffset": "0"}))
        return fut

    def start_encoded(self, opaque: int, frame: bytes) -> asyncio.Future[RemotingCommand]:
        assert self.rpc_hook is None
        return self._answer(frame)

    def start_request(self, cmd: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        assert self.rpc_hook is not None
        cmd.opaque = 7
        return self._answer(cmd.encode())

    def forget(self, opaque: int) -> None:
        pass


def pull_service(client: CapturingClient, offsets: RemoteBrokerOffsetStore) -> PullService:
    """A pull service wired to the capturing client; only its request path is exercised."""
    async def no_offset(mq: MessageQueue) -> int:
        return -1

    return PullService(config=ConsumerConfig(namesrv_addr="127.0.0.1:9876"), client=client,  # type: ignore[arg-type]
                       group="cap_push_group", subscriptions={}, life=Lifecycle(), offsets=offsets,
                       limits=FlowLimits(1000, 100), stops=StopOffsets(), orderly=False, start_offset=no_offset,
                       forget_queue=lambda mq, pq: None, settle=lambda: None, on_denied=lambda what, err: None,
                       stats=ConsumeStatsTable(),
                       submit=lambda msgs, pq, mq: None)


@pytest.mark.parametrize("signed", [False, True], ids=["rendered", "signed"])
async def test_pull_header_fields_match_java_but_never_carry_an_offset(signed: bool) -> None:
    java = java_frames(11)
    java_keys = {frozenset(json.loads(r["header"])["extFields"]) for r in java}
    client = CapturingClient(signed)
    offsets = RemoteBrokerOffsetStore(client, "cap_push_group")  # type: ignore[arg-type]
    pull = pull_service(client, offsets)
    mq = MessageQueue("CapProducerTopic3", "broker-a", 2)
    sub = build_subscription(mq.topic, "*")
    sub.sub_version = 1795244539999
    await pull._pull(mq, 1, 32, sub)  # nothing consumed yet
    offsets.update_offset(mq, 1)
    await pull._pull(mq, 1, 32, sub)
    ours = [c.ext for c in client.sent]
    assert {frozenset(e) for e in ours} <= java_keys
    assert (ours[0]["sysFlag"], ours[0]["commitOffset"]) == ("2", "0")
    # Java piggy-backs the consumed offset here (sysFlag 3, commitOffset 1); this client never does:
    # a real broker applies it after later UPDATE_CONSUMER_OFFSETs (issue 14, offset_store.py)
    assert (ours[1]["sysFlag"], ours[1]["commitOffset"]) == ("2", "0")
    java_70 = next(json.loads(r["header"])["extFields"] for r in java if r["index"] == 70)
    assert (java_70["sysFlag"], java_70["commitOffset"]) == ("3", "1")
    same = set(java_70) - {"subVersion", "sysFlag", "commitOffset"}
    assert {k: ours[1][k] for k in same} == {k: java_70[k] for k in same}
    assert ours[1]["subVersion"] == "1795244539999"
    assert client.sent[0].code == 11 and not client.sent[0].is_response
    assert pull._waiting == {}  # nothing left for the timeout sweep


def test_heartbeat_body_shape_matches_java() -> None:
    rec = java_frames(34)[0]
    java = json.loads(rec["body_text"])
    core = ConsumerCore("cap_push_group", ConsumerConfig(consume_from_where="first"))
    core.subscribe("CapProducerTopic3", "TagA || TagB")
    ours = core.heartbeat_data()
    assert set(ours) <= set(java) | {"clientID"}
    j_consumer, o_consumer = java["consumerDataSet"][0], ours["consumerDataSet"][0]
    assert set(o_consumer) == set(j_consumer)
    j_sub = next(s for s in j_consumer["subscriptionDataSet"] if s["topic"] == "CapProducerTopic3")
    o_sub = o_consumer["subscriptionDataSet"][0]
    assert {k: v for k, v in o_sub.items() if k != "subVersion"} == \
        {k: v for k, v in j_sub.items() if k != "subVersion"}
    assert o_consumer["consumeFromWhere"] == j_consumer["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
    assert ours["producerDataSet"] == [{"groupName": "CLIENT_INNER_PRODUCER"}]
