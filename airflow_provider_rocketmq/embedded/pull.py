"""PULL_MESSAGE (11) with tag filtering and long polling.

Lookup follows DefaultMessageStore.getMessage and PullMessageProcessor: the
store status name becomes the response remark (FOUND, NO_MATCHED_MESSAGE,
NO_MESSAGE_IN_QUEUE, OFFSET_TOO_SMALL, OFFSET_OVERFLOW_ONE, OFFSET_OVERFLOW_BADLY)
and maps to 0 / 20 / 19 or 21 / 21 / 19 / 21. A found batch is the concatenation
of the stored records, sliced from the consume queue without re-encoding, capped
like a broker reading from memory (32 messages, 256 KiB, at least one message).

A pull with the suspend flag that finds nothing is parked until a matching
message arrives in its queue or ``suspendTimeoutMillis`` passes, then processed
once more without suspending (PullRequestHoldService + notifyMessageArriving).
"""

from __future__ import annotations

import asyncio
import contextlib

from ..client.connection import Handler, RemotingProtocol
from ..client.protocol.codes import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    ResponseCode,
)
from ..client.protocol.command import RemotingCommand
from ..client.route import PERM_READ
from .filter import SubscriptionData, SubscriptionParseError
from .headers import FAQ_SUFFIX, opt_int, opt_str, req_int, req_str
from .ports import BrokerContext
from .store import ConsumeQueue, MessageStore

MAX_TRANSFER_COUNT = 32
MAX_TRANSFER_BYTES = 256 * 1024
MAX_FILTER_SCAN = 16000

_CODE_BY_STATUS = {
    "FOUND": ResponseCode.SUCCESS,
    "NO_MATCHED_MESSAGE": ResponseCode.PULL_RETRY_IMMEDIATELY,
    "OFFSET_OVERFLOW_ONE": ResponseCode.PULL_NOT_FOUND,
    "OFFSET_OVERFLOW_BADLY": ResponseCode.PULL_OFFSET_MOVED,
    "OFFSET_TOO_SMALL": ResponseCode.PULL_OFFSET_MOVED,
}

_Waiter = tuple["asyncio.Future[None]", SubscriptionData]
Found = tuple[str, int, int, int, "bytes | None"]  # status, nextBeginOffset, minOffset, maxOffset, body


class _Refused(Exception):
    """A pull the broker refuses before looking at the queue: the answer's code and remark."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class PullService:
    """Answers pulls for one broker and holds suspended ones."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.store_slot = ctx.store_slot
        self.groups = ctx.groups
        self.members = ctx.members
        self.offsets = ctx.offsets
        self.hold: dict[tuple[str, int], list[_Waiter]] = {}

    def handlers(self) -> dict[int, Handler]:
        return {11: self.pull_message}

    async def pull_message(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand | None:
        return await self.answer(conn, cmd, allow_suspend=True)

    async def answer(self, conn: RemotingProtocol, cmd: RemotingCommand, *, allow_suspend: bool) -> RemotingCommand:
        """PullMessageProcessor.processRequest; ``allow_suspend`` False: answer now (a parked pull's second look)."""
        group = req_str(cmd, "consumerGroup")
        topic = req_str(cmd, "topic")
        queue_id = req_int(cmd, "queueId")
        offset = req_int(cmd, "queueOffset")
        max_nums = req_int(cmd, "maxMsgNums")
        sys_flag = req_int(cmd, "sysFlag")
        commit_offset = req_int(cmd, "commitOffset")
        suspend_ms = req_int(cmd, "suspendTimeoutMillis")
        sub_version = opt_int(cmd, "subVersion", 0)
        store = self.store_slot.get()
        try:
            self._check_access(conn, store, group, topic, queue_id)
            sub = self._subscription(cmd, group, topic, sys_flag, sub_version)
        except _Refused as exc:
            return cmd.make_response(exc.code, {}, remark=exc.remark)

        status, next_offset, min_offset, max_offset, body = get_messages(store.get_queue(topic, queue_id), offset,
                                                                         max_nums, sub)
        code = _CODE_BY_STATUS.get(status)
        if code is None:  # NO_MESSAGE_IN_QUEUE
            code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND

        if allow_suspend and sys_flag & PULL_FLAG_COMMIT_OFFSET:
            await self.offsets.commit(group, topic, queue_id, commit_offset, from_pull=True)

        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and sys_flag & PULL_FLAG_SUSPEND and suspend_ms > 0:
            await self._park(topic, queue_id, sub, suspend_ms / 1000.0)
            return await self.answer(conn, cmd, allow_suspend=False)

        return cmd.make_response(code, {"suggestWhichBrokerId": "0", "nextBeginOffset": str(next_offset),
                                        "maxOffset": str(max_offset), "minOffset": str(min_offset)},
                                 body, remark=status)

    def _check_access(self, conn: RemotingProtocol, store: MessageStore, group: str, topic: str, queue_id: int) -> None:
        """The group may consume, the topic exists and is readable, the queue id is one of its read queues."""
        gcfg = self.groups.config(group)
        if gcfg is None:
            raise _Refused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                           f"subscription group [{group}] does not exist, {FAQ_SUFFIX}")
        if not gcfg.consume_enable:
            raise _Refused(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        tcfg = store.topics.get(topic)
        if tcfg is None:
            raise _Refused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please! {FAQ_SUFFIX}")
        if not tcfg.perm & PERM_READ:
            raise _Refused(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if queue_id < 0 or queue_id >= tcfg.read_queues:
            raise _Refused(ResponseCode.SYSTEM_ERROR,
                           f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                           f"[{tcfg.read_queues}] consumer:[/{conn.peer}]")

    def _subscription(self, cmd: RemotingCommand, group: str, topic: str, sys_flag: int,
                      sub_version: int) -> SubscriptionData:
        """The pull's own expression (sysFlag subscription bit), else the group's heartbeat subscription."""
        if sys_flag & PULL_FLAG_SUBSCRIPTION:
            try:
                return SubscriptionData.build(topic, opt_str(cmd, "subscription"), opt_str(cmd, "expressionType"),
                                              sub_version)
            except SubscriptionParseError as exc:
                if str(exc).startswith("The broker does not support"):
                    raise _Refused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
                raise _Refused(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                               "parse the consumer's subscription failed") from None
        info = self.members.find(group)
        if info is None:
            raise _Refused(ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's group info not exist{FAQ_SUFFIX}")
        found = info.subscriptions.get(topic)
        if found is None:
            raise _Refused(ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's subscription not exist{FAQ_SUFFIX}")
        if found.sub_version < sub_version:
            raise _Refused(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
        return found

    async def _park(self, topic: str, queue_id: int, sub: SubscriptionData, timeout: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (fut, sub)
        waiters = self.hold.setdefault((topic, queue_id), [])
        waiters.append(entry)
        try:
            await asyncio.wait((fut,), timeout=timeout)
        finally:
            with contextlib.suppress(ValueError):
                waiters.remove(entry)
            if not waiters and self.hold.get((topic, queue_id)) is waiters:
                del self.hold[(topic, queue_id)]
            if not fut.done():
                fut.cancel()

    def on_arrival(self, topic: str, queue_id: int, tags_code: int) -> None:
        """Store listener: wake the parked pulls whose subscription matches the new message."""
        waiters = self.hold.get((topic, queue_id))
        if not waiters:
            return
        for fut, sub in waiters:
            if not fut.done() and sub.matches(tags_code):
                fut.set_result(None)

    def cancel_all(self) -> None:
        for waiters in self.hold.values():
            for fut, _ in waiters:
                if not fut.done():
                    fut.cancel()
        self.hold.clear()

    def parked(self, topic: str | None = None) -> int:
        """How many pulls are parked (for tests)."""
        return sum(len(w) for (t, _), w in self.hold.items() if topic is None or t == topic)


def get_messages(cq: ConsumeQueue | None, offset: int, max_nums: int, sub: SubscriptionData) -> Found:
    """(status, nextBeginOffset, minOffset, maxOffset, body) of a queue like DefaultMessageStore.getMessage."""
    if cq is None or cq.max_offset == 0:
        return "NO_MESSAGE_IN_QUEUE", 0, 0, 0, None
    min_o, max_o = cq.min_offset, cq.max_offset
    if offset < min_o:
        return "OFFSET_TOO_SMALL", min_o, min_o, max_o, None
    if offset == max_o:
        return "OFFSET_OVERFLOW_ONE", offset, min_o, max_o, None
    if offset > max_o:
        return "OFFSET_OVERFLOW_BADLY", max_o, min_o, max_o, None
    limit = max(1, min(max_nums, MAX_TRANSFER_COUNT))
    if sub.match_all:
        picked = _first_records(cq.records, offset, limit)
        return "FOUND", offset + len(picked), min_o, max_o, b"".join(picked)
    picked, next_offset = _matching_records(cq, offset, limit, sub.codes)
    if not picked:
        return "NO_MATCHED_MESSAGE", next_offset, min_o, max_o, None
    return "FOUND", next_offset, min_o, max_o, b"".join(picked)


def _first_records(records: list[bytes], offset: int, limit: int) -> list[bytes]:
    """Up to ``limit`` records from ``offset``, within MAX_TRANSFER_BYTES (at least one)."""
    picked = records[offset:offset + limit]
    total = sum(map(len, picked))
    if total > MAX_TRANSFER_BYTES and len(picked) > 1:
        total = 0
        for i, rec in enumerate(picked):
            if i and total + len(rec) > MAX_TRANSFER_BYTES:
                return picked[:i]
            total += len(rec)
    return picked


def _matching_records(cq: ConsumeQueue, offset: int, limit: int, codes: set[int]) -> tuple[list[bytes], int]:
    """Records from ``offset`` whose tagsCode is in ``codes``: at most ``limit``, within MAX_TRANSFER_BYTES
    (at least one), scanning at most MAX_FILTER_SCAN entries; and the offset the next pull starts at."""
    records, tags = cq.records, cq.tags
    end = min(cq.max_offset, offset + MAX_FILTER_SCAN)
    out: list[bytes] = []
    total = 0
    i = offset
    while i < end:
        if tags[i] in codes:
            rec = records[i]
            if out and total + len(rec) > MAX_TRANSFER_BYTES:
                break
            out.append(rec)
            total += len(rec)
            if len(out) >= limit:
                i += 1
                break
        i += 1
    return out, i
