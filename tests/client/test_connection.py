"""Remoting connection behaviour over real sockets on 127.0.0.1 against a scripted peer."""

from __future__ import annotations

import asyncio

import pytest

from airflow_provider_rocketmq.client.connection import (
    ConnectionPool,
    RemotingProtocol,
    next_opaque,
    open_connection,
)
from airflow_provider_rocketmq.client.protocol.acl import AclHook
from airflow_provider_rocketmq.client.protocol.command import SERIALIZE_ROCKETMQ, RemotingCommand
from airflow_provider_rocketmq.client.protocol.errors import (
    ClientStateError,
    ConnectionClosedError,
    ProtocolError,
    RequestTimeoutError,
)

from .peer import ScriptedPeer

ECHO = 30


async def _echo_peer(gates: dict[str, asyncio.Event] | None = None) -> ScriptedPeer:
    peer = ScriptedPeer()

    async def echo(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        if gates is not None:
            await gates[cmd.ext["id"]].wait()
        return cmd.make_response(0, {"id": cmd.ext["id"]})

    peer.on(ECHO, echo)
    return await peer.start()


async def test_concurrent_requests_answered_out_of_order_are_matched_by_opaque() -> None:
    ids = [str(i) for i in range(8)]
    gates = {i: asyncio.Event() for i in ids}
    peer = await _echo_peer(gates)
    conn = await open_connection(peer.addr)
    try:
        tasks = [asyncio.create_task(conn.request(RemotingCommand.request(ECHO, {"id": i}), 10))
                 for i in ids]
        await peer.wait_received(len(ids))  # every request is parked at the peer
        done_order = []
        for i in reversed(ids):  # answer newest first
            gates[i].set()
            resp = await tasks[int(i)]
            done_order.append(resp.ext["id"])
            assert resp.opaque == next(c.opaque for c in peer.received if c.ext["id"] == i)
        assert done_order == list(reversed(ids))
        assert len({c.opaque for c in peer.received}) == len(ids)
    finally:
        await conn.close()
        await peer.stop()


async def test_request_timeout_then_connection_still_usable() -> None:
    never = asyncio.Event()
    gates = {"slow": never, "fast": asyncio.Event()}
    gates["fast"].set()
    peer = await _echo_peer(gates)
    conn = await open_connection(peer.addr)
    try:
        with pytest.raises(RequestTimeoutError, match="code 30"):
            await conn.request(RemotingCommand.request(ECHO, {"id": "slow"}), 0.2)
        never.set()  # the late answer for the timed-out opaque is dropped quietly
        resp = await conn.request(RemotingCommand.request(ECHO, {"id": "fast"}), 5)
        assert resp.ext == {"id": "fast"}
        assert not conn.is_closed
    finally:
        await conn.close()
        await peer.stop()


async def test_oneway_is_delivered_and_never_answered() -> None:
    peer = await _echo_peer()
    got = asyncio.Event()
    replies: list[RemotingCommand] = []

    async def note(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        got.set()
        return cmd.make_response(0, {"should": "not be sent"})

    peer.on(15, note)
    conn = await open_connection(peer.addr)
    original = conn._deliver

    def spy(commands: list[RemotingCommand]) -> None:  # record every frame the client receives
        replies.extend(commands)
        original(commands)

    conn._deliver = spy  # type: ignore[method-assign]
    try:
        conn.oneway(RemotingCommand.request(15, {"commitOffset": 3}))
        await asyncio.wait_for(got.wait(), 5)
        assert peer.received[-1].is_oneway and peer.received[-1].ext["commitOffset"] == "3"
        # a request sent after the oneway is answered, and it is the only frame that came back
        resp = await conn.request(RemotingCommand.request(ECHO, {"id": "after"}), 5)
        assert resp.ext == {"id": "after"}
        assert [r.ext.get("id") for r in replies] == ["after"]
    finally:
        await conn.close()
        await peer.stop()


async def test_server_initiated_request_answered_by_registered_handler() -> None:
    peer = await _echo_peer()

    async def running_info(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(0, {"group": cmd.ext["consumerGroup"]}, b'{"ok":true}',
                                 language="PYTHON")

    conn = await open_connection(peer.addr, handlers={307: running_info})
    try:
        await asyncio.wait_for(peer.connected.wait(), 5)
        server_side = peer.connections[-1]
        resp = await server_side.request(RemotingCommand.request(307, {"consumerGroup": "g"}), 5)
        assert (resp.code, resp.ext, resp.body, resp.language) == (0, {"group": "g"}, b'{"ok":true}',
                                                                   "PYTHON")
        unknown = await server_side.request(RemotingCommand.request(9999), 5)
        assert unknown.code == 3 and "9999" in (unknown.remark or "")
    finally:
        await conn.close()
        await peer.stop()


async def test_failing_handler_answers_system_error() -> None:
    peer = await _echo_peer()

    async def broken(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("boom")

    conn = await open_connection(peer.addr, handlers={309: broken})
    try:
        await asyncio.wait_for(peer.connected.wait(), 5)
        resp = await peer.connections[-1].request(RemotingCommand.request(309), 5)
        assert resp.code == 1 and "boom" in (resp.remark or "")
    finally:
        await conn.close()
        await peer.stop()


async def test_peer_closing_mid_request_fails_pending_futures() -> None:
    peer = ScriptedPeer()
    arrived = asyncio.Event()

    async def hang_then_die(conn: RemotingProtocol, cmd: RemotingCommand) -> None:
        arrived.set()
        await asyncio.Event().wait()  # cancelled when the connection drops

    peer.on(11, hang_then_die)
    await peer.start()
    conn = await open_connection(peer.addr)
    try:
        pending = [asyncio.create_task(conn.request(RemotingCommand.request(11, {"n": n}), 30))
                   for n in range(3)]
        await asyncio.wait_for(arrived.wait(), 5)
        await peer.drop_connections()
        for t in pending:
            with pytest.raises(ConnectionClosedError):
                await asyncio.wait_for(t, 5)
        assert conn.is_closed
        with pytest.raises(ConnectionClosedError):
            await conn.request(RemotingCommand.request(11), 1)
    finally:
        await conn.close()
        await peer.stop()


async def test_our_close_fails_pending_futures() -> None:
    peer = ScriptedPeer()
    arrived = asyncio.Event()

    async def hang(conn: RemotingProtocol, cmd: RemotingCommand) -> None:
        arrived.set()
        await asyncio.Event().wait()

    peer.on(11, hang)
    await peer.start()
    conn = await open_connection(peer.addr)
    task = asyncio.create_task(conn.request(RemotingCommand.request(11), 30))
    await asyncio.wait_for(arrived.wait(), 5)
    await conn.close()
    await conn.close()  # idempotent
    with pytest.raises(ConnectionClosedError):
        await task
    await peer.stop()


async def test_garbage_from_peer_closes_with_protocol_cause() -> None:
    peer = ScriptedPeer()
    arrived = asyncio.Event()

    async def garbage(conn: RemotingProtocol, cmd: RemotingCommand) -> None:
        assert conn.transport is not None
        conn.transport.write(b"\x00\x00\x00\x06\x07\x00\x00\x00zz")  # serialize type 7
        arrived.set()

    peer.on(11, garbage)
    await peer.start()
    conn = await open_connection(peer.addr)
    try:
        with pytest.raises(ConnectionClosedError) as info:
            await conn.request(RemotingCommand.request(11), 10)
        assert isinstance(info.value.__cause__, ProtocolError)
    finally:
        await conn.close()
        await peer.stop()


async def test_binary_header_request_gets_binary_response() -> None:
    peer = await _echo_peer()
    conn = await open_connection(peer.addr)
    try:
        cmd = RemotingCommand.request(ECHO, {"id": "bin"})
        cmd.serialize_type = SERIALIZE_ROCKETMQ
        resp = await conn.request(cmd, 5)
        assert resp.serialize_type == SERIALIZE_ROCKETMQ and resp.ext == {"id": "bin"}
        assert peer.received[-1].language == "PYTHON"
    finally:
        await conn.close()
        await peer.stop()


async def test_pool_reconnects_after_peer_drop_and_signs_requests() -> None:
    peer = await _echo_peer()
    pool = ConnectionPool(rpc_hook=AclHook("ak", "sk"))
    try:
        first = await pool.get(peer.addr)
        assert (await pool.request(peer.addr, RemotingCommand.request(ECHO, {"id": "1"}), 5)).ext["id"] == "1"
        await peer.drop_connections()
        await first.wait_closed()
        resp = await pool.request(peer.addr, RemotingCommand.request(ECHO, {"id": "2"}), 5)
        assert resp.ext["id"] == "2"
        assert (await pool.get(peer.addr)) is not first
        assert all(c.ext.get("AccessKey") == "ak" and "Signature" in c.ext for c in peer.received)
        assert len(peer.connections) == 1  # the dropped one was forgotten, one new connection
    finally:
        await pool.close()
        await peer.stop()
    with pytest.raises(ConnectionClosedError):
        await pool.get(peer.addr)


async def test_pool_closed_while_connecting_keeps_no_connection() -> None:
    peer = await _echo_peer()
    pool = ConnectionPool()
    try:
        # get() is inside its connect when close() runs: the new connection must not survive
        got, _ = await asyncio.gather(pool.get(peer.addr), pool.close(), return_exceptions=True)
        assert isinstance(got, ConnectionClosedError)
        assert pool.connections() == {}
        await peer.connected.wait()
        await asyncio.wait_for(peer.connections[0].wait_closed(), 5)
    finally:
        await pool.close()
        await peer.stop()


async def test_connect_refused_is_typed() -> None:
    peer = await ScriptedPeer().start()
    addr = peer.addr
    await peer.stop()
    with pytest.raises(ConnectionClosedError, match="cannot connect"):
        await open_connection(addr, timeout=2)


# -- start_request / start_encoded: timer-free waits, writes of one loop iteration coalesced -----


async def test_requests_started_in_one_iteration_go_out_in_one_write() -> None:
    peer = await _echo_peer()
    conn = await open_connection(peer.addr)
    assert conn.transport is not None
    writes: list[bytes] = []
    real_write = conn.transport.write
    conn.transport.write = lambda data: (writes.append(bytes(data)), real_write(data))[1]  # type: ignore[method-assign]
    try:
        cmds = [RemotingCommand.request(ECHO, {"id": str(i)}) for i in range(2)]
        futs = [conn.start_request(c) for c in cmds]
        encoded = RemotingCommand.request(ECHO, {"id": "2"})
        encoded.opaque = next_opaque()
        futs.append(conn.start_encoded(encoded.opaque, encoded.encode()))
        assert writes == []  # nothing written before this iteration ends
        answers = await asyncio.wait_for(asyncio.gather(*futs), 10)
        assert [a.ext["id"] for a in answers] == ["0", "1", "2"]
        assert [a.opaque for a in answers] == [cmds[0].opaque, cmds[1].opaque, encoded.opaque]
        assert writes == [cmds[0].encode() + cmds[1].encode() + encoded.encode()]
        for c in [*cmds, encoded]:
            conn.forget(c.opaque)
        assert conn._pending == {}
    finally:
        await conn.close()
        await peer.stop()


async def test_a_forgotten_request_ignores_its_late_answer() -> None:
    gate = asyncio.Event()
    peer = await _echo_peer({"late": gate, "next": gate})
    conn = await open_connection(peer.addr)
    try:
        cmd = RemotingCommand.request(ECHO, {"id": "late"})
        fut = conn.start_request(cmd)
        await peer.wait_received(1)
        conn.forget(cmd.opaque)  # what a caller does once it stops waiting (its own timeout)
        fut.cancel()
        gate.set()
        answer = await conn.request(RemotingCommand.request(ECHO, {"id": "next"}), 10)
        assert answer.ext["id"] == "next"  # the late answer was dropped, the connection is fine
        assert conn._pending == {}
    finally:
        await conn.close()
        await peer.stop()


async def test_started_request_fails_when_the_peer_closes_and_closed_connections_refuse() -> None:
    never = asyncio.Event()
    peer = await _echo_peer({"x": never})
    conn = await open_connection(peer.addr)
    try:
        fut = conn.start_request(RemotingCommand.request(ECHO, {"id": "x"}))
        await peer.wait_received(1)
        await peer.stop()
        with pytest.raises(ConnectionClosedError):
            await asyncio.wait_for(fut, 10)
        with pytest.raises(ConnectionClosedError):
            conn.start_request(RemotingCommand.request(ECHO, {"id": "y"}))
        with pytest.raises(ConnectionClosedError):
            conn.start_encoded(next_opaque(), b"")
    finally:
        await conn.close()


async def test_signed_connection_signs_started_requests_and_refuses_rendered_frames() -> None:
    peer = await _echo_peer()
    hook = AclHook("ak", "sk")
    conn = await open_connection(peer.addr, rpc_hook=hook)
    try:
        cmd = RemotingCommand.request(ECHO, {"id": "s"})
        answer = await asyncio.wait_for(conn.start_request(cmd), 10)
        conn.forget(cmd.opaque)
        assert answer.ext["id"] == "s"
        assert peer.received[-1].ext["AccessKey"] == "ak" and "Signature" in peer.received[-1].ext
        with pytest.raises(ClientStateError, match="rpc_hook"):
            conn.start_encoded(next_opaque(), cmd.encode())
    finally:
        await conn.close()
        await peer.stop()
