"""MQClient: one connection pool, the name servers, cached routes and typed broker RPCs.

Every facade (producer, admin) and every push consumer owns one `MQClient`. It
adds the ACL hook to every request, applies the namespace to topics and groups,
and gives the rest of the client typed helpers for the RPCs they share
(offsets, consumer lists, heartbeats), so no one builds these headers twice.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from .config import ClientConfig
from .connection import ConnectionPool, Handler
from .protocol import fastjson
from .protocol.acl import AclHook
from .protocol.codes import PULL_FLAG_SUBSCRIPTION, RequestCode, ResponseCode
from .protocol.command import RemotingCommand
from .protocol.errors import (
    BrokerError,
    ClientStateError,
    ProtocolError,
    RequestTimeoutError,
    RocketMQError,
    RouteNotFoundError,
    broker_error,
)
from .protocol.queue import MessageQueue
from .route import MASTER_ID, ClusterInfo, NameServerClient, TopicRouteData

log = logging.getLogger(__name__)

T = TypeVar("T")
F = TypeVar("F", bound="ClientFacade")

RETRY_ATTEMPTS = 3


def _is_retriable(exc: BaseException) -> bool:
    return isinstance(exc, RocketMQError) and exc.retriable


async def retry_idempotent(call: Callable[[], Awaitable[T]], attempts: int = RETRY_ATTEMPTS) -> T:
    """Run an idempotent RPC with bounded, jittered retries on retriable errors only."""
    async for attempt in AsyncRetrying(stop=stop_after_attempt(attempts),
                                       wait=wait_random_exponential(multiplier=0.05, max=1.0),
                                       retry=retry_if_exception(_is_retriable), reraise=True):
        with attempt:
            return await call()
    raise AssertionError("unreachable")  # pragma: no cover - AsyncRetrying re-raises


async def with_deadline(coro: Awaitable[T], timeout: float | None, what: str) -> T:
    """Await ``coro`` within ``timeout`` seconds (None: no limit); cancel it and raise
    RequestTimeoutError otherwise. Used by the sync facades so a caller's deadline
    cancels the work on the loop instead of leaving it running."""
    if timeout is None:
        return await coro
    try:
        return await asyncio.wait_for(coro, timeout)
    except asyncio.TimeoutError:
        raise RequestTimeoutError(f"{what} did not finish within {timeout}s") from None


class MQClient:
    """Shared RPC layer of one client instance: routes, connections, the requests every facade makes."""

    def __init__(self, config: ClientConfig | None = None,
                 handlers: dict[int, Handler] | None = None) -> None:
        self.config = (config or ClientConfig()).validate()
        hook = None
        if self.config.acl_enabled:
            assert self.config.access_key is not None and self.config.secret_key is not None
            hook = AclHook(self.config.access_key, self.config.secret_key, self.config.security_token)
        self.pool = ConnectionPool(handlers=dict(handlers or {}), rpc_hook=hook,
                                   connect_timeout=self.config.request_timeout, use_tls=self.config.use_tls)
        self.namesrv = NameServerClient(self.config.namesrv_list(), self.pool, self.config.request_timeout)
        self._routes: dict[str, TopicRouteData] = {}
        self._broker_addrs: dict[str, dict[int, str]] = {}
        self._route_locks: dict[str, asyncio.Lock] = {}
        self._closed = False

    @property
    def client_id(self) -> str:
        return self.config.client_id()

    @property
    def timeout(self) -> float:
        return self.config.request_timeout

    def ns(self, resource: str) -> str:
        """The namespaced name of a topic or group (idempotent)."""
        return self.config.with_namespace(resource)

    # -- lifecycle ---------------------------------------------------------------
    async def start(self) -> None:
        if self._closed:
            raise ClientStateError("MQClient is closed")

    async def close(self) -> None:
        """Close every connection (pending requests fail with ConnectionClosedError). Idempotent."""
        self._closed = True
        await self.pool.close()

    def register_handler(self, code: int, handler: Handler) -> None:
        """Handle a broker-initiated request (live connections see it too: the dict is shared)."""
        self.pool.handlers[code] = handler

    # -- raw RPC -----------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClientStateError("MQClient is closed")

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Send a request and return the raw response; one deadline covers connect + reply."""
        self._check_open()
        budget = timeout if timeout is not None else self.timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        conn = await self.pool.get(addr, budget)
        return await conn.request(cmd, max(deadline - loop.time(), 0.001))

    async def invoke_ok(self, addr: str, cmd: RemotingCommand, timeout: float | None = None,
                        ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """Like `invoke`, but a response code outside ``ok`` raises the typed BrokerError."""
        resp = await self.invoke(addr, cmd, timeout)
        if resp.code not in tuple(ok):
            raise broker_error(resp.code, resp.remark, addr=addr, request=cmd)
        return resp

    async def oneway(self, addr: str, cmd: RemotingCommand) -> None:
        self._check_open()
        await self.pool.oneway(addr, cmd)

    # -- routing ---------------------------------------------------------------
    async def get_route(self, topic: str, refresh: bool = False) -> TopicRouteData:
        """Route of a topic from the cache, or from the name servers (coalesced per topic)."""
        self._check_open()
        topic = self.ns(topic)
        if not refresh and topic in self._routes:
            return self._routes[topic]
        lock = self._route_locks.setdefault(topic, asyncio.Lock())
        async with lock:
            if not refresh and topic in self._routes:
                return self._routes[topic]
            route = await retry_idempotent(lambda: self.namesrv.get_route(topic))
            self._routes[topic] = route
            for b in route.broker_datas:
                self._broker_addrs[b.broker_name] = dict(b.broker_addrs)
            return route

    def cached_route(self, topic: str) -> TopicRouteData | None:
        return self._routes.get(self.ns(topic))

    async def refresh_routes(self) -> dict[str, TopicRouteData]:
        """Re-fetch every cached route (Java polls every 30 s); failures keep the old route."""
        for topic in list(self._routes):
            try:
                await self.get_route(topic, refresh=True)
            except RocketMQError as exc:
                log.warning("route refresh of %s failed: %s", topic, exc)
        return dict(self._routes)

    async def get_cluster_info(self) -> ClusterInfo:
        self._check_open()
        info = await retry_idempotent(self.namesrv.get_cluster_info)
        for name, b in info.broker_addr_table.items():
            self._broker_addrs[name] = dict(b.broker_addrs)
        return info

    def broker_addr(self, broker_name: str, broker_id: int = MASTER_ID, *, exact: bool = False) -> str:
        """Address of a broker from the cached routes.

        Without ``exact``, a missing id falls back to the master, then to any
        replica (Java findBrokerAddressInSubscribe), so pulls follow a
        suggested slave only while it exists.
        """
        addrs = self._broker_addrs.get(broker_name)
        if addrs:
            if broker_id in addrs:
                return addrs[broker_id]
            if not exact:
                if MASTER_ID in addrs:
                    return addrs[MASTER_ID]
                return addrs[min(addrs)]
        raise RouteNotFoundError(f"no address known for broker {broker_name!r} (id {broker_id})")

    def broker_addrs(self) -> dict[str, dict[int, str]]:
        """Every broker seen in routes: name -> {id: addr}."""
        return {k: dict(v) for k, v in self._broker_addrs.items()}

    async def master_addr(self, mq: MessageQueue) -> str:
        """Master address of ``mq``'s broker, fetching the topic route if needed."""
        try:
            return self.broker_addr(mq.broker_name, MASTER_ID, exact=True)
        except RouteNotFoundError:
            await self.get_route(mq.topic, refresh=True)
            return self.broker_addr(mq.broker_name, MASTER_ID, exact=True)

    # -- typed helpers (shared by admin and consumer) -------------------------------
    def _queue_header(self, mq: MessageQueue) -> dict[str, Any]:
        return {"topic": self.ns(mq.topic), "queueId": mq.queue_id, "bname": mq.broker_name}

    async def _offset_rpc(self, code: int, mq: MessageQueue, extra: dict[str, Any] | None = None,
                          timeout: float | None = None, ok: Iterable[int] = (ResponseCode.SUCCESS,),
                          max_attempts: int | None = None) -> RemotingCommand:
        attempts = 0

        async def call() -> RemotingCommand:
            nonlocal attempts
            attempts += 1
            if attempts > 1:  # the broker may have moved (restart, failover): re-read the route
                try:
                    await self.get_route(mq.topic, refresh=True)
                except RocketMQError as exc:
                    log.debug("route refresh for %s failed: %s", mq.topic, exc)
            addr = await self.master_addr(mq)
            header = self._queue_header(mq)
            if extra:
                header.update(extra)
            return await self.invoke_ok(addr, RemotingCommand.request(code, header), timeout, ok)
        return await retry_idempotent(call, RETRY_ATTEMPTS if max_attempts is None else max_attempts)

    async def query_consumer_offset(self, mq: MessageQueue, group: str,
                                    timeout: float | None = None) -> int:
        """The committed offset of ``group`` on ``mq``; -1 when the broker has none (22)."""
        resp = await self._offset_rpc(RequestCode.QUERY_CONSUMER_OFFSET, mq,
                                      {"consumerGroup": self.ns(group)}, timeout,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        return resp.ext_int("offset")

    async def update_consumer_offset(self, mq: MessageQueue, group: str, offset: int,
                                     oneway: bool = False, timeout: float | None = None,
                                     attempts: int | None = None) -> None:
        """Store ``offset`` for ``group`` on the master (Java persists it oneway).

        A broker applies concurrent offset writes in any order and may lose overlapping first
        writes of a group's topic (see consumer/offset_store.py): callers that need the offset
        to stick send one acknowledged write at a time. ``attempts`` bounds the retries.
        """
        extra = {"consumerGroup": self.ns(group), "commitOffset": int(offset)}
        if oneway:
            header = {**self._queue_header(mq), **extra}
            await self.oneway(await self.master_addr(mq),
                              RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header))
        else:
            # Setting an absolute value is idempotent: retried like the reads, route re-read included.
            resp = await self._offset_rpc(RequestCode.UPDATE_CONSUMER_OFFSET, mq, extra, timeout,
                                          ok=(ResponseCode.SUCCESS, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST),
                                          max_attempts=attempts)
            if resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                await self._make_group_known(mq, group, resp, timeout)
                await self._offset_rpc(RequestCode.UPDATE_CONSUMER_OFFSET, mq, extra, timeout,
                                       max_attempts=attempts)

    async def _make_group_known(self, mq: MessageQueue, group: str, refusal: RemotingCommand,
                                timeout: float | None) -> None:
        """A 5.x broker refuses an offset commit of a group it does not know (26; 4.9.7 creates the
        group). Group-only committers (the Spark source, the window commit) never heartbeat or pull
        with that group, so one pull at the queue's max offset makes the broker auto-create it
        (``autoCreateSubscriptionGroup``, the default): nothing is read, committed or registered.
        If the broker still refuses, its own 26 is raised."""
        top = await self.max_offset(mq, timeout)
        header = {**self._queue_header(mq), "consumerGroup": self.ns(group), "queueOffset": top, "maxMsgNums": 1,
                  "sysFlag": PULL_FLAG_SUBSCRIPTION, "commitOffset": 0, "suspendTimeoutMillis": 0,
                  "subscription": "*", "subVersion": 0, "expressionType": "TAG"}
        resp = await self.invoke(await self.master_addr(mq), RemotingCommand.request(RequestCode.PULL_MESSAGE, header),
                                 timeout)
        if resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
            raise broker_error(refusal.code, refusal.remark, addr=await self.master_addr(mq))
        log.info("group %s was unknown to the broker of %s: made known by a pull, committing again", group, mq)

    async def max_offset(self, mq: MessageQueue, timeout: float | None = None) -> int:
        """Offset one past the last message of the queue (the high-water mark)."""
        resp = await self._offset_rpc(RequestCode.GET_MAX_OFFSET, mq, None, timeout)
        return resp.ext_int("offset")

    async def min_offset(self, mq: MessageQueue, timeout: float | None = None) -> int:
        resp = await self._offset_rpc(RequestCode.GET_MIN_OFFSET, mq, None, timeout)
        return resp.ext_int("offset")

    async def search_offset(self, mq: MessageQueue, ts_ms: int, timeout: float | None = None) -> int:
        """First offset whose store time is >= ``ts_ms`` (SEARCH_OFFSET_BY_TIMESTAMP)."""
        resp = await self._offset_rpc(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq,
                                      {"timestamp": int(ts_ms)}, timeout)
        return resp.ext_int("offset")

    async def find_broker_addr_by_topic(self, topic: str) -> str:
        """A broker of the topic (random broker name, master preferred), like Java."""
        route = await self.get_route(topic)
        candidates = [b for b in route.broker_datas if b.broker_addrs]
        if not candidates:
            raise RouteNotFoundError(f"topic {topic!r} has no broker with an address")
        addr = random.choice(candidates).select_addr()
        assert addr is not None
        return addr

    async def consumer_ids(self, group: str, topic: str, timeout: float | None = None) -> list[str]:
        """Client ids of the group's live members (GET_CONSUMER_LIST_BY_GROUP).

        Raises SystemError_ (code 1) when the broker knows no consumer of the group.
        """
        async def call() -> list[str]:
            addr = await self.find_broker_addr_by_topic(topic)
            resp = await self.invoke_ok(addr, RemotingCommand.request(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.ns(group)}), timeout)
            body = fastjson.loads(resp.body) if resp.body else {}
            ids = body.get("consumerIdList") if isinstance(body, dict) else None
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise ProtocolError("GET_CONSUMER_LIST_BY_GROUP: consumerIdList missing or malformed")
            return ids
        return await retry_idempotent(call)

    async def heartbeat(self, addr: str, heartbeat_data: dict[str, Any],
                        timeout: float | None = None) -> RemotingCommand:
        """HEART_BEAT with a HeartbeatData body (keys sorted, as fastjson writes them)."""
        body = fastjson.dumps(heartbeat_data).encode("utf-8")
        return await self.invoke_ok(addr, RemotingCommand.request(RequestCode.HEART_BEAT, None, body),
                                    timeout)

    async def unregister(self, addr: str, client_id: str | None = None, *,
                         producer_group: str | None = None, consumer_group: str | None = None,
                         timeout: float | None = None) -> None:
        """UNREGISTER_CLIENT for one group on one broker (sent at shutdown)."""
        header: dict[str, Any] = {"clientID": client_id or self.client_id}
        if producer_group:
            header["producerGroup"] = self.ns(producer_group)
        if consumer_group:
            header["consumerGroup"] = self.ns(consumer_group)
        await self.invoke_ok(addr, RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, header), timeout)


class ClientFacade:
    """Base of the asyncio facades (producer, admin): owns an `MQClient` unless one is passed in."""

    def __init__(self, config: ClientConfig | None = None, mqclient: MQClient | None = None) -> None:
        self._own_client = mqclient is None
        self.client = mqclient if mqclient is not None else MQClient(config)
        self.config = self.client.config

    async def start(self: F) -> F:
        await self.client.start()
        return self

    async def close(self) -> None:
        """Close the connections, only when this facade created its MQClient. Idempotent."""
        if self._own_client:
            await self.client.close()

    async def __aenter__(self: F) -> F:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["BrokerError", "ClientFacade", "MQClient", "retry_idempotent"]
