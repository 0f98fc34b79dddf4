"""Listener plumbing shared by the consume services: context objects and result mapping."""

from __future__ import annotations

import asyncio
import enum
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from ..protocol.message import MessageExt
from ..protocol.queue import MessageQueue
from .config import ConsumeStatus, OrderlyStatus

ACK_ALL = 2**31 - 1  # Java ackIndex default (Integer.MAX_VALUE)


class ConsumeContext:
    """Passed to concurrent listeners: set ``ack_index`` / ``delay_level_when_next_consume``.

    ``ack_index`` (with CONSUME_SUCCESS) says the messages up to and including
    that index succeeded; the rest are retried. ``delay_level_when_next_consume``:
    0 lets the broker pick 3 + reconsume times, -1 sends straight to the DLQ.
    """

    __slots__ = ("ack_index", "delay_level_when_next_consume", "message_queue")

    def __init__(self, message_queue: MessageQueue) -> None:
        self.message_queue = message_queue
        self.ack_index = ACK_ALL
        self.delay_level_when_next_consume = 0


_NOT_ORDERLY = ("OrderlyContext has no {0}: it is a concurrent-listener knob, and an orderly batch is "
                "committed or suspended whole (return SUSPEND_CURRENT_QUEUE_A_MOMENT and set "
                "suspend_current_queue_time; with auto_commit False, COMMIT/ROLLBACK)")


class OrderlyContext:
    """Passed to orderly listeners (Java ConsumeOrderlyContext).

    ``suspend_current_queue_time`` (s) overrides the pause after SUSPEND_CURRENT_QUEUE_A_MOMENT;
    ``auto_commit = False`` makes SUCCESS acknowledge without committing (see `OrderlyStatus`).
    Setting ``ack_index`` or ``delay_level_when_next_consume`` (concurrent knobs) raises.
    """

    __slots__ = ("auto_commit", "message_queue", "suspend_current_queue_time")

    def __init__(self, message_queue: MessageQueue) -> None:
        self.message_queue = message_queue
        self.auto_commit = True
        self.suspend_current_queue_time = -1.0

    @property
    def ack_index(self) -> NoReturn:
        raise AttributeError(_NOT_ORDERLY.format("ack_index"))

    @ack_index.setter
    def ack_index(self, value: object) -> None:
        raise AttributeError(_NOT_ORDERLY.format("ack_index"))

    @property
    def delay_level_when_next_consume(self) -> NoReturn:
        raise AttributeError(_NOT_ORDERLY.format("delay_level_when_next_consume"))

    @delay_level_when_next_consume.setter
    def delay_level_when_next_consume(self, value: object) -> None:
        raise AttributeError(_NOT_ORDERLY.format("delay_level_when_next_consume"))


Listener = Callable[[list[Any], Any], Any]


def is_async_listener(fn: Listener) -> bool:
    """``async def`` functions, and objects whose ``__call__`` is one."""
    call = type(fn).__dict__.get("__call__") if not inspect.isfunction(fn) and not inspect.ismethod(fn) else None
    return inspect.iscoroutinefunction(fn) or (call is not None and inspect.iscoroutinefunction(call))


def failed_from(status: Any, ctx: ConsumeContext, n: int) -> int:
    """Index of the first failed message of a concurrent call (n = all succeeded)."""
    if status is ConsumeStatus.CONSUME_SUCCESS or status == "CONSUME_SUCCESS":
        ack = ctx.ack_index
        return n if ack >= n - 1 else max(ack + 1, 0)
    return 0  # RECONSUME_LATER, None, or anything else: Java treats it as a failure


def orderly_ok(status: Any) -> bool:
    return status is OrderlyStatus.SUCCESS or status == "SUCCESS" or status is ConsumeStatus.CONSUME_SUCCESS


class OrderlyOutcome(enum.Enum):
    """What an orderly worker does with the messages of one listener call."""

    COMMIT = "COMMIT"  # commit everything taken so far
    ACK = "ACK"  # consumed, not committed (auto_commit False)
    ROLLBACK = "ROLLBACK"  # everything taken since the last commit goes back, then a pause
    SUSPEND = "SUSPEND"  # these messages again after a pause (or to the DLQ past the maximum)


def orderly_outcome(status: Any, auto_commit: bool) -> OrderlyOutcome:
    """Java ConsumeMessageOrderlyService.processConsumeResult, status by status."""
    name = status.value if isinstance(status, OrderlyStatus) else status
    if status is ConsumeStatus.CONSUME_SUCCESS:
        name = "SUCCESS"
    if auto_commit:
        # COMMIT/ROLLBACK need auto_commit False; Java logs them and treats them as SUCCESS
        return OrderlyOutcome.COMMIT if name in ("SUCCESS", "COMMIT", "ROLLBACK") else OrderlyOutcome.SUSPEND
    if name == "SUCCESS":
        return OrderlyOutcome.ACK
    if name == "COMMIT":
        return OrderlyOutcome.COMMIT
    if name == "ROLLBACK":
        return OrderlyOutcome.ROLLBACK
    return OrderlyOutcome.SUSPEND


async def maybe_await(value: Any) -> Any:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value


_CR = {ConsumeStatus.CONSUME_SUCCESS: "CR_SUCCESS", ConsumeStatus.RECONSUME_LATER: "CR_LATER"}
_CR_ORDERLY = {OrderlyStatus.COMMIT: "CR_COMMIT", OrderlyStatus.ROLLBACK: "CR_ROLLBACK"}


async def consume_message_directly(call: Callable[[Any], Awaitable[Any]], ctx: ConsumeContext | OrderlyContext,
                                   orderly: bool) -> dict[str, Any]:
    """CONSUME_MESSAGE_DIRECTLY: ``await call(ctx)`` runs the listener once; ConsumeMessageDirectlyResult."""
    start = time.monotonic()
    remark = None
    try:
        status = await call(ctx)
        if status is None:
            result = "CR_RETURN_NULL"
        elif orderly:
            result = _CR_ORDERLY.get(status, "CR_SUCCESS" if orderly_ok(status) else "CR_LATER")
        else:
            result = _CR.get(status, "CR_LATER")
    except Exception as exc:
        result = "CR_THROW_EXCEPTION"
        remark = f"{type(exc).__name__}: {exc}"
    auto_commit = ctx.auto_commit if isinstance(ctx, OrderlyContext) else True
    out: dict[str, Any] = {"autoCommit": auto_commit, "consumeResult": result, "order": orderly,
                           "spentTimeMills": int((time.monotonic() - start) * 1000)}
    if remark is not None:
        out["remark"] = remark
    return out


def run_listener(listener: Listener, msgs: list[MessageExt] | Any) -> Callable[[Any], Awaitable[Any]]:
    """``call(ctx)`` for `consume_message_directly`: sync listeners run in the default executor."""
    async def call(ctx: Any) -> Any:
        if is_async_listener(listener):
            return await listener(msgs, ctx)
        return await maybe_await(await asyncio.get_running_loop().run_in_executor(None, listener, msgs, ctx))
    return call
