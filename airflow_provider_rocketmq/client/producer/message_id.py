"""Client message ids (UNIQ_KEY), made as Java's MessageClientIDSetter makes them.

An id is 32 hex digits: this host's IPv4 address, the process id, a per-generator seed, the
milliseconds since the start of the local month and a 16-bit counter. The producer stamps one on
every message it sends (kept on every attempt, so a duplicate is recognisable); `send_wire`'s
builders take the generator as a parameter and make none themselves.
"""

from __future__ import annotations

import binascii
import itertools
import os
import socket
import struct
import threading
import time


class UniqIdGenerator:
    """hex(ip4 + int16 pid + int32 seed + int32 ms-since-month-start + int16 counter), upper case."""

    def __init__(self) -> None:
        try:
            ip = socket.inet_aton(socket.gethostbyname(socket.gethostname()))
        except OSError:
            ip = b"\x7f\x00\x00\x01"
        self._prefix = binascii.hexlify(ip + struct.pack(">hi", os.getpid() & 0x7FFF,
                                                          id(self) & 0x7FFFFFFF)).decode().upper()
        self._lock = threading.Lock()
        self._counter = itertools.count(1)  # next() on it is atomic: no lock per id
        self._head: tuple[int, str] = (-1, "")
        self._start = 0.0
        self._next = 0.0
        self._set_month()

    def _set_month(self) -> None:
        # Java MessageClientIDSetter counts from the start of the month in the local time
        # zone; gmtime here would put the start in the future in the hours around a month
        # boundary west of UTC (a negative, then wrapped, time field).
        now = time.time()
        t = time.localtime(now)
        self._start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        self._next = time.mktime((t.tm_year + (t.tm_mon == 12), t.tm_mon % 12 + 1, 1, 0, 0, 0, 0, 0, -1))

    def next_id(self) -> str:
        now = time.time()
        if now >= self._next:
            with self._lock:
                if now >= self._next:
                    self._set_month()
        # Java writes (int)(now - start): the low 32 bits, which wrap after ~24.8 days
        ms = int((now - self._start) * 1000) & 0xFFFFFFFF
        head = self._head  # (ms, prefix + time hex) as one tuple: threads never see half an update
        if head[0] != ms:
            head = self._head = (ms, f"{self._prefix}{ms:08X}")
        return f"{head[1]}{next(self._counter) & 0xFFFF:04X}"

    def next_ids(self, n: int) -> list[str]:
        """``n`` ids made at once (one clock read): what ``n`` calls of `next_id` within the same
        millisecond give, for the pipelined sends that make ids by the chunk."""
        head = self.next_id()[:-4]
        counter = self._counter
        return [f"{head}{next(counter) & 0xFFFF:04X}" for _ in range(n)]


_generator = UniqIdGenerator()


def new_uniq_id() -> str:
    """A new UNIQ_KEY id."""
    return _generator.next_id()


def new_uniq_ids(n: int) -> list[str]:
    """``n`` new UNIQ_KEY ids (see `UniqIdGenerator.next_ids`)."""
    return _generator.next_ids(n)


__all__ = ["UniqIdGenerator", "new_uniq_id", "new_uniq_ids"]
