"""A scripted remoting peer on 127.0.0.1 for connection/client tests.

It is a real asyncio TCP server speaking frames through the foundation's
`RemotingProtocol` (server side); tests register ``handlers`` per request code
and inspect ``received`` (every request the peer saw, in order).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from airflow_provider_rocketmq.client.connection import RemotingProtocol
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand

PeerHandler = Callable[[RemotingProtocol, RemotingCommand], Awaitable[RemotingCommand | None]]


class ScriptedPeer:
    def __init__(self, handlers: dict[int, PeerHandler] | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self.handlers: dict[int, PeerHandler] = {}
        self.received: list[RemotingCommand] = []
        self.connections: list[RemotingProtocol] = []
        self.connected = asyncio.Event()
        self._arrivals = asyncio.Condition()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0
        for code, h in (handlers or {}).items():
            self.on(code, h)

    def on(self, code: int, handler: PeerHandler) -> None:
        async def recording(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand | None:
            self.received.append(cmd)
            async with self._arrivals:
                self._arrivals.notify_all()
            return await handler(conn, cmd)
        self.handlers[code] = recording

    def reply(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
              resp_code: int = 0, remark: str | None = None) -> None:
        """Answer every request ``code`` with a fixed response."""
        async def h(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
            return cmd.make_response(resp_code, ext, body, remark)
        self.on(code, h)

    async def wait_received(self, n: int, timeout: float = 10.0) -> None:
        """Wait until the peer has seen ``n`` requests in total."""
        async def until() -> None:
            async with self._arrivals:
                await self._arrivals.wait_for(lambda: len(self.received) >= n)
        await asyncio.wait_for(until(), timeout)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _factory(self) -> RemotingProtocol:
        proto = RemotingProtocol(self.handlers, name="peer")
        self.connections.append(proto)
        self.connected.set()
        return proto

    async def start(self) -> ScriptedPeer:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._factory, "127.0.0.1", self.port, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for c in self.connections:
                await c.close()
            await self._server.wait_closed()
            self._server = None

    async def drop_connections(self) -> None:
        for c in self.connections:
            if c.transport is not None:
                c.transport.abort()
        self.connections.clear()

    def codes(self) -> list[int]:
        return [c.code for c in self.received]

    async def __aenter__(self) -> ScriptedPeer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def route_body(topic_queues: int = 4, brokers: dict[str, str] | None = None, perm: int = 6) -> bytes:
    """A standard-JSON TopicRouteData body for brokers {name: addr}."""
    import json
    brokers = brokers or {"broker-a": "127.0.0.1:10911"}
    return json.dumps({
        "brokerDatas": [{"brokerAddrs": {"0": a}, "brokerName": n, "cluster": "DefaultCluster"}
                        for n, a in brokers.items()],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": n, "perm": perm, "readQueueNums": topic_queues, "topicSysFlag": 0,
                        "writeQueueNums": topic_queues} for n in brokers],
    }).encode()
