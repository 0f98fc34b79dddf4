"""Where a newly owned queue starts (REFERENCE 2.12, Java RebalancePushImpl.computePullFromWhere)."""

from __future__ import annotations

import logging

from ..mqclient import MQClient
from ..protocol.errors import AclDeniedError, RocketMQError
from ..protocol.names import RETRY_PREFIX
from ..protocol.queue import MessageQueue
from .config import ConsumeFromWhere, ConsumerConfig, parse_consume_timestamp
from .offset_store import ReadOffsetType
from .ports import DeniedHook, RebalanceOffsets

log = logging.getLogger(__name__)


class StartOffsets:
    """The stored offset if there is one, else the consume-from-where rule; -1 if unknown now."""

    def __init__(self, config: ConsumerConfig, client: MQClient, offsets: RebalanceOffsets,
                 on_denied: DeniedHook | None = None) -> None:
        self.config = config
        self.client = client
        self.offsets = offsets
        self.on_denied = on_denied  # an ACL refusal (GET_MAX_OFFSET needs Get on the topic): the consumer fails

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
