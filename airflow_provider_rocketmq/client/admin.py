"""Admin: topics, offsets, consumer groups, stats and lag (what mqadmin does, as an API).

Sensors and triggers use this without joining the group (no heartbeat), so they
never take queues away from the real consumers. All RPCs here are reads or
idempotent writes (create topic, set an offset), retried with tenacity on
retriable errors by the shared `MQClient` helpers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

from .config import ClientConfig
from .lag import LagSnapshot, from_consume_stats, from_offsets
from .loop_thread import SyncFacade
from .mqclient import ClientFacade, retry_idempotent
from .protocol.admin_bodies import (
    ConsumerConnection,
    ConsumeStats,
    OffsetWrapper,
    TopicOffset,
    TopicStatsTable,
)
from .protocol.codes import RequestCode, ResponseCode
from .protocol.command import RemotingCommand
from .protocol.errors import AclDeniedError, BrokerError, ConfigError, RouteNotFoundError, SystemError_
from .protocol.names import DEFAULT_TOPIC, check_topic, retry_topic
from .protocol.queue import MessageQueue
from .route import PERM_READ, PERM_WRITE

log = logging.getLogger(__name__)

T = TypeVar("T")
# Answers meaning "this broker has no stats for the group" rather than a failure.
_NO_STATS_CODES = frozenset({ResponseCode.SYSTEM_ERROR, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                             ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST})
_PARALLEL = 16  # concurrent per-queue RPCs; enough for hundreds of queues, gentle on brokers


async def _bounded_gather(calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
    sem = asyncio.Semaphore(_PARALLEL)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with sem:
            return await call()
    return list(await asyncio.gather(*(one(c) for c in calls)))


def _check_queue(mq: object) -> MessageQueue:
    if not isinstance(mq, MessageQueue):
        raise ConfigError("mq", f"expected a MessageQueue(topic, broker_name, queue_id), got {mq!r}")
    return mq


def _check_group(group: object) -> str:
    if not isinstance(group, str) or not group:
        raise ConfigError("group", f"must be a non-empty consumer group name, got {group!r}")
    return group


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(name, f"must be a non-negative integer, got {value!r}")
    return value


class AsyncAdmin(ClientFacade):
    """asyncio admin client; owns an `MQClient` unless one is passed in (start/close/async with)."""

    def _display(self, topic: str) -> str:
        return self.config.without_namespace(topic)

    # -- topics -------------------------------------------------------------------
    async def create_topic(self, topic: str, queues: int = 8, cluster: str | None = None, *,
                           perm: int = PERM_READ | PERM_WRITE, order: bool = False) -> list[str]:
        """Create or update ``topic`` on every master of ``cluster``; returns the broker names.

        Without ``cluster`` the only cluster is used (or ``DefaultCluster`` when there are several).
        """
        check_topic(topic)
        if isinstance(queues, bool) or not isinstance(queues, int) or not 1 <= queues <= 1024:
            raise ConfigError("queues", f"must be an integer in [1, 1024], got {queues!r}")
        info = await self.client.get_cluster_info()
        if cluster is None:
            names = sorted(info.cluster_addr_table)
            if not names:
                raise RouteNotFoundError("the name server knows no cluster (is a broker registered?)")
            if len(names) > 1 and "DefaultCluster" not in names:
                raise ConfigError("cluster", f"several clusters exist ({', '.join(names)}); name one")
            cluster = names[0] if len(names) == 1 else "DefaultCluster"
        masters = info.master_addrs(cluster)
        if not masters:
            raise RouteNotFoundError(f"cluster {cluster!r} has no master broker")
        header = {"topic": self.client.ns(topic), "defaultTopic": DEFAULT_TOPIC, "readQueueNums": queues,
                  "writeQueueNums": queues, "perm": perm, "topicFilterType": "SINGLE_TAG",
                  "topicSysFlag": 0, "order": order}

        async def create(addr: str) -> None:
            await retry_idempotent(lambda: self.client.invoke_ok(
                addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header)))
        await asyncio.gather(*(create(a) for a in masters.values()))
        log.info("topic %s created/updated on %s (%d queues)", topic, ", ".join(sorted(masters)), queues)
        return sorted(masters)

    async def broker_names(self) -> list[str]:
        """The names of the brokers the name servers know (sorted): a round trip to them."""
        return sorted((await self.client.get_cluster_info()).broker_addr_table)

    async def topic_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues of a topic, sorted like Java (fresh route)."""
        route = await self.client.get_route(topic, refresh=True)
        return [MessageQueue(self._display(mq.topic), mq.broker_name, mq.queue_id)
                for mq in route.subscribe_queues(self.client.ns(topic))]

    # -- offsets ------------------------------------------------------------------
    async def max_offset(self, mq: MessageQueue) -> int:
        return await self.client.max_offset(_check_queue(mq))

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self.client.min_offset(_check_queue(mq))

    async def search_offset(self, mq: MessageQueue, ts: int) -> int:
        """First offset stored at or after ``ts`` (epoch milliseconds)."""
        return await self.client.search_offset(_check_queue(mq), _check_int("ts", ts))

    async def committed_offset(self, group: str, mq: MessageQueue) -> int:
        """The group's committed offset on ``mq``; -1 when none is stored."""
        return await self.client.query_consumer_offset(_check_queue(mq), _check_group(group))

    async def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        await self.client.update_consumer_offset(_check_queue(mq), _check_group(group),
                                                 _check_int("offset", offset))

    async def high_water_marks(self, topic: str) -> dict[MessageQueue, int]:
        """Max offset of every readable queue of ``topic`` (a window's end)."""
        queues = await self.topic_queues(topic)
        offsets = await _bounded_gather([partial(self.client.max_offset, mq) for mq in queues])
        return dict(zip(queues, offsets, strict=True))

    async def committed_offsets(self, group: str, topic: str) -> dict[MessageQueue, int]:
        queues = await self.topic_queues(topic)
        offsets = await _bounded_gather([partial(self.client.query_consumer_offset, mq, group)
                                         for mq in queues])
        return dict(zip(queues, offsets, strict=True))

    # -- consumer groups -------------------------------------------------------------
    async def consumer_ids(self, group: str) -> list[str]:
        """Client ids of the group's online members (empty when none is online)."""
        try:
            return sorted(await self.client.consumer_ids(group, retry_topic(group)))
        except (RouteNotFoundError, SystemError_):
            return []

    async def consumer_connections(self, group: str) -> ConsumerConnection:
        """Who is connected in the group; ConsumerNotOnlineError (206) when nobody is."""
        async def call() -> ConsumerConnection:
            addr = await self.client.find_broker_addr_by_topic(retry_topic(group))
            resp = await self.client.invoke_ok(addr, RemotingCommand.request(
                RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": self.client.ns(group)}))
            return ConsumerConnection.from_body(resp.body)
        return await retry_idempotent(call)

    async def _ask_each_broker(self, route_topic: str, code: int, header: dict[str, Any],
                               parse: Callable[[bytes | None], T]) -> list[T]:
        """Send one request to every broker of ``route_topic`` (fresh route); parsed answers."""
        route = await self.client.get_route(route_topic, refresh=True)

        async def one(addr: str) -> T:
            resp = await retry_idempotent(lambda: self.client.invoke_ok(addr, RemotingCommand.request(code, header)))
            return parse(resp.body)
        return list(await asyncio.gather(*(one(a) for a in route.select_addrs())))

    async def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """GET_CONSUME_STATS from every broker of ``%RETRY%<group>``, merged (tps summed)."""
        header: dict[str, Any] = {"consumerGroup": self.client.ns(group)}
        if topic is not None:
            header["topic"] = self.client.ns(topic)
        parts = await self._ask_each_broker(retry_topic(group), RequestCode.GET_CONSUME_STATS, header,
                                            ConsumeStats.from_body)
        table: dict[MessageQueue, OffsetWrapper] = {}
        for p in parts:
            table.update(p.offset_table)
        return ConsumeStats(table, sum(p.consume_tps for p in parts))

    async def topic_stats(self, topic: str) -> TopicStatsTable:
        """GET_TOPIC_STATS_INFO from every broker of the topic, merged."""
        parts = await self._ask_each_broker(topic, RequestCode.GET_TOPIC_STATS_INFO, {"topic": self.client.ns(topic)},
                                            TopicStatsTable.from_body)
        table: dict[MessageQueue, TopicOffset] = {}
        for part in parts:
            table.update(part.offset_table)
        return TopicStatsTable(table)

    async def lag(self, group: str, topic: str | None = None) -> LagSnapshot:
        """Per-queue lag and totals, the figures of ``mqadmin consumerProgress -g group``.

        Uses GET_CONSUME_STATS; a group without stats (never committed, or no
        ``%RETRY%`` route yet) falls back to max offsets + committed offsets,
        which needs ``topic``.
        """
        _check_group(group)
        try:
            stats = await self.consume_stats(group, topic)
            snapshot = from_consume_stats(group, topic, [stats], self._display)
            if snapshot.queues:
                return snapshot
        except RouteNotFoundError:
            pass  # no %RETRY% route: the group never registered
        except BrokerError as exc:
            if exc.code not in _NO_STATS_CODES or isinstance(exc, AclDeniedError):
                raise
            log.info("no consume stats for %s (%s); using offsets", group, exc)
        if topic is None:
            raise RouteNotFoundError(f"consumer group {group!r} has no consume stats on any broker "
                                     "(nothing committed yet); name a topic to compute lag from offsets")
        return await self._lag_from_offsets(group, topic)

    async def _lag_from_offsets(self, group: str, topic: str) -> LagSnapshot:
        queues = await self.topic_queues(topic)

        async def row(mq: MessageQueue) -> tuple[MessageQueue, int, int, int]:
            max_off = await self.client.max_offset(mq)
            committed = await self.client.query_consumer_offset(mq, group)
            min_off = await self.client.min_offset(mq) if committed < 0 else 0
            return mq, max_off, committed, min_off
        rows = await _bounded_gather([partial(row, mq) for mq in queues])
        return from_offsets(group, topic, rows, self._display)


class Admin(SyncFacade[AsyncAdmin]):
    """Synchronous admin facade (context manager) over `AsyncAdmin` on a private loop thread."""

    def __init__(self, config: ClientConfig | None = None, *, timeout: float | None = 60.0) -> None:
        cfg = (config or ClientConfig()).validate()
        self._timeout = timeout
        super().__init__("rocketmq-admin", lambda: AsyncAdmin(cfg))

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._call(coro, self._timeout, "admin call")

    def create_topic(self, topic: str, queues: int = 8, cluster: str | None = None, *,
                     perm: int = PERM_READ | PERM_WRITE, order: bool = False) -> list[str]:
        return self._run(self._impl.create_topic(topic, queues, cluster, perm=perm, order=order))

    def broker_names(self) -> list[str]:
        return self._run(self._impl.broker_names())

    def topic_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self._impl.topic_queues(topic))

    def max_offset(self, mq: MessageQueue) -> int:
        return self._run(self._impl.max_offset(mq))

    def min_offset(self, mq: MessageQueue) -> int:
        return self._run(self._impl.min_offset(mq))

    def search_offset(self, mq: MessageQueue, ts: int) -> int:
        return self._run(self._impl.search_offset(mq, ts))

    def committed_offset(self, group: str, mq: MessageQueue) -> int:
        return self._run(self._impl.committed_offset(group, mq))

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        self._run(self._impl.update_consumer_offset(group, mq, offset))

    def high_water_marks(self, topic: str) -> dict[MessageQueue, int]:
        return self._run(self._impl.high_water_marks(topic))

    def committed_offsets(self, group: str, topic: str) -> dict[MessageQueue, int]:
        return self._run(self._impl.committed_offsets(group, topic))

    def consumer_ids(self, group: str) -> list[str]:
        return self._run(self._impl.consumer_ids(group))

    def consumer_connections(self, group: str) -> ConsumerConnection:
        return self._run(self._impl.consumer_connections(group))

    def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        return self._run(self._impl.consume_stats(group, topic))

    def topic_stats(self, topic: str) -> TopicStatsTable:
        return self._run(self._impl.topic_stats(topic))

    def lag(self, group: str, topic: str | None = None) -> LagSnapshot:
        return self._run(self._impl.lag(group, topic))

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Admin", "AsyncAdmin", "LagSnapshot"]
