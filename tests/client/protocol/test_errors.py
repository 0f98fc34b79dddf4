"""Typed broker errors: an ACL refusal is recognised from the remark a 4.x (code 1) or 5.x (code 16) broker
answers, and says who was refused what; a code-16 refusal that is not the ACL's stays NoPermissionError."""

from __future__ import annotations

import pytest

from airflow_provider_rocketmq.client.protocol.errors import (
    AclDeniedError,
    NoPermissionError,
    RefusedRequest,
    SystemError_,
    broker_error,
)


@pytest.mark.parametrize("remark,reason", [
    # as quoted from real 4.x brokers in apache/rocketmq-externals#244 and apache/rocketmq#5310 reports
    (("org.apache.rocketmq.acl.common.AclException: No accessKey is configured, "
      "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:394)"),
     "No accessKey is configured"),
    (("org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=dashboard, "
      "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:683)"),
     "Check signature failed for accessKey=dashboard"),
    # the embedded broker's form (no line number) and a message with a comma of its own
    (("org.apache.rocketmq.acl.common.AclException: Need admin permission for request code=17, but accessKey=ak "
      "is not, org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java)"),
     "Need admin permission for request code=17, but accessKey=ak is not"),
])
def test_acl_1_refusals_are_typed(remark: str, reason: str) -> None:
    err = broker_error(1, remark, addr="10.0.0.1:10911")
    assert isinstance(err, AclDeniedError) and not isinstance(err, SystemError_)  # never "no consumer"
    assert err.acl == "1.0" and err.reason == reason and err.remark == remark and not err.retriable
    assert str(err).startswith("access denied by broker 10.0.0.1:10911 (ACL 1.0): ")
    assert str(err).endswith(f": {reason}")


# recorded from a real 5.3.3 broker with ACL 2.0 (tests/data/differential/rocketmq-5.3.3-acl2.json)
ACL2 = [
    (11, "pnogroup", "User:pnogroup has no permission to access Group:PG from 127.0.0.1, no matched policies.",
     "authorization", "pnogroup", "Group:PG", ("Sub",),
     "user pnogroup lacks Sub on Group:PG (PULL_MESSAGE)"),
    (30, "psub", "User:psub has no permission to access Topic:PT from 127.0.0.1, no matched policies.",
     "authorization", "psub", "Topic:PT", ("Get",), "user psub lacks Get on Topic:PT (GET_MAX_OFFSET)"),
    (15, "pdeny", "User:pdeny has no permission to access Group:PG from 127.0.0.1, the decision is deny.",
     "authorization", "pdeny", "Group:PG", ("Sub", "Update"),
     "user pdeny lacks Sub or Update on Group:PG (UPDATE_CONSUMER_OFFSET)"),
    (34, "pfull", "check signature failed.", "authentication", "pfull", None, (),
     "user pfull was not authenticated (HEART_BEAT)"),
    (34, None, "username cannot be null.", "authentication", None, None, (),
     "a request without credentials was refused (HEART_BEAT)"),
    (11, "ghost", "User:ghost is not found.", "authentication", "ghost", None, (),
     "user ghost was not authenticated (PULL_MESSAGE)"),
    (310, "pdis", "User:pdis is disabled.", "authentication", "pdis", None, (),
     "user pdis was not authenticated (SEND_MESSAGE_V2)"),
]


@pytest.mark.parametrize("code,key,remark,kind,user,resource,actions,what", ACL2)
def test_acl_2_refusals_name_the_user_resource_and_missing_action(
        code: int, key: str | None, remark: str, kind: str, user: str | None, resource: str | None,
        actions: tuple[str, ...], what: str) -> None:
    err = broker_error(16, remark, addr="127.0.0.1:10991", request=RefusedRequest(code, key))
    assert isinstance(err, AclDeniedError) and not isinstance(err, NoPermissionError)
    assert (err.acl, err.kind, err.user, err.resource, err.actions) == ("2.0", kind, user, resource, actions)
    assert err.reason == remark and not err.retriable
    assert str(err) == f"access denied by broker 127.0.0.1:10991 (ACL 2.0): {what}: {remark}"


@pytest.mark.parametrize("remark", [
    # NO_PERMISSION for a topic, broker or group switched off (4.9.7 and 5.3.3 send/pull processors)
    "the topic[Orders] sending message is forbidden",
    "the broker[broker-a] sending message is forbidden",
    "the topic[Orders] pulling message is forbidden",
    "the broker[broker-a] pulling message is forbidden",
    "subscription group no permission, g1",
    "",
])
def test_code_16_that_is_not_the_acls_stays_no_permission(remark: str) -> None:
    err = broker_error(16, remark, request=RefusedRequest(11, "pfull"))
    assert type(err) is NoPermissionError and err.code == 16 and not err.retriable


def test_other_system_errors_stay_retriable() -> None:
    err = broker_error(1, "no consumer for this group, g")
    assert type(err) is SystemError_ and err.retriable
