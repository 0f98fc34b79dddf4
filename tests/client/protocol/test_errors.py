"""Typed broker errors: an ACL refusal is recognised from the remark a 4.x broker answers."""

from __future__ import annotations

import pytest

from airflow_provider_rocketmq.client.protocol.errors import AclDeniedError, SystemError_, broker_error


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
def test_acl_refusals_are_typed(remark: str, reason: str) -> None:
    err = broker_error(1, remark, addr="10.0.0.1:10911")
    assert isinstance(err, AclDeniedError) and isinstance(err, SystemError_)
    assert err.reason == reason and err.remark == remark and not err.retriable
    assert str(err) == f"access denied by broker 10.0.0.1:10911 (ACL): {reason}"


def test_other_system_errors_stay_retriable() -> None:
    err = broker_error(1, "no consumer for this group, g")
    assert type(err) is SystemError_ and err.retriable
