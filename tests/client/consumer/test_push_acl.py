"""A push consumer against a 4.x broker whose plain ACL refuses it: start() fails on a refused first heartbeat,
a refused pull fails the consumer (``failure``, ``denied``, ``stats()["denied"]``), nothing more is consumed
or committed (tests/client/consumer/test_push_acl_failure.py: every other refusal, and ACL 2.0)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_rocketmq.client import (
    AclDeniedError,
    ClientConfig,
    ConsumeStatus,
    Message,
    PushConsumer,
)
from airflow_provider_rocketmq.client.producer import Producer
from airflow_provider_rocketmq.embedded import EmbeddedCluster

from .cluster import wait_until

ADMIN = {"accessKey": "admin_ak", "secretKey": "admin_sk_1", "admin": True}
READER = {"accessKey": "reader_ak", "secretKey": "reader_sk", "defaultTopicPerm": "DENY",
          "defaultGroupPerm": "DENY", "topicPerms": ["AclPush=SUB"], "groupPerms": ["acl_readers=SUB"]}


@pytest.fixture
def acl_cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(queues=2, acl={"accounts": [ADMIN, READER]}) as cluster:
        cluster.create_topic("AclPush", 2)
        yield cluster


def _consumer(cluster: EmbeddedCluster, group: str, got: list[Any]) -> PushConsumer:
    consumer = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, access_key="reader_ak",
                            secret_key="reader_sk", consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                            pull_time_delay_when_exception=0.05, persist_consumer_offset_interval=60.0)
    consumer.subscribe("AclPush")
    consumer.register_listener(lambda msgs, ctx: got.extend(msgs) or ConsumeStatus.CONSUME_SUCCESS)
    return consumer


def _send(cluster: EmbeddedCluster, n: int) -> None:
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr, access_key="admin_ak",
                               secret_key="admin_sk_1")) as producer:
        for i in range(n):
            producer.send(Message("AclPush", b"m%d" % i))


def test_start_raises_when_the_first_heartbeat_is_refused(acl_cluster: EmbeddedCluster) -> None:
    got: list[Any] = []
    consumer = _consumer(acl_cluster, "acl_others", got)
    with pytest.raises(AclDeniedError) as info:
        consumer.start()
    assert info.value.reason == "No default permission for group:acl_others"
    assert consumer.denied is info.value
    assert acl_cluster.brokers[0].consumer_ids("acl_others") == []
    consumer.shutdown()  # a no-op after the failed start


def test_refused_pulls_are_reported_and_nothing_is_committed(acl_cluster: EmbeddedCluster) -> None:
    got: list[Any] = []
    consumer = _consumer(acl_cluster, "acl_readers", got)
    consumer.start()
    try:
        _send(acl_cluster, 2)
        wait_until(lambda: len(got) == 2, 20, "the two allowed messages")
        assert consumer.denied is None and consumer.stats()["denied"] is None
        # the topic's SUB permission is withdrawn (a plain_acl.yml reload); the parked pulls return the
        # next messages, every pull after that is refused
        acl_cluster.set_acl({"accounts": [ADMIN, {**READER, "topicPerms": ["AclPush=DENY"]}]})
        _send(acl_cluster, 4)
        wait_until(lambda: consumer.denied is not None, 20, "a refused pull")
        assert consumer.denied is not None
        assert consumer.denied.reason == "No default permission for topic:AclPush"
        assert consumer.stats()["denied"] == str(consumer.denied)
        # the consumer failed on the first refusal; `denied` is the last one (a heartbeat may be refused
        # after the pull, for the same withdrawn permission)
        assert isinstance(consumer.failure, AclDeniedError) and consumer.failure.reason == consumer.denied.reason
        assert consumer.denied.acl == "1.0"
        consumed = len(got)
    finally:
        consumer.shutdown()
    # the final commit is refused too (UPDATE_CONSUMER_OFFSET needs SUB on the topic; the periodic
    # commit did not run yet): the broker holds no offset although messages were consumed
    assert consumed >= 2
    assert set(acl_cluster.committed_offsets("acl_readers", "AclPush").values()) == {-1}
    assert consumer.denied is not None and consumer.denied.reason == "No default permission for topic:AclPush"
