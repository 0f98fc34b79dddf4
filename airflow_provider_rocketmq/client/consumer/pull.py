"""Pull service: one long-polling loop per owned queue (Java PullMessageService).

Each owned queue has exactly one asyncio task, so at most one PULL_MESSAGE is
in flight per queue. Before each pull the loop applies flow control (cached
count, bytes and span; the pull is *delayed* 50 ms, never dropped), then sends a
suspended pull, decodes the body once per batch and hands the whole batch to the
consume service.

Unlike Java, pulls never piggy-back the consumed offset (sysFlag 2, never the
commit bit 1): a real broker applies that offset on its pull executor, after an
UPDATE_CONSUMER_OFFSET sent later may already have landed, and the older value
wins. The offset store is the only writer of offsets (offset_store.py).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections.abc import Callable, Mapping

from ..connection import RemotingProtocol
from ..mqclient import MQClient
from ..protocol.batch import BatchDecoder, PulledBatch, filter_for
from ..protocol.codes import PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND, RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.errors import (
    AclDeniedError,
    MessageDecodeError,
    RefusedRequest,
    RequestTimeoutError,
    RocketMQError,
    broker_error,
)
from ..protocol.message import PROPERTY_RETRY_TOPIC, MessageExt, decode_messages_sized
from ..protocol.names import RETRY_PREFIX
from ..protocol.queue import MessageQueue
from ..pull_request import PullFrame
from .config import ConsumerConfig
from .lifecycle import Background, Lifecycle
from .ports import DeniedHook, FlowLimits, ForgetQueue, PullOffsets, StartOffset, StopOffsets
from .process_queue import ProcessQueue
from .stats import ConsumeStatsTable, TopicStats
from .subscription import SubscriptionData

log = logging.getLogger(__name__)


DELAY_FLOW_CONTROL = 0.05  # local thresholds exceeded, at most (Java PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL)
DELAY_BROKER_FLOW_CONTROL = 0.02  # broker answered FLOW_CONTROL (215)
DELAY_SUSPENDED = 1.0  # consumer paused
DELAY_OFFSET_ILLEGAL = 10.0  # Java waits before re-seeding an illegal offset (lets in-flight work settle)
# After a broker restart or a dropped connection: retry soon (0.2 s doubling to 1 s, jittered), not
# after pull_time_delay_when_exception (3 s), while `on_trouble` renews the member on that broker
RECONNECT_DELAY_MIN = 0.2
RECONNECT_DELAY_MAX = 1.0
# the broker does not know this member's subscription (it restarted): the heartbeat brings it back
_MEMBER_UNKNOWN = (ResponseCode.SUBSCRIPTION_NOT_EXIST, ResponseCode.SUBSCRIPTION_NOT_LATEST)
SWEEP_INTERVAL = 1.0  # how often overdue long polls are failed (their timeout is tens of seconds)



class _Wait(enum.Enum):
    """Why a queue's next pull waits (`PullService._reason_to_wait`)."""

    PAUSED = "the consumer is suspended"
    CACHE_FULL = "flow control: the queue's cache is over a threshold"
    UNLOCKED = "orderly: the queue is not locked on the broker"
    OFFSET_TO_REREAD = "orderly: the stored offset is read again after locking"
    AT_STOP = "the queue reached its stop offset"


SubmitMessages = Callable[[list[MessageExt], ProcessQueue, MessageQueue], None]
SubmitBatch = Callable[[PulledBatch, ProcessQueue, MessageQueue], None]


def _no_message_listener(msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
    raise AssertionError("a batch listener's pull loop decoded messages")


class PullService:
    """Starts, runs and stops the per-queue pull loops of one consumer.

    Batches go to ``submit`` (message listeners, decoded by `decode_messages_sized`) or, with a
    ``decoder``, to ``submit_batch`` (batch listeners); ``settle`` runs before each flow-control
    check so that finished consumption frees the cache without a wake-up of its own.
    """

    def __init__(self, *, config: ConsumerConfig, client: MQClient, group: str,
                 subscriptions: Mapping[str, SubscriptionData], life: Lifecycle, offsets: PullOffsets,
                 limits: FlowLimits, stops: StopOffsets, orderly: bool, start_offset: StartOffset,
                 forget_queue: ForgetQueue, settle: Callable[[], None], on_denied: DeniedHook,
                 on_trouble: Callable[[str], None] = lambda broker: None,
                 stats: ConsumeStatsTable,
                 submit: SubmitMessages | None = None,
                 batches: tuple[BatchDecoder, SubmitBatch] | None = None) -> None:
        if (submit is None) == (batches is None):
            raise ValueError("give exactly one of submit (message listeners) and batches (batch listeners)")
        self.config = config
        self.client = client
        self.group = group  # namespaced
        self.subscriptions = subscriptions
        self.life = life
        self.offsets = offsets
        self.limits = limits
        self.stops = stops
        self.orderly = orderly
        self.start_offset = start_offset
        self.forget_queue = forget_queue
        self.settle = settle
        self.on_denied = on_denied
        self.on_trouble = on_trouble  # (broker name): unreachable, or it no longer knows this member
        self.stats = stats
        self.submit: SubmitMessages = submit if submit is not None else _no_message_listener
        self.batches = batches
        self.bg = Background("pull")
        self.tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self.next_offsets: dict[MessageQueue, int] = {}
        self.suggested_broker: dict[MessageQueue, int] = {}
        self._frames: dict[MessageQueue, PullFrame] = {}
        self._conns: dict[str, RemotingProtocol] = {}
        # in-flight long polls: deadline and response future, failed by one periodic sweep
        # rather than a timer per pull
        self._waiting: dict[int, tuple[float, asyncio.Future[RemotingCommand], MessageQueue]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.now = time.monotonic
        self.pulls = 0
        self.flow_control_hits = 0

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        self.stop_queue(mq)
        self.next_offsets[mq] = offset
        self._spawn_loop(mq, pq, 0.0)
        if self._sweeper is None:
            self._sweeper = self.bg.spawn(self._sweep(), "pull timeouts")

    def _spawn_loop(self, mq: MessageQueue, pq: ProcessQueue, delay: float) -> None:
        self.tasks[mq] = self.bg.spawn(self._loop(mq, pq, delay), f"pull {mq}",
                                       on_crash=lambda exc: self._recover(mq, pq))

    def _recover(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """A pull loop died of an unexpected exception (logged and counted by `Background`)."""
        task = self.tasks.get(mq)
        if task is None or not task.done() or self.life.closing:
            return  # stopped on purpose, or already replaced by a new start_queue
        if pq.dropped:  # mid-repair of an illegal offset: let the next rebalance take it again
            del self.tasks[mq]
            self.forget_queue(mq, pq)
            return
        log.warning("restarting the pull loop of %s in %.1fs", mq, self.config.pull_time_delay_when_exception)
        self._spawn_loop(mq, pq, self.config.pull_time_delay_when_exception)

    def stop_queue(self, mq: MessageQueue) -> None:
        task = self.tasks.pop(mq, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def stop_all(self) -> None:
        self.tasks.clear()
        self._sweeper = None
        # bounded: a cancelled long-poll must not hold shutdown (the loop thread cancels leftovers)
        await self.bg.cancel_all(timeout=2.0)

    # -- the loop ---------------------------------------------------------------------------
    async def _loop(self, mq: MessageQueue, pq: ProcessQueue, delay: float = 0.0) -> None:
        """Pull ``mq`` until its queue is dropped or the consumer closes: wait until a pull may go
        (`_reason_to_wait`), pull, hand what came to the consume service."""
        life = self.life
        settle = self.settle
        deliver = self._deliver_messages if self.batches is None else self._deliver_batch
        sub = self.subscriptions.get(mq.topic)
        st = self.stats.topic(mq.topic)
        now = self.now
        offset_reread = False  # orderly: the stored offset was read again since the lock was taken
        troubles = 0  # consecutive pulls lost to a broker restart / dropped connection
        while not pq.dropped and not life.closing and not life.failed:
            settle()  # concurrent mode: finished batches free the cache before flow control
            if delay:
                await asyncio.sleep(delay)
                delay = 0.0
                if pq.dropped or life.closing:
                    return
            offset = self.next_offsets[mq]
            stop = self.stops.get(mq)
            wait = self._reason_to_wait(pq, offset, stop, offset_reread)
            if wait is not None:
                delay, offset_reread = await self._wait(wait, mq, pq, offset_reread)
                continue
            sub = self.subscriptions.get(mq.topic) or sub
            if sub is None:
                return
            began = now()
            try:
                resp = await self._pull(mq, offset, self.config.pull_batch_size if stop is None
                                        else min(self.config.pull_batch_size, stop - offset), sub)
            except RocketMQError as exc:  # no connection, no route, no answer: reconnect soon
                if not (pq.dropped or life.closing):
                    delay = self._trouble(mq, troubles, "pull %s at %d failed: %s", mq, offset, exc)
                    troubles += 1
                continue
            if pq.dropped or life.failed:  # a failed consumer delivers nothing more, even what was pulled
                return
            pq.last_pull_time = t = now()
            st.pulls += 1
            st.pull_rt += t - began
            code = resp.code
            if code in _MEMBER_UNKNOWN:
                delay = self._trouble(mq, troubles, "pull %s at %d: broker code %d %s; renewing the subscription",
                                      mq, offset, code, (resp.remark or "").split("\n")[0])
                troubles += 1
                continue
            troubles = 0
            self.pulls += 1
            if code == ResponseCode.SUCCESS:
                delay = deliver(mq, pq, resp, offset, stop, sub, st)
            else:
                after = await self._without_messages(mq, pq, resp, offset)
                if after is None:  # the queue was handed back to the rebalancer
                    return
                delay = after

    def _reason_to_wait(self, pq: ProcessQueue, offset: int, stop: int | None,
                        offset_reread: bool) -> _Wait | None:
        """Why the next pull of ``pq`` may not go now (None: it may), in the order they are checked."""
        if self.life.paused:
            return _Wait.PAUSED
        # orderly: taken but uncommitted messages still occupy the cache (Java's msgCount)
        orderly = self.orderly
        count = pq.count if orderly else pq.cached_count
        limits = self.limits
        if count > limits.count or pq.msg_size > limits.bytes \
                or (count > 1 and not orderly and pq.span() > self.config.consume_concurrently_max_span):
            return _Wait.CACHE_FULL
        if orderly and self.config.clustering:
            if not pq.locked:
                return _Wait.UNLOCKED
            if not offset_reread:  # first pull after locking: read the stored offset again
                return _Wait.OFFSET_TO_REREAD
        if stop is not None and offset >= stop:
            return _Wait.AT_STOP
        return None

    async def _wait(self, why: _Wait, mq: MessageQueue, pq: ProcessQueue,
                    offset_reread: bool) -> tuple[float, bool]:
        """Wait out ``why`` (or say how long to wait): the delay before the loop looks again, and
        whether the orderly offset has been read again."""
        if why is _Wait.PAUSED:
            return DELAY_SUSPENDED, offset_reread
        if why is _Wait.CACHE_FULL:
            self.flow_control_hits += 1
            await pq.wait_for_space(DELAY_FLOW_CONTROL)  # early when a batch leaves the cache
            return 0.0, offset_reread
        if why is _Wait.OFFSET_TO_REREAD:
            off = await self.start_offset(mq)
            if off >= 0:
                self.next_offsets[mq] = off
                return 0.0, True
        elif why is _Wait.AT_STOP:
            await self.stops.wait_changed()
            return 0.0, offset_reread
        return self.config.pull_time_delay_when_exception, offset_reread

    def _trouble(self, mq: MessageQueue, troubles: int, msg: str, *args: object) -> float:
        """A pull lost to a broker restart or a dropped connection: logged (``msg % args``) at the first
        of an episode; the delay before the next try."""
        if not troubles:
            log.warning(msg, *args)
        return self._reconnect_delay(mq, troubles)

    def _next_begin(self, mq: MessageQueue, resp: RemotingCommand) -> int | None:
        """The answer's nextBeginOffset (its suggested broker noted); None, logged, when it has none."""
        ext = resp.ext_fields or {}
        try:
            next_begin = int(ext["nextBeginOffset"])
            self.suggested_broker[mq] = int(ext.get("suggestWhichBrokerId", 0))
        except (KeyError, ValueError):
            log.warning("pull response for %s lacks a valid nextBeginOffset: %r", mq, ext)
            return None
        return next_begin

    def _deliver_messages(self, mq: MessageQueue, pq: ProcessQueue, resp: RemotingCommand, offset: int,
                          stop: int | None, sub: SubscriptionData, st: TopicStats) -> float:
        """SUCCESS for a message listener: decode, filter, cache and submit; the delay before the next pull."""
        cfg = self.config
        next_begin = self._next_begin(mq, resp)
        if next_begin is None:
            return cfg.pull_time_delay_when_exception
        try:
            msgs, body_bytes = decode_messages_sized(resp.body or b"", broker_name=mq.broker_name)
        except MessageDecodeError as exc:
            # a corrupt body must not be skipped silently nor retried forever at full speed
            log.error("corrupt pull body for %s at %d: %s", mq, offset, exc)
            return cfg.pull_time_delay_when_exception
        decoded = msgs
        if stop is not None:
            next_begin = min(next_begin, stop)
            if msgs and msgs[-1].queue_offset >= stop:
                msgs = [m for m in msgs if m.queue_offset < stop]
        self.next_offsets[mq] = next_begin
        if msgs and (mq.topic.startswith(RETRY_PREFIX) or cfg.namespace or sub.tags_set):
            msgs = self._prepare(mq, msgs, sub.tags_set)
        if not msgs:
            return 0.0
        st.pulled += len(msgs)
        pq.put_messages(msgs, body_bytes if msgs is decoded else -1)  # filtered: summed there
        self.submit(msgs, pq, mq)
        return cfg.pull_interval

    def _deliver_batch(self, mq: MessageQueue, pq: ProcessQueue, resp: RemotingCommand, offset: int,
                       stop: int | None, sub: SubscriptionData, st: TopicStats) -> float:
        """SUCCESS for a batch listener: decode with its decoder, cache and submit; the delay before the next pull."""
        cfg = self.config
        next_begin = self._next_begin(mq, resp)
        if next_begin is None:
            return cfg.pull_time_delay_when_exception
        assert self.batches is not None
        decoder, submit_batch = self.batches
        try:
            batch = decoder(resp.body or b"", mq, filter_for(mq, stop, sub.tags_set, cfg.namespace))
        except MessageDecodeError as exc:
            log.error("corrupt pull body for %s at %d: %s", mq, offset, exc)
            return cfg.pull_time_delay_when_exception
        self.next_offsets[mq] = next_begin if stop is None else min(next_begin, stop)
        if batch is None or not pq.put_batch(batch):
            return 0.0
        st.pulled += batch.count
        submit_batch(batch, pq, mq)
        return cfg.pull_interval

    async def _without_messages(self, mq: MessageQueue, pq: ProcessQueue, resp: RemotingCommand,
                                offset: int) -> float | None:
        """Any answer but SUCCESS: the delay before the next pull, or None when the loop ends (the queue was
        given back after an illegal offset, committed mode; or the ACL refused the pull)."""
        cfg = self.config
        code = resp.code
        if code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED):
            next_begin = self._next_begin(mq, resp)
            if next_begin is None:
                return cfg.pull_time_delay_when_exception
            if code != ResponseCode.PULL_OFFSET_MOVED:
                self.next_offsets[mq] = next_begin
                if not pq.cached_count and not pq.consuming:  # Java correctTagsOffset
                    self.offsets.update_offset(mq, next_begin, increase_only=True)
                return 0.0
            log.warning("offset %d of %s is illegal; moving to %d", offset, mq, next_begin)
            if not cfg.enable_offset_commit:
                # nothing is persisted in this mode, so Java's drop + re-read of the stored offset
                # would loop on the same illegal offset: move on in place instead
                self.next_offsets[mq] = next_begin
                return 0.0
            await self._repair_offset(mq, pq, next_begin)
            return None
        if code == ResponseCode.FLOW_CONTROL:
            return DELAY_BROKER_FLOW_CONTROL
        err = broker_error(code, resp.remark, addr=mq.broker_name,
                           request=RefusedRequest(RequestCode.PULL_MESSAGE, cfg.access_key))
        if isinstance(err, AclDeniedError):
            # Java retries; here the consumer fails (`PushConsumer.failure`): the same credentials get
            # the same answer, and a consumer that silently reads nothing looks like an idle topic
            self.on_denied(f"pull of {mq}", err)
            return None
        if not self.life.closing:
            log.warning("pull %s at %d: broker code %d %s", mq, offset, code, resp.remark or "")
        return cfg.pull_time_delay_when_exception

    async def _repair_offset(self, mq: MessageQueue, pq: ProcessQueue, next_begin: int) -> None:
        """Java's illegal-offset repair: drop the queue, let in-flight work settle, store the broker's
        offset and hand the queue back to the rebalancer, which takes it again from there."""
        pq.drop()
        await asyncio.sleep(DELAY_OFFSET_ILLEGAL)
        self.offsets.update_offset(mq, next_begin, increase_only=False)
        try:
            await self.offsets.persist(mq)
        except Exception:  # an OSError of the local file: the queue must still be taken again
            log.exception("cannot persist the corrected offset %d of %s", next_begin, mq)
        self.tasks.pop(mq, None)
        self.forget_queue(mq, pq)

    def _reconnect_delay(self, mq: MessageQueue, troubles: int) -> float:
        """Report the broker's trouble (at the start of an episode of this queue, then every 5th
        retry) and pick the next retry delay."""
        if troubles % 5 == 0:
            self.on_trouble(mq.broker_name)
        return min(RECONNECT_DELAY_MAX, RECONNECT_DELAY_MIN * (1 << min(troubles, 8))) * random.uniform(0.8, 1.2)

    async def _pull(self, mq: MessageQueue, offset: int, max_nums: int, sub: SubscriptionData) -> RemotingCommand:
        cfg = self.config
        client = self.client
        broker_id = self.suggested_broker.get(mq, 0)
        addr = client.broker_addr(mq.broker_name, broker_id)
        # the hottest RPC: straight to the pooled connection (MQClient.invoke adds two coroutine
        # layers per pull); the pool applies the same ACL hook and reconnects a closed connection
        conn = self._conns.get(addr)
        if conn is None or conn.is_closed:
            conn = self._conns[addr] = await client.pool.get(addr)
        flag = PULL_FLAG_SUSPEND  # no commit bit: see the module docstring
        subscription = None
        if cfg.post_subscription_when_pull:
            flag |= PULL_FLAG_SUBSCRIPTION
            subscription = sub.sub_string
        frame = self._frames.get(mq)
        if frame is None:  # the per-queue constant part (extFields are strings)
            frame = self._frames[mq] = PullFrame({
                "consumerGroup": self.group, "topic": mq.topic, "queueId": str(mq.queue_id),
                "suspendTimeoutMillis": str(int(cfg.broker_suspend_max_time * 1000)),
                "expressionType": sub.expression_type, "bname": mq.broker_name})
        opaque, fut = frame.start(conn, offset, max_nums, flag, sub.sub_version, subscription)
        self._waiting[opaque] = (self.now() + cfg.consumer_timeout_when_suspend, fut, mq)
        try:
            return await fut
        finally:
            conn.forget(opaque)
            del self._waiting[opaque]

    async def _sweep(self) -> None:
        timeout = self.config.consumer_timeout_when_suspend
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            now = self.now()
            for deadline, fut, mq in list(self._waiting.values()):
                if now > deadline and not fut.done():
                    fut.set_exception(RequestTimeoutError(
                        f"no response to the pull of {mq} within {timeout:.1f}s"))

    def _prepare(self, mq: MessageQueue, msgs: list[MessageExt], tags: frozenset[str]) -> list[MessageExt]:
        """Exact tag re-filter (hash collisions), original topic of retries, namespace."""
        if tags:
            msgs = [m for m in msgs if m.tags in tags]
        if mq.topic.startswith(RETRY_PREFIX):
            for m in msgs:
                original = m.properties.get(PROPERTY_RETRY_TOPIC)
                if original:
                    m.topic = original
        ns = self.config.namespace
        if ns:
            strip = self.config.without_namespace
            for m in msgs:
                m.topic = strip(m.topic)
        return msgs
