"""Push-consumer configuration and the enums of its public API.

`ConsumerConfig` carries the knobs of Java's ``DefaultMQPushConsumer``
(REFERENCE 1.1-1.3) in snake_case with Java's defaults. Durations are seconds
(floats) rather than Java's milliseconds/minutes; sizes keep Java's units
(``*_size_*`` thresholds in MiB). `validate()` applies Java's ``checkConfig``
ranges and names the knob and its valid range on error.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
from dataclasses import dataclass, field
from typing import Any

from ..config import ClientConfig
from ..protocol.errors import ConfigError


class ConsumeStatus(enum.Enum):
    """Result of a concurrent listener."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class OrderlyStatus(enum.Enum):
    """Result of an orderly listener.

    With ``ctx.auto_commit`` True (the default) SUCCESS commits the messages (COMMIT and ROLLBACK
    count as SUCCESS, as in Java). With ``ctx.auto_commit = False`` SUCCESS only acknowledges:
    the offset moves on COMMIT (past everything taken so far), ROLLBACK hands every message taken
    since the last commit to the listener again after the suspend time.
    """

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(enum.Enum):
    """Where a group without a committed offset starts (REFERENCE 2.12)."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
    # deprecated Java aliases: behave like LAST_OFFSET
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"


# a broker frees a queue lock this long after its last renewal (rocketmq.broker.rebalance.lockMaxLiveTime)
BROKER_LOCK_EXPIRY = 60.0
TIMESTAMP_FORMAT = "%Y%m%d%H%M%S"  # Java yyyyMMddHHmmss (local time zone)


def _default_timestamp() -> str:
    return (_dt.datetime.now() - _dt.timedelta(minutes=30)).strftime(TIMESTAMP_FORMAT)


def parse_consume_timestamp(text: str) -> int:
    """``yyyyMMddHHmmss`` in local time -> epoch milliseconds."""
    try:
        return int(_dt.datetime.strptime(text, TIMESTAMP_FORMAT).timestamp() * 1000)
    except (TypeError, ValueError):
        raise ConfigError("consume_timestamp", f"{text!r} is not yyyyMMddHHmmss") from None


def enum_value(value: enum.Enum | str) -> str:
    """An enum knob's wire name (a knob may still hold the string it was given before validate())."""
    return value.value if isinstance(value, enum.Enum) else str(value)


def _enum(cls: type[enum.Enum], value: Any, knob: str) -> Any:
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        key = value.strip().upper()
        for member in cls:
            short = member.name.replace("CONSUME_FROM_", "")
            if key in (member.name, member.value, short, short.replace("_OFFSET", "")):
                return member
    raise ConfigError(knob, f"{value!r} is not one of {', '.join(m.name for m in cls)}")


@dataclass
class ConsumerConfig(ClientConfig):
    """Knobs of the push consumer (Java names in snake_case, Java defaults).

    Durations are in seconds. ``allocate_strategy`` is a strategy name
    ("averagely", "by_circle", "consistent_hash") or a strategy object.
    """

    message_model: MessageModel | str = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    consume_timestamp: str = field(default_factory=_default_timestamp)
    allocate_strategy: Any = "averagely"
    consume_thread_min: int = 20
    consume_thread_max: int = 20
    consume_concurrently_max_span: int = 2000
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100  # MiB
    pull_threshold_for_topic: int = -1
    pull_threshold_size_for_topic: int = -1  # MiB
    pull_interval: float = 0.0
    consume_message_batch_max_size: int = 1
    pull_batch_size: int = 32
    post_subscription_when_pull: bool = False
    unit_mode: bool = False
    max_reconsume_times: int = -1
    suspend_current_queue_time: float = 1.0
    consume_timeout: float = 15 * 60.0
    await_termination_when_shutdown: float = 10.0
    persist_consumer_offset_interval: float = 5.0
    heartbeat_broker_interval: float = 30.0
    poll_name_server_interval: float = 30.0
    rebalance_interval: float = 20.0
    # Java system properties / constants, knobs here so tests can shorten them
    pull_time_delay_when_exception: float = 3.0
    broker_suspend_max_time: float = 15.0
    consumer_timeout_when_suspend: float = 30.0
    lock_interval: float = 20.0
    lock_max_live_time: float = 30.0
    max_time_consume_continuously: float = 60.0
    pull_max_idle_time: float = 120.0
    offset_store_dir: str = "~/.rocketmq_offsets"
    enable_offset_commit: bool = True

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        self.message_model = _enum(MessageModel, self.message_model, "message_model")
        self.consume_from_where = _enum(ConsumeFromWhere, self.consume_from_where, "consume_from_where")

    # -- validation --------------------------------------------------------------
    def validate(self) -> ConsumerConfig:
        """Java checkConfig ranges; raises ConfigError naming the knob and its valid range."""
        parent = getattr(super(), "validate", None)
        if parent is not None:
            parent()
        self.message_model = _enum(MessageModel, self.message_model, "message_model")
        self.consume_from_where = _enum(ConsumeFromWhere, self.consume_from_where, "consume_from_where")
        parse_consume_timestamp(self.consume_timestamp)
        _int_range(self, "consume_thread_min", 1, 1000)
        _int_range(self, "consume_thread_max", 1, 1000)
        if self.consume_thread_min > self.consume_thread_max:
            raise ConfigError("consume_thread_min", f"must be <= consume_thread_max "
                              f"({self.consume_thread_min} > {self.consume_thread_max})")
        _int_range(self, "consume_concurrently_max_span", 1, 65535)
        _int_range(self, "pull_threshold_for_queue", 1, 65535)
        _int_range(self, "pull_threshold_size_for_queue", 1, 1024)
        _int_range(self, "pull_threshold_for_topic", 1, 6553500, allow_off=True)
        _int_range(self, "pull_threshold_size_for_topic", 1, 102400, allow_off=True)
        _num_range(self, "pull_interval", 0, 65.535)
        _int_range(self, "consume_message_batch_max_size", 1, 1024)
        _int_range(self, "pull_batch_size", 1, 1024)
        _int_range(self, "max_reconsume_times", -1, 2**31 - 1)
        for knob in ("post_subscription_when_pull", "unit_mode", "enable_offset_commit"):
            if not isinstance(getattr(self, knob), bool):
                raise ConfigError(knob, f"must be true or false, got {getattr(self, knob)!r}")
        _num_range(self, "suspend_current_queue_time", 0.0, 3600.0)
        for knob in ("consume_timeout", "persist_consumer_offset_interval", "heartbeat_broker_interval",
                     "poll_name_server_interval", "rebalance_interval", "pull_time_delay_when_exception",
                     "broker_suspend_max_time", "consumer_timeout_when_suspend", "lock_interval",
                     "lock_max_live_time", "max_time_consume_continuously", "pull_max_idle_time"):
            _num_range(self, knob, 0.001, 86400.0 * 7)
        _num_range(self, "await_termination_when_shutdown", 0.0, 86400.0)
        if self.consumer_timeout_when_suspend <= self.broker_suspend_max_time:
            raise ConfigError("consumer_timeout_when_suspend",
                              f"must exceed broker_suspend_max_time ({self.broker_suspend_max_time}s), "
                              f"got {self.consumer_timeout_when_suspend}s")
        # renew before the client stops trusting its lock, and stop trusting it before the broker
        # may grant it to another member: otherwise two members consume one orderly queue
        if self.lock_interval >= self.lock_max_live_time:
            raise ConfigError("lock_interval", f"must be less than lock_max_live_time ({self.lock_max_live_time}s), "
                              f"got {self.lock_interval}s")
        if self.lock_max_live_time >= BROKER_LOCK_EXPIRY:
            raise ConfigError("lock_max_live_time", f"must be less than the broker's lock expiry "
                              f"({BROKER_LOCK_EXPIRY:.0f}s), got {self.lock_max_live_time}s")
        if not isinstance(self.offset_store_dir, str) or not self.offset_store_dir:
            raise ConfigError("offset_store_dir", "must be a non-empty path")
        from .allocate import strategy_by_name  # local: allocate is only needed here
        if isinstance(self.allocate_strategy, str):
            strategy_by_name(self.allocate_strategy)
        elif not callable(getattr(self.allocate_strategy, "allocate", None)):
            raise ConfigError("allocate_strategy", f"{self.allocate_strategy!r} has no allocate() method")
        return self

    # -- derived values ------------------------------------------------------------
    @property
    def clustering(self) -> bool:
        return self.message_model is MessageModel.CLUSTERING

    def effective_suspend_time(self) -> float:
        """Java clamps suspendCurrentQueueTimeMillis to [10 ms, 30 s]."""
        return min(30.0, max(0.01, float(self.suspend_current_queue_time)))

    def replace(self, **changes: Any) -> ConsumerConfig:
        return dataclasses.replace(self, **changes)


def _int_range(cfg: Any, knob: str, lo: int, hi: int, *, allow_off: bool = False) -> None:
    value = getattr(cfg, knob)
    ok = isinstance(value, int) and not isinstance(value, bool) and (lo <= value <= hi
                                                                      or (allow_off and value == -1))
    if not ok:
        rng = f"-1 (off) or [{lo}, {hi}]" if allow_off else f"[{lo}, {hi}]"
        raise ConfigError(knob, f"must be an integer in {rng}, got {value!r}")


def _num_range(cfg: Any, knob: str, lo: float, hi: float) -> None:
    value = getattr(cfg, knob)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ConfigError(knob, f"must be a number of seconds in [{lo}, {hi}], got {value!r}")
