"""RocketMQProduceOperator and RocketMQAwaitMessageSensor/Trigger against the embedded broker:
what lands on the broker, what the await sensor returns and which offsets it commits."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_rocketmq.client import (
    AclDeniedError,
    Admin,
    ClientConfig,
    ConsumeStatus,
    Message,
    Producer,
    PushConsumer,
)
from airflow_provider_rocketmq.client.protocol.errors import ConfigError, RocketMQError
from airflow_provider_rocketmq.operators.produce import RocketMQProduceOperator
from airflow_provider_rocketmq.sensors.await_message import RocketMQAwaitMessageSensor
from airflow_provider_rocketmq.triggers.await_message import RocketMQAwaitMessageTrigger

pytestmark = pytest.mark.timeout(120)
HERE = __name__  # apply functions below are imported by dotted path, as the triggerer does


def first_order(message: Any, prefix: str = "order") -> Any:
    body = message.body.decode()
    return {"order": body, "offset": message.queue_offset} if body.startswith(prefix) else None


def explode(message: Any) -> Any:
    raise ValueError(f"cannot judge {message.body!r}")


def orders(n: int, tag: str = "T") -> Iterator[Any]:
    for i in range(n):
        yield (f"order-{i}", tag, [f"k{i}"], {"seq": str(i)})


@pytest.fixture
def rmq(embedded_cluster: Any, airflow_conn: Any) -> Iterator[Any]:
    with airflow_conn("rocketmq_default", host=embedded_cluster.namesrv_addr):
        yield SimpleNamespace(namesrv=embedded_cluster.namesrv_addr)


def create_topic(namesrv: str, topic: str, queues: int) -> None:
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        admin.create_topic(topic, queues=queues)


def send(namesrv: str, topic: str, bodies: list[str]) -> None:
    with Producer(ClientConfig(namesrv_addr=namesrv)) as producer:
        for body in bodies:
            producer.send(Message(topic, body))


def committed(namesrv: str, group: str, topic: str) -> int:
    """Sum of the group's committed offsets (messages it consumed, for topics created empty)."""
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        return sum(max(off, 0) for off in admin.committed_offsets(group, topic).values())


def read_all(namesrv: str, topic: str, n: int) -> list[Any]:
    got: list[Any] = []
    enough = threading.Event()

    def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
        got.extend(msgs)
        if len(got) >= n:
            enough.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(f"reader_{topic}", namesrv_addr=namesrv,
                            consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    consumer.subscribe(topic)
    consumer.register_listener(listener)
    with consumer:
        assert enough.wait(30), f"read {len(got)} of {n}"
    return got


def test_produce_operator_sends_every_form_and_summarises(rmq: Any) -> None:
    create_topic(rmq.namesrv, "pa_forms", 2)

    def produce() -> Iterator[Any]:
        yield Message("pa_forms", b"as-message", tags="M", keys="km")
        yield b"raw-bytes"
        yield "text"
        yield ("tuple-body", "TT")
        yield from orders(3)

    op = RocketMQProduceOperator(task_id="p", topic="pa_forms", producer_function=produce)
    out = op.execute({})
    assert out["messages"] == 7 and out["status"] == {"SEND_OK": 7}
    assert out["bytes"] == sum(len(b) for b in (b"as-message", b"raw-bytes", b"text", b"tuple-body")) + 3 * 7
    assert sum(out["queues"].values()) == 7 and all(q.startswith("broker-") for q in out["queues"])
    assert out["first"]["msg_id"] and out["last"]["topic"] == "pa_forms"

    by_body = {m.body: m for m in read_all(rmq.namesrv, "pa_forms", 7)}
    assert set(by_body) == {b"as-message", b"raw-bytes", b"text", b"tuple-body", b"order-0", b"order-1",
                            b"order-2"}
    assert (by_body[b"as-message"].tags, by_body[b"as-message"].keys) == ("M", "km")
    assert by_body[b"tuple-body"].tags == "TT"
    assert (by_body[b"order-2"].tags, by_body[b"order-2"].keys) == ("T", "k2")
    assert by_body[b"order-2"].get_property("seq") == "2"


def test_produce_operator_dotted_path_and_bad_items(rmq: Any) -> None:
    create_topic(rmq.namesrv, "pa_path", 1)
    op = RocketMQProduceOperator(task_id="p", topic="pa_path", producer_function=f"{HERE}.orders",
                                 producer_function_args=[4], producer_function_kwargs={"tag": "X"})
    assert op.execute({})["messages"] == 4

    def bad() -> Iterator[Any]:
        yield "fine"
        yield ("body", 42)

    with pytest.raises(ConfigError) as err:
        RocketMQProduceOperator(task_id="p", topic="pa_path", producer_function=bad).execute({})
    assert err.value.field == "producer_function[1].tags"
    assert committed(rmq.namesrv, "nobody", "pa_path") == 0
    with Admin(ClientConfig(namesrv_addr=rmq.namesrv)) as admin:
        assert sum(admin.high_water_marks("pa_path").values()) == 5  # the 4, then the one before the bad item

    for fn, field in ((lambda: [Message("other_topic", b"x")], "producer_function[0].topic"),
                      (lambda: 5, "producer_function"), (lambda: [object()], "producer_function[0]")):
        with pytest.raises(ConfigError) as err:
            RocketMQProduceOperator(task_id="p", topic="pa_path", producer_function=fn).execute({})
        assert err.value.field == field
    with pytest.raises(ConfigError) as err:
        RocketMQProduceOperator(task_id="p", topic="pa_path", producer_function="no_module_path")
    assert err.value.field == "producer_function"
    with pytest.raises(ConfigError, match="cannot import"):
        RocketMQProduceOperator(task_id="p", topic="pa_path", producer_function=f"{HERE}.missing").execute({})


def test_await_sensor_returns_the_value_and_commits_what_it_read(rmq: Any) -> None:
    create_topic(rmq.namesrv, "pa_await", 1)  # one queue: "what it read" is a prefix
    send(rmq.namesrv, "pa_await", ["noise-0", "noise-1", "order-A", "noise-3", "order-B"])
    sensor = RocketMQAwaitMessageSensor(task_id="s", topic="pa_await", consumer_group="g_await",
                                        apply_function=f"{HERE}.first_order", deferrable=False, timeout=60)
    assert sensor.execute({}) == {"order": "order-A", "offset": 2}
    assert committed(rmq.namesrv, "g_await", "pa_await") == 3  # noise-0, noise-1, order-A; not beyond
    assert sensor.execute({}) == {"order": "order-B", "offset": 4}  # the next run starts after order-A
    assert committed(rmq.namesrv, "g_await", "pa_await") == 5

    # nothing matches: the timeout fails the task and what it read is committed
    send(rmq.namesrv, "pa_await", ["noise-5"])
    quick = RocketMQAwaitMessageSensor(task_id="s", topic="pa_await", consumer_group="g_await",
                                       apply_function=f"{HERE}.first_order", deferrable=False, timeout=3)
    with pytest.raises(RocketMQError, match="within 3"):
        quick.execute({})
    assert committed(rmq.namesrv, "g_await", "pa_await") == 6


def test_await_sensor_apply_error_commits_nothing(rmq: Any) -> None:
    create_topic(rmq.namesrv, "pa_err", 1)
    send(rmq.namesrv, "pa_err", ["x"])
    sensor = RocketMQAwaitMessageSensor(task_id="s", topic="pa_err", consumer_group="g_err",
                                        apply_function=f"{HERE}.explode", deferrable=False)
    with pytest.raises(ValueError, match="cannot judge"):
        sensor.execute({})
    assert committed(rmq.namesrv, "g_err", "pa_err") == 0


async def test_await_trigger_event_and_offsets_across_queues(rmq: Any) -> None:
    await asyncio.to_thread(create_topic, rmq.namesrv, "pa_trig", 4)
    trigger = RocketMQAwaitMessageTrigger(topic="pa_trig", consumer_group="g_trig",
                                          apply_function=f"{HERE}.first_order",
                                          apply_function_kwargs={"prefix": "wanted"})
    classpath, _ = trigger.serialize()
    assert classpath == "airflow_provider_rocketmq.triggers.await_message.RocketMQAwaitMessageTrigger"
    events = trigger.run()
    pending = asyncio.ensure_future(events.__anext__())
    await asyncio.to_thread(send, rmq.namesrv, "pa_trig", [f"other-{i}" for i in range(6)])
    done, _ = await asyncio.wait({pending}, timeout=2)
    assert not done  # nothing wanted yet: still waiting
    await asyncio.to_thread(send, rmq.namesrv, "pa_trig", ["wanted-1"])
    event = await asyncio.wait_for(pending, 30)
    assert event.payload["status"] == "success" and event.payload["value"]["order"] == "wanted-1"
    assert event.payload["message"]["topic"] == "pa_trig"
    await events.aclose()
    # everything it read is committed: the six others and the match
    assert await asyncio.to_thread(committed, rmq.namesrv, "g_trig", "pa_trig") == 7


async def test_await_trigger_reports_bad_input_as_an_error_event(rmq: Any, airflow_conn: Any) -> None:
    trigger = RocketMQAwaitMessageTrigger(topic="t", consumer_group="g", apply_function=f"{HERE}.nothing_here")
    event = await trigger.run().__anext__()
    assert event.payload["status"] == "error" and "apply_function" in event.payload["message"]
    with airflow_conn("rmq_bad", host="h", extra={"tls": "perhaps"}):
        trigger = RocketMQAwaitMessageTrigger(topic="t", consumer_group="g", apply_function=f"{HERE}.first_order",
                                              rocketmq_conn_id="rmq_bad")
        event = await trigger.run().__anext__()
    assert event.payload["status"] == "error" and "extra.tls" in event.payload["message"]
    with pytest.raises(ConfigError) as err:
        RocketMQAwaitMessageTrigger(topic="t", consumer_group="g", apply_function=f"{HERE}.first_order",
                                    consumer_overrides={"enable_offset_commit": False})
    assert err.value.field == "consumer_overrides.enable_offset_commit"


def test_await_sensor_defers_to_its_trigger(rmq: Any) -> None:
    try:
        from airflow.sdk.exceptions import TaskDeferred
    except ImportError:  # Airflow 3.0
        from airflow.exceptions import TaskDeferred  # type: ignore[no-redef,attr-defined,unused-ignore]

    sensor = RocketMQAwaitMessageSensor(task_id="s", topic="pa_def", consumer_group="g_def",
                                        apply_function=f"{HERE}.first_order", deferrable=True, timeout=30)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    assert isinstance(deferred.value.trigger, RocketMQAwaitMessageTrigger)
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.trigger.serialize()[1]["rocketmq_conn_id"] == "rocketmq_default"
    with pytest.raises(RocketMQError, match="boom"):
        sensor.execute_complete({}, {"status": "error", "message": "boom"})
    with pytest.raises(ConfigError) as err:
        RocketMQAwaitMessageSensor(task_id="s", topic="t", consumer_group="g", apply_function=f"{HERE}.gone")\
            .execute({})
    assert err.value.field == "apply_function"


ACL2_USERS = {"users": [{"username": "nogroup", "password": "nogroup_secret"},
                        {"username": "reader", "password": "reader_secret"}],
              "acls": {"nogroup": [{"resource": "Topic:pa_acl", "actions": ["Sub", "Get"]}],
                       "reader": [{"resource": "Topic:pa_acl", "actions": ["Sub", "Get"]},
                                  {"resource": "Group:g_acl", "actions": ["Sub", "Get", "Update"]}]}}


@pytest.fixture
def acl2_rmq(embedded_cluster_factory: Any, airflow_conn: Any) -> Iterator[Any]:
    cluster = embedded_cluster_factory(queues=2, acl2=ACL2_USERS)
    cluster.create_topic("pa_acl", 2)
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr, access_key="rocketmq",
                               secret_key="12345678")) as producer:
        producer.send(Message("pa_acl", b"noise"))
    with airflow_conn("rmq_nogroup", host=cluster.namesrv_addr, login="nogroup", password="nogroup_secret"), \
            airflow_conn("rmq_reader", host=cluster.namesrv_addr, login="reader", password="reader_secret"):
        yield cluster


def test_await_sensor_fails_when_the_acl_refuses_the_group(acl2_rmq: Any) -> None:
    sensor = RocketMQAwaitMessageSensor(task_id="s", topic="pa_acl", consumer_group="g_acl",
                                        apply_function=f"{HERE}.first_order", deferrable=False, timeout=60,
                                        rocketmq_conn_id="rmq_nogroup")
    with pytest.raises(AclDeniedError, match="user nogroup lacks Sub on Group:g_acl"):
        sensor.execute({})


async def test_await_trigger_ends_with_an_error_event_when_a_pull_is_refused(acl2_rmq: Any) -> None:
    """The refusal comes after the consumer started: the trigger does not wait on, it reports the error."""
    acl2_rmq.brokers[0].faults.respond(
        11, 16, "User:reader has no permission to access Group:g_acl from 127.0.0.1, the decision is deny.")
    trigger = RocketMQAwaitMessageTrigger(topic="pa_acl", consumer_group="g_acl",
                                          apply_function=f"{HERE}.first_order", rocketmq_conn_id="rmq_reader")
    event = await asyncio.wait_for(trigger.run().__anext__(), 30)
    assert event.payload["status"] == "error"
    assert "AclDeniedError" in event.payload["message"]
    assert "user reader lacks Sub on Group:g_acl (PULL_MESSAGE)" in event.payload["message"]
    sensor = RocketMQAwaitMessageSensor(task_id="s", topic="pa_acl", consumer_group="g_acl",
                                        apply_function=f"{HERE}.first_order", rocketmq_conn_id="rmq_reader")
    with pytest.raises(RocketMQError, match="lacks Sub on Group:g_acl"):
        sensor.execute_complete({}, event.payload)  # the deferred task fails with it
