"""Read one queue's offset range ``[start, end)`` as Arrow record batches (runs in Spark tasks).

No consumer group membership, no rebalancing, no offset commits: a task pulls its
range straight from the queue's master broker with *non-suspended* PULL_MESSAGE
requests (sysFlag = subscription only, expression ``*``), several in flight at
once on one connection, and stops at its end offset.

Pipelining. The range is cut into chunks of ``pullBatchSize`` offsets; up to
``pullsInFlight`` chunk pulls are outstanding (refilled in halves, so that the
pulls started together go out in one write) and their answers are taken in
offset order. Fewer are outstanding when answers are big: the pulls in flight
times the largest recent answer stay within ``IN_FLIGHT_BYTES`` (a task's memory
for answers not yet read does not grow with the message size), and until the
first answer shows the size, one pull goes out.

A broker may answer a chunk with fewer messages than asked (its per-pull byte
cap): the rest of that chunk is pulled again from the answer's ``nextBeginOffset``
before later answers are used, so every offset is read exactly once and batches
come out in offset order. Because the broker filters
nothing (``*``), a chunk's answer never holds offsets past the chunk, and the
answers of a flush are one contiguous run of stored records: they are decoded
together into one record batch of roughly ``FLUSH_OFFSETS`` rows.

Tags (``expression``) are filtered here, exactly, after decoding.

Retention. An answer ``OFFSET_MOVED`` (21) below the queue's min offset means the
broker deleted offsets this range needs: with ``failOnDataLoss`` the task fails
with `DataLossError`; otherwise it logs the lost sub-range and reads on from the
min offset. Timeouts and lost connections are retried (bounded, jittered): the
outstanding pulls are dropped and re-sent from the first offset not yet read.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from airflow_provider_rocketmq.client.connection import RemotingProtocol
from airflow_provider_rocketmq.client.mqclient import MQClient
from airflow_provider_rocketmq.client.protocol.codes import PULL_FLAG_SUBSCRIPTION, ResponseCode
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.errors import (
    ConnectionClosedError,
    ProtocolError,
    RequestTimeoutError,
    RocketMQError,
    broker_error,
)
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.client.pull_request import PullFrame

from .decode import decode_bodies
from .options import SourceOptions, redacting
from .ranges import DataLossError, QueueSpan, data_loss_message

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

FLUSH_OFFSETS = 65_536  # offsets per record batch: each batch costs fixed Arrow calls, and in a load it
# becomes one row group of the output (16,384 cost an offsets load ~10 % more task CPU)
FLUSH_BYTES = 16 << 20  # ... or this many bytes of pull bodies, whichever comes first
RETRY_ATTEMPTS = 4  # per answer: the first try and three retries
NO_PROGRESS_LIMIT = 3  # answers in a row that do not advance the offset before the task fails
IN_FLIGHT_BYTES = 16 << 20  # pulls in flight x the largest recent answer stay within this
FIRST_PULLS = 1  # in flight until an answer showed how big answers are


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, RocketMQError) and exc.retriable


@dataclass
class _Pull:
    """One outstanding pull of offsets ``[offset, limit)``."""

    offset: int
    limit: int
    opaque: int
    future: asyncio.Future[RemotingCommand]


def read_span(opts: SourceOptions, span: QueueSpan) -> Iterator[pa.RecordBatch]:
    """Record batches (`MESSAGE_SCHEMA`, client/protocol/columnar.py) of the messages in ``span`` that match the tags.

    Synchronous, as Spark's ``DataSourceReader.read`` wants: a private event loop
    runs while the next batch is being fetched. Closing the iterator early (a
    ``LIMIT``) closes the connections.
    """
    loop = asyncio.new_event_loop()
    agen = _read_span(opts, span)
    try:
        while True:
            try:
                with redacting(opts):
                    batch = loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                return
            yield batch
    finally:
        try:
            loop.run_until_complete(agen.aclose())
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


async def _read_span(opts: SourceOptions, span: QueueSpan) -> AsyncGenerator[pa.RecordBatch, None]:
    client = MQClient(opts.client_config())
    try:
        reader = SpanPuller(client, opts, span)
        async for batch in reader.batches():
            yield batch
    finally:
        await client.close()


class SpanPuller:
    """Pipelined pulls over one span; `batches()` yields decoded, tag-filtered record batches."""

    def __init__(self, client: MQClient, opts: SourceOptions, span: QueueSpan) -> None:
        self.client = client
        self.opts = opts
        self.span = span
        self.mq = MessageQueue(span.topic, span.broker, span.queue_id)
        self.tags = opts.tag_filter()
        self.batch = opts.pull_batch_size
        self.depth = opts.pulls_in_flight
        self._frame = PullFrame({
            "consumerGroup": client.ns(opts.reader_group), "topic": client.ns(span.topic),
            "queueId": str(span.queue_id), "suspendTimeoutMillis": "0", "expressionType": "TAG",
            "bname": span.broker})
        self._conn: RemotingProtocol | None = None
        self._inflight: deque[_Pull] = deque()
        self._next_chunk = span.start  # first offset no pull has been sent for
        self._no_progress = 0
        self._answer_bytes = 0  # the largest recent answer body (decays by 1/8 per answer); 0: none yet
        # figures for tests and logs
        self.pulls = 0
        self.offsets_read = 0
        self.offsets_lost = 0
        self.rows = 0

    # -- public ------------------------------------------------------------------------------
    async def batches(self) -> AsyncIterator[pa.RecordBatch]:
        bodies: list[bytes] = []
        covered = size = 0
        try:
            while self._inflight or self._next_chunk < self.span.end:
                body, advanced = await self._next_answer()
                if body:
                    bodies.append(body)
                    size += len(body)
                covered += advanced
                if bodies and (covered >= FLUSH_OFFSETS or size >= FLUSH_BYTES):
                    batch = self._decode(bodies)
                    bodies, covered, size = [], 0, 0
                    if batch is not None:
                        yield batch
            if bodies:
                batch = self._decode(bodies)
                if batch is not None:
                    yield batch
        finally:
            self._drop_inflight()
        log.info("read %s: %d offsets, %d rows, %d pulls%s", self.span, self.offsets_read, self.rows, self.pulls,
                 f", {self.offsets_lost} offsets lost to retention" if self.offsets_lost else "")

    # -- pulls --------------------------------------------------------------------------------
    def _decode(self, bodies: list[bytes]) -> pa.RecordBatch | None:
        batch = decode_bodies(bodies, self.mq, self.span.end, self.tags, self.opts.namespace)
        if batch is not None:
            self.rows += batch.num_rows
        return batch

    async def _connect(self) -> RemotingProtocol:
        if self._conn is None or self._conn.is_closed:
            route = await self.client.get_route(self.span.topic, refresh=self._conn is not None)
            if route.broker(self.span.broker) is None:
                raise RocketMQError(f"{self.span}: broker {self.span.broker!r} is not in the topic's route")
            self._conn = await self.client.pool.get(self.client.broker_addr(self.span.broker))
        return self._conn

    def _send(self, conn: RemotingProtocol, offset: int, limit: int) -> _Pull:
        max_nums = min(self.batch, limit - offset)
        opaque, fut = self._frame.start(conn, offset, max_nums, PULL_FLAG_SUBSCRIPTION, 0, "*")
        self.pulls += 1
        return _Pull(offset, limit, opaque, fut)

    def _depth(self) -> int:
        """Pulls allowed in flight: ``pullsInFlight``, fewer when answers are big (`IN_FLIGHT_BYTES`)."""
        if not self._answer_bytes:
            return min(self.depth, FIRST_PULLS)
        return max(1, min(self.depth, IN_FLIGHT_BYTES // self._answer_bytes))

    def _fill(self, conn: RemotingProtocol) -> None:
        # refill in halves: the pulls started in one loop iteration go out in one write
        depth = self._depth()
        if len(self._inflight) > depth // 2:
            return
        while len(self._inflight) < depth and self._next_chunk < self.span.end:
            limit = min(self._next_chunk + self.batch, self.span.end)
            self._inflight.append(self._send(conn, self._next_chunk, limit))
            self._next_chunk = limit

    def _drop_inflight(self) -> None:
        """Forget every outstanding pull; the next chunk restarts at the first offset not read."""
        if self._inflight:
            self._next_chunk = self._inflight[0].offset
        conn = self._conn
        while self._inflight:
            p = self._inflight.popleft()
            if conn is not None:
                conn.forget(p.opaque)
            if not p.future.done():
                p.future.cancel()

    async def _next_answer(self) -> tuple[bytes, int]:
        """Wait for the oldest pull's answer (retrying transport failures); its body and offsets covered."""
        try:
            return await self._try_answer()
        except RocketMQError as exc:
            if not _retriable(exc):
                raise
            failed: RocketMQError | None = exc
        # the retries' machinery is built only after a failure (it costs tens of microseconds per answer,
        # ~31,000 answers per million rows); the schedule is the same as if the first try ran in it
        async for attempt in AsyncRetrying(stop=stop_after_attempt(RETRY_ATTEMPTS),
                                           wait=wait_random_exponential(multiplier=0.1, max=2.0),
                                           retry=retry_if_exception(_retriable), reraise=True):
            with attempt:
                if failed is not None:
                    first, failed = failed, None
                    raise first
                return await self._try_answer()
        raise AssertionError("unreachable")  # pragma: no cover - AsyncRetrying re-raises

    async def _try_answer(self) -> tuple[bytes, int]:
        try:
            conn = await self._connect()
            self._fill(conn)
            front = self._inflight[0]
            resp = await self._answer_of(front)
        except (RequestTimeoutError, ConnectionClosedError) as exc:
            log.warning("pull of %s failed (%s); retrying from offset %d", self.span, self.opts.redact(str(exc)),
                        self._inflight[0].offset if self._inflight else self._next_chunk)
            self._drop_inflight()
            if self._conn is not None:
                await self._conn.close()
            raise
        return self._answer(conn, front, resp)

    async def _answer_of(self, front: _Pull) -> RemotingCommand:
        """``front``'s answer within the request timeout. A timer that cancels the pull's own future:
        ``asyncio.wait_for`` costs a task-like wrapper per answer, and Python 3.10 has no ``asyncio.timeout``."""
        fut = front.future
        if fut.done():  # with pulls in flight the answer is often here already
            return fut.result()
        expired = False

        def expire() -> None:
            nonlocal expired
            if not fut.done():
                expired = True
                fut.cancel()

        timer = asyncio.get_running_loop().call_later(self.opts.request_timeout, expire)
        try:
            return await fut
        except asyncio.CancelledError:
            if not expired:
                raise
            raise RequestTimeoutError(f"no answer to the pull of {self.span} at offset {front.offset} within "
                                      f"{self.opts.request_timeout}s") from None
        finally:
            timer.cancel()

    def _lost(self, front: _Pull, lost_to: int, min_offset: int) -> int:
        """Offsets ``[front.offset, lost_to)`` are gone: fail, or skip them all at once (one warning)."""
        lost = QueueSpan(self.span.topic, self.span.broker, self.span.queue_id, front.offset, self.span.end)
        self._drop_inflight()
        if self.opts.fail_on_data_loss:
            raise DataLossError(data_loss_message(lost, lost_to, min_offset))
        log.warning("%s; skipping them (failOnDataLoss=false)", data_loss_message(lost, lost_to, min_offset,
                                                                                  hint=False))
        self.offsets_lost += lost_to - front.offset
        self._next_chunk = lost_to
        self._no_progress = 0
        return lost_to - front.offset

    def _answer(self, conn: RemotingProtocol, front: _Pull, resp: RemotingCommand) -> tuple[bytes, int]:
        """Apply one answer to the front pull: advance, re-pull the rest of a short chunk, or fail."""
        code = resp.code
        ext = resp.ext_fields or {}
        if code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED,
                    ResponseCode.PULL_NOT_FOUND):
            try:
                next_begin = int(ext["nextBeginOffset"])
            except (KeyError, ValueError):
                raise ProtocolError(f"pull answer for {self.span} lacks a valid nextBeginOffset") from None
        else:
            self._drop_inflight()
            raise broker_error(code, resp.remark)
        body = b""
        if code == ResponseCode.SUCCESS:
            if next_begin > front.limit:  # never with expression "*"; keep the range exact anyway
                raise ProtocolError(f"pull of {self.span} at {front.offset} (at most {front.limit - front.offset} "
                                    f"messages) answered up to offset {next_begin}")
            body = resp.body or b""
            # a big answer counts at once, a small one lets the estimate down slowly
            self._answer_bytes = max(len(body), self._answer_bytes - (self._answer_bytes >> 3), 1)
        elif next_begin > front.offset:
            # moved on without messages (21 OFFSET_MOVED below the min offset; 20 for records the
            # broker already removed): with expression "*" nothing is filtered, so these offsets are lost
            return b"", self._lost(front, min(next_begin, self.span.end), int(ext.get("minOffset", next_begin)))
        elif code != ResponseCode.PULL_RETRY_IMMEDIATELY:  # 19, or 21 without a way forward
            self._drop_inflight()
            raise RocketMQError(f"{self.span}: the broker has no message at offset {front.offset} "
                                f"(max offset {ext.get('maxOffset', '?')}); was the queue truncated?")
        if next_begin <= front.offset:
            self._no_progress += 1
            if self._no_progress >= NO_PROGRESS_LIMIT:
                self._drop_inflight()
                raise RocketMQError(f"{self.span}: {NO_PROGRESS_LIMIT} pulls at offset {front.offset} made no "
                                    f"progress (broker code {code})")
            next_begin = front.offset
        else:
            self._no_progress = 0
        self._inflight.popleft()
        conn.forget(front.opaque)
        advanced = next_begin - front.offset
        if code == ResponseCode.SUCCESS:
            self.offsets_read += advanced
        if next_begin < front.limit:  # a short answer: pull the rest of the chunk before anything later
            self._inflight.appendleft(self._send(conn, next_begin, front.limit))
        return body, advanced
