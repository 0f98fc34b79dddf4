"""Our PULL_MESSAGE / HEART_BEAT frames have the shape of the recorded Java 4.9.7 frames."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_rocketmq.client.consumer.config import ConsumerConfig
from airflow_provider_rocketmq.client.consumer.core import ConsumerCore
from airflow_provider_rocketmq.client.consumer.offset_store import RemoteBrokerOffsetStore
from airflow_provider_rocketmq.client.queue import MessageQueue
from airflow_provider_rocketmq.client.remoting.command import RemotingCommand

VECTORS = Path("/work/shared/protocol/vectors/push_concurrent.jsonl")


def java_frames(code: int) -> list[dict[str, Any]]:
    if not VECTORS.exists():
        pytest.skip("recorded vectors not available")
    out = []
    for line in VECTORS.read_text().splitlines():
        rec = json.loads(line)
        if rec["code"] == code and rec["direction"] == "c2s" and rec["header"]:
            out.append(rec)
    return out


class CapturingClient:
    """Stands in for MQClient and its pooled connection where only the frame matters (no broker
    could tell us its shape)."""

    is_closed = False

    def __init__(self) -> None:
        self.sent: list[RemotingCommand] = []
        self.pool = self

    def broker_addr(self, name: str, broker_id: int = 0, exact: bool = False) -> str:
        return "127.0.0.1:1"

    async def get(self, addr: str) -> CapturingClient:
        return self

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.sent.append(cmd)
        return cmd.make_response(19, {"nextBeginOffset": "0"})


async def test_pull_header_fields_and_commit_sysflag_match_java() -> None:
    java = java_frames(11)
    java_keys = {frozenset(json.loads(r["header"])["extFields"]) for r in java}
    core = ConsumerCore("cap_push_group", ConsumerConfig(namesrv_addr="127.0.0.1:9876"))
    client = CapturingClient()
    core.client = client  # type: ignore[assignment]
    core.offset_store = RemoteBrokerOffsetStore(client, "cap_push_group")  # type: ignore[arg-type]
    mq = MessageQueue("CapProducerTopic3", "broker-a", 2)
    await core.pull._pull(mq, 1, 32, 1795244539999, "*", "TAG")  # nothing consumed yet
    core.offset_store.update_offset(mq, 1)
    await core.pull._pull(mq, 1, 32, 1795244539999, "*", "TAG")
    ours = [c.ext for c in client.sent]
    assert {frozenset(e) for e in ours} <= java_keys
    assert (ours[0]["sysFlag"], ours[0]["commitOffset"]) == ("2", "0")
    assert (ours[1]["sysFlag"], ours[1]["commitOffset"]) == ("3", "1")
    java_70 = next(json.loads(r["header"])["extFields"] for r in java if r["index"] == 70)
    assert {k: ours[1][k] for k in java_70 if k != "subVersion"} == \
        {k: v for k, v in java_70.items() if k != "subVersion"}


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
