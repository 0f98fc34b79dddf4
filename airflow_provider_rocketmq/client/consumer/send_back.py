"""Returning failed messages to the broker (REFERENCE 2.11).

First CONSUMER_SEND_MSG_BACK with the message's commit-log offset (the broker
copies the stored message to ``%RETRY%<group>`` with a delay level, or to
``%DLQ%<group>`` past max reconsume times / for delay level -1). If that RPC
fails, send a *new* message to ``%RETRY%<group>`` through the internal producer,
carrying RETRY_TOPIC, ORIGIN_MESSAGE_ID, RECONSUME_TIME, MAX_RECONSUME_TIMES and
DELAY like Java; the broker diverts it to the DLQ past the maximum.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..mqclient import MQClient
from ..protocol.codes import RequestCode
from ..protocol.command import RemotingCommand
from ..protocol.errors import AclDeniedError, RocketMQError
from ..protocol.message import (
    PROPERTY_DELAY,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TRAN_MSG,
    Message,
    MessageExt,
)
from ..protocol.names import retry_topic
from ..protocol.queue import MessageQueue
from .config import ConsumerConfig

log = logging.getLogger(__name__)

SEND_BACK_TIMEOUT = 5.0  # Java sendMessageBack RPC timeout
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"


class SendBack:
    """Send-back with the producer fallback; one per consumer."""

    def __init__(self, config: ConsumerConfig, client: MQClient, group: str, orderly: bool,
                 on_denied: Callable[[str, AclDeniedError], None] | None = None) -> None:
        self.config = config
        self.on_denied = on_denied  # both sends refused by the ACL: the consumer fails
        self.client = client
        self.group = group  # as the user named it
        self.ns_group = config.with_namespace(group)
        self.orderly = orderly
        self._producer: Any = None
        self.sent_back = 0
        self.fallback_sends = 0
        self.failures = 0

    def max_reconsume_times(self) -> int:
        n = self.config.max_reconsume_times
        if n == -1:
            return 2**31 - 1 if self.orderly else 16
        return n

    async def send(self, msg: MessageExt, delay_level: int, mq: MessageQueue | None = None) -> bool:
        """True once the broker (or the fallback send) has the message; False if both failed."""
        client = self.client
        ns_group = self.ns_group
        broker = mq.broker_name if mq is not None else msg.broker_name
        header = {
            "offset": msg.commit_log_offset, "group": ns_group, "delayLevel": delay_level,
            "originMsgId": msg.msg_id, "originTopic": client.ns(msg.topic), "unitMode": self.config.unit_mode,
            "maxReconsumeTimes": self.max_reconsume_times(), "bname": broker,
        }
        try:
            try:
                addr = client.broker_addr(broker, 0, exact=True)
            except RocketMQError:
                addr = msg.store_host
            await client.invoke_ok(addr, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header),
                                   SEND_BACK_TIMEOUT)
            self.sent_back += 1
            return True
        except RocketMQError as exc:
            log.warning("CONSUMER_SEND_MSG_BACK of %s failed (%s); sending it to %s instead",
                        msg.msg_id, exc, retry_topic(ns_group))
        try:
            await self._send_as_new(msg, delay_level)
            self.fallback_sends += 1
            return True
        except RocketMQError as exc:
            log.warning("fallback send of %s to %s failed: %s", msg.msg_id, retry_topic(ns_group), exc)
            self.failures += 1
            if isinstance(exc, AclDeniedError) and self.on_denied is not None:
                self.on_denied(f"send-back of {msg.msg_id}", exc)
            return False

    async def _send_as_new(self, msg: MessageExt, delay_level: int) -> None:
        props = dict(msg.properties)
        # the topic as the broker knows it (namespaced), as Java and the broker's own send-back store it
        props.setdefault(PROPERTY_RETRY_TOPIC, self.client.ns(msg.topic))
        props[PROPERTY_ORIGIN_MESSAGE_ID] = props.get(PROPERTY_ORIGIN_MESSAGE_ID) or msg.msg_id
        reconsume = msg.reconsume_times + 1
        max_times = self.max_reconsume_times()
        props[PROPERTY_RECONSUME_TIME] = str(reconsume)
        props[PROPERTY_MAX_RECONSUME_TIMES] = str(max_times)
        props.pop(PROPERTY_TRAN_MSG, None)
        props.pop(PROPERTY_DELAY, None)
        # always %RETRY%: the broker itself diverts to %DLQ% once RECONSUME_TIME reaches the maximum
        new = Message(retry_topic(self.group), msg.body, properties=props, flag=msg.flag,
                      delay_level=3 + msg.reconsume_times)
        producer = await self.producer()
        await producer.send(new)

    async def producer(self) -> Any:
        if self._producer is None:
            from ..producer import AsyncProducer  # the producer is only needed on this rare path
            self._producer = AsyncProducer(self.config, group=INNER_PRODUCER_GROUP, mqclient=self.client)
            start = getattr(self._producer, "start", None)
            if start is not None:
                await start()
        return self._producer

    async def close(self) -> None:
        p, self._producer = self._producer, None
        if p is not None:
            close = getattr(p, "close", None) or getattr(p, "shutdown", None)
            if close is not None:
                try:
                    res = close()
                    if hasattr(res, "__await__"):
                        await res
                except RocketMQError:
                    pass
