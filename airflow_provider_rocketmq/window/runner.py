"""Consume one bounded window with a push consumer and stage it as it goes (no Airflow imports).

`run_window`: snapshot every queue's high-water mark (the consumer's stop offsets: it never pulls
past them); run a push consumer of the group (no offset commits; a batch listener with the
columnar decoder) until every queue it owns reached its mark or a bound (messages, bytes,
duration) is hit, each queue's contiguous prefix streamed to Parquet part files as it advances
(collector.py, writer.py: memory holds the consumer's caches, the writer's bounded queue and one
row group, whatever the window's size); publish the last part file, then write the manifest - the
commit point (staging.py: fsync and rename locally, one completed upload on an object store; part
files without a manifest are never trusted); then commit the manifest's end offsets if asked.

A re-run with the same staging location finds the manifest and returns it (committing again if
asked); without one it removes the earlier attempt's part files and consumes again. What is
committed was staged first, so nothing is lost while the staging location keeps what was written.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from airflow_provider_rocketmq.client.consumer.config import ConsumeFromWhere, ConsumeStatus
from airflow_provider_rocketmq.client.protocol.columnar import ColumnBatch, decode_columns
from airflow_provider_rocketmq.client.protocol.errors import ConfigError, RocketMQError
from airflow_provider_rocketmq.client.protocol.names import RETRY_PREFIX
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.window.collector import (
    QueueKey,
    QueueSlice,
    WindowCollector,
    parse_tag_expression,
)
from airflow_provider_rocketmq.window.commit import OffsetAdmin, commit_manifest
from airflow_provider_rocketmq.window.manifest import (
    MANIFEST_NAME,
    FileEntry,
    QueueRange,
    WindowManifest,
    new_window_id,
    read_manifest,
    write_manifest,
)
from airflow_provider_rocketmq.window.progress import ProgressHook
from airflow_provider_rocketmq.window.reach import UNREACHABLE, reachable_high_water_marks
from airflow_provider_rocketmq.window.staging import StagingLocation
from airflow_provider_rocketmq.window.starts import AdminStarts, GroupStart, decidable_queues
from airflow_provider_rocketmq.window.writer import PART_PREFIX, PART_SUFFIX, StagingWriter

log = logging.getLogger(__name__)

_RECHECK_FLOORS = 2.0  # seconds between re-reads of the floors of the queues not complete yet


class WindowAdmin(OffsetAdmin, Protocol):
    """The part of `Admin` a window needs."""

    def consumer_ids(self, group: str) -> list[str]: ...

    def high_water_marks(self, topic: str) -> dict[MessageQueue, int]: ...

    def min_offset(self, mq: MessageQueue) -> int: ...

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int: ...


# register it with `register_window_listener` (a coroutine function: it runs on the consumer's loop)
Listener = Callable[[ColumnBatch, Any], Awaitable[ConsumeStatus]]
# returns a subscribed, not started PushConsumer (the runner uses on_assignment, on_failure, set_stop_offsets,
# suspend, resume, start, shutdown)
ConsumerFactory = Callable[[Listener], Any]

# ConsumerConfig defaults of a window's consumer (overridable): the flow-control cache of the whole
# topic is bounded (64 MiB), whatever the number of queues (the default bounds each queue to 100 MiB)
WINDOW_CONSUMER_DEFAULTS: dict[str, Any] = {"pull_threshold_size_for_topic": 64}


class WindowCancelledError(RocketMQError):
    """The window was stopped from outside (`run_window`'s ``cancel``): nothing was committed."""


def register_window_listener(consumer: Any, listener: Listener) -> None:
    """Attach the window's listener to a push consumer: one call per pulled batch, decoded to columns."""
    consumer.register_batch_listener(listener, decode_columns)


@dataclass(frozen=True)
class WindowSpec:
    """What to consume and where to stage it.

    ``commit``: commit the end offsets once staged (``after_staging``); otherwise the
    caller commits later from the manifest. ``assignment_timeout`` bounds the wait for
    the first rebalance (a member that gets no queue stages an empty window);
    ``idle_timeout`` stops a window that makes no progress at all (broker gone, queue
    stuck): what is contiguous is staged and the rest is left for the next window.
    ``settle_time`` > 0 (mapped instances): the member joins the group suspended and
    only takes queues once the group's membership has been stable that long, so members
    started together split the queues instead of each reading all of them first.
    ``staging_dir`` is a local directory or a URL (``s3://bucket/prefix/window``, ...)
    read and written through fsspec with ``storage_options``. ``rows_per_file`` bounds a
    part file, ``row_group_bytes`` the pulled data grouped into one Parquet row group,
    ``queue_bytes`` the pulled data waiting for the writer thread (back-pressure).
    """

    topic: str
    consumer_group: str
    staging_dir: str
    window_id: str | None = None
    expression: str = "*"
    max_messages: int | None = None
    max_bytes: int | None = None
    max_duration: float | None = None
    commit: bool = True
    rows_per_file: int = 5_000_000
    row_group_bytes: int = 8 << 20
    queue_bytes: int = 8 << 20
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    assignment_timeout: float = 60.0
    idle_timeout: float = 120.0
    settle_time: float = 0.0
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    consume_timestamp_ms: int | None = None
    shutdown_timeout: float = 30.0

    def validate(self) -> None:
        for name in ("topic", "consumer_group", "staging_dir"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(name, "must be a non-empty string")
        parse_tag_expression(self.expression)
        for name in ("max_messages", "max_bytes", "rows_per_file", "row_group_bytes", "queue_bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(name, f"must be a positive integer, got {value!r}")
        if isinstance(self.settle_time, bool) or not isinstance(self.settle_time, (int, float)) \
                or self.settle_time < 0:
            raise ConfigError("settle_time", f"must be >= 0 seconds, got {self.settle_time!r}")
        for name in ("max_duration", "assignment_timeout", "idle_timeout"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not value > 0):
                raise ConfigError(name, f"must be a positive number of seconds, got {value!r}")
        if self.window_id is not None and (not self.window_id or "/" in self.window_id
                                           or self.window_id in (".", "..")):
            raise ConfigError("window_id", f"{self.window_id!r} is not usable as a directory name")
        if self.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP and self.consume_timestamp_ms is None:
            raise ConfigError("consume_timestamp_ms", "needed with CONSUME_FROM_TIMESTAMP")


@dataclass(frozen=True)
class WindowResult:
    manifest: str
    messages: int
    bytes: int
    window_id: str
    reused: bool = False
    committed: dict[str, int] | None = None

    def to_xcom(self) -> dict[str, Any]:
        return {"manifest": self.manifest, "messages": self.messages, "bytes": self.bytes}


def run_window(
    spec: WindowSpec,
    admin: WindowAdmin,
    consumer_factory: ConsumerFactory,
    *,
    namesrv: str = "",
    cancel: threading.Event | None = None,
    progress: ProgressHook | None = None,
) -> WindowResult:
    """Consume, stage and (per ``spec.commit``) commit one window; see the module docstring.

    Setting ``cancel`` (e.g. from an operator's ``on_kill``) stops the window promptly: the
    consumer is shut down, no manifest is written and nothing is committed
    (`WindowCancelledError`). ``progress`` (`window/progress.py`) is attached to the collector
    while the window consumes and ticked from the wait loop (a reused window never attaches it).
    """
    spec.validate()
    staging = StagingLocation(spec.staging_dir, spec.storage_options)
    manifest_path = staging.url(MANIFEST_NAME)
    if staging.exists(MANIFEST_NAME):
        manifest = read_manifest(manifest_path, verify_files=True, storage_options=spec.storage_options)
        if spec.window_id is not None and manifest.window_id != spec.window_id:
            # a fixed staging path shared by runs would otherwise replay one window forever
            raise ConfigError("staging_path", f"{staging.location} already holds window {manifest.window_id!r}, "
                              f"not {spec.window_id!r}; use a directory per run (e.g. include {{{{ run_id }}}})")
        log.info("window %s already staged at %s (%d messages): reusing it", manifest.window_id,
                 manifest_path, manifest.messages)
        committed = commit_manifest(admin, manifest) if spec.commit else None
        return WindowResult(manifest_path, manifest.messages, manifest.bytes, manifest.window_id,
                            reused=True, committed=committed)

    window_id = spec.window_id or new_window_id()
    # a broker that does not answer is left out: its queues wait for the next window (window/reach.py)
    hwm_by_mq, unreachable = reachable_high_water_marks(admin, spec.topic)
    group_start = GroupStart(spec.consumer_group, spec.consume_from_where, spec.consume_timestamp_ms)
    hwm_by_mq = decidable_queues(admin, group_start, hwm_by_mq, unreachable)
    log.info("window %s: high-water marks of %s: %s", window_id, spec.topic,
             {str(mq): off for mq, off in sorted(hwm_by_mq.items())})
    _clear_leftovers(staging)
    writer = StagingWriter(staging, window_id, rows_per_file=spec.rows_per_file,
                           row_group_bytes=spec.row_group_bytes, queue_bytes=spec.queue_bytes).start()
    collector = WindowCollector(
        {_key(mq): off for mq, off in hwm_by_mq.items()},
        sink=writer.put,
        starts=AdminStarts(admin, group_start, hwm_by_mq),
        tags=parse_tag_expression(spec.expression),
        max_messages=spec.max_messages,
        max_bytes=spec.max_bytes,
    )
    consumer = None
    try:
        if progress is not None:
            progress.attach(collector)
        try:
            consumer = _consume(spec, admin, consumer_factory, collector, writer, hwm_by_mq, cancel,
                                progress.tick if progress is not None else _no_tick)
        finally:
            if progress is not None:
                progress.detach()
        collector.close()  # every admitted batch is with the writer
        if collector.error is not None:
            raise collector.error
        _check_cancel(cancel)
        files = writer.close()
        manifest = _manifest(spec, window_id, collector.slices(), files, namesrv)
        _check_cancel(cancel)
        path = write_manifest(manifest, manifest_path, storage_options=spec.storage_options)
        log.info("window %s staged: %d messages, %d bytes, %d files -> %s", window_id, manifest.messages,
                 manifest.bytes, len(manifest.files), path)
        committed = commit_manifest(admin, manifest) if spec.commit else None
    except BaseException:
        writer.abort()
        raise
    finally:
        if consumer is not None:
            _shutdown_bounded(consumer, spec.shutdown_timeout)
    return WindowResult(str(path), manifest.messages, manifest.bytes, window_id, committed=committed)


# -- consuming ---------------------------------------------------------------------------------------

class _Assignment:
    """The consumer's latest allocation of the window topic, from its ``on_assignment`` callback.

    The callback fires once a rebalance has updated the whole table, whereas
    ``assigned_queues()`` can be read half-way through one (queues are added one by one).
    """

    def __init__(self, collector: WindowCollector) -> None:
        self.collector = collector
        self.queues: frozenset[QueueKey] | None = None  # None: no rebalance result yet

    def __call__(self, topic: str, mq_all: Any, mq_divided: Any) -> None:
        if not topic.startswith(RETRY_PREFIX):
            self.queues = frozenset(_key(mq) for mq in mq_divided)  # one atomic replacement
            self.collector.notify()


def _check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise WindowCancelledError("the window was cancelled: no manifest written, nothing committed")


class _WriterRoom:
    """Waits, on an event loop, until the writer's queue has room for a batch (`reserve_room`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.fut: asyncio.Future[None] | None = None

    def wake(self) -> None:  # the writer's thread
        self.loop.call_soon_threadsafe(self._set)

    def _set(self) -> None:
        if self.fut is not None and not self.fut.done():
            self.fut.set_result(None)

    async def wait(self, writer: StagingWriter, size: int) -> None:
        # no await between a refused reservation and the future: `_set` runs on this loop after it
        while not writer.reserve_room(size, self.wake):
            self.fut = self.loop.create_future()
            await self.fut


async def _in_thread(fn: Callable[[ColumnBatch], None], batch: ColumnBatch) -> None:
    """``fn(batch)`` in a daemon thread of its own, awaited (a stuck admin call never holds up the
    interpreter's exit, as an executor's worker would)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def run() -> None:
        try:
            fn(batch)
        except BaseException as exc:
            loop.call_soon_threadsafe(_settle_future, fut, exc)
        else:
            loop.call_soon_threadsafe(_settle_future, fut, None)

    threading.Thread(target=run, name="rocketmq-window-resolve", daemon=True).start()
    await fut


def _settle_future(fut: asyncio.Future[None], exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)


def _consume(spec: WindowSpec, admin: WindowAdmin, consumer_factory: ConsumerFactory,
             collector: WindowCollector, writer: StagingWriter, hwm_by_mq: dict[MessageQueue, int],
             cancel: threading.Event | None, tick: Callable[[], None]) -> Any:
    """Run the consumer until the window is complete; returns it suspended (None: nothing to read)."""
    if not hwm_by_mq:
        return None  # a topic without queues: nothing to read
    assignment = _Assignment(collector)
    consumer = consumer_factory(_listener(collector, writer))
    try:  # from here on, every way out shuts the consumer down (or returns it to the caller, who does)
        # a terminal consumer failure (an ACL refusal of its heartbeat, rebalance, pull...) ends the
        # window with that error: nothing is staged or committed, never an empty "success"
        consumer.on_failure(collector.fail)
        consumer.on_assignment(assignment)
        # the consumer never pulls a queue past its high-water mark (nor trims a batch after it)
        consumer.set_stop_offsets(dict(hwm_by_mq))
        if spec.settle_time > 0:
            consumer.suspend()  # heartbeats register the member; no rebalance until resume()
        consumer.start()
        if spec.settle_time > 0:
            _settle(spec, admin, cancel)
            consumer.resume()
        _wait_until_done(spec, collector, assignment, {_key(mq) for mq in hwm_by_mq}, cancel, tick)
        # pull nothing more (every queue stops at what the window took), but stay a member, still
        # holding the queues: a sibling must not take them over (and re-read them from the old
        # committed offsets) before this window is committed
        frontiers = collector.frontiers()
        consumer.set_stop_offsets({mq: frontiers.get(_key(mq), hwm) for mq, hwm in hwm_by_mq.items()})
        consumer.suspend()
    except BaseException:
        _shutdown_bounded(consumer, spec.shutdown_timeout)
        raise
    return consumer


def _listener(collector: WindowCollector, writer: StagingWriter) -> Listener:
    """The window's batch listener, run on the consumer's event loop."""
    room: _WriterRoom | None = None

    async def listener(batch: ColumnBatch, ctx: Any) -> ConsumeStatus:
        # On the consumer's event loop: no consume thread to wake and no hand-off per batch, but
        # nothing here may block the loop. So the writer's room is awaited, and the rare batch that
        # needs admin round trips (a queue's first one, a gap) is offered from a thread of its own.
        # Batches of one queue still come one at a time, in order (the consumer awaits each call).
        # Always "success": a failure status would send the messages back to the group's retry
        # topic; an error is recorded instead, the runner raises it and nothing is committed.
        nonlocal room
        try:
            if not batch.mq.topic.startswith(RETRY_PREFIX):  # redeliveries of older windows are not ours
                if room is None:
                    room = _WriterRoom(asyncio.get_running_loop())
                await room.wait(writer, batch.raw_bytes)
                if not collector.try_offer(batch):
                    await _in_thread(collector.offer, batch)
        except asyncio.CancelledError:
            raise  # the consumer is shutting down: this batch is not staged, so not in the window either
        except BaseException as exc:
            collector.fail(exc)
        return ConsumeStatus.CONSUME_SUCCESS

    return listener


def _wait_until_done(spec: WindowSpec, collector: WindowCollector, assignment: _Assignment,
                     window_queues: set[QueueKey], cancel: threading.Event | None, tick: Callable[[], None]) -> None:
    """Until every owned queue is complete, or a bound, ``max_duration``, the assignment timeout or
    the idle timeout ends the window, or the listener failed; the collector takes the queues the
    consumer is assigned and re-checks their floors every `_RECHECK_FLOORS` seconds."""
    started = time.monotonic()  # bounds count from the moment queues may be taken
    deadline = started + spec.max_duration if spec.max_duration else None
    last_recheck = last_progress = time.monotonic()
    seen_version = collector.version
    retry_at: dict[QueueKey, float] = {}
    while True:
        _check_cancel(cancel)
        if collector.error is not None:
            return
        allocated = assignment.queues
        owned = sorted(k for k in allocated if k in window_queues) if allocated is not None else []
        _take_reachable(collector, owned, retry_at)
        tick()  # progress reports, once the queues just assigned count (cheap unless one is due)
        now = time.monotonic()
        if _window_ends(spec, collector, owned, allocated is not None, now - started, deadline, now):
            return
        if collector.version != seen_version:
            seen_version, last_progress = collector.version, now
        elif allocated is not None and now - last_progress >= spec.idle_timeout:
            log.warning("no progress for %.0fs (queues %s incomplete): staging what is contiguous",
                        spec.idle_timeout, [k for k in owned if not collector.complete((k,))])
            return
        if now - last_recheck >= _RECHECK_FLOORS:
            last_recheck = now
            _refresh_reachable(collector, owned)
        collector.wait_for_change(0.2 if deadline is None else max(0.0, min(0.2, deadline - now)))


def _take_reachable(collector: WindowCollector, owned: list[QueueKey], retry_at: dict[QueueKey, float]) -> None:
    """`WindowCollector.take_queues` queue by queue: a queue whose broker stopped answering since the
    high-water marks were read waits (asked again after `_RECHECK_FLOORS` s; ``idle_timeout`` ends the
    window if it never answers, staging what is contiguous)."""
    now = time.monotonic()
    for key in owned:
        if now < retry_at.get(key, 0.0):
            continue
        try:
            collector.take_queues((key,))
        except UNREACHABLE as exc:
            log.warning("%s:%d: cannot read its start offset (%s); trying again later", key[0], key[1], exc)
            retry_at[key] = now + _RECHECK_FLOORS


def _refresh_reachable(collector: WindowCollector, owned: list[QueueKey]) -> None:
    """`WindowCollector.refresh_floors` queue by queue, so one silent broker does not stop the others'."""
    for key in owned:
        try:
            collector.refresh_floors((key,))
        except UNREACHABLE as exc:  # what is contiguous stays; idle_timeout ends the window if it stays silent
            log.warning("%s:%d: cannot re-read its committed offset (%s)", key[0], key[1], exc)


def _window_ends(spec: WindowSpec, collector: WindowCollector, owned: list[QueueKey], assigned: bool,
                 elapsed: float, deadline: float | None, now: float) -> bool:
    """Whether a bound, completion, ``max_duration`` or the assignment timeout ends the window (logged)."""
    if collector.bound_reached():
        log.info("window bound reached (max_messages=%s, max_bytes=%s)", spec.max_messages, spec.max_bytes)
        return True
    if assigned and collector.complete(owned):
        log.info("every owned queue reached its high-water mark: %s", owned)
        return True
    if deadline is not None and now >= deadline:
        log.info("max_duration %.1fs reached; staging what is contiguous", spec.max_duration)
        return True
    if not assigned and elapsed >= spec.assignment_timeout:
        log.warning("no queue assigned within %.0fs: staging an empty window", spec.assignment_timeout)
        return True
    return False


def _no_tick() -> None:
    pass


def _shutdown_bounded(consumer: Any, timeout: float) -> None:
    """Shut the consumer down, but never let a stuck shutdown hang the task.

    Nothing depends on the consumer after the window: it never commits offsets
    (``enable_offset_commit=False``) and the staged data is already written. A
    shutdown that overruns is logged and abandoned (its threads are daemons).
    """
    error: list[BaseException] = []

    def run() -> None:
        try:
            consumer.shutdown()
        except BaseException as exc:
            error.append(exc)

    worker = threading.Thread(target=run, name="rocketmq-window-shutdown", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        log.error("consumer shutdown did not finish within %.0fs; abandoning it (no offset depends on it)",
                  timeout)
    elif error:
        log.warning("consumer shutdown failed: %s", error[0])


def _settle(spec: WindowSpec, admin: WindowAdmin, cancel: threading.Event | None) -> None:
    """Wait until the group's member list has not changed for ``settle_time`` (at most 4x that)."""
    give_up = time.monotonic() + 4 * spec.settle_time
    members = sorted(admin.consumer_ids(spec.consumer_group))
    stable_since = time.monotonic()
    while time.monotonic() < give_up and time.monotonic() - stable_since < spec.settle_time:
        time.sleep(min(0.2, spec.settle_time))  # membership can only be polled (no admin event)
        _check_cancel(cancel)
        now = sorted(admin.consumer_ids(spec.consumer_group))
        if now != members:
            members, stable_since = now, time.monotonic()
    log.info("group %s settled with %d member(s)", spec.consumer_group, len(members))


def _key(mq: MessageQueue) -> QueueKey:
    return (mq.broker_name, mq.queue_id)


# -- staging -----------------------------------------------------------------------------------------

def _clear_leftovers(staging: StagingLocation) -> None:
    """Remove what an attempt that died before its manifest left: part files (never trusted without
    the manifest that lists them) and temp files of atomic writes."""
    staging.make_dirs()
    for name in staging.names():
        if (name.startswith(PART_PREFIX) and name.endswith(PART_SUFFIX)) or \
                (name.startswith(".") and name.endswith(".tmp")):
            log.info("removing %s left by an earlier attempt", staging.url(name))
            staging.remove(name)


def _manifest(spec: WindowSpec, window_id: str, slices: list[QueueSlice], files: list[FileEntry],
              namesrv: str) -> WindowManifest:
    return WindowManifest(
        window_id=window_id,
        topic=spec.topic,
        consumer_group=spec.consumer_group,
        expression=spec.expression,
        namesrv=namesrv,
        queues=[QueueRange(broker=s.key[0], queue_id=s.key[1], start_offset=s.start, end_offset=s.end,
                           high_water=s.high_water, messages=s.messages, gaps=s.gaps) for s in slices],
        files=files,
        messages=sum(s.messages for s in slices),
        bytes=sum(s.bytes for s in slices),
    )


def default_staging_dir(base: str | os.PathLike[str], *parts: str) -> str:
    """``base/part/part...`` with every part made safe as a single directory name (base: path or URL)."""
    text = os.fspath(base)
    if "://" in text:
        return "/".join([text.rstrip("/"), *(safe_name(p) for p in parts)])
    return str(Path(text).joinpath(*(safe_name(p) for p in parts)))


def safe_name(text: str) -> str:
    """A directory/partition-safe rendering of an id (run ids hold ``:`` and ``+``)."""
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))
    return out.strip(".") or "_"
