"""The push consumer's engine on asyncio (Java DefaultMQPushConsumerImpl + MQClientInstance).

`ConsumerCore` wires the parts together and runs the background routines:
rebalance (every rebalance_interval and on demand), offset persistence,
heartbeats, route polling, orderly lock renewal and the consume-timeout
cleaner. It lives on one event loop; `push.PushConsumer` is the thread-safe
facade and `AsyncPushConsumer` the native asyncio face.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..config import RETRY_PREFIX, retry_topic
from ..errors import AclDeniedError, ClientStateError, ConfigError, RocketMQError
from ..mqclient import MQClient
from ..queue import MessageQueue
from .allocate import AllocateStrategy, strategy_by_name
from .client_handlers import register_handlers
from .config import ConsumerConfig, MessageModel
from .consume_concurrent import ConcurrentConsumeService
from .consume_orderly import OrderlyConsumeService
from .listener import Listener
from .offset_store import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore
from .pull import PullService
from .rebalance import Rebalancer
from .send_back import INNER_PRODUCER_GROUP, SendBack
from .subscription import SubscriptionData, build_subscription

log = logging.getLogger(__name__)

_GROUP_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
HEARTBEAT_TIMEOUT = 3.0


def check_group(group: str) -> None:
    """Java Validators.checkGroup plus the DEFAULT_CONSUMER rule."""
    if not isinstance(group, str) or not group.strip():
        raise ConfigError("group", "consumer group must be a non-empty name")
    if len(group) > 255:
        raise ConfigError("group", f"consumer group is {len(group)} characters long; the limit is 255")
    if not _GROUP_RE.match(group):
        raise ConfigError("group", f"{group!r} may only contain letters, digits, '%', '|', '_' and '-'")
    if group == "DEFAULT_CONSUMER":
        raise ConfigError("group", "DEFAULT_CONSUMER is reserved; choose another consumer group")


class ConsumerCore:
    """State and background routines of one push consumer (runs on one event loop)."""

    def __init__(self, group: str, config: ConsumerConfig) -> None:
        check_group(group)
        config.validate()
        self.group = group
        self.config = config
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.user_topics: dict[str, str] = {}  # namespaced topic -> user expression
        self.listener: Listener | None = None
        self.orderly = False
        self.strategy: AllocateStrategy = (strategy_by_name(config.allocate_strategy)
                                           if isinstance(config.allocate_strategy, str)
                                           else config.allocate_strategy)
        self.client: MQClient = None  # type: ignore[assignment]  # created in start()
        self.offset_store: OffsetStore = None  # type: ignore[assignment]
        self.rebalancer = Rebalancer(self)
        self.pull = PullService(self)
        self.consume: ConcurrentConsumeService | OrderlyConsumeService | None = None
        self.send_back = SendBack(self)
        self.state = "CREATED"
        self.closing = False
        self.paused = False
        self.started_at = 0.0
        self.denied: AclDeniedError | None = None  # the last request the broker's ACL refused
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_wakeup: asyncio.Event | None = None
        self._stop_offsets_changed: asyncio.Future[None] | None = None
        self.now = time.monotonic

    # -- identity ---------------------------------------------------------------------
    @property
    def client_id(self) -> str:
        return self.client.client_id if self.client is not None else self.config.client_id()

    @property
    def ns_group(self) -> str:
        return self.config.with_namespace(self.group)

    # -- configuration before start ------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*") -> None:
        sub = build_subscription(self.config.with_namespace(topic), expression)
        self.subscriptions[sub.topic] = sub
        self.user_topics[sub.topic] = expression

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(self.config.with_namespace(topic), None)

    def register_listener(self, fn: Listener, orderly: bool = False) -> None:
        if not callable(fn):
            raise ConfigError("listener", f"{fn!r} is not callable")
        if self.state != "CREATED":
            raise ClientStateError("register the listener before start()")
        self.listener = fn
        self.orderly = orderly

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if self.state != "CREATED":
            raise ClientStateError(f"consumer is {self.state}; a consumer can start only once")
        if self.listener is None:
            raise ClientStateError("register a listener before start()")
        if not self.subscriptions:
            raise ClientStateError("subscribe to at least one topic before start()")
        if self.config.clustering and self.config.instance_name == "DEFAULT":
            # Java changeInstanceNameToPID: unique client ids for members in one process
            self.config = self.config.replace(instance_name=f"{os.getpid()}#{time.monotonic_ns()}")
        self.state = "STARTING"
        self.client = MQClient(self.config)
        await self.client.start()
        register_handlers(self)
        if self.config.clustering:
            self.offset_store = RemoteBrokerOffsetStore(self.client, self.group,
                                                        enable_commit=self.config.enable_offset_commit)
            rt = self.config.with_namespace(retry_topic(self.group))
            self.subscriptions.setdefault(rt, build_subscription(rt, "*"))
        else:
            self.offset_store = LocalFileOffsetStore(self.config.offset_store_dir, self.client_id, self.group,
                                                     enable_commit=self.config.enable_offset_commit)
        await self.offset_store.load()
        self.consume = (OrderlyConsumeService if self.orderly else ConcurrentConsumeService)(self, self.listener)
        self._rebalance_wakeup = asyncio.Event()
        self._stop_offsets_changed = asyncio.get_running_loop().create_future()
        for topic in list(self.subscriptions):
            try:
                await self.client.get_route(topic)
            except RocketMQError as exc:  # %RETRY% has no route before the first heartbeat
                log.info("no route yet for %s: %s", topic, exc)
        if not await self.send_heartbeat() and self.denied is not None:
            raise self.denied  # no broker took the heartbeat and the ACL refused it: it will not change
        self.started_at = time.time()
        self.state = "RUNNING"
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._rebalance_loop(), name="rebalance"),
                       loop.create_task(self._every(self.config.persist_consumer_offset_interval,
                                                    self.persist_offsets), name="persist"),
                       loop.create_task(self._every(self.config.heartbeat_broker_interval,
                                                    self.send_heartbeat), name="heartbeat"),
                       loop.create_task(self._every(self.config.poll_name_server_interval,
                                                    self._poll_routes), name="routes")]
        if self.orderly and self.config.clustering:
            self._tasks.append(loop.create_task(self._every(self.config.lock_interval,
                                                            self.rebalancer.lock_all), name="lock"))
        if isinstance(self.consume, ConcurrentConsumeService):
            self._tasks.append(loop.create_task(self._every(self.config.consume_timeout,
                                                            self.consume.clean_expired), name="cleaner"))
        self.wake_rebalance()

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop pulling, drain or time out consumption, persist, unlock, unregister, close."""
        if self.state in ("SHUTDOWN", "CREATED") or self.client is None:
            self.state = "SHUTDOWN"
            return
        self.closing = True  # from here on no lock path sends LOCK_BATCH_MQ
        self.state = "STOPPING"
        for t in self._tasks:
            t.cancel()
        await asyncio.wait(self._tasks, timeout=5.0) if self._tasks else None
        if isinstance(self.consume, OrderlyConsumeService):
            await self.consume.stop_relocking()
        await self.pull.stop_all()
        wait = self.config.await_termination_when_shutdown if timeout is None else timeout
        if self.consume is not None and not await self.consume.drain(wait):
            log.warning("in-flight consumption did not finish within %.1fs; its messages will be "
                        "delivered again", wait)
        await self._persist_final()
        if self.orderly and self.config.clustering:
            # after every locking task has stopped, and covering locks granted to requests whose
            # caller was cancelled (a rebalance taking over a leaver's queues, a re-lock)
            await self.rebalancer.unlock_all_final()
        for pq in self.rebalancer.table.values():
            pq.drop()
        await self._unregister()
        if self.consume is not None:
            await self.consume.close()
        await self.send_back.close()
        await self.client.close()
        self.state = "SHUTDOWN"

    async def _persist_final(self) -> None:
        owned = list(self.rebalancer.table)
        if not owned or not self.config.enable_offset_commit:
            return
        if isinstance(self.offset_store, RemoteBrokerOffsetStore):
            results = await asyncio.gather(*(self.offset_store.persist_sync(mq) for mq in owned
                                             if self.offset_store.memory_offset(mq) >= 0),
                                           return_exceptions=True)
            for r in results:
                if isinstance(r, AclDeniedError):
                    self.note_denied("final offset commit", r)
                elif isinstance(r, Exception):
                    log.warning("final offset persist failed: %s", r)
        else:
            await self.offset_store.persist_all(owned)

    async def _unregister(self) -> None:
        for name, addrs in self.client.broker_addrs().items():
            for addr in addrs.values():
                for consumer_group, producer_group in ((self.ns_group, None), (None, INNER_PRODUCER_GROUP)):
                    try:
                        await self.client.unregister(addr, self.client_id, consumer_group=consumer_group,
                                                     producer_group=producer_group)
                    except RocketMQError as exc:
                        log.info("UNREGISTER_CLIENT on %s (%s) failed: %s", name, addr, exc)

    # -- background routines -------------------------------------------------------------------
    async def _every(self, interval: float, fn: Callable[[], Awaitable[Any]]) -> None:
        # `while not closing`, not `while True`: Python 3.11's asyncio.wait_for (used by RPCs) can
        # swallow a cancellation that races with a completed result; shutdown must still end the loop
        while not self.closing:
            await asyncio.sleep(interval)
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("periodic %s failed", getattr(fn, "__name__", fn))

    def wake_rebalance(self) -> None:
        if self._rebalance_wakeup is not None:
            self._rebalance_wakeup.set()

    async def _rebalance_loop(self) -> None:
        assert self._rebalance_wakeup is not None
        while not self.closing:  # see _every: a swallowed cancellation must not keep this alive
            try:
                await asyncio.wait_for(self._rebalance_wakeup.wait(), self.config.rebalance_interval)
            except asyncio.TimeoutError:
                pass
            self._rebalance_wakeup.clear()
            if self.paused:
                continue
            try:
                await self.rebalancer.do_rebalance()
            except asyncio.CancelledError:
                raise
            except AclDeniedError as exc:
                self.note_denied("rebalance", exc)
            except Exception:
                log.exception("rebalance failed")

    async def _poll_routes(self) -> None:
        await self.client.refresh_routes()

    async def persist_offsets(self) -> None:
        await self.offset_store.persist_all(list(self.rebalancer.table))

    def heartbeat_data(self) -> dict[str, Any]:
        return {
            "clientID": self.client_id,
            "consumerDataSet": [{
                "consumeFromWhere": self.config.consume_from_where.value,  # type: ignore[union-attr]
                "consumeType": "CONSUME_PASSIVELY",
                "groupName": self.ns_group,
                "messageModel": self.config.message_model.value,  # type: ignore[union-attr]
                "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()],
                "unitMode": self.config.unit_mode,
            }],
            "producerDataSet": [{"groupName": INNER_PRODUCER_GROUP}],
        }

    async def send_heartbeat(self, data: dict[str, Any] | None = None) -> bool:
        """HEART_BEAT to every known broker (masters and slaves); True if one succeeded."""
        data = data or self.heartbeat_data()
        ok = False
        for name, addrs in self.client.broker_addrs().items():
            for addr in addrs.values():
                try:
                    await self.client.heartbeat(addr, data, HEARTBEAT_TIMEOUT)
                    ok = True
                except AclDeniedError as exc:
                    self.note_denied(f"heartbeat to {name}", exc)
                except RocketMQError as exc:
                    log.warning("heartbeat to %s (%s) failed: %s", name, addr, exc)
        return ok

    async def on_queues_changed(self, topic: str, mq_all: frozenset[MessageQueue],
                                mine: frozenset[MessageQueue]) -> None:
        """Java messageQueueChanged: topic thresholds, new subVersion, immediate heartbeat."""
        self.adjust_thresholds(len(self.rebalancer.table))
        sub = self.subscriptions.get(topic)
        if sub is None:
            return
        new_version = max(int(time.time() * 1000), sub.sub_version + 1)
        old = sub.sub_version
        sub.sub_version = new_version
        # pulls carry the version only after the broker has it (avoids SUBSCRIPTION_NOT_LATEST)
        if not await self.send_heartbeat():
            sub.sub_version = old

    def adjust_thresholds(self, n_queues: int) -> None:
        """Java: per-queue limits = topic limits divided by the owned process queues (when set)."""
        cfg = self.config
        n = max(1, n_queues)
        if cfg.pull_threshold_for_topic != -1:
            self.pull.threshold_count = max(1, cfg.pull_threshold_for_topic // n)
        if cfg.pull_threshold_size_for_topic != -1:
            self.pull.threshold_bytes = max(1, cfg.pull_threshold_size_for_topic // n) * 1024 * 1024

    def note_denied(self, what: str, err: AclDeniedError) -> None:
        """Record a request the broker's ACL refused (`PushConsumer.denied`, ``stats()["denied"]``)."""
        if self.denied is None or self.denied.reason != err.reason:  # warning: callers raise or report it
            log.warning("%s refused: %s", what, err)
        self.denied = err

    # -- user-facing helpers --------------------------------------------------------------------
    def suspend(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self.wake_rebalance()

    def assigned_queues(self) -> frozenset[MessageQueue]:
        return frozenset(mq for mq in self.rebalancer.table if not mq.topic.startswith(RETRY_PREFIX))

    def set_stop_offsets(self, offsets: dict[MessageQueue, int]) -> None:
        self.pull.stop_offsets.update({self._ns_mq(mq): int(off) for mq, off in offsets.items()})
        fut = self._stop_offsets_changed
        if fut is not None and not fut.done():
            fut.set_result(None)
        if fut is not None:
            self._stop_offsets_changed = asyncio.get_running_loop().create_future()

    async def wait_stop_offsets_changed(self) -> None:
        fut = self._stop_offsets_changed
        if fut is None:
            await asyncio.sleep(1)
            return
        try:
            await asyncio.wait_for(asyncio.shield(fut), 1.0)
        except asyncio.TimeoutError:
            pass

    def _ns_mq(self, mq: MessageQueue) -> MessageQueue:
        topic = self.config.with_namespace(mq.topic)
        return mq if topic == mq.topic else MessageQueue(topic, mq.broker_name, mq.queue_id)

    def stats(self) -> dict[str, Any]:
        consume = self.consume
        table = self.rebalancer.table
        return {
            "group": self.group,
            "client_id": self.client_id if self.client is not None else None,
            "state": self.state,
            "paused": self.paused,
            "model": self.config.message_model.value,  # type: ignore[union-attr]
            "orderly": self.orderly,
            "assigned_queues": len(table),
            "cached_messages": sum(pq.count for pq in table.values()),
            "cached_bytes": sum(pq.msg_size for pq in table.values()),
            "max_cached_in_queue": max((pq.count for pq in table.values()), default=0),
            "pulls": self.pull.pulls,
            "pulled_messages": self.pull.pulled_msgs,
            "flow_control_delays": self.pull.flow_control_hits,
            "consumed_ok": consume.consumed_ok if consume else 0,
            "consumed_failed": consume.consumed_failed if consume else 0,
            "sent_back": self.send_back.sent_back,
            "fallback_sends": self.send_back.fallback_sends,
            "denied": str(self.denied) if self.denied is not None else None,
            "offsets": {str(mq): off for mq, off in self.offset_store.table.items()}
            if self.offset_store is not None else {},
        }


def make_config(config: ConsumerConfig | None, overrides: dict[str, Any]) -> ConsumerConfig:
    """A ConsumerConfig from an optional base plus keyword overrides (unknown knobs are errors)."""
    base = config if config is not None else ConsumerConfig()
    if not overrides:
        return base.replace()
    known = set(ConsumerConfig.__dataclass_fields__)
    for key in overrides:
        if key not in known:
            raise ConfigError(key, "unknown consumer option")
    return base.replace(**overrides)


__all__ = ["ConsumerCore", "MessageModel", "check_group", "make_config"]
