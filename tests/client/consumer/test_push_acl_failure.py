"""A consumer whose request is refused by the broker's ACL fails, wherever the refusal comes from.

Java logs such refusals and retries; here each one is terminal (`PushConsumer.failure`, the
``on_failure`` callbacks, `raise_if_failed`), so a missing permission is an error the caller sees,
never a consumer that silently reads nothing. First against the embedded broker's ACL 2.0 mode (users
and policies, the 5.x answers), then every place a refusal can surface, injected as the 5.x answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_rocketmq.client import (
    AclDeniedError,
    ClientConfig,
    ConsumeStatus,
    Message,
    MessageQueue,
    OrderlyStatus,
    PushConsumer,
    RocketMQError,
)
from airflow_provider_rocketmq.client.producer import Producer
from airflow_provider_rocketmq.embedded import EmbeddedCluster

from .cluster import FAST, TestCluster, wait_until

SUPER = {"access_key": "rocketmq", "secret_key": "12345678"}


@pytest.fixture
def acl2() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(queues=2, acl2=True) as cluster:
        cluster.create_topic("Acl2Orders", 2)
        cluster.create_user("reader", "reader_secret")
        cluster.create_acl("reader", ["Topic:Acl2Orders", "Group:readers"], ["Sub", "Get", "Update"])
        cluster.create_user("nogroup", "nogroup_secret")
        cluster.create_acl("nogroup", ["Topic:Acl2Orders"], ["Sub", "Get"])
        yield cluster


def _send(cluster: EmbeddedCluster, n: int, first: int = 0, queue_id: int | None = None) -> None:
    queue = MessageQueue("Acl2Orders", "broker-a", queue_id) if queue_id is not None else None
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr, **SUPER)) as producer:
        for i in range(first, first + n):
            producer.send(Message("Acl2Orders", b"m%d" % i), queue=queue)


class Watch:
    """A listener that records bodies, and the failure callback."""

    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.failures: list[RocketMQError] = []
        self.failed = threading.Event()

    def listener(self, msgs: list[Any], ctx: Any) -> ConsumeStatus:
        self.got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def on_failure(self, exc: RocketMQError) -> None:
        self.failures.append(exc)
        self.failed.set()


def _consumer(namesrv: str, group: str, watch: Watch, user: str, secret: str, **kw: Any) -> PushConsumer:
    consumer = PushConsumer(group, namesrv_addr=namesrv, access_key=user, secret_key=secret, **{**FAST, **kw})
    consumer.subscribe("Acl2Orders")
    consumer.register_listener(watch.listener)
    consumer.on_failure(watch.on_failure)
    return consumer


def test_start_fails_naming_the_user_the_group_and_the_missing_action(acl2: EmbeddedCluster) -> None:
    watch = Watch()
    consumer = _consumer(acl2.namesrv_addr, "readers", watch, "nogroup", "nogroup_secret")
    with pytest.raises(AclDeniedError) as info:
        consumer.start()
    err = info.value
    assert (err.acl, err.user, err.resource, err.actions, err.request) == \
        ("2.0", "nogroup", "Group:readers", ("Sub",), "HEART_BEAT")
    assert "user nogroup lacks Sub on Group:readers (HEART_BEAT)" in str(err)
    assert consumer.failure is err and watch.failures == [err]
    assert acl2.brokers[0].consumer_ids("readers") == []
    consumer.shutdown()


def test_a_permission_withdrawn_while_consuming_fails_the_consumer(acl2: EmbeddedCluster) -> None:
    watch = Watch()
    consumer = _consumer(acl2.namesrv_addr, "readers", watch, "reader", "reader_secret")
    consumer.start()
    try:
        _send(acl2, 4)
        wait_until(lambda: len(watch.got) == 4, 20, "the four allowed messages")
        assert consumer.failure is None
        consumer.raise_if_failed()  # nothing to raise yet
        # the operator denies the group (mqadmin createAcl ... -d Deny): queue 0's parked pull brings m4, its
        # next pull is refused; queue 1's pull, sent before the change, stays parked on the broker
        acl2.create_acl("reader", ["Group:readers"], ["Sub"], "Deny")
        _send(acl2, 1, first=4, queue_id=0)
        assert watch.failed.wait(20), "the refusal did not fail the consumer"
        err = watch.failures[0]
        assert isinstance(err, AclDeniedError) and consumer.failure is err
        assert (err.user, err.resource, err.kind) == ("reader", "Group:readers", "authorization")
        assert "the decision is deny" in err.reason
        with pytest.raises(AclDeniedError):
            consumer.raise_if_failed()
        # messages sent after the failure wake the long poll still parked on the broker: what it brings
        # back is dropped, not consumed (a window for it to arrive: the absence of an event)
        _send(acl2, 4, first=8, queue_id=1)
        time.sleep(0.5)
    finally:
        report = consumer.shutdown()
    assert set(watch.got) == {b"m0", b"m1", b"m2", b"m3", b"m4"}
    assert not set(watch.got) & {b"m8", b"m9", b"m10", b"m11"}, watch.got
    # the final commit is refused too, and reported
    assert not report.ok and isinstance(report.denied, AclDeniedError)
    assert watch.failures == [err]  # told once


# -- every place a refusal surfaces, injected as the 5.x answer ----------------------------------------

def _refusal(resource: str) -> str:
    return f"User:app has no permission to access {resource} from 127.0.0.1, no matched policies."


@pytest.mark.parametrize("code,resource,options,request_name", [
    (38, "Group:g_acl_fail", {}, "GET_CONSUMER_LIST_BY_GROUP"),  # rebalance
    (14, "Group:g_acl_fail", {}, "QUERY_CONSUMER_OFFSET"),  # the start offset of an assigned queue
    (30, "Topic:AclFail", {"consume_from_where": "CONSUME_FROM_LAST_OFFSET"}, "GET_MAX_OFFSET"),  # new group, last
    (11, "Group:g_acl_fail", {}, "PULL_MESSAGE"),
    (15, "Group:g_acl_fail", {}, "UPDATE_CONSUMER_OFFSET"),  # the periodic offset commit
    (41, "Group:g_acl_fail", {"orderly": True}, "LOCK_BATCH_MQ"),  # an orderly queue's broker lock
    (36, "Group:g_acl_fail", {"fail_listener": True}, "SEND_MESSAGE_V2"),  # send-back and its fallback send
], ids=["rebalance", "offset-read", "start-offset", "pull", "offset-commit", "lock", "send-back"])
def test_every_refused_request_fails_the_consumer(cluster: TestCluster, code: int, resource: str,
                                                  options: dict[str, Any], request_name: str) -> None:
    topic, group = "AclFail", "g_acl_fail"
    cluster.create_topic(topic, 2)
    cluster.fill(topic, 6)
    faults = cluster.embedded.brokers[0].faults
    faults.respond(code, 16, _refusal(resource))
    if code == 36:  # the fallback of a refused send-back is a send to %RETRY%, refused as well
        faults.respond(310, 16, _refusal(resource))
    if code == 30:  # no committed offset (a 5.x broker's usual answer): the start offset is the max offset
        faults.respond(14, 22, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
    orderly, fail_listener = options.pop("orderly", False), options.pop("fail_listener", False)
    failures: list[RocketMQError] = []
    failed = threading.Event()

    def listener(msgs: list[Any], ctx: Any) -> Any:
        if orderly:
            return OrderlyStatus.SUCCESS
        return ConsumeStatus.RECONSUME_LATER if fail_listener else ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **{**FAST, **options})
    consumer.subscribe(topic)
    consumer.register_listener(listener, orderly=orderly)
    consumer.on_failure(lambda exc: (failures.append(exc), failed.set()))
    consumer.start()
    try:
        assert failed.wait(20), f"a refused {request_name} did not fail the consumer"
        err = failures[0]
        assert isinstance(err, AclDeniedError) and consumer.failure is err
        assert (err.acl, err.user, err.resource, err.request) == ("2.0", "app", resource, request_name)
        assert consumer.stats()["denied"] == str(err)
    finally:
        consumer.shutdown()
    assert failures == [err]


def test_a_consumer_without_acl_trouble_never_fails(cluster: TestCluster) -> None:
    """A code-16 NO_PERMISSION that is not the ACL's (a topic not readable for a while) is retried, as Java does."""
    topic, group = "AclNotMine", "g_acl_not_mine"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 3)
    cluster.embedded.brokers[0].faults.respond(11, 16, "the topic[AclNotMine] pulling message is forbidden", times=3)
    got: list[bytes] = []
    consumer = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    consumer.subscribe(topic)
    consumer.register_listener(lambda msgs, ctx: got.extend(m.body for m in msgs) or ConsumeStatus.CONSUME_SUCCESS)
    with consumer:
        wait_until(lambda: len(got) == 3, 20, "the three messages once the topic is readable again")
        assert consumer.failure is None and consumer.denied is None
