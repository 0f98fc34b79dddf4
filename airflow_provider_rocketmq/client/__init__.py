"""Pure-Python asyncio client for the RocketMQ 4.x remoting protocol.

Nothing in this package imports Airflow or Spark. Public names are resolved
lazily so that importing the codec does not pull in the consumer machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    # errors (every class a caller may catch; `RocketMQError` is the base of them all)
    "RocketMQError": ".protocol.errors",
    "ConfigError": ".protocol.errors",
    "ProtocolError": ".protocol.errors",
    "FrameTooLargeError": ".protocol.errors",
    "MessageDecodeError": ".protocol.errors",
    "CompressionUnavailableError": ".protocol.errors",
    "ConnectionClosedError": ".protocol.errors",
    "RequestTimeoutError": ".protocol.errors",
    "RouteNotFoundError": ".protocol.errors",
    "ClientStateError": ".protocol.errors",
    "BrokerError": ".protocol.errors",
    "SystemError_": ".protocol.errors",
    "AclDeniedError": ".protocol.errors",
    "SystemBusyError": ".protocol.errors",
    "RequestCodeNotSupportedError": ".protocol.errors",
    "ServiceNotAvailableError": ".protocol.errors",
    "NoPermissionError": ".protocol.errors",
    "TopicNotExistError": ".protocol.errors",
    "SubscriptionError": ".protocol.errors",
    "ConsumerNotOnlineError": ".protocol.errors",
    "FlowControlError": ".protocol.errors",
    "FlushTimeoutError": ".protocol.errors",
    "SendAbortedError": ".producer.pipeline",
    # messages, queues, names
    "Message": ".protocol.message",
    "MessageExt": ".protocol.message",
    "MessageQueue": ".protocol.queue",
    "check_topic": ".protocol.names",
    # configuration
    "ClientConfig": ".config",
    "parse_namesrv": ".config",
    "ConsumerConfig": ".consumer.config",
    "ConsumeStatus": ".consumer.config",
    "OrderlyStatus": ".consumer.config",
    "MessageModel": ".consumer.config",
    "ConsumeFromWhere": ".consumer.config",
    "parse_consume_timestamp": ".consumer.config",
    # producer
    "Producer": ".producer",
    "AsyncProducer": ".producer",
    "SendResult": ".producer",
    "SendOutcome": ".producer.pipeline",
    "PipelineOptions": ".producer.pipeline",
    "BULK_MAX_IN_FLIGHT": ".producer.pipeline",
    "BULK_MAX_BATCH": ".producer.pipeline",
    # admin
    "Admin": ".admin",
    "AsyncAdmin": ".admin",
    "LagSnapshot": ".admin",
    # push consumer
    "PushConsumer": ".consumer.push",
    "AsyncPushConsumer": ".consumer.push",
    "OffsetPersistReport": ".consumer.offset_store",
    "PulledBatch": ".protocol.batch",
    "PullFilter": ".protocol.batch",
    "MessageBatch": ".protocol.batch",
    "decode_message_batch": ".protocol.batch",
    "AllocateMessageQueueAveragely": ".consumer.allocate",
    "AllocateMessageQueueAveragelyByCircle": ".consumer.allocate",
    "AllocateMessageQueueByConfig": ".consumer.allocate",
    "AllocateMessageQueueByMachineRoom": ".consumer.allocate",
    "AllocateMachineRoomNearby": ".consumer.allocate",
    "AllocateMessageQueueConsistentHash": ".consumer.allocate",
}

if TYPE_CHECKING:  # the same names, eagerly, for type checkers (tests/client/test_public_api.py)
    from .admin import Admin, AsyncAdmin, LagSnapshot
    from .config import ClientConfig, parse_namesrv
    from .consumer.allocate import (
        AllocateMachineRoomNearby,
        AllocateMessageQueueAveragely,
        AllocateMessageQueueAveragelyByCircle,
        AllocateMessageQueueByConfig,
        AllocateMessageQueueByMachineRoom,
        AllocateMessageQueueConsistentHash,
    )
    from .consumer.config import (
        ConsumeFromWhere,
        ConsumerConfig,
        ConsumeStatus,
        MessageModel,
        OrderlyStatus,
        parse_consume_timestamp,
    )
    from .consumer.offset_store import OffsetPersistReport
    from .consumer.push import AsyncPushConsumer, PushConsumer
    from .producer import AsyncProducer, Producer, SendResult
    from .producer.pipeline import (
        BULK_MAX_BATCH,
        BULK_MAX_IN_FLIGHT,
        PipelineOptions,
        SendAbortedError,
        SendOutcome,
    )
    from .protocol.batch import MessageBatch, PulledBatch, PullFilter, decode_message_batch
    from .protocol.errors import (
        AclDeniedError,
        BrokerError,
        ClientStateError,
        CompressionUnavailableError,
        ConfigError,
        ConnectionClosedError,
        ConsumerNotOnlineError,
        FlowControlError,
        FlushTimeoutError,
        FrameTooLargeError,
        MessageDecodeError,
        NoPermissionError,
        ProtocolError,
        RequestCodeNotSupportedError,
        RequestTimeoutError,
        RocketMQError,
        RouteNotFoundError,
        ServiceNotAvailableError,
        SubscriptionError,
        SystemBusyError,
        SystemError_,
        TopicNotExistError,
    )
    from .protocol.message import Message, MessageExt
    from .protocol.names import check_topic
    from .protocol.queue import MessageQueue

__all__ = [
    "BULK_MAX_BATCH", "BULK_MAX_IN_FLIGHT", "AclDeniedError", "Admin", "AllocateMachineRoomNearby", "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle", "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom", "AllocateMessageQueueConsistentHash", "AsyncAdmin", "AsyncProducer",
    "AsyncPushConsumer", "BrokerError", "ClientConfig", "ClientStateError", "CompressionUnavailableError",
    "ConfigError", "ConnectionClosedError", "ConsumeFromWhere", "ConsumeStatus", "ConsumerConfig",
    "ConsumerNotOnlineError", "FlowControlError", "FlushTimeoutError", "FrameTooLargeError", "LagSnapshot",
    "Message", "MessageBatch", "MessageDecodeError", "MessageExt", "MessageModel", "MessageQueue",
    "NoPermissionError", "OffsetPersistReport", "OrderlyStatus", "PipelineOptions", "Producer",
    "ProtocolError", "PullFilter", "PulledBatch", "PushConsumer", "RequestCodeNotSupportedError",
    "RequestTimeoutError", "RocketMQError", "RouteNotFoundError", "SendAbortedError", "SendOutcome",
    "SendResult", "ServiceNotAvailableError", "SubscriptionError", "SystemBusyError", "SystemError_",
    "TopicNotExistError", "check_topic", "decode_message_batch", "parse_consume_timestamp", "parse_namesrv",
]


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(mod, __name__), name)
    globals()[name] = value
    return value
