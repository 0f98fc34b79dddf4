"""Blocking sockets for the synchronous `Producer.send`: one request and its answer in the caller's thread.

Handing a send to the producer's loop thread and waiting for the answer there costs two thread
wake-ups and the loop's own rounds per message; a thread that sends one message at a time gains
nothing from them. `DirectSender` keeps one plain blocking socket per broker address, used by one
thread at a time: the frame is written and its answer read in the calling thread. A thread that
finds the socket in use by another gets None and takes the loop-thread path instead, so concurrent
senders still share one pipelined connection. Not for TLS or signed (ACL) connections.

What an error means for the message is the same as on the loop path: a connect that fails or a
write that does not complete stored nothing (`NotSentError`: another attempt cannot duplicate
it); a timeout or a connection lost while waiting for the answer may have stored it.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time

from ..connection import split_addr
from ..protocol.command import FrameBuffer, RemotingCommand
from ..protocol.errors import ConnectionClosedError, RequestTimeoutError
from ..protocol.send_wire import NotSentError


class _Channel:
    __slots__ = ("frames", "lock", "sock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.frames = FrameBuffer()

    def drop(self) -> None:
        sock, self.sock = self.sock, None
        self.frames = FrameBuffer()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class DirectSender:
    """One blocking socket per broker address for synchronous sends (module docstring)."""

    def __init__(self, connect_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self._channels: dict[str, _Channel] = {}
        self._guard = threading.Lock()
        self._closed = False

    def exchange(self, addr: str, broker: str, opaque: int, frame: bytes, timeout: float) -> RemotingCommand | None:
        """Write ``frame`` to ``addr`` and return the answer with ``opaque``; None when another thread
        is using that broker's socket. Raises NotSentError (nothing stored), RequestTimeoutError or
        ConnectionClosedError (the broker may have stored it)."""
        ch = self._channels.get(addr)
        if ch is None:
            with self._guard:
                ch = self._channels.setdefault(addr, _Channel())
        if not ch.lock.acquire(blocking=False):
            return None
        try:
            if self._closed:
                raise NotSentError(ConnectionClosedError("the producer is closed"), broker)
            deadline = time.monotonic() + timeout
            sock = ch.sock
            if sock is not None and select.select([sock], [], [], 0)[0]:
                ch.drop()  # idle and readable: the broker closed it (an answer is never left unread)
                sock = None
            if sock is None:
                try:
                    sock = socket.create_connection(split_addr(addr), min(timeout, self.connect_timeout))
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError as exc:
                    raise NotSentError(ConnectionClosedError(f"cannot connect to {addr}: {exc}"), broker) from exc
                ch.sock = sock
            try:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                sock.sendall(frame)
            except OSError as exc:  # not all written: the broker cannot have decoded the request
                ch.drop()
                raise NotSentError(ConnectionClosedError(f"cannot write to {addr}: {exc}"), broker) from exc
            return self._answer(ch, addr, opaque, deadline, timeout)
        finally:
            ch.lock.release()

    def _answer(self, ch: _Channel, addr: str, opaque: int, deadline: float, timeout: float) -> RemotingCommand:
        sock = ch.sock
        assert sock is not None
        frames = ch.frames
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                n = sock.recv_into(frames.writable())
            except TimeoutError:
                ch.drop()  # a late answer must not meet the next request
                raise RequestTimeoutError(f"no response to code 310 from {addr} within {timeout:.3f}s") from None
            except OSError as exc:
                ch.drop()
                raise ConnectionClosedError(f"connection {addr} closed: {exc}") from exc
            if n == 0:
                ch.drop()
                raise ConnectionClosedError(f"connection {addr} closed by the broker")
            try:
                commands = frames.filled(n)
            except Exception:
                ch.drop()
                raise
            for cmd in commands:  # anything else (a request of the broker's) has no one to answer it here
                if cmd.is_response and cmd.opaque == opaque:
                    return cmd

    def close(self) -> None:
        """Close every socket (a send in progress on another thread fails with ConnectionClosedError)."""
        self._closed = True
        with self._guard:
            channels = list(self._channels.values())
        for ch in channels:
            sock = ch.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv
            if ch.lock.acquire(timeout=5):
                try:
                    ch.drop()
                finally:
                    ch.lock.release()


__all__ = ["DirectSender"]
