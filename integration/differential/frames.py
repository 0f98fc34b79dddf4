"""Request headers and bodies the cases send, built as the Java 4.9.7 client builds them."""

from __future__ import annotations

import json
from typing import Any

from airflow_provider_rocketmq.client.protocol.message import (
    Message,
    encode_batch,
    java_string_hash,
    properties_to_string,
)

BORN = 1795244528602  # a fixed born timestamp: stored messages then differ only by what the broker adds
PULL_SUB = 0x4  # sysFlag: the subscription travels in the pull
PULL_SUSPEND = 0x2
PULL_COMMIT = 0x1


def props(**kv: str) -> str:
    return properties_to_string(kv)


def send_v2(topic: str, *, group: str = "DF_pg", queue_id: int = 0, properties: str = "", sys_flag: int = 0,
            flag: int = 0, reconsume: int = 0, max_reconsume: int | None = None, batch: bool = False,
            broker_name: str = "broker-a", default_queues: int = 4) -> dict[str, Any]:
    """SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE one-letter header."""
    ext: dict[str, Any] = {"a": group, "b": topic, "c": "TBW102", "d": default_queues, "e": queue_id, "f": sys_flag,
                           "g": BORN, "h": flag, "i": properties, "j": reconsume, "k": False}
    if max_reconsume is not None:
        ext["l"] = max_reconsume
    ext["m"] = batch
    ext["n"] = broker_name
    return ext


def send_v1(topic: str, *, group: str = "DF_pg", queue_id: int = 0, properties: str = "") -> dict[str, Any]:
    """SEND_MESSAGE (10): the same header with its long field names."""
    return {"producerGroup": group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": queue_id, "sysFlag": 0, "bornTimestamp": BORN, "flag": 0, "properties": properties,
            "reconsumeTimes": 0, "unitMode": False, "batch": False}


def batch_body(topic: str, items: list[tuple[bytes, dict[str, str]]]) -> bytes:
    msgs = []
    for body, p in items:
        m = Message(topic, body)
        m.properties = dict(p)
        msgs.append(m)
    return encode_batch(msgs)


def pull(group: str, topic: str, queue_id: int, offset: int, *, sys_flag: int = PULL_SUB, subscription: str = "*",
         expression_type: str = "TAG", max_nums: int = 32, suspend_ms: int = 0, commit_offset: int = 0,
         sub_version: int = 0) -> dict[str, Any]:
    return {"consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
            "maxMsgNums": max_nums, "sysFlag": sys_flag, "commitOffset": commit_offset,
            "suspendTimeoutMillis": suspend_ms, "subscription": subscription, "subVersion": sub_version,
            "expressionType": expression_type}


def subscription(topic: str, expression: str = "*", *, version: int = 1, expression_type: str = "TAG") -> dict[str, Any]:
    tags = [] if expression.strip() == "*" or expression_type != "TAG" else \
        [t.strip() for t in expression.split("||") if t.strip()]
    return {"classFilterMode": False, "codeSet": [java_string_hash(t) for t in tags],
            "expressionType": expression_type, "subString": expression, "subVersion": version,
            "tagsSet": tags, "topic": topic}


def heartbeat(client_id: str, group: str | None = None, subs: list[dict[str, Any]] | None = None, *,
              model: str = "CLUSTERING", consume_type: str = "CONSUME_PASSIVELY",
              from_where: str = "CONSUME_FROM_FIRST_OFFSET", producer_group: str | None = None) -> bytes:
    consumers = []
    if group is not None:
        consumers.append({"consumeFromWhere": from_where, "consumeType": consume_type, "groupName": group,
                          "messageModel": model, "subscriptionDataSet": subs or [], "unitMode": False})
    producers = [{"groupName": producer_group}] if producer_group else []
    return json.dumps({"clientID": client_id, "consumerDataSet": consumers,
                       "producerDataSet": producers}).encode()


def mq(topic: str, broker: str, queue_id: int) -> dict[str, Any]:
    return {"brokerName": broker, "queueId": queue_id, "topic": topic}


def lock_body(group: str, client_id: str, mqs: list[dict[str, Any]]) -> bytes:
    return json.dumps({"clientId": client_id, "consumerGroup": group, "mqSet": mqs}).encode()
