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


async def test_a_signed_pull_is_answered_under_the_opaque_start_returns() -> None:
    """On a connection with the ACL hook the command is sent, not the rendered frame: the opaque returned
    must be the one the request went out with (the consumer tracks and forgets its long polls by it)."""
    import asyncio

    from airflow_provider_rocketmq.client.connection import open_connection
    from airflow_provider_rocketmq.client.protocol.acl import AclHook

    from .peer import ScriptedPeer

    release = asyncio.Event()

    async def parked(conn: object, cmd: RemotingCommand) -> RemotingCommand:
        await release.wait()  # a long poll: both pulls are in flight together
        return cmd.make_response(19, {"nextBeginOffset": "0"})

    async with ScriptedPeer({11: parked}) as peer:
        conn = await open_connection(peer.addr, rpc_hook=AclHook("ak_123456", "sk_123456"))
        try:
            frame = PullFrame({"consumerGroup": "g", "topic": "T", "queueId": "0", "suspendTimeoutMillis": "1",
                               "expressionType": "TAG", "bname": "broker-a"})
            (o1, f1), (o2, f2) = frame.start(conn, 0, 32, 2, 1, None), frame.start(conn, 5, 32, 2, 1, None)
            await peer.wait_received(2)
            assert o1 != o2 and [c.opaque for c in peer.received] == [o1, o2]
            assert all(c.ext["AccessKey"] == "ak_123456" and "Signature" in c.ext for c in peer.received)
            conn.forget(o1)  # stop waiting for the first: the second is still answered
            release.set()
            assert (await asyncio.wait_for(f2, 5)).code == 19 and not f1.done()
        finally:
            await conn.close()
