"""GET_CONSUMER_RUNNING_INFO's answer: Java's ConsumerRunningInfo (REFERENCE 2.9)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..protocol.codes import CLIENT_VERSION
from ..protocol.queue import MessageQueue
from .config import ConsumerConfig, enum_value
from .ports import OwnedQueues
from .stats import ConsumeStatsTable
from .subscription import SubscriptionData


def consumer_running_info(*, config: ConsumerConfig, group: str, orderly: bool, started_at: float,
                          table: OwnedQueues, memory_offset: Callable[[MessageQueue], int],
                          subscriptions: Mapping[str, SubscriptionData],
                          stats: ConsumeStatsTable) -> dict[str, Any]:
    """ConsumerRunningInfo with Java property names (fastjson object keys for ``mqTable``)."""
    cfg = config
    props = {
        "consumerGroup": group, "messageModel": enum_value(cfg.message_model),
        "consumeFromWhere": enum_value(cfg.consume_from_where),
        "consumeTimestamp": cfg.consume_timestamp, "consumeThreadMin": str(cfg.consume_thread_min),
        "consumeThreadMax": str(cfg.consume_thread_max), "pullBatchSize": str(cfg.pull_batch_size),
        "consumeMessageBatchMaxSize": str(cfg.consume_message_batch_max_size),
        "pullThresholdForQueue": str(cfg.pull_threshold_for_queue),
        "pullThresholdSizeForQueue": str(cfg.pull_threshold_size_for_queue),
        "consumeConcurrentlyMaxSpan": str(cfg.consume_concurrently_max_span),
        "maxReconsumeTimes": str(cfg.max_reconsume_times), "instanceName": cfg.instance_name,
        "unitName": cfg.unit_name, "namespace": cfg.namespace,
        "PROP_NAMESERVER_ADDR": cfg.namesrv_addr, "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
        "PROP_CONSUMEORDERLY": str(orderly).lower(), "PROP_CLIENT_VERSION": f"V4_9_7 ({CLIENT_VERSION})",
        "PROP_THREADPOOL_CORE_SIZE": str(cfg.consume_thread_min),
        "PROP_CONSUMER_START_TIMESTAMP": str(int(started_at * 1000)),
    }
    props = {k: str(v) for k, v in props.items()}
    mq_table = {mq: pq.info(memory_offset(mq)) for mq, pq in sorted(table.items())}
    status_table = {topic: stats.status(topic) for topic in subscriptions}  # Java: per subscription
    return {"jstack": "", "mqTable": mq_table, "properties": props,
            "statusTable": status_table,
            "subscriptionSet": [s.to_json() for s in subscriptions.values()]}
