"""asyncio remoting connection: opaque-correlated requests, oneway sends, and
requests initiated by the peer dispatched to registered handlers.

The same `RemotingProtocol` serves both ends: the client's `Connection` and the
embedded broker's server side. Frames are written whole with ``transport.write``
so writes never interleave. Reads go into one reused `FrameBuffer` per connection
(`asyncio.BufferedProtocol`), which cuts the stream into frames.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol

from .protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode
from .protocol.command import FrameBuffer, RemotingCommand
from .protocol.errors import (
    ClientStateError,
    ConnectionClosedError,
    ProtocolError,
    RequestTimeoutError,
    RocketMQError,
)

log = logging.getLogger(__name__)

# Like Java's per-JVM RemotingCommand.requestId: unique across every connection.
_opaque = itertools.count(1)

Handler = Callable[["RemotingProtocol", RemotingCommand], Awaitable[RemotingCommand | None]]
RpcHook = Callable[[RemotingCommand], None]


def next_opaque() -> int:
    return next(_opaque) & 0x7FFFFFFF


class ResponseSink(Protocol):
    """Where the answer to one request goes: an asyncio Future, or any object with these three
    methods. The connection calls them from its read path (or `connection_lost`) and only while
    ``done()`` is false; they must not raise."""

    def done(self) -> bool: ...

    def set_result(self, result: RemotingCommand, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class RemotingProtocol(asyncio.BufferedProtocol):
    """One TCP connection speaking remoting frames in both directions."""

    def __init__(self, handlers: dict[int, Handler] | None = None, *, name: str = "",
                 rpc_hook: RpcHook | None = None,
                 on_close: Callable[[RemotingProtocol], None] | None = None,
                 response_language: str = "JAVA") -> None:
        self.handlers = handlers if handlers is not None else {}
        self.name = name
        self.rpc_hook = rpc_hook
        self.on_close = on_close
        self.response_language = response_language
        self.transport: asyncio.Transport | None = None
        self.peer: str = ""
        self._frames = FrameBuffer()
        self._pending: dict[int, ResponseSink] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._close_cause: BaseException | None = None
        self.attrs: dict[str, object] = {}  # per-connection state owned by the handlers' side
        self._batched: list[bytes] | None = None  # frames queued by start_request, written together
        self._loop = asyncio.get_running_loop()

    # -- asyncio.Protocol ------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.writable()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            commands = self._frames.filled(nbytes)
        except ProtocolError as exc:
            log.warning("closing %s: %s", self.name or self.peer, exc)
            self._abort(exc)
            return
        self._deliver(commands)

    def _deliver(self, commands: list[RemotingCommand]) -> None:
        for cmd in commands:
            if cmd.is_response:
                fut = self._pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
                else:
                    log.debug("response for unknown opaque %d on %s", cmd.opaque, self.name or self.peer)
            else:
                self._dispatch(cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        cause = self._close_cause or exc
        err = ConnectionClosedError(f"connection {self.name or self.peer} closed"
                                    + (f": {cause}" if cause else ""))
        err.__cause__ = cause
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(err)
        if not self._closed.done():
            self._closed.set_result(None)
        for task in list(self._tasks):
            task.cancel()
        if self.on_close is not None:
            try:
                self.on_close(self)
            except Exception:  # a close callback must never break the loop
                log.exception("on_close callback failed")

    # -- peer-initiated requests ------------------------------------------------
    def _dispatch(self, cmd: RemotingCommand) -> None:
        handler = self.handlers.get(cmd.code)
        if handler is None:
            if not cmd.is_oneway:
                self.send(cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                            remark=f" request type {cmd.code} not supported",
                                            language=self.response_language))
            return
        task = asyncio.get_running_loop().create_task(self._run_handler(handler, cmd))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_handler(self, handler: Handler, cmd: RemotingCommand) -> None:
        try:
            resp = await handler(self, cmd)
        except asyncio.CancelledError:
            return
        except Exception as exc:  # answer like Java does rather than leave the peer waiting
            log.exception("handler for code %d failed", cmd.code)
            resp = cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}",
                                     language=self.response_language)
        if resp is not None and not cmd.is_oneway and not self.is_closed:
            resp.opaque = cmd.opaque
            resp.flag |= FLAG_RESPONSE
            self.send(resp)

    # -- sending -------------------------------------------------------------------
    @property
    def is_closed(self) -> bool:
        return self._closed.done() or self.transport is None or self.transport.is_closing()

    def send(self, cmd: RemotingCommand) -> None:
        """Write one frame now (no reply tracking)."""
        if self.is_closed:
            raise ConnectionClosedError(f"connection {self.name or self.peer} is closed")
        if self.rpc_hook is not None and not cmd.is_response:
            self.rpc_hook(cmd)
        assert self.transport is not None
        self.transport.write(cmd.encode())

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for the response with the same opaque."""
        cmd.opaque = next_opaque()
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = fut
        try:
            self.send(cmd)
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise RequestTimeoutError(
                f"no response to code {cmd.code} from {self.name or self.peer} within {timeout:.3f}s"
            ) from None
        finally:
            self._pending.pop(cmd.opaque, None)

    def start_request(self, cmd: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        """Send a request and return the future of its response, with no timer attached.

        For callers that bound many long waits with one periodic sweep (the
        consumer's long-poll pulls) instead of a timer per request. The caller
        must call `forget` once it stops waiting. Requests started in one loop
        iteration are written together at the start of the next one.
        """
        if self.is_closed:
            raise ConnectionClosedError(f"connection {self.name or self.peer} is closed")
        cmd.opaque = next_opaque()
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        return self._start(cmd.opaque, cmd.encode())

    def start_encoded(self, opaque: int, frame: bytes) -> asyncio.Future[RemotingCommand]:
        """`start_request` for a frame the caller rendered itself with ``opaque`` (from `next_opaque`).

        Only for unsigned connections: an rpc_hook must see every request as a command.
        """
        if self.rpc_hook is not None:
            raise ClientStateError("a connection with an rpc_hook needs start_request()")
        if self.is_closed:
            raise ConnectionClosedError(f"connection {self.name or self.peer} is closed")
        return self._start(opaque, frame)

    def _start(self, opaque: int, frame: bytes) -> asyncio.Future[RemotingCommand]:
        fut: asyncio.Future[RemotingCommand] = self._loop.create_future()
        self._pending[opaque] = fut
        self._queue_frame(frame)
        return fut

    def _queue_frame(self, frame: bytes) -> None:
        # Requests started in one loop iteration (pull loops woken by one read) go out in a
        # single write at the start of the next iteration: one send() instead of several.
        if self._batched is None:
            self._batched = [frame]
            self._loop.call_soon(self._write_batched)
        else:
            self._batched.append(frame)

    def send_encoded(self, opaque: int, frame: bytes, sink: ResponseSink, *, coalesce: bool = True) -> None:
        """Write a request the caller rendered with ``opaque`` (from `next_opaque`); its answer goes
        to ``sink``, with no timer (the caller bounds the wait and calls `forget`).

        ``coalesce``: written with the other frames of this loop iteration at the start of the next
        one (pipelined sends), else at once. Only for unsigned connections (see `send_command`).
        Raises ConnectionClosedError, having written nothing, when the connection is closed.
        """
        if self.rpc_hook is not None:
            raise ClientStateError("a connection with an rpc_hook needs send_command()")
        if self.is_closed:
            raise ConnectionClosedError(f"connection {self.name or self.peer} is closed")
        self._pending[opaque] = sink
        self._write(frame, coalesce)

    def send_command(self, cmd: RemotingCommand, sink: ResponseSink, *, coalesce: bool = True) -> int:
        """`send_encoded` for a command (signed by the rpc_hook if there is one); returns its opaque."""
        if self.is_closed:
            raise ConnectionClosedError(f"connection {self.name or self.peer} is closed")
        cmd.opaque = next_opaque()
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        frame = cmd.encode()
        self._pending[cmd.opaque] = sink
        self._write(frame, coalesce)
        return cmd.opaque

    def _write(self, frame: bytes, coalesce: bool) -> None:
        if coalesce or self._batched is not None:  # behind frames already queued: writes keep their order
            self._queue_frame(frame)
        else:
            assert self.transport is not None
            self.transport.write(frame)

    def _write_batched(self) -> None:
        frames, self._batched = self._batched, None
        if frames and self.transport is not None and not self.transport.is_closing():
            self.transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

    def forget(self, opaque: int) -> None:
        """Stop tracking a request started with `start_request` (a late response is ignored)."""
        self._pending.pop(opaque, None)

    def oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next_opaque()
        cmd.flag |= FLAG_ONEWAY
        self.send(cmd)

    # -- closing ---------------------------------------------------------------------
    def _abort(self, cause: BaseException) -> None:
        self._close_cause = cause
        if self.transport is not None:
            self.transport.abort()

    async def close(self) -> None:
        """Close and wait until every pending request has failed. Idempotent."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        if self.transport is not None:
            await asyncio.shield(self._closed)

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)


async def open_connection(addr: str, *, handlers: dict[int, Handler] | None = None,
                          rpc_hook: RpcHook | None = None, timeout: float = 3.0,
                          use_tls: bool = False,
                          on_close: Callable[[RemotingProtocol], None] | None = None) -> RemotingProtocol:
    """Connect to ``host:port``; the connect itself is bounded by ``timeout``."""
    host, port = split_addr(addr)
    loop = asyncio.get_running_loop()
    ssl_ctx: ssl.SSLContext | None = None
    if use_tls:
        # RocketMQ's TLS is commonly self-signed (Java client default: no verification).
        ssl_ctx = ssl.create_default_context()
        ssl_ctx.check_hostname = False
        ssl_ctx.verify_mode = ssl.CERT_NONE
    try:
        _, proto = await asyncio.wait_for(
            loop.create_connection(lambda: RemotingProtocol(handlers, name=addr, rpc_hook=rpc_hook,
                                                            on_close=on_close, response_language="PYTHON"),
                                   host, port, ssl=ssl_ctx),
            timeout)
    except asyncio.TimeoutError:
        raise RequestTimeoutError(f"connect to {addr} timed out after {timeout}s") from None
    except OSError as exc:
        raise ConnectionClosedError(f"cannot connect to {addr}: {exc}") from exc
    return proto


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RocketMQError(f"address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


class ConnectionPool:
    """One live connection per address, (re)opened on demand."""

    def __init__(self, *, handlers: dict[int, Handler] | None = None, rpc_hook: RpcHook | None = None,
                 connect_timeout: float = 3.0, use_tls: bool = False) -> None:
        self.handlers = handlers if handlers is not None else {}
        self.rpc_hook = rpc_hook
        self.connect_timeout = connect_timeout
        self.use_tls = use_tls
        self._conns: dict[str, RemotingProtocol] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closed = False

    async def get(self, addr: str, timeout: float | None = None) -> RemotingProtocol:
        """The live connection to ``addr``, opened if needed within ``timeout`` (at most
        ``connect_timeout``) so that a caller's deadline also bounds the connect."""
        conn = self._conns.get(addr)
        if conn is not None and not conn.is_closed:
            return conn
        if self._closed:
            raise ConnectionClosedError("connection pool is closed")
        lock = self._locks.setdefault(addr, asyncio.Lock())
        async with lock:
            conn = self._conns.get(addr)
            if conn is None or conn.is_closed:
                limit = self.connect_timeout if timeout is None else min(timeout, self.connect_timeout)
                conn = await open_connection(addr, handlers=self.handlers, rpc_hook=self.rpc_hook,
                                             timeout=limit, use_tls=self.use_tls)
                if self._closed:  # close() ran while we were connecting: it could not see this one
                    await conn.close()
                    raise ConnectionClosedError("connection pool is closed")
                self._conns[addr] = conn
            return conn

    async def request(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        conn = await self.get(addr)
        return await conn.request(cmd, timeout)

    async def oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.get(addr)
        conn.oneway(cmd)

    def live(self, addr: str) -> RemotingProtocol | None:
        """The open connection to ``addr``, or None (never connects: for synchronous hot paths)."""
        conn = self._conns.get(addr)
        return conn if conn is not None and not conn.is_closed else None

    def connections(self) -> dict[str, RemotingProtocol]:
        return {a: c for a, c in self._conns.items() if not c.is_closed}

    async def close_addr(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        self._closed = True
        conns, self._conns = list(self._conns.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
