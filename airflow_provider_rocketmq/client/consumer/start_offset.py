"""Where a newly owned queue starts (REFERENCE 2.12, Java RebalancePushImpl.computePullFromWhere).

One deliberate difference from Java: a queue without a committed offset in a group that has consumed
from the topic (another queue has a committed offset above 0) is a queue added to the topic since
(``mqadmin updateTopic -r 16 -w 16``): it starts at its minimum offset whatever ``consume_from_where``
says. Java starts it at the queue's *max* offset under CONSUME_FROM_LAST_OFFSET whenever the broker
answers "no offset" (QUERY_NOT_FOUND, once the queue's first message is no longer in the broker's
memory), losing what producers wrote to the new queue before this consumer noticed it. A group whose
committed offsets are all 0 or absent counts as new: its consume-from rule applies.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..mqclient import MQClient
from ..protocol.errors import AclDeniedError, RocketMQError
from ..protocol.names import RETRY_PREFIX
from ..protocol.queue import MessageQueue
from .config import ConsumeFromWhere, ConsumerConfig, enum_value, parse_consume_timestamp
from .offset_store import ReadOffsetType
from .ports import DeniedHook, RebalanceOffsets

log = logging.getLogger(__name__)


NEW_GROUP_RECHECK = 5.0  # seconds a "the group has no offset on this topic" answer is reused (same queues)


class StartOffsets:
    """The stored offset if there is one, else the minimum offset of a queue added to a topic the group
    consumes, else the consume-from-where rule; -1 if unknown now."""

    def __init__(self, config: ConsumerConfig, client: MQClient, offsets: RebalanceOffsets,
                 on_denied: DeniedHook | None = None, group: str | None = None) -> None:
        self.config = config
        self.client = client
        self.offsets = offsets
        self.on_denied = on_denied  # an ACL refusal (GET_MAX_OFFSET needs Get on the topic): the consumer fails
        self.group = group  # clustering: whose committed offsets tell a queue added to the topic
        self._consumed_topics: set[str] = set()  # topics the group has consumed from
        # topic -> (when no committed offset was found on it, the topic's queues then)
        self._new_since: dict[str, tuple[float, frozenset[MessageQueue]]] = {}

    async def __call__(self, mq: MessageQueue) -> int:
        last = await self.offsets.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        if last >= 0:
            return last
        if last == -2:  # the broker could not answer: try again later, never guess
            return -1
        where = self.config.consume_from_where
        is_retry = mq.topic.startswith(RETRY_PREFIX)
        try:
            if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
                return 0
            if not is_retry and await self._consumed_from(mq):
                low = await self.client.min_offset(mq)
                log.info("%s has no committed offset but the group consumes the topic (a queue added to it): "
                         "starting at its minimum offset %d, not per %s", mq, low, enum_value(where))
                return low
            if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
                if is_retry:
                    return await self.client.max_offset(mq)
                ts = parse_consume_timestamp(self.config.consume_timestamp)
                return await self.client.search_offset(mq, ts)
            # LAST_OFFSET and its deprecated aliases
            return 0 if is_retry else await self.client.max_offset(mq)
        except AclDeniedError as exc:
            if self.on_denied is not None:
                self.on_denied(f"start offset of {mq}", exc)
            return -1
        except RocketMQError as exc:
            log.warning("cannot compute the start offset of %s: %s", mq, exc)
            return -1

    async def _consumed_from(self, mq: MessageQueue) -> bool:
        """Whether the group has a committed offset above 0 on another queue of ``mq``'s topic: this
        member's offsets first, then (clustering) the brokers'. A "none" answer is reused for
        `NEW_GROUP_RECHECK` while the topic keeps its queues (a new group's first rebalance asks once, not
        once per queue); queues added since make it ask again, whenever that is."""
        topic = mq.topic
        if topic in self._consumed_topics:
            return True
        route = self.client.cached_route(topic)
        others = [q for q in (route.subscribe_queues(topic) if route is not None else []) if q != mq]
        if any(self.offsets.memory_offset(q) > 0 for q in others):
            self._consumed_topics.add(topic)
            return True
        if self.group is None or not others:
            return False
        queues = frozenset(others) | {mq}
        since, then = self._new_since.get(topic, (-1e9, frozenset()))
        if then == queues and time.monotonic() - since < NEW_GROUP_RECHECK:
            return False
        found = await asyncio.gather(*(self.client.query_consumer_offset(q, self.group) for q in others))
        if any(off > 0 for off in found):
            self._consumed_topics.add(topic)
            return True
        self._new_since[topic] = (time.monotonic(), queues)
        return False
