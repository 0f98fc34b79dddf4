"""PULL_MESSAGE frames rendered per queue equal the command encoding of the same fields."""

from __future__ import annotations

import pytest

from airflow_provider_rocketmq.client.protocol.command import RemotingCommand, decode_frame
from airflow_provider_rocketmq.client.pull_request import PullFrame


@pytest.mark.parametrize("const", [
    {"consumerGroup": "g", "topic": "T", "queueId": "0", "suspendTimeoutMillis": "15000",
     "expressionType": "TAG", "bname": "broker-a"},
    {"consumerGroup": 'ns1%g"q', "topic": "标签\\t", "queueId": "7", "suspendTimeoutMillis": "1",
     "expressionType": "SQL92", "bname": "b\u2028c"},
], ids=["plain", "escapes"])
@pytest.mark.parametrize("subscription", [None, 'a || b "q" 值'], ids=["no_sub", "sub"])
def test_rendered_pull_frame_equals_the_command_encoding(const: dict[str, str], subscription: str | None) -> None:
    frame = PullFrame(const)
    for numbers in ((0, 32, 2, 0, 1), (2**40, 1, 7, 2**40 - 1, 1795244539999)):
        cmd = RemotingCommand(11, frame.fields(*numbers, subscription))
        cmd.opaque = 2**31 - 1
        assert frame.render(cmd.opaque, *numbers, subscription) == cmd.encode()
        assert decode_frame(cmd.encode()).ext == cmd.ext_fields
