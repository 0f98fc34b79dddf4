"""Server-side plumbing shared by the embedded name server and brokers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from ..client.connection import Handler, RemotingProtocol
from ..client.protocol.codes import ResponseCode
from ..client.protocol.command import RemotingCommand
from .headers import HeaderError


async def abort_connections(conns: Iterable[RemotingProtocol]) -> int:
    """Abort every connection (like a peer vanishing) and wait until each is closed; how many."""
    targets = list(conns)
    for conn in targets:
        if conn.transport is not None:
            conn.transport.abort()
    await asyncio.gather(*(c.wait_closed() for c in targets), return_exceptions=True)
    return len(targets)


async def close_server(server: asyncio.AbstractServer, conns: Iterable[RemotingProtocol]) -> None:
    """Stop accepting, drop the open connections, and wait for the listening socket to close."""
    server.close()
    await abort_connections(conns)
    await server.wait_closed()


def header_error_response(cmd: RemotingCommand, exc: HeaderError) -> RemotingCommand:
    """Java's answer to a missing or malformed header field: SYSTEM_ERROR with the field's remark."""
    return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))


def answer_header_errors(handler: Handler) -> Handler:
    """Wrap ``handler`` so that a HeaderError becomes `header_error_response`."""

    async def guarded(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            return await handler(conn, cmd)
        except HeaderError as exc:
            return header_error_response(cmd, exc)

    return guarded
