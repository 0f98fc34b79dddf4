"""Raw remoting connections for the differential check: any frame out, every answer and every
broker-initiated request kept, optionally signed with an ACL account."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from airflow_provider_rocketmq.client.connection import RemotingProtocol, open_connection
from airflow_provider_rocketmq.client.protocol.acl import AclHook
from airflow_provider_rocketmq.client.protocol.codes import CLIENT_VERSION
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.errors import ConnectionClosedError, RequestTimeoutError

# What a connection does with a broker-initiated request: an answer, or None (none sent).
Responder = Callable[[RemotingCommand], Awaitable[RemotingCommand | None]]
INBOUND_CODES = (40, 220, 307, 309)
BUSY_RETRIES = 5
SHED_PREFIXES = ("[TIMEOUT_CLEAN_QUEUE]", "[PC_SYNCHRONIZED]", "[PCBUSY_CLEAN_QUEUE]", "[REJECTREQUEST]")  # NOTIFY_CONSUMER_IDS_CHANGED, RESET_OFFSET, RUNNING_INFO, DIRECTLY


class Conn:
    """One TCP connection speaking as a Java client (language JAVA, the client's version)."""

    def __init__(self) -> None:
        self.proto: RemotingProtocol | None = None
        self.inbound: list[RemotingCommand] = []
        self._arrived = asyncio.Event()
        self.responders: dict[int, Responder] = {}

    @classmethod
    async def open(cls, addr: str, *, acl: tuple[str, str] | None = None) -> Conn:
        self = cls()

        async def on_request(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand | None:
            self.inbound.append(cmd)
            self._arrived.set()
            responder = self.responders.get(cmd.code)
            return await responder(cmd) if responder is not None else None

        hook = AclHook(*acl) if acl is not None else None
        self.proto = await open_connection(addr, handlers={c: on_request for c in INBOUND_CODES},
                                           rpc_hook=hook, timeout=5.0)
        return self

    async def call(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None, *,
                   timeout: float = 10.0, version: int = CLIENT_VERSION, oneway: bool = False,
                   serialize_type: int = 0) -> RemotingCommand | None:
        """The answer, or None when none came within ``timeout`` (or for a oneway request).

        A busy broker's load shedding (SYSTEM_BUSY ``[TIMEOUT_CLEAN_QUEUE]`` / ``[PC_...]``: the request
        was dropped unprocessed) is not an answer to the request: it is sent again, a few times.
        """
        assert self.proto is not None
        for attempt in range(BUSY_RETRIES + 1):
            cmd = RemotingCommand(code, None if ext is None else {k: _text(v) for k, v in ext.items()}, body,
                                  language="JAVA", version=version, serialize_type=serialize_type)
            if oneway:
                self.proto.oneway(cmd)
                return None
            try:
                resp = await self.proto.request(cmd, timeout)
            except RequestTimeoutError:
                return None
            except ConnectionClosedError:
                return RemotingCommand(-1, remark="connection closed by the server")
            if not (resp.code == 2 and (resp.remark or "").startswith(SHED_PREFIXES)) or attempt == BUSY_RETRIES:
                return resp
            await asyncio.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    async def wait_inbound(self, code: int, count: int = 1, timeout: float = 10.0) -> list[RemotingCommand]:
        """The broker-initiated requests with ``code`` once ``count`` arrived (fewer after ``timeout``)."""
        async def until() -> None:
            while sum(1 for c in self.inbound if c.code == code) < count:
                self._arrived.clear()
                await self._arrived.wait()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(until(), timeout)
        return [c for c in self.inbound if c.code == code]

    async def close(self) -> None:
        if self.proto is not None:
            await self.proto.close()


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
