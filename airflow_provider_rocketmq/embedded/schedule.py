"""Delayed delivery (ScheduleMessageService): the retry back-off of send-back.

A message with a DELAY level is stored in ``SCHEDULE_TOPIC_XXXX`` queue
``level - 1`` with REAL_TOPIC / REAL_QID properties, and re-stored into its real
queue once ``delay(level) * time_scale`` has passed since it was stored. The
per-level delivery progress is a consumer offset of the reserved group
``%SCHEDULE%`` (so it survives a restart with the rest of the store).
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..client.protocol.message import (
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    decode_messages,
    properties_to_string,
)
from .ports import BrokerContext
from .settings import DELAY_LEVELS_S, MAX_DELAY_LEVEL
from .store import MessageStore
from .topic_rules import SCHEDULE_TOPIC

log = logging.getLogger(__name__)

PROGRESS_GROUP = "%SCHEDULE%"


class ScheduleService:
    """Moves due messages from the schedule topic to their real queues."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.settings = ctx.settings
        self.store_slot = ctx.store_slot
        self._wakeup: asyncio.Future[None] | None = None

    def delay_ms(self, level: int) -> float:
        return DELAY_LEVELS_S[level - 1] * 1000.0 * self.settings.time_scale

    def on_arrival(self, topic: str, queue_id: int, tags_code: int) -> None:
        if topic == SCHEDULE_TOPIC and self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def run(self) -> None:
        # A plain future plus a timer: cancelling this task cancels exactly one await
        # (wait_for around an Event could leave a cancelled task running on 3.11).
        loop = asyncio.get_running_loop()
        while True:
            try:
                wait = self.deliver_due()
            except Exception:  # never let one bad record stop delivery for good
                log.exception("broker %s: delayed delivery failed", self.settings.name)
                wait = 1.0
            wakeup = self._wakeup = loop.create_future()
            timer = loop.call_later(wait, _wake, wakeup)
            try:
                await wakeup
            finally:
                timer.cancel()
                self._wakeup = None

    def deliver_due(self) -> float:
        """Deliver every due message; return seconds until the next one is due (max 60)."""
        store = self.store_slot.current
        if store is None:
            return 1.0
        now = time.time() * 1000
        next_due = now + 60_000
        for level in range(1, MAX_DELAY_LEVEL + 1):
            cq = store.get_queue(SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            progress = max(store.query_offset(PROGRESS_GROUP, SCHEDULE_TOPIC, level - 1), cq.min_offset)
            start = progress
            delay = self.delay_ms(level)
            while progress < cq.max_offset:
                due = cq.store_ts[progress] + delay
                if due > now:
                    next_due = min(next_due, due)
                    break
                self._deliver(store, cq.records[progress])
                progress += 1
            if progress != start:
                store.commit_offset(PROGRESS_GROUP, SCHEDULE_TOPIC, level - 1, progress)
        return max(0.0, (next_due - time.time() * 1000) / 1000.0)

    def _deliver(self, store: MessageStore, record: bytes) -> None:
        (msg,) = decode_messages(record, decompress_body=False)
        props = msg.properties
        topic = props.get(PROPERTY_REAL_TOPIC)
        try:
            queue_id = int(props.get(PROPERTY_REAL_QID, "0"))
        except ValueError:
            queue_id = 0
        if not topic:
            log.warning("broker %s: delayed message without REAL_TOPIC dropped", self.settings.name)
            return
        cfg = store.ensure_topic(topic, 1)
        if queue_id >= cfg.write_queues:
            queue_id = 0
        store.put_message(topic, queue_id, msg.body, properties_to_string(props), flag=msg.flag,
                          sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                          reconsume_times=msg.reconsume_times)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
