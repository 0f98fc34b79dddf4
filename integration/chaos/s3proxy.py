"""A fault-injecting HTTP proxy in front of an S3 server (moto), for object-store faults.

Every client (s3fs in the window and the load, pyarrow's S3 client of pyiceberg) talks to the
proxy; the proxy forwards each request to the server on a fresh connection and relays the answer,
unless the active fault plan says otherwise for that request:

- ``slowdown``: answer ``503 SlowDown`` (the request is not forwarded: nothing changes on the server);
- ``reset_before``: reset the connection (RST) before forwarding anything;
- ``reset_after``: forward the request, let the server apply it, then reset the connection instead of
  answering: the client does not know that its request took effect (a lost answer);
- ``slow``: hold the request ``slow_s`` seconds before forwarding it;
- an *outage*: for a while every request is forwarded and its answer lost.

Requests are read whole (``Content-Length`` or chunked; ``Expect: 100-continue`` is answered by the
proxy), answers are relayed with ``Connection: close``. Counters record what was injected, per fault
and for ledger entries (``_rocketmq_ledger/`` writes), so a run shows that its faults were real.
"""

from __future__ import annotations

import contextlib
import random
import re
import socket
import socketserver
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

_LEDGER_ENTRY = re.compile(r"_rocketmq_ledger/\d{10}\.json")
_SLOWDOWN = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
             b"<Message>Please reduce your request rate.</Message><RequestId>chaos</RequestId></Error>")


@dataclass
class FaultPlan:
    """Probabilities per request (they are tried in this order) and an optional outage."""

    slowdown: float = 0.0
    reset_before: float = 0.0
    reset_after: float = 0.0
    slow: float = 0.0
    slow_s: float = 1.0
    outage_from: float = 0.0  # monotonic clock; outage_from <= now < outage_until: every answer lost
    outage_until: float = 0.0
    until: float = float("inf")  # the plan ends here (monotonic clock)
    ledger_only: bool = False  # faults hit only writes of ledger entries (a blip exactly at a load's commit)


@dataclass
class ProxyStats:
    requests: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    ledger_writes: int = 0
    ledger_injected: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, Any]:
        return {"requests": self.requests, "injected": dict(self.injected), "ledger_writes": self.ledger_writes,
                "ledger_injected": dict(self.ledger_injected)}


class _Reject(Exception):
    pass


def _read_until(sock: socket.socket, buf: bytearray, marker: bytes, limit: int = 1 << 20) -> int:
    while True:
        i = buf.find(marker)
        if i >= 0:
            return i
        if len(buf) > limit:
            raise _Reject("header too long")
        chunk = sock.recv(65536)
        if not chunk:
            raise _Reject("closed")
        buf += chunk


def _read_exact(sock: socket.socket, buf: bytearray, n: int) -> bytes:
    while len(buf) < n:
        chunk = sock.recv(max(65536, n - len(buf)))
        if not chunk:
            raise _Reject("closed in a body")
        buf += chunk
    out = bytes(buf[:n])
    del buf[:n]
    return out


def _read_chunked(sock: socket.socket, buf: bytearray) -> bytes:
    """A chunked body, returned de-chunked."""
    body = bytearray()
    while True:
        i = _read_until(sock, buf, b"\r\n")
        size = int(bytes(buf[:i]).split(b";")[0].strip() or b"0", 16)
        del buf[:i + 2]
        if size == 0:
            i = _read_until(sock, buf, b"\r\n")  # trailers end with an empty line
            while i != 0:
                del buf[:i + 2]
                i = _read_until(sock, buf, b"\r\n")
            del buf[:2]
            return bytes(body)
        body += _read_exact(sock, buf, size)
        _read_exact(sock, buf, 2)


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0): the peer sees 'connection reset', not a clean end."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        sock.close()


class S3FaultProxy:
    """The proxy on 127.0.0.1 (a free port); ``endpoint`` is what clients get as endpoint URL."""

    def __init__(self, upstream: tuple[str, int], seed: int = 0) -> None:
        self.upstream = upstream
        self.rng = random.Random(seed)
        self._lock = threading.Lock()
        self.plan = FaultPlan(until=0.0)
        self.stats = ProxyStats()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 128

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="s3-fault-proxy")
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- the plan --------------------------------------------------------------------------------
    def set_plan(self, plan: FaultPlan) -> None:
        with self._lock:
            self.plan = plan

    def clear(self) -> None:
        self.set_plan(FaultPlan(until=0.0))

    def _decide(self, is_ledger_write: bool) -> str:
        now = time.monotonic()
        with self._lock:
            p = self.plan
            self.stats.requests += 1
            if is_ledger_write:
                self.stats.ledger_writes += 1
            if now >= p.until or (p.ledger_only and not is_ledger_write):
                return "pass"
            if p.outage_from <= now < p.outage_until:
                what = "outage"
            else:
                r = self.rng.random()
                what = "pass"
                for name, prob in (("slowdown", p.slowdown), ("reset_before", p.reset_before),
                                   ("reset_after", p.reset_after), ("slow", p.slow)):
                    if r < prob:
                        what = name
                        break
                    r -= prob
            if what != "pass":
                self.stats.injected[what] += 1
                if is_ledger_write:
                    self.stats.ledger_injected[what] += 1
            return what

    # -- serving ---------------------------------------------------------------------------------
    def _serve(self, client: socket.socket) -> None:
        buf = bytearray()
        try:
            end = _read_until(client, buf, b"\r\n\r\n")
            head = bytes(buf[:end]).decode("latin-1")
            del buf[:end + 4]
            request_line, *header_lines = head.split("\r\n")
            method, target = request_line.split(" ")[:2]
            headers = [tuple(h.split(":", 1)) for h in header_lines if ":" in h]
            names = {k.strip().lower(): v.strip() for k, v in headers}
            # a ledger entry (<seq>.json), not the output's probe object next to them
            is_ledger_write = method in ("PUT", "POST") and _LEDGER_ENTRY.search(target) is not None
            what = self._decide(is_ledger_write)
            if what == "reset_before":
                _reset(client)
                return
            if names.get("expect", "").lower() == "100-continue":
                client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            if names.get("transfer-encoding", "").lower() == "chunked":
                body = _read_chunked(client, buf)
            else:
                body = _read_exact(client, buf, int(names.get("content-length", "0") or 0))
            if what == "slowdown":
                body = b"" if method == "HEAD" else _SLOWDOWN  # an answer to HEAD has no body
                client.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                               + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
                client.close()
                return
            if what == "slow":
                time.sleep(self.plan.slow_s)
            drop = {"expect", "transfer-encoding", "content-length", "connection"}
            out = [f"{method} {target} HTTP/1.1"] + [f"{k}:{v}" for k, v in headers if k.strip().lower() not in drop]
            out += [f"Content-Length: {len(body)}", "Connection: close"]
            answer = self._forward(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
            if what in ("reset_after", "outage"):
                _reset(client)  # the server applied the request; its answer is lost
                return
            client.sendall(answer)
            client.close()
        except (_Reject, OSError, ValueError):
            with contextlib.suppress(OSError):
                client.close()

    def _forward(self, request: bytes) -> bytes:
        with socket.create_connection(self.upstream, timeout=120) as up:
            up.sendall(request)
            chunks = []
            while True:
                chunk = up.recv(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        raw = b"".join(chunks)
        end = raw.find(b"\r\n\r\n")
        if end < 0:
            return raw
        lines = raw[:end].split(b"\r\n")
        kept = [lines[0]] + [h for h in lines[1:] if not h.lower().startswith(b"connection:")] + [b"Connection: close"]
        return b"\r\n".join(kept) + raw[end:]
