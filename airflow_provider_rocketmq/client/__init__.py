"""Pure-Python asyncio client for the RocketMQ 4.x remoting protocol.

Nothing in this package imports Airflow or Spark. Public names are resolved
lazily so that importing the codec does not pull in the consumer machinery.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "RocketMQError": ".protocol.errors",
    "BrokerError": ".protocol.errors",
    "ConfigError": ".protocol.errors",
    "AclDeniedError": ".protocol.errors",
    "Message": ".protocol.message",
    "MessageExt": ".protocol.message",
    "MessageQueue": ".protocol.queue",
    "ClientConfig": ".config",
    "Producer": ".producer",
    "AsyncProducer": ".producer",
    "SendResult": ".producer",
    "SendOutcome": ".producer.pipeline",
    "SendAbortedError": ".producer.pipeline",
    "PipelineOptions": ".producer.pipeline",
    "Admin": ".admin",
    "AsyncAdmin": ".admin",
    "LagSnapshot": ".admin",
    "PushConsumer": ".consumer.push",
    "AsyncPushConsumer": ".consumer.push",
    "OffsetPersistReport": ".consumer.offset_store",
    "PulledBatch": ".protocol.batch",
    "PullFilter": ".protocol.batch",
    "MessageBatch": ".protocol.batch",
    "decode_message_batch": ".protocol.batch",
    "ConsumerConfig": ".consumer.config",
    "ConsumeStatus": ".consumer.config",
    "OrderlyStatus": ".consumer.config",
    "MessageModel": ".consumer.config",
    "ConsumeFromWhere": ".consumer.config",
    "AllocateMessageQueueAveragely": ".consumer.allocate",
    "AllocateMessageQueueAveragelyByCircle": ".consumer.allocate",
    "AllocateMessageQueueByConfig": ".consumer.allocate",
    "AllocateMessageQueueByMachineRoom": ".consumer.allocate",
    "AllocateMachineRoomNearby": ".consumer.allocate",
    "AllocateMessageQueueConsistentHash": ".consumer.allocate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(mod, __name__), name)
    globals()[name] = value
    return value
