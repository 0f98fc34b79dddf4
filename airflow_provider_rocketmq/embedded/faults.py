"""Fault injection for tests: delayed or lost responses and busy answers.

Rules match a request code (or every code with ``code=None``) and apply a bounded
number of ``times`` (``None``: until cleared). ``delay`` and ``drop`` let the
request be processed normally (a SEND is stored, an offset committed) and only
hold back or lose the *response*, which is what a slow or lossy network does to
a client. ``respond`` answers at once with the given code (SYSTEM_BUSY,
FLOW_CONTROL, ...) without processing the request.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..client.remoting.codes import ResponseCode

BUSY_REMARK = "[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 0ms, size of queue: 0"
FLOW_CONTROL_REMARK = "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while"


@dataclass
class FaultRule:
    """One injected fault; ``action`` is ``delay``, ``drop`` or ``respond``."""

    action: str
    code: int | None = None
    seconds: float = 0.0
    response_code: int = ResponseCode.SYSTEM_BUSY
    remark: str | None = None
    times: int | None = None


class FaultInjector:
    """Thread-safe rule table consulted by the broker before answering each request."""

    def __init__(self) -> None:
        self._rules: list[FaultRule] = []
        self._lock = threading.Lock()

    def add(self, rule: FaultRule) -> FaultRule:
        if rule.action not in ("delay", "drop", "respond"):
            raise ValueError(f"action: unknown fault action {rule.action!r}")
        if rule.times is not None and rule.times < 1:
            raise ValueError(f"times: must be >= 1 or None, got {rule.times}")
        with self._lock:
            self._rules.append(rule)
        return rule

    def delay_responses(self, code: int | None, seconds: float, times: int | None = None) -> FaultRule:
        return self.add(FaultRule("delay", code, seconds=seconds, times=times))

    def drop_responses(self, code: int | None, times: int | None = None) -> FaultRule:
        return self.add(FaultRule("drop", code, times=times))

    def respond(self, code: int | None, response_code: int, remark: str | None = None,
                times: int | None = None) -> FaultRule:
        return self.add(FaultRule("respond", code, response_code=response_code, remark=remark, times=times))

    def system_busy(self, code: int | None, times: int | None = None) -> FaultRule:
        return self.respond(code, ResponseCode.SYSTEM_BUSY, BUSY_REMARK, times)

    def flow_control(self, code: int | None, times: int | None = None) -> FaultRule:
        return self.respond(code, ResponseCode.FLOW_CONTROL, FLOW_CONTROL_REMARK, times)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def take(self, code: int) -> FaultRule | None:
        """The first rule matching ``code``, consuming one of its ``times``."""
        if not self._rules:
            return None
        with self._lock:
            for rule in self._rules:
                if rule.code is None or rule.code == code:
                    if rule.times is not None:
                        rule.times -= 1
                        if rule.times <= 0:
                            self._rules.remove(rule)
                    return rule
        return None
