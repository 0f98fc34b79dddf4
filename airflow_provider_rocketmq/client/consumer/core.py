"""The push consumer's engine on asyncio (Java DefaultMQPushConsumerImpl + MQClientInstance).

`ConsumerCore` is the composition root: `start()` builds the services, each with
the narrow interfaces of `ports` it needs (no service holds the core or reaches
into a sibling), and runs the background routines: rebalance (every
rebalance_interval and on demand), offset persistence, heartbeats, route
polling, orderly lock renewal and the consume-timeout cleaner. It lives on one
event loop; `push.PushConsumer` is the thread-safe facade and
`AsyncPushConsumer` the native asyncio face.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..mqclient import MQClient
from ..protocol.batch import BatchDecoder, PullFilter
from ..protocol.errors import (
    AclDeniedError,
    ClientStateError,
    ConfigError,
    MessageDecodeError,
    ProtocolError,
    RocketMQError,
)
from ..protocol.message import decode_messages
from ..protocol.names import RETRY_PREFIX, retry_topic
from ..protocol.queue import MessageQueue
from .allocate import AllocateStrategy, strategy_by_name
from .client_handlers import register_handlers
from .config import ConsumerConfig, MessageModel, enum_value
from .consume_batch import BatchConsumeService, BatchListener
from .consume_concurrent import ConcurrentConsumeService
from .consume_orderly import OrderlyConsumeService
from .lifecycle import Background, ConsumerState, Lifecycle
from .listener import ConsumeContext, Listener, OrderlyContext, consume_message_directly, run_listener
from .locks import QueueLocks
from .offset_store import LocalFileOffsetStore, OffsetPersistReport, OffsetStore, RemoteBrokerOffsetStore
from .ports import FlowLimits, StopOffsets
from .process_queue import ProcessQueue
from .pull import PullService
from .rebalance import AssignmentCallback, Rebalancer
from .running_info import consumer_running_info
from .send_back import INNER_PRODUCER_GROUP, SendBack
from .start_offset import StartOffsets
from .stats import SAMPLE_INTERVAL, ConsumeStatsTable
from .subscription import SubscriptionData, build_subscription

log = logging.getLogger(__name__)

_GROUP_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
HEARTBEAT_TIMEOUT = 3.0
RENEW_DELAY_MIN = 0.2  # renewing a member on a restarted broker: retry 0.2 s doubling to 1 s, jittered
RENEW_DELAY_MAX = 1.0
ROUTE_REFRESH_MIN_INTERVAL = 1.0  # at most this often outside poll_name_server_interval

ConsumeService = ConcurrentConsumeService | OrderlyConsumeService | BatchConsumeService
FailureCallback = Callable[[RocketMQError], Any]


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


@dataclass
class _Parts:
    """The services of a started consumer."""

    client: MQClient
    offsets: OffsetStore
    send_back: SendBack
    consume: ConsumeService
    pull: PullService
    rebalancer: Rebalancer
    locks: QueueLocks | None


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
        self.batch_listener: tuple[BatchListener, BatchDecoder] | None = None
        self.orderly = False
        self.strategy: AllocateStrategy = (strategy_by_name(config.allocate_strategy)
                                           if isinstance(config.allocate_strategy, str)
                                           else config.allocate_strategy)
        self.life = Lifecycle()
        self.table: dict[MessageQueue, ProcessQueue] = {}  # written by the rebalancer only
        self.stops = StopOffsets()
        self.limits = FlowLimits(config.pull_threshold_for_queue, config.pull_threshold_size_for_queue)
        self.assignment_callbacks: list[AssignmentCallback] = []
        self.bg = Background("consumer")
        self.parts: _Parts | None = None
        self.started_at = 0.0
        self.consume_stats = ConsumeStatsTable()  # restarted by start(): figures count from there
        self.denied: AclDeniedError | None = None  # the last request the broker's ACL refused
        self.failure: RocketMQError | None = None  # the terminal failure (the first ACL refusal)
        self.failure_callbacks: list[FailureCallback] = []
        self.final_persist: OffsetPersistReport | None = None  # what shutdown() committed
        self._renewing: set[str] = set()  # brokers a renew task is running for
        self._routes_refreshed = 0.0

    # -- identity ---------------------------------------------------------------------
    @property
    def state(self) -> ConsumerState:
        return self.life.state

    @property
    def client_id(self) -> str:
        return self.parts.client.client_id if self.parts is not None else self.config.client_id()

    @property
    def ns_group(self) -> str:
        return self.config.with_namespace(self.group)

    def _running(self) -> _Parts:
        if self.parts is None:
            raise ClientStateError(f"consumer is {self.life.state.value}; start() it first")
        return self.parts

    # -- configuration before start ------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*") -> None:
        sub = build_subscription(self.config.with_namespace(topic), expression)
        self.subscriptions[sub.topic] = sub
        self.user_topics[sub.topic] = expression
        if self.life.state is ConsumerState.RUNNING:  # the broker must know it before the rebalance
            self.bg.spawn(self._after_subscribe(), f"subscribe {topic}")

    async def _after_subscribe(self) -> None:
        await self.send_heartbeat()
        self.wake_rebalance()

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(self.config.with_namespace(topic), None)

    def _check_registration(self, fn: object, what: str) -> None:
        if not callable(fn):
            raise ConfigError(what, f"{fn!r} is not callable")
        if self.life.state is not ConsumerState.CREATED:
            raise ClientStateError("register the listener before start()")
        if self.listener is not None or self.batch_listener is not None:
            raise ClientStateError("a consumer has one listener; it is registered already")

    def register_listener(self, fn: Listener, orderly: bool = False) -> None:
        self._check_registration(fn, "listener")
        self.listener = fn
        self.orderly = orderly

    def register_batch_listener(self, fn: BatchListener, decoder: BatchDecoder) -> None:
        self._check_registration(fn, "listener")
        if not callable(decoder):
            raise ConfigError("decoder", f"{decoder!r} is not callable")
        self.batch_listener = (fn, decoder)

    def add_assignment_callback(self, callback: AssignmentCallback) -> None:
        self.assignment_callbacks.append(callback)

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if self.life.state is not ConsumerState.CREATED:
            raise ClientStateError(f"consumer is {self.life.state.value}; a consumer can start only once")
        if self.listener is None and self.batch_listener is None:
            raise ClientStateError("register a listener before start()")
        if not self.subscriptions:
            raise ClientStateError("subscribe to at least one topic before start()")
        if self.config.clustering and self.config.instance_name == "DEFAULT":
            # Java changeInstanceNameToPID: unique client ids for members in one process
            self.config = self.config.replace(instance_name=f"{os.getpid()}#{time.monotonic_ns()}")
        self.life.advance(ConsumerState.STARTING)
        cfg = self.config
        client = MQClient(cfg)
        try:
            await client.start()
            offsets: OffsetStore
            if cfg.clustering:
                offsets = RemoteBrokerOffsetStore(client, self.group, enable_commit=cfg.enable_offset_commit,
                                                  on_denied=self.note_denied)
                rt = cfg.with_namespace(retry_topic(self.group))
                self.subscriptions.setdefault(rt, build_subscription(rt, "*"))
            else:
                offsets = LocalFileOffsetStore(cfg.offset_store_dir, client.client_id, self.group,
                                               enable_commit=cfg.enable_offset_commit)
            self.parts = self._build(client, offsets)
        except BaseException:
            await client.close()  # shutdown() closes it once the parts exist
            raise
        register_handlers(client, self, self.bg)
        await offsets.load()
        for topic in list(self.subscriptions):
            try:
                await client.get_route(topic)
            except RocketMQError as exc:  # %RETRY% has no route before the first heartbeat
                log.info("no route yet for %s: %s", topic, exc)
        await self.send_heartbeat()
        if self.failure is not None:
            raise self.failure  # a broker's ACL refused the heartbeat: it will not change
        self.started_at = time.time()
        self.life.advance(ConsumerState.RUNNING)
        parts = self.parts
        bg = self.bg
        bg.spawn(parts.rebalancer.run(), "rebalance")
        bg.spawn(self._every(cfg.persist_consumer_offset_interval, self.persist_offsets), "persist")
        bg.spawn(self._every(cfg.heartbeat_broker_interval, self.send_heartbeat), "heartbeat")
        bg.spawn(self._every(SAMPLE_INTERVAL, self.consume_stats.sample_async), "stats")
        bg.spawn(self._every(cfg.poll_name_server_interval, client.refresh_routes), "routes")
        if parts.locks is not None:
            bg.spawn(self._every(cfg.lock_interval, parts.locks.lock_all), "lock")
        if isinstance(parts.consume, ConcurrentConsumeService):
            bg.spawn(self._every(cfg.consume_timeout, parts.consume.clean_expired), "cleaner")
        self.wake_rebalance()

    def _build(self, client: MQClient, offsets: OffsetStore) -> _Parts:
        """Wire the services; each gets only the views and hooks it uses."""
        cfg = self.config
        life = self.life
        stats = self.consume_stats = ConsumeStatsTable()
        send_back = SendBack(cfg, client, self.group, self.orderly, on_denied=self.note_denied)
        locks = None
        if self.orderly and cfg.clustering:
            locks = QueueLocks(client, client.client_id, self.ns_group, self.table, life, on_denied=self.note_denied)
        consume: ConsumeService
        if self.batch_listener is not None:
            consume = BatchConsumeService(config=cfg, group=self.group, listener=self.batch_listener[0],
                                          life=life, offsets=offsets, send_back=send_back.send, stats=stats)
        elif self.orderly:
            assert self.listener is not None
            consume = OrderlyConsumeService(config=cfg, group=self.group, listener=self.listener, life=life,
                                            offsets=offsets, send_back=send_back.send,
                                            max_reconsume_times=send_back.max_reconsume_times(),
                                            lock=locks.lock if locks is not None else None, stats=stats)
        else:
            assert self.listener is not None
            consume = ConcurrentConsumeService(config=cfg, group=self.group, listener=self.listener, life=life,
                                               offsets=offsets, send_back=send_back.send, table=self.table,
                                               stats=stats)
        start_offset = StartOffsets(cfg, client, offsets, on_denied=self.note_denied,
                                    group=self.group if cfg.clustering else None)

        def forget(mq: MessageQueue, pq: ProcessQueue) -> None:
            rebalancer.forget(mq, pq)

        if isinstance(consume, BatchConsumeService):
            assert self.batch_listener is not None
            pull = PullService(config=cfg, client=client, group=self.ns_group, subscriptions=self.subscriptions,
                               life=life, offsets=offsets, limits=self.limits, stops=self.stops, orderly=False,
                               start_offset=start_offset, forget_queue=forget, settle=consume.settle_ready,
                               on_denied=self.note_denied, on_trouble=self.renew_on, stats=stats,
                               batches=(self.batch_listener[1], consume.submit_batch))
        else:
            pull = PullService(config=cfg, client=client, group=self.ns_group, subscriptions=self.subscriptions,
                               life=life, offsets=offsets, limits=self.limits, stops=self.stops,
                               orderly=self.orderly, start_offset=start_offset, forget_queue=forget,
                               settle=consume.settle_ready, on_denied=self.note_denied, on_trouble=self.renew_on,
                               stats=stats,
                               submit=consume.submit)
        rebalancer = Rebalancer(config=cfg, client=client, group=self.group, client_id=client.client_id,
                                strategy=self.strategy, subscriptions=self.subscriptions, life=life,
                                table=self.table, offsets=offsets, start_offset=start_offset, pull=pull,
                                release=consume if isinstance(consume, OrderlyConsumeService) else None,
                                locks=locks, on_changed=self.on_queues_changed, on_denied=self.note_denied,
                                adjust_limits=self.adjust_thresholds, callbacks=self.assignment_callbacks)
        return _Parts(client, offsets, send_back, consume, pull, rebalancer, locks)

    async def shutdown(self, timeout: float | None = None) -> OffsetPersistReport:
        """Stop pulling, drain or time out consumption, persist, unlock, unregister, close.

        Returns what the final offset persist committed (the same report on later calls; an
        empty one when the consumer never started or is stopping in another call).
        """
        life = self.life
        parts = self.parts
        if life.state in (ConsumerState.SHUTDOWN, ConsumerState.STOPPING):
            return self.final_persist or OffsetPersistReport(enabled=self.config.enable_offset_commit)
        if parts is None:  # never started, or start() failed before the services existed
            if life.state is ConsumerState.STARTING:
                life.advance(ConsumerState.STOPPING)
            life.advance(ConsumerState.SHUTDOWN)
            self.final_persist = OffsetPersistReport(enabled=self.config.enable_offset_commit)
            return self.final_persist
        life.advance(ConsumerState.STOPPING)  # from here on no lock path sends LOCK_BATCH_MQ
        await self.bg.cancel_all()
        if isinstance(parts.consume, OrderlyConsumeService):
            await parts.consume.stop_relocking()
        await parts.pull.stop_all()
        wait = self.config.await_termination_when_shutdown if timeout is None else timeout
        drained = await parts.consume.drain(wait)
        if not drained:
            log.warning("in-flight consumption did not finish within %.1fs; its messages will be "
                        "delivered again", wait)
        report = self.final_persist = await self._persist_final(parts)
        report.drained = drained
        if parts.locks is not None:
            # after every locking task has stopped, and covering locks granted to requests whose
            # caller was cancelled (a rebalance taking over a leaver's queues, a re-lock)
            await parts.locks.unlock_all_final()
        for pq in self.table.values():
            pq.drop()
        await self._unregister(parts.client)
        await parts.consume.close()
        await parts.send_back.close()
        await parts.client.close()
        life.advance(ConsumerState.SHUTDOWN)
        return report

    async def _persist_final(self, parts: _Parts) -> OffsetPersistReport:
        """Commit every owned queue's offset, one acknowledged write at a time per broker, read back
        (offset_store.py says why); a queue that was never written successfully is reported, not hidden."""
        report = await parts.offsets.persist_final(list(self.table))
        if report.denied is not None:
            self.note_denied("final offset commit", report.denied)
        if report.failed:
            log.warning("final offsets not committed (these messages will be delivered again): %s",
                        report.describe_failures())
        return report

    async def _unregister(self, client: MQClient) -> None:
        for name, addrs in client.broker_addrs().items():
            for addr in addrs.values():
                for consumer_group, producer_group in ((self.ns_group, None), (None, INNER_PRODUCER_GROUP)):
                    try:
                        await client.unregister(addr, self.client_id, consumer_group=consumer_group,
                                                producer_group=producer_group)
                    except RocketMQError as exc:
                        log.info("UNREGISTER_CLIENT on %s (%s) failed: %s", name, addr, exc)

    # -- background routines -------------------------------------------------------------------
    async def _every(self, interval: float, fn: Callable[[], Awaitable[Any]]) -> None:
        # `while not closing`, not `while True`: Python 3.11's asyncio.wait_for (used by RPCs) can
        # swallow a cancellation that races with a completed result; shutdown must still end the loop
        while not self.life.closing:
            await asyncio.sleep(interval)
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("periodic %s failed", getattr(fn, "__name__", fn))

    def wake_rebalance(self) -> None:
        if self.parts is not None:
            self.parts.rebalancer.wake()

    async def rebalance_now(self) -> bool:
        try:
            return await self._running().rebalancer.do_rebalance()
        except AclDeniedError as exc:
            self.note_denied("rebalance", exc)
            raise

    async def persist_offsets(self) -> None:
        await self._running().offsets.persist_all(list(self.table))  # refusals go to note_denied

    def heartbeat_data(self) -> dict[str, Any]:
        return {
            "clientID": self.client_id,
            "consumerDataSet": [{
                "consumeFromWhere": enum_value(self.config.consume_from_where),
                "consumeType": "CONSUME_PASSIVELY",
                "groupName": self.ns_group,
                "messageModel": enum_value(self.config.message_model),
                "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()],
                "unitMode": self.config.unit_mode,
            }],
            "producerDataSet": [{"groupName": INNER_PRODUCER_GROUP}],
        }

    async def send_heartbeat(self, data: dict[str, Any] | None = None) -> bool:
        """HEART_BEAT to every known broker (masters and slaves); True if one succeeded."""
        client = self._running().client
        data = data or self.heartbeat_data()
        ok = False
        for name in client.broker_addrs():
            ok = await self._heartbeat_broker(client, name, data, logging.WARNING) or ok
        return ok

    def renew_on(self, broker: str) -> None:
        """A pull found ``broker`` unreachable, or the broker no longer knows this member (it restarted
        and lost its consumer table): refresh routes and heartbeat it as soon as it answers, so pulls
        resume within about a second of the broker accepting connections rather than at the next
        30 s heartbeat or route poll."""
        if self.life.closing or broker in self._renewing or self.parts is None:
            return
        self._renewing.add(broker)
        self.bg.spawn(self._renew(broker), f"renew on {broker}")

    async def _renew(self, broker: str) -> None:
        client = self._running().client
        delay = RENEW_DELAY_MIN
        try:
            while not self.life.closing:
                now = time.monotonic()
                if now - self._routes_refreshed >= ROUTE_REFRESH_MIN_INTERVAL:  # it may have moved
                    self._routes_refreshed = now
                    await client.refresh_routes()
                if await self._heartbeat_broker(client, broker):
                    log.info("renewed the subscription on %s", broker)
                    return
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(RENEW_DELAY_MAX, delay * 2)
        finally:
            self._renewing.discard(broker)

    async def _heartbeat_broker(self, client: MQClient, broker: str, data: dict[str, Any] | None = None,
                                level: int = logging.DEBUG) -> bool:
        """HEART_BEAT to every address of ``broker``; True if one succeeded (failures logged at ``level``)."""
        data = data or self.heartbeat_data()
        ok = False
        for addr in client.broker_addrs().get(broker, {}).values():
            try:
                await client.heartbeat(addr, data, HEARTBEAT_TIMEOUT)
                ok = True
            except AclDeniedError as exc:
                self.note_denied(f"heartbeat to {broker}", exc)
            except RocketMQError as exc:
                log.log(level, "heartbeat to %s (%s) failed: %s", broker, addr, exc)
        return ok

    async def on_queues_changed(self, topic: str, mq_all: frozenset[MessageQueue],
                                mine: frozenset[MessageQueue]) -> None:
        """Java messageQueueChanged: topic thresholds, new subVersion, immediate heartbeat."""
        self.adjust_thresholds(len(self.table))
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
            self.limits.count = max(1, cfg.pull_threshold_for_topic // n)
        if cfg.pull_threshold_size_for_topic != -1:
            self.limits.bytes = max(1, cfg.pull_threshold_size_for_topic // n) * 1024 * 1024

    def note_denied(self, what: str, err: AclDeniedError) -> None:
        """Record a request the broker's ACL refused (`PushConsumer.denied`, ``stats()["denied"]``): the
        consumer fails (`fail`)."""
        if self.denied is None or self.denied.reason != err.reason:  # warning: callers raise or report it
            log.warning("%s refused%s: %s", what, "" if self.failure else "; the consumer stops", err)
        self.denied = err
        self.fail(what, err)

    def fail(self, what: str, err: RocketMQError) -> None:
        """A terminal failure: no new pull or rebalance from now on; the callbacks hear it once.

        What was consumed before it is still committed by `shutdown` (its offsets were read); the
        caller is expected to shut the consumer down and report ``err``.
        """
        if self.failure is not None:
            return
        self.failure = err
        self.life.failed = True
        log.debug("consumer %s failed (%s)", self.group, what)  # the caller logged why (a warning: its owner reports it)
        for callback in list(self.failure_callbacks):
            self._tell(callback, err)

    def on_failure(self, callback: FailureCallback) -> None:
        """``callback(error)`` once, on the consumer's loop, at its terminal failure (at once if it failed)."""
        self.failure_callbacks.append(callback)
        if self.failure is not None:
            self._tell(callback, self.failure)

    @staticmethod
    def _tell(callback: FailureCallback, err: RocketMQError) -> None:
        try:
            callback(err)
        except Exception:  # a user callback must not hide the failure from the others
            log.exception("on_failure callback failed")

    # -- broker requests (ports.BrokerRequests) -------------------------------------------------
    def owns_group(self, group: str | None) -> bool:
        return group in (self.ns_group, self.group)

    async def reset_offsets(self, topic: str, table: dict[MessageQueue, int]) -> None:
        await self._running().rebalancer.reset_offsets(self.config.with_namespace(topic), table)

    def running_info(self) -> dict[str, Any]:
        parts = self._running()
        return consumer_running_info(config=self.config, group=self.group, orderly=self.orderly,
                                     started_at=self.started_at,
                                     # released orderly queues waiting for their unlock show as
                                     # dropped, with tryUnlockTimes, as Java's table keeps them
                                     table={**parts.rebalancer.releasing, **self.table},
                                     memory_offset=parts.offsets.memory_offset, subscriptions=self.subscriptions,
                                     stats=self.consume_stats)

    async def consume_directly(self, body: bytes, broker_name: str) -> dict[str, Any]:
        """Run the listener on the one message of ``body`` (CONSUME_MESSAGE_DIRECTLY)."""
        try:
            msgs = decode_messages(body)
        except MessageDecodeError as exc:
            raise ProtocolError(f"bad message body: {exc}") from None
        if len(msgs) != 1:
            raise ProtocolError(f"expected 1 message, got {len(msgs)}")
        msg = msgs[0]
        msg.broker_name = broker_name
        mq = MessageQueue(msg.topic, broker_name, msg.queue_id)
        if self.batch_listener is not None:
            fn, decoder = self.batch_listener
            batch = decoder(body, mq, PullFilter(None, None, mq.topic.startswith(RETRY_PREFIX),
                                                 self.config.namespace))
            return await consume_message_directly(run_listener(fn, batch), ConsumeContext(mq), False)
        assert self.listener is not None
        ctx = OrderlyContext(mq) if self.orderly else ConsumeContext(mq)
        return await consume_message_directly(run_listener(self.listener, [msg]), ctx, self.orderly)

    def offsets_of(self, topic: str) -> dict[MessageQueue, int]:
        if self.parts is None:
            return {}
        return self.parts.offsets.clone_offset_table(self.config.with_namespace(topic))

    # -- user-facing helpers --------------------------------------------------------------------
    def suspend(self) -> None:
        self.life.paused = True

    def resume(self) -> None:
        self.life.paused = False
        self.wake_rebalance()

    def assigned_queues(self) -> frozenset[MessageQueue]:
        return frozenset(mq for mq in self.table if not mq.topic.startswith(RETRY_PREFIX))

    def set_stop_offsets(self, offsets: dict[MessageQueue, int]) -> None:
        self.stops.update({self._ns_mq(mq): int(off) for mq, off in offsets.items()})

    def _ns_mq(self, mq: MessageQueue) -> MessageQueue:
        topic = self.config.with_namespace(mq.topic)
        return mq if topic == mq.topic else MessageQueue(topic, mq.broker_name, mq.queue_id)

    def stats(self) -> dict[str, Any]:
        parts = self.parts
        table = self.table
        pull = parts.pull if parts is not None else None
        send_back = parts.send_back if parts is not None else None
        errors = self.bg.errors
        if parts is not None:
            errors += parts.pull.bg.errors + parts.consume.bg.errors
        return {
            "group": self.group,
            "client_id": self.client_id if parts is not None else None,
            "state": self.life.state.value,
            "paused": self.life.paused,
            "model": enum_value(self.config.message_model),
            "orderly": self.orderly,
            "assigned_queues": len(table),
            "cached_messages": sum(pq.count for pq in table.values()),
            "cached_bytes": sum(pq.msg_size for pq in table.values()),
            "max_cached_in_queue": max((pq.count for pq in table.values()), default=0),
            "pulls": pull.pulls if pull else 0,
            "pulled_messages": self.consume_stats.total("pulled"),
            "flow_control_delays": pull.flow_control_hits if pull else 0,
            "consumed_ok": self.consume_stats.total("consumed_ok"),
            "consumed_failed": self.consume_stats.total("consumed_failed"),
            "sent_back": send_back.sent_back if send_back else 0,
            "fallback_sends": send_back.fallback_sends if send_back else 0,
            "background_errors": errors,
            "denied": str(self.denied) if self.denied is not None else None,
            "offsets": {str(mq): off for mq, off in parts.offsets.table.items()} if parts is not None else {},
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
