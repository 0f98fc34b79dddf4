"""The event-driven watcher (`MessageQueueTrigger(scheme="rocketmq")`) against the embedded broker:
one event per arrival, also when the trigger is re-created from its serialized form after every
event, as the triggerer does; the position lives in the watcher group's offsets on the broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, Producer
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.triggers.watch import RocketMQWatchTrigger

pytestmark = pytest.mark.timeout(120)

POLL = 0.2


@pytest.fixture
def namesrv(embedded_cluster: Any, airflow_conn: Any) -> Iterator[str]:
    with airflow_conn("rocketmq_default", host=embedded_cluster.namesrv_addr):
        yield embedded_cluster.namesrv_addr


def produce(namesrv: str, topic: str, n: int) -> None:
    with Producer(ClientConfig(namesrv_addr=namesrv)) as producer:
        for i in range(n):
            producer.send(Message(topic, f"m{i}".encode()))


def create_topic(namesrv: str, topic: str, queues: int = 4) -> None:
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        admin.create_topic(topic, queues=queues)


def offsets(namesrv: str, group: str, topic: str) -> dict[int, int]:
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        return {mq.queue_id: off for mq, off in admin.committed_offsets(group, topic).items()}


def recreate(trigger: Any) -> Any:
    """What the triggerer does: import the classpath and build a new instance from the kwargs."""
    from importlib import import_module

    classpath, kwargs = trigger.serialize()
    module, name = classpath.rsplit(".", 1)
    return getattr(import_module(module), name)(**kwargs)


class Events:
    """A trigger's run() as the triggerer drives it; a wait that times out leaves the poll running
    (cancelling ``__anext__`` would end the generator)."""

    def __init__(self, trigger: Any) -> None:
        self._gen: AsyncIterator[Any] = trigger.run()
        self._pending: asyncio.Future[Any] | None = None

    async def next(self, timeout: float) -> Any:
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._gen.__anext__())
        done, _ = await asyncio.wait({self._pending}, timeout=timeout)
        if not done:
            return None
        event, self._pending = self._pending.result(), None
        return event

    async def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            await asyncio.gather(self._pending, return_exceptions=True)
        await self._gen.aclose()  # type: ignore[attr-defined]


async def next_event(trigger: Any, timeout: float) -> Any:
    """The first event of a fresh run of ``trigger`` within ``timeout`` seconds, else None."""
    events = Events(trigger)
    try:
        return await events.next(timeout)
    finally:
        await events.close()


def message_queue_trigger(**kwargs: Any) -> Any:
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger

    return MessageQueueTrigger(scheme="rocketmq", **kwargs)


async def test_recreated_watcher_fires_once_per_arrival(namesrv: str) -> None:
    create_topic(namesrv, "ww_arrivals")
    await asyncio.to_thread(produce, namesrv, "ww_arrivals", 10)
    first = message_queue_trigger(topic="ww_arrivals", consumer_group="g_arr", poll_interval=POLL)
    assert isinstance(first.trigger, RocketMQWatchTrigger)

    events = Events(first)
    event = await events.next(15)
    assert event is not None and event.payload["messages"] == 10
    ranges = event.payload["ranges"]
    assert sum(r["end_offset"] - r["start_offset"] for r in ranges) == 10
    assert all(r["start_offset"] == 0 for r in ranges)
    await events.close()  # the triggerer drops the fired trigger ...
    # ... the watcher group holds what was signalled; the consuming group is untouched
    assert offsets(namesrv, "g_arr-watcher", "ww_arrivals") == {r["queue_id"]: r["end_offset"] for r in ranges}
    assert sum(offsets(namesrv, "g_arr", "ww_arrivals").values()) == 0

    second = recreate(first)  # ... and builds it again from its serialized form
    events = Events(second)
    assert await events.next(3 * POLL + 0.5) is None  # no new arrival: silent
    await asyncio.to_thread(produce, namesrv, "ww_arrivals", 5)
    event = await events.next(15)
    assert event is not None and event.payload["messages"] == 5
    before = {r["queue_id"]: r["end_offset"] for r in ranges}
    for r in event.payload["ranges"]:  # the new ranges start where the signalled ones ended
        assert r["start_offset"] == before[r["queue_id"]]
    # the same generator, resumed, does not fire again for those 5 either
    assert await events.next(3 * POLL + 0.5) is None
    await events.close()
    assert await next_event(recreate(second), 3 * POLL + 0.5) is None


async def test_min_messages_and_what_the_consumer_already_read(namesrv: str) -> None:
    create_topic(namesrv, "ww_min", queues=1)
    await asyncio.to_thread(produce, namesrv, "ww_min", 3)
    trigger = RocketMQWatchTrigger(topic="ww_min", consumer_group="g_min", min_messages=5, poll_interval=POLL)
    events = Events(trigger)
    assert await events.next(3 * POLL + 0.5) is None  # 3 < 5
    await asyncio.to_thread(produce, namesrv, "ww_min", 2)
    event = await events.next(15)
    assert event is not None and event.payload["ranges"] == [
        {"broker": event.payload["ranges"][0]["broker"], "queue_id": 0, "start_offset": 0, "end_offset": 5}]
    await events.close()

    # the consuming group read ahead (a DAG run took messages that arrived after the event):
    # those are not announced again, only what lies beyond
    await asyncio.to_thread(produce, namesrv, "ww_min", 8)
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        (mq,) = admin.topic_queues("ww_min")
        admin.update_consumer_offset("g_min", mq, 11)
    event = await next_event(recreate(trigger), 3 * POLL + 0.5)
    assert event is None  # 2 left beyond the group's offset, fewer than min_messages
    again = RocketMQWatchTrigger(topic="ww_min", consumer_group="g_min", poll_interval=POLL)
    event = await next_event(again, 15)
    assert event is not None and event.payload["ranges"][0]["start_offset"] == 11
    assert event.payload["ranges"][0]["end_offset"] == 13


async def test_watcher_waits_for_a_topic_that_does_not_exist_yet(namesrv: str) -> None:
    trigger = RocketMQWatchTrigger(topic="ww_later", consumer_group="g_later", poll_interval=POLL)
    events = Events(trigger)
    assert await events.next(3 * POLL + 0.5) is None  # logged and retried, no event, no crash
    await asyncio.to_thread(create_topic, namesrv, "ww_later", 2)
    await asyncio.to_thread(produce, namesrv, "ww_later", 2)
    event = await events.next(15)
    assert event is not None and event.payload["messages"] == 2
    await events.close()


def test_watch_trigger_parameters() -> None:
    trigger = RocketMQWatchTrigger(topic="T", consumer_group="G", min_messages=3, poll_interval=2,
                                   rocketmq_conn_id="rmq")
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_rocketmq.triggers.watch.RocketMQWatchTrigger"
    assert kwargs == {"topic": "T", "consumer_group": "G", "min_messages": 3, "poll_interval": 2.0,
                      "watcher_group": "G-watcher", "rocketmq_conn_id": "rmq"}
    assert RocketMQWatchTrigger(**kwargs).serialize() == (classpath, kwargs)
    for bad, field in (({"min_messages": 0}, "min_messages"), ({"poll_interval": 0}, "poll_interval"),
                       ({"watcher_group": "G"}, "watcher_group"), ({"consumer_group": ""}, "consumer_group")):
        with pytest.raises(ConfigError) as err:
            RocketMQWatchTrigger(**{"topic": "T", "consumer_group": "G", **bad})
        assert err.value.field == field


@pytest.mark.parametrize("acls,refused", [
    # no Get on the topic: its high-water marks are refused
    ([{"resource": "Group:*", "actions": ["Sub", "Get", "Update"]}], "lacks Get on Topic:ww_acl (GET_MAX_OFFSET)"),
    # reads allowed, but the watcher group's position may not move: it would never fire
    ([{"resource": "Topic:ww_acl", "actions": ["Sub", "Get"]}, {"resource": "Group:*", "actions": ["Get"]}],
     "lacks Sub or Update on Group:g_acl-watcher (UPDATE_CONSUMER_OFFSET)"),
], ids=["high-water-marks", "position-update"])
async def test_an_acl_refusal_ends_the_watcher_with_the_error(embedded_cluster_factory: Any, airflow_conn: Any,
                                                              acls: list[dict[str, Any]], refused: str) -> None:
    from airflow_provider_rocketmq.client import AclDeniedError

    cluster = embedded_cluster_factory(queues=2, acl2={"users": [{"username": "watcher", "password": "watch_pw"}],
                                                       "acls": {"watcher": acls}})
    cluster.create_topic("ww_acl", 2)
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr, access_key="rocketmq",
                               secret_key="12345678")) as producer:
        producer.send(Message("ww_acl", b"m"))
    with airflow_conn("rmq_watcher", host=cluster.namesrv_addr, login="watcher", password="watch_pw"):
        trigger = RocketMQWatchTrigger(topic="ww_acl", consumer_group="g_acl", poll_interval=POLL,
                                       rocketmq_conn_id="rmq_watcher")
        with pytest.raises(AclDeniedError, match=refused.replace("(", r"\(").replace(")", r"\)")):
            await next_event(trigger, 20)
