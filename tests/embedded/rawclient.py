"""A bare remoting client for the embedded-broker tests: send any frame, see the raw answer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from airflow_provider_rocketmq.client.connection import RemotingProtocol, open_connection
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand


class RawClient:
    """One connection; records broker-initiated requests (e.g. code 40) in ``inbound``."""

    def __init__(self) -> None:
        self.conn: RemotingProtocol | None = None
        self.inbound: list[RemotingCommand] = []
        self.inbound_event = asyncio.Event()

    async def connect(self, addr: str, handled: tuple[int, ...] = (40, 220)) -> RawClient:
        async def record(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand | None:
            self.inbound.append(cmd)
            self.inbound_event.set()
            return None

        self.conn = await open_connection(addr, handlers={c: record for c in handled})
        return self

    async def call(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None, *,
                   version: int = 407, timeout: float = 10.0, serialize_type: int = 0,
                   oneway: bool = False) -> RemotingCommand:
        assert self.conn is not None
        cmd = RemotingCommand(code, None if ext is None else {k: str(v) for k, v in ext.items()}, body,
                              language="JAVA", version=version, serialize_type=serialize_type)
        if oneway:
            self.conn.oneway(cmd)
            return cmd
        return await self.conn.request(cmd, timeout)

    async def wait_inbound(self, code: int, count: int = 1, timeout: float = 5.0) -> list[RemotingCommand]:
        """Wait until ``count`` broker-initiated requests with ``code`` arrived."""
        async def until() -> None:
            while sum(1 for c in self.inbound if c.code == code) < count:
                self.inbound_event.clear()
                await self.inbound_event.wait()
        await asyncio.wait_for(until(), timeout)
        return [c for c in self.inbound if c.code == code]

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


def send_ext(topic: str, *, queue_id: int = -1, props: str = "", group: str = "pg", sys_flag: int = 0,
             reconsume: int | None = None, max_reconsume: int | None = None, batch: bool = False) -> dict[str, str]:
    ext = {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": str(sys_flag),
           "g": "1795244528602", "h": "0", "i": props, "j": str(reconsume or 0), "k": "false",
           "m": "true" if batch else "false", "n": "broker-a"}
    if max_reconsume is not None:
        ext["l"] = str(max_reconsume)
    return ext


def props(**kv: str) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in kv.items())


def pull_ext(group: str, topic: str, queue_id: int, offset: int, *, sys_flag: int = 4, subscription: str = "*",
             suspend_ms: int = 15000, sub_version: int = 0, max_nums: int = 32,
             commit_offset: int = 0) -> dict[str, str]:
    return {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
            "maxMsgNums": str(max_nums), "sysFlag": str(sys_flag), "commitOffset": str(commit_offset),
            "suspendTimeoutMillis": str(suspend_ms), "subscription": subscription,
            "subVersion": str(sub_version), "expressionType": "TAG"}


def heartbeat_body(client_id: str, group: str, subs: dict[str, str], *, model: str = "CLUSTERING",
                   sub_version: int = 1) -> bytes:
    from airflow_provider_rocketmq.client.protocol.message import java_string_hash

    sub_list = []
    for topic, expr in subs.items():
        tags = [] if expr == "*" else [t.strip() for t in expr.split("||")]
        sub_list.append({"classFilterMode": False, "codeSet": [java_string_hash(t) for t in tags],
                         "expressionType": "TAG", "subString": expr, "subVersion": sub_version,
                         "tagsSet": tags, "topic": topic})
    data = {"clientID": client_id, "consumerDataSet": [{
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "consumeType": "CONSUME_PASSIVELY",
        "groupName": group, "messageModel": model, "subscriptionDataSet": sub_list, "unitMode": False}],
        "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}]}
    return json.dumps(data).encode()
