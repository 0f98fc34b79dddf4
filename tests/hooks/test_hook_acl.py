"""An Airflow connection's login / password sign every request: the hook's clients against a broker in
ACL mode, accepted with the right secret, refused with the broker's reason otherwise."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from airflow_provider_rocketmq.client import AclDeniedError, ConsumeStatus, Message
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook

ACL = {"accounts": [{"accessKey": "hook_user", "secretKey": "hook_secret", "defaultTopicPerm": "DENY",
                     "defaultGroupPerm": "DENY", "topicPerms": ["AclHook=PUB|SUB"],
                     "groupPerms": ["hook_readers=SUB"]}]}


def test_connection_credentials_against_an_acl_broker(airflow_conn: Any) -> None:
    with EmbeddedCluster(queues=2, acl=ACL) as cluster:
        cluster.create_topic("AclHook", 2)
        with airflow_conn("rmq_acl", host=cluster.namesrv_addr, login="hook_user", password="hook_secret"):
            hook = RocketMQHook("rmq_acl")
            assert "hook_secret" not in repr(hook.get_client_config())
            with hook.get_producer() as producer:
                for i in range(3):
                    producer.send(Message("AclHook", b"m%d" % i))
            got: list[bytes] = []
            done = threading.Event()

            def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
                got.extend(m.body for m in msgs)
                if len(got) >= 3:
                    done.set()
                return ConsumeStatus.CONSUME_SUCCESS

            consumer = hook.get_consumer("hook_readers", "AclHook", listener=listener,
                                         consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            consumer.start()
            try:
                assert done.wait(20), got
            finally:
                consumer.shutdown()
            assert sorted(got) == [b"m0", b"m1", b"m2"] and consumer.denied is None
            assert sum(cluster.committed_offsets("hook_readers", "AclHook").values()) == 3

        for conn_id, fields, reason in (
                ("rmq_acl_wrong", {"login": "hook_user", "password": "not-it"},
                 "Check signature failed for accessKey=hook_user"),
                ("rmq_acl_none", {}, "No accessKey is configured")):
            with airflow_conn(conn_id, host=cluster.namesrv_addr, **fields):
                hook = RocketMQHook(conn_id)
                with hook.get_producer() as producer, pytest.raises(AclDeniedError) as info:
                    producer.send(Message("AclHook", b"refused"))
                assert info.value.reason == reason
                consumer = hook.get_consumer("hook_readers", "AclHook", listener=lambda m, c: None)
                with pytest.raises(AclDeniedError, match=reason):
                    consumer.start()
        assert len(cluster.messages("AclHook")) == 3
