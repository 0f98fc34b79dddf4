"""A broker for the consumer tests: the EmbeddedCluster when available, else namesrv + broker.

Runs on its own loop thread (real sockets on 127.0.0.1). Helpers fill topics with
batch sends and read what the broker holds (committed offsets, DLQ contents).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from airflow_provider_rocketmq.client.config import ClientConfig
from airflow_provider_rocketmq.client.loop_thread import LoopThread
from airflow_provider_rocketmq.client.mqclient import MQClient
from airflow_provider_rocketmq.client.producer import AsyncProducer
from airflow_provider_rocketmq.client.protocol.codes import RequestCode
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.errors import RocketMQError
from airflow_provider_rocketmq.client.protocol.message import Message, MessageExt, decode_messages
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue


class TestCluster:
    __test__ = False  # a helper, not a test class
    """The shared EmbeddedCluster plus client-side helpers running on their own loop thread."""

    def __init__(self, queues: int = 8, time_scale: float = 1.0, brokers: int = 1, **kw: Any) -> None:
        from airflow_provider_rocketmq.embedded import EmbeddedCluster
        self.embedded = EmbeddedCluster(brokers=brokers, queues=queues, time_scale=time_scale, **kw).start()
        self.queues = queues
        self.namesrv_addr: str = self.embedded.namesrv_addr
        self.lt = LoopThread(name="test-clients")
        self.client = MQClient(ClientConfig(namesrv_addr=self.namesrv_addr))
        self.producer = AsyncProducer(ClientConfig(namesrv_addr=self.namesrv_addr), group="test_producer")
        self.run(self.producer.start())

    def run(self, coro: Any, timeout: float = 60) -> Any:
        return self.lt.run(coro, timeout)

    def create_topic(self, topic: str, queues: int | None = None) -> None:
        self.embedded.create_topic(topic, queues or self.queues)  # blocks until done (bridged)

    def fill(self, topic: str, count: int, *, body: Callable[[int], bytes] = lambda i: b"%08d" % i,
             tags: Callable[[int], str | None] = lambda i: None, per_batch: int = 64) -> list[bytes]:
        """Send ``count`` messages spread round-robin over the queues (batches of ``per_batch``)."""
        async def go() -> list[bytes]:
            qs = await self.producer.publish_queues(topic)
            sent: list[bytes] = []
            i = 0
            q = 0
            while i < count:
                n = min(per_batch, count - i)
                msgs = [Message(topic, body(j), tags=tags(j)) for j in range(i, i + n)]
                await self.producer.send_batch(msgs, queue=qs[q % len(qs)])
                sent += [m.body for m in msgs]
                i += n
                q += 1
            return sent
        return self.run(go(), timeout=300)

    def queues_of(self, topic: str) -> list[MessageQueue]:
        async def go() -> list[MessageQueue]:
            return sorted((await self.client.get_route(topic, refresh=True)).subscribe_queues(topic))
        return self.run(go())

    def committed(self, group: str, topic: str) -> dict[MessageQueue, int]:
        async def go() -> dict[MessageQueue, int]:
            return {mq: await self.client.query_consumer_offset(mq, group) for mq in
                    sorted((await self.client.get_route(topic, refresh=True)).subscribe_queues(topic))}
        return self.run(go())

    def read_all(self, topic: str) -> list[MessageExt]:
        """Every message stored in ``topic`` (a plain pull loop, no group)."""
        async def go() -> list[MessageExt]:
            out: list[MessageExt] = []
            try:
                route = await self.client.get_route(topic, refresh=True)
            except RocketMQError:  # no route: the topic holds nothing yet
                return out
            for mq in sorted(route.subscribe_queues(topic)):
                off = 0
                addr = await self.client.master_addr(mq)
                while True:
                    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                        "consumerGroup": "test_reader", "topic": topic, "queueId": mq.queue_id,
                        "queueOffset": off, "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0,
                        "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
                        "expressionType": "TAG"})
                    resp = await self.client.invoke(addr, cmd, 5)
                    if resp.code != 0:
                        break
                    msgs = decode_messages(resp.body or b"")
                    out += msgs
                    off = int(resp.ext["nextBeginOffset"])
            return out
        return self.run(go())

    def close(self) -> None:
        async def down() -> None:
            await self.producer.close()
            await self.client.close()
        try:
            self.run(down())
        finally:
            self.lt.stop()
            self.embedded.stop()


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, step: float = 0.05) -> None:
    """Poll-with-deadline, for conditions that have nothing to await (other processes, brokers)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


FAST = {"rebalance_interval": 0.5, "persist_consumer_offset_interval": 0.5, "heartbeat_broker_interval": 2.0,
            "consume_from_where": "CONSUME_FROM_FIRST_OFFSET", "pull_time_delay_when_exception": 0.2,
            "broker_suspend_max_time": 2.0, "consumer_timeout_when_suspend": 5.0, "consume_thread_min": 4,
            "consume_thread_max": 4}


def bodies(msgs: Iterable[MessageExt]) -> list[bytes]:
    return [m.body for m in msgs]


def wait_settled(consumers: list[Any], n_queues: int, timeout: float = 20.0) -> None:
    """Until the members' assignments partition the topic's queues, twice in a row one
    rebalance period apart (a rebalance still running on a stale member list shows a
    transient, overlapping table)."""
    def partitioned() -> bool:
        sets = [c.assigned_queues() for c in consumers]
        union = set().union(*sets)
        return len(union) == n_queues and sum(len(s) for s in sets) == n_queues

    deadline = time.monotonic() + timeout
    while True:
        wait_until(partitioned, max(0.1, deadline - time.monotonic()), "a settled assignment")
        before = [c.assigned_queues() for c in consumers]
        time.sleep(FAST["rebalance_interval"] * 2)  # stability window: nothing to await across members
        if partitioned() and [c.assigned_queues() for c in consumers] == before:
            return
