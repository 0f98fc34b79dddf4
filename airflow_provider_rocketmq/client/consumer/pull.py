"""Pull service: one long-polling loop per owned queue (Java PullMessageService).

Each owned queue has exactly one asyncio task, so at most one PULL_MESSAGE is
in flight per queue. Before each pull the loop applies flow control (cached
count, bytes and span; the pull is *delayed* 50 ms, never dropped), then sends a
suspended pull that piggy-backs the consumed offset (sysFlag 3 with commit, 2
without, exactly like the recorded Java frames), decodes the body once per batch
and hands the whole batch to the consume service.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..config import RETRY_PREFIX
from ..errors import AclDeniedError, MessageDecodeError, RequestTimeoutError, RocketMQError, broker_error
from ..message import PROPERTY_RETRY_TOPIC, MessageExt, decode_messages
from ..queue import MessageQueue
from ..remoting.codes import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    RequestCode,
    ResponseCode,
)
from ..remoting.command import RemotingCommand
from ..remoting.connection import RemotingProtocol, next_opaque
from .process_queue import ProcessQueue
from .pull_frame import PullFrame
from .subscription import SubscriptionData

if TYPE_CHECKING:
    from .core import ConsumerCore

log = logging.getLogger(__name__)


DELAY_FLOW_CONTROL = 0.05  # local thresholds exceeded (Java PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL)
DELAY_BROKER_FLOW_CONTROL = 0.02  # broker answered FLOW_CONTROL (215)
DELAY_SUSPENDED = 1.0  # consumer paused
DELAY_OFFSET_ILLEGAL = 10.0  # Java waits before re-seeding an illegal offset (lets in-flight work settle)
SWEEP_INTERVAL = 1.0  # how often overdue long polls are failed (their timeout is tens of seconds)


class PullService:
    """Starts, runs and stops the per-queue pull loops of one consumer."""

    def __init__(self, core: ConsumerCore) -> None:
        self.core = core
        self.tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self.next_offsets: dict[MessageQueue, int] = {}
        self.suggested_broker: dict[MessageQueue, int] = {}
        self.stop_offsets: dict[MessageQueue, int] = {}
        self._frames: dict[MessageQueue, PullFrame] = {}
        self._conns: dict[str, RemotingProtocol] = {}
        # in-flight long polls: deadline and response future, failed by one periodic sweep
        # rather than a timer per pull
        self._waiting: dict[int, tuple[float, asyncio.Future[RemotingCommand], MessageQueue]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.threshold_count = core.config.pull_threshold_for_queue
        self.threshold_bytes = core.config.pull_threshold_size_for_queue * 1024 * 1024
        self.pulls = 0
        self.pulled_msgs = 0
        self.flow_control_hits = 0

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        self.stop_queue(mq)
        self.next_offsets[mq] = offset
        loop = asyncio.get_running_loop()
        self.tasks[mq] = loop.create_task(self._loop(mq, pq), name=f"pull {mq}")
        if self._sweeper is None:
            self._sweeper = loop.create_task(self._sweep(), name="pull timeouts")

    def stop_queue(self, mq: MessageQueue) -> None:
        task = self.tasks.pop(mq, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def stop_all(self) -> None:
        tasks = list(self.tasks.values())
        self.tasks.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            tasks.append(self._sweeper)
            self._sweeper = None
        for t in tasks:
            t.cancel()
        if tasks:
            # bounded: a cancelled long-poll must not hold shutdown (the loop thread cancels leftovers)
            _, pending = await asyncio.wait(tasks, timeout=2.0)
            if pending:
                log.debug("%d pull task(s) still finishing after cancel", len(pending))

    # -- the loop ---------------------------------------------------------------------------
    async def _loop(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        core = self.core
        cfg = core.config
        sub = core.subscriptions.get(mq.topic)
        delay = 0.0
        previously_locked = False
        rewrite = mq.topic.startswith(RETRY_PREFIX) or bool(cfg.namespace)  # see _prepare
        # concurrent mode: settle finished batches before judging flow control (no wake-up needed)
        results = getattr(core.consume, "_results", None)
        drain = getattr(core.consume, "_drain_results", None)
        while not pq.dropped and not core.closing:
            if results:
                drain()  # type: ignore[misc]
            if delay:
                await asyncio.sleep(delay)
                delay = 0.0
                if pq.dropped or core.closing:
                    return
            if core.paused:
                delay = DELAY_SUSPENDED
                continue
            count = pq.cached_count
            if count > self.threshold_count or pq.msg_size > self.threshold_bytes \
                    or (count > 1 and not core.orderly and pq.span() > cfg.consume_concurrently_max_span):
                self.flow_control_hits += 1
                delay = DELAY_FLOW_CONTROL
                continue
            if core.orderly and cfg.clustering:
                if not pq.locked:
                    delay = cfg.pull_time_delay_when_exception
                    continue
                if not previously_locked:  # first pull after locking: re-read the stored offset
                    previously_locked = True
                    off = await core.rebalancer.compute_pull_from_where(mq)
                    if off < 0:
                        delay = cfg.pull_time_delay_when_exception
                        previously_locked = False
                        continue
                    self.next_offsets[mq] = off
            offset = self.next_offsets[mq]
            max_nums = cfg.pull_batch_size
            stop = self.stop_offsets.get(mq)
            if stop is not None:
                if offset >= stop:
                    await core.wait_stop_offsets_changed()
                    continue
                max_nums = min(max_nums, stop - offset)
            sub = core.subscriptions.get(mq.topic) or sub
            if sub is None:
                return
            try:
                resp = await self._pull(mq, offset, max_nums, sub)
            except asyncio.CancelledError:
                raise
            except RocketMQError as exc:
                if not pq.dropped and not core.closing:
                    log.warning("pull %s at %d failed: %s", mq, offset, exc)
                delay = cfg.pull_time_delay_when_exception
                continue
            if pq.dropped:
                return
            pq.last_pull_time = core.now()
            code = resp.code
            self.pulls += 1
            ext = resp.ext_fields or {}
            if code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                        ResponseCode.PULL_OFFSET_MOVED):
                try:
                    next_begin = int(ext["nextBeginOffset"])
                    suggest = int(ext.get("suggestWhichBrokerId", 0))
                except (KeyError, ValueError):
                    log.warning("pull response for %s lacks a valid nextBeginOffset: %r", mq, ext)
                    delay = cfg.pull_time_delay_when_exception
                    continue
                self.suggested_broker[mq] = suggest
            if code == ResponseCode.SUCCESS:
                try:
                    msgs = decode_messages(resp.body or b"", broker_name=mq.broker_name)
                except MessageDecodeError as exc:
                    # a corrupt body must not be skipped silently nor retried forever at full speed
                    log.error("corrupt pull body for %s at %d: %s", mq, offset, exc)
                    delay = cfg.pull_time_delay_when_exception
                    continue
                if stop is not None:
                    next_begin = min(next_begin, stop)
                    if msgs and msgs[-1].queue_offset >= stop:
                        msgs = [m for m in msgs if m.queue_offset < stop]
                self.next_offsets[mq] = next_begin
                if msgs and (rewrite or sub.tags_set):
                    msgs = self._prepare(mq, msgs, sub.tags_set)
                if not msgs:
                    continue
                self.pulled_msgs += len(msgs)
                pq.put_messages(msgs)
                core.consume.submit(msgs, pq, mq)  # type: ignore[union-attr]  # set before pulls start
                if cfg.pull_interval:
                    delay = cfg.pull_interval
            elif code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                self.next_offsets[mq] = next_begin
                if not pq.cached_count and not pq.consuming:  # Java correctTagsOffset
                    core.offset_store.update_offset(mq, next_begin, increase_only=True)
            elif code == ResponseCode.PULL_OFFSET_MOVED and not cfg.enable_offset_commit:
                # nothing is persisted in this mode, so Java's drop + re-read of the stored offset
                # would loop on the same illegal offset: move on in place instead
                log.warning("offset %d of %s is illegal; moving to %d", offset, mq, next_begin)
                self.next_offsets[mq] = next_begin
            elif code == ResponseCode.PULL_OFFSET_MOVED:
                log.warning("offset %d of %s is illegal; moving to %d", offset, mq, next_begin)
                pq.drop()
                await asyncio.sleep(DELAY_OFFSET_ILLEGAL)
                core.offset_store.update_offset(mq, next_begin, increase_only=False)
                await core.offset_store.persist(mq)
                self.tasks.pop(mq, None)
                core.rebalancer.remove_queue(mq)
                return
            elif code == ResponseCode.FLOW_CONTROL:
                delay = DELAY_BROKER_FLOW_CONTROL
            else:
                err = broker_error(code, resp.remark, addr=mq.broker_name)
                if isinstance(err, AclDeniedError):
                    core.note_denied(f"pull of {mq}", err)  # retried like Java; reported through `denied`
                elif not core.closing:
                    log.warning("pull %s at %d: broker code %d %s", mq, offset, code, resp.remark or "")
                delay = cfg.pull_time_delay_when_exception

    async def _pull(self, mq: MessageQueue, offset: int, max_nums: int, sub: SubscriptionData) -> RemotingCommand:
        core = self.core
        cfg = core.config
        client = core.client
        broker_id = self.suggested_broker.get(mq, 0)
        addr = client.broker_addr(mq.broker_name, broker_id)
        # the hottest RPC: straight to the pooled connection (MQClient.invoke adds two coroutine
        # layers per pull); the pool applies the same ACL hook and reconnects a closed connection
        conn = self._conns.get(addr)
        if conn is None or conn.is_closed:
            conn = self._conns[addr] = await client.pool.get(addr)
        commit = core.offset_store.memory_offset(mq) if cfg.clustering else -1
        flag = PULL_FLAG_SUSPEND
        if commit > 0 and cfg.enable_offset_commit and broker_id == 0:
            flag |= PULL_FLAG_COMMIT_OFFSET
        subscription = None
        if cfg.post_subscription_when_pull:
            flag |= PULL_FLAG_SUBSCRIPTION
            subscription = sub.sub_string
        frame = self._frames.get(mq)
        if frame is None:  # the per-queue constant part (extFields are strings)
            frame = self._frames[mq] = PullFrame({
                "consumerGroup": core.ns_group, "topic": mq.topic, "queueId": str(mq.queue_id),
                "suspendTimeoutMillis": str(int(cfg.broker_suspend_max_time * 1000)),
                "expressionType": sub.expression_type, "bname": mq.broker_name})
        commit = max(0, commit)
        if conn.rpc_hook is None:
            opaque = next_opaque()
            fut = conn.start_encoded(opaque, frame.render(opaque, offset, max_nums, flag, commit,
                                                          sub.sub_version, subscription))
        else:  # a signing hook needs the command itself
            cmd = RemotingCommand(RequestCode.PULL_MESSAGE,
                                  frame.fields(offset, max_nums, flag, commit, sub.sub_version, subscription))
            fut = conn.start_request(cmd)
            opaque = cmd.opaque
        self._waiting[opaque] = (core.now() + cfg.consumer_timeout_when_suspend, fut, mq)
        try:
            return await fut
        finally:
            conn.forget(opaque)
            del self._waiting[opaque]

    async def _sweep(self) -> None:
        timeout = self.core.config.consumer_timeout_when_suspend
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            now = self.core.now()
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
        ns = self.core.config.namespace
        if ns:
            strip = self.core.config.without_namespace
            for m in msgs:
                m.topic = strip(m.topic)
        return msgs
