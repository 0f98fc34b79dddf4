"""Typed models of the admin response bodies (REFERENCE 2.9, 3).

ConsumeStats and TopicStatsTable key their ``offsetTable`` by MessageQueue
objects written inline by fastjson (``{{"brokerName":..}:{..}}``); `fastjson.loads`
hands those keys over as raw JSON text, parsed here into `MessageQueue`.
Malformed bodies raise `ProtocolError` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import fastjson
from .errors import ProtocolError
from .queue import MessageQueue


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where} is not a JSON object")
    return value


def _int(obj: dict[str, Any], name: str, where: str, default: int | None = None) -> int:
    value = obj.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ProtocolError(f"{where}: field {name!r} missing or not a number: {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ProtocolError(f"{where}: field {name!r} is not an integer: {value!r}") from None


def _float(obj: dict[str, Any], name: str, where: str) -> float:
    value = obj.get(name, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError(f"{where}: field {name!r} is not a number: {value!r}")
    return float(value)


def _mq_key(key: str, where: str) -> MessageQueue:
    try:
        return MessageQueue.from_json(fastjson.parse_key(key))
    except ProtocolError as exc:
        raise ProtocolError(f"{where}: bad MessageQueue key: {exc}") from None


V = TypeVar("V")


def _queue_table(obj: dict[str, Any], what: str, build: Callable[[dict[str, Any], str], V]) -> dict[MessageQueue, V]:
    """An ``offsetTable`` keyed by inline MessageQueue objects; ``build(value, where)`` makes each value."""
    table: dict[MessageQueue, V] = {}
    for key, value in _obj(obj.get("offsetTable") or {}, f"{what}.offsetTable").items():
        mq = _mq_key(key, f"{what}.offsetTable")
        where = f"{what}.offsetTable[{mq}]"
        table[mq] = build(_obj(value, where), where)
    return table


def _load(body: bytes | str | None, what: str) -> dict[str, Any]:
    if not body:
        raise ProtocolError(f"{what} body is empty")
    return _obj(fastjson.loads(body), f"{what} body")


@dataclass(frozen=True)
class OffsetWrapper:
    """One queue of ConsumeStats: broker (max) offset, committed offset, last store time."""

    broker_offset: int
    consumer_offset: int
    last_timestamp: int
    pull_offset: int | None = None

    @classmethod
    def from_json(cls, v: dict[str, Any], where: str) -> OffsetWrapper:
        pull = v.get("pullOffset")
        return cls(_int(v, "brokerOffset", where), _int(v, "consumerOffset", where),
                   _int(v, "lastTimestamp", where, 0), _int(v, "pullOffset", where) if pull is not None else None)


@dataclass(frozen=True)
class ConsumeStats:
    """GET_CONSUME_STATS answer of one broker for one group."""

    offset_table: dict[MessageQueue, OffsetWrapper]
    consume_tps: float = 0.0

    @classmethod
    def from_body(cls, body: bytes | str | None) -> ConsumeStats:
        obj = _load(body, "ConsumeStats")
        return cls(_queue_table(obj, "ConsumeStats", OffsetWrapper.from_json), _float(obj, "consumeTps", "ConsumeStats"))

    def total_diff(self) -> int:
        """Java ConsumeStats.computeTotalDiff (sum of brokerOffset - consumerOffset)."""
        return sum(w.broker_offset - w.consumer_offset for w in self.offset_table.values())


@dataclass(frozen=True)
class TopicOffset:
    min_offset: int
    max_offset: int
    last_update_timestamp: int

    @classmethod
    def from_json(cls, v: dict[str, Any], where: str) -> TopicOffset:
        return cls(_int(v, "minOffset", where), _int(v, "maxOffset", where), _int(v, "lastUpdateTimestamp", where, 0))


@dataclass(frozen=True)
class TopicStatsTable:
    """GET_TOPIC_STATS_INFO answer: min/max offset and last store time of every queue."""

    offset_table: dict[MessageQueue, TopicOffset]

    @classmethod
    def from_body(cls, body: bytes | str | None) -> TopicStatsTable:
        return cls(_queue_table(_load(body, "TopicStatsTable"), "TopicStatsTable", TopicOffset.from_json))


@dataclass(frozen=True)
class Connection:
    """One live consumer client of a group, as the broker sees it."""

    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass(frozen=True)
class ConsumerConnection:
    """GET_CONSUMER_CONNECTION_LIST answer."""

    connections: tuple[Connection, ...]
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""

    @classmethod
    def from_body(cls, body: bytes | str | None) -> ConsumerConnection:
        obj = _load(body, "ConsumerConnection")
        conns = []
        raw = obj.get("connectionSet") or []
        if not isinstance(raw, list):
            raise ProtocolError("ConsumerConnection.connectionSet is not an array")
        for c in raw:
            c = _obj(c, "ConsumerConnection.connectionSet[]")
            conns.append(Connection(str(c.get("clientId", "")), str(c.get("clientAddr", "")),
                                    str(c.get("language", "")),
                                    _int(c, "version", "ConsumerConnection.connectionSet[]", 0)))
        subs = _obj(obj.get("subscriptionTable") or {}, "ConsumerConnection.subscriptionTable")
        return cls(tuple(sorted(conns, key=lambda c: c.client_id)),
                   {str(k): _obj(v, f"subscriptionTable[{k}]") for k, v in subs.items()},
                   str(obj.get("consumeType") or ""), str(obj.get("messageModel") or ""),
                   str(obj.get("consumeFromWhere") or ""))

    def to_dict(self) -> dict[str, Any]:
        return {"connections": [c.__dict__ for c in self.connections],
                "subscriptions": {t: s.get("subString", "") for t, s in self.subscriptions.items()},
                "consume_type": self.consume_type, "message_model": self.message_model,
                "consume_from_where": self.consume_from_where}


def consume_stats_body(table: dict[MessageQueue, OffsetWrapper], consume_tps: float = 0.0) -> bytes:
    """Encode a ConsumeStats body the way a Java broker does (fastjson object keys)."""
    offsets = {mq: {"brokerOffset": w.broker_offset, "consumerOffset": w.consumer_offset,
                    "lastTimestamp": w.last_timestamp} for mq, w in table.items()}
    return fastjson.dumps({"consumeTps": consume_tps, "offsetTable": offsets}).encode("utf-8")
