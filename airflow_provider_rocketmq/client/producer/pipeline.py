"""Pipelined sends: many SEND requests in flight on one connection per broker, one result per message.

A `SendPipeline` belongs to one `AsyncProducer` and one run (`AsyncProducer.send_many`,
`Producer.send_many`). Messages are put in submission order; each gets exactly one `SendOutcome`
(a `SendResult`, or the typed error of its request, or `SendAbortedError` when it was not sent),
handed out in submission order.

What holds, and when:

* **Bounded.** At most ``max_in_flight`` SEND requests of the run wait for their answer at any
  time (first attempts and retries alike), and at most ``max_in_flight * max_batch`` messages are
  accepted and unanswered: `put` waits for room.
* **Batches.** With ``max_batch > 1`` consecutive messages bound for one queue travel in one
  SEND_BATCH_MESSAGE (stored in one piece, in order: message ``i`` of it at ``queue_offset + i``)
  and still get a result each. Delayed messages, ``%RETRY%`` topics and bodies a single send would
  compress (``compress_over``) always go alone; a batch never mixes topics or exceeds
  ``max_message_size``.
* **Order per key.** Messages put with a ``key`` go to the queue the key hashes to (as
  `AsyncProducer.send` does) and that queue has **one request in flight at a time**: the next
  request (up to ``max_batch`` messages that queued up meanwhile) leaves only once the previous one
  is answered. So the broker stores one queue's keyed messages in submission order whatever its
  number of send threads (4.9.7 defaults to ``min(cores, 4)``, which may store two requests of one
  connection in either order), and a retry never overtakes: the queue waits while its request is
  retried, and the retry goes to the same queue. With the failure rule below: the messages of a key
  that the broker stores are a prefix of those put for it, in the order put (a batch is stored whole
  or not at all). Holds while the topic's writable queues stay the same during the run (a changed
  queue count maps keys to other queues, as in Java).
  Messages without a key are spread round robin, many requests in flight: no order among them.
* **Failures.** A request is retried (bounded, jittered: tenacity) only when the broker certainly
  did not store it (the answers and connect failures `AsyncProducer.send` retries on); a timeout or
  a connection lost after the write fails the request's messages with that error, as the broker may
  have stored them. When a keyed queue's request fails for good, the queue's later messages of the
  run are not sent (`SendAbortedError`), so a key's stored messages never skip one and go on. With
  ``stop_on_error`` (the default) the first failure stops the run: nothing more is sent, what is in
  flight is answered, the rest gets `SendAbortedError`.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from ..connection import RemotingProtocol, next_opaque
from ..protocol.codes import RequestCode
from ..protocol.command import RemotingCommand
from ..protocol.errors import (
    ConfigError,
    ConnectionClosedError,
    ProtocolError,
    RequestTimeoutError,
    RocketMQError,
    RouteNotFoundError,
)
from ..protocol.message import (
    MAX_PROPERTIES_LEN,
    PROPERTY_DELAY,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    Message,
    properties_to_string,
)
from ..protocol.names import DEFAULT_TOPIC, RETRY_PREFIX
from ..protocol.queue import MessageQueue
from ..protocol.send_wire import (
    DEFAULT_TOPIC_QUEUE_NUMS,
    NotSentError,
    SendResult,
    build_send_request,
    new_result,
    select_by_key,
    send_answer,
    send_result,
)
from ..route import MASTER_ID
from .message_id import new_uniq_ids
from .ports import SendPort

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 4096
MAX_BATCH = 1024
# what bulk senders (the produce operator and command) use unless told otherwise: one SEND request per
# message costs several times the client CPU of one carrying up to 32 messages of its queue
BULK_MAX_IN_FLIGHT = 64
BULK_MAX_BATCH = 32
_ITEM_HEAD = struct.Struct(">iiiii")  # batch item: size, magic, crc, flag, body length
_H = struct.Struct(">H")


class SendAbortedError(RocketMQError):
    """The message was not sent: an earlier failure (``cause``) stopped the run or its key's queue."""

    def __init__(self, message: str, cause: RocketMQError | None) -> None:
        super().__init__(message)
        self.cause = cause


class SendOutcome:
    """What became of one message of a pipelined run: ``index`` (its position in submission order),
    ``message`` (as put), either ``result`` or ``error``, and ``request``: the number (within the
    run, from 0) of the SEND request that carried it, shared by the messages of one batch; None
    when it was never sent."""

    __slots__ = ("_result", "error", "index", "message", "request")

    def __init__(self, index: int, message: Message, result: SendResult | None,
                 error: RocketMQError | None, request: int | None = None) -> None:
        self.index = index
        self.message = message
        self._result = result
        self.error = error
        self.request = request

    @property
    def result(self) -> SendResult | None:
        return self._result

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        what = f"result={self.result!r}" if self.error is None else f"error={self.error!r}"
        return f"SendOutcome(index={self.index}, {what})"


class _Answer:
    """The broker's answer to a stored batch, shared by its messages' outcomes."""

    __slots__ = ("offset", "offset_ids", "queue", "region", "status")

    def __init__(self, queue: MessageQueue, offset: int, status: str, offset_ids: list[str] | None,
                 region: str | None) -> None:
        self.queue = queue
        self.offset = offset  # of the batch's first message: message i sits at offset + i
        self.status = status
        self.offset_ids = offset_ids  # one per message, or None when the broker did not list them all
        self.region = region

    def result(self, pos: int, uniq: str) -> SendResult:
        ids = self.offset_ids
        return new_result(uniq, ids[pos] if ids is not None else "", self.queue, self.offset + pos, self.status,
                          self.region)


class _StoredOutcome(SendOutcome):
    """The outcome of a message of a stored batch: its `SendResult` is made from the batch's answer when
    first read (a run that only counts its results, like the produce operator's, makes one per request)."""

    __slots__ = ("_answer", "_pos", "_uniq")

    def __init__(self, index: int, message: Message, request: int, answer: _Answer, pos: int, uniq: str) -> None:
        self.index = index
        self.message = message
        self._result = None
        self.error = None
        self.request = request
        self._answer = answer
        self._pos = pos
        self._uniq = uniq

    @property
    def result(self) -> SendResult:
        r = self._result
        if r is None:
            r = self._result = self._answer.result(self._pos, self._uniq)
        return r


@dataclass(frozen=True)
class PipelineOptions:
    """``max_in_flight``: SEND requests awaiting an answer at once; ``max_batch``: messages per
    request (1: SEND_MESSAGE_V2 only); ``stop_on_error``: the first failure stops the run."""

    max_in_flight: int = 64
    max_batch: int = 1
    stop_on_error: bool = True

    def __post_init__(self) -> None:
        for name, top in (("max_in_flight", MAX_IN_FLIGHT), ("max_batch", MAX_BATCH)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ConfigError(name, f"must be an integer in [1, {top}], got {value!r}")
        if not isinstance(self.stop_on_error, bool):
            raise ConfigError("stop_on_error", f"must be a boolean, got {self.stop_on_error!r}")

    @property
    def capacity(self) -> int:
        return self.max_in_flight * self.max_batch


class _Item:
    __slots__ = ("alone", "msg", "props", "seq", "size", "text", "uniq")

    def __init__(self, seq: int, msg: Message, props: dict[str, str] | None, uniq: str, text: str, alone: bool,
                 size: int) -> None:
        self.seq = seq
        self.msg = msg  # what the caller put (its outcome names it); body, flag and topic go on the wire
        self.props = props  # the properties sent: the message's, with UNIQ_KEY and WAIT (None: only those two)
        self.uniq = uniq
        self.text = text  # the properties as the wire writes them
        self.alone = alone  # never in a batch (see `batchable`)
        self.size = size  # its bytes in a batch, properties counted at their UTF-8 maximum

    @property
    def sent(self) -> Message:
        """The message as sent (for the builders of the signed and the retry paths)."""
        copy = Message.__new__(Message)
        msg = self.msg
        props = dict(self.props) if self.props is not None else {PROPERTY_UNIQ_KEY: self.uniq, PROPERTY_WAIT: "true"}
        copy.topic, copy.body, copy.flag, copy.properties = msg.topic, msg.body, msg.flag, props
        return copy


class _Lane:
    """The keyed messages of one queue: one request in flight at a time."""

    __slots__ = ("broken", "busy", "mq", "pending")

    def __init__(self, mq: MessageQueue) -> None:
        self.mq = mq
        self.pending: deque[_Item] = deque()
        self.busy = False
        self.broken: RocketMQError | None = None


class _Request:
    """One SEND request; also the connection's sink for its answer (see `ResponseSink`)."""

    __slots__ = ("addr", "conn", "deadline", "finished", "items", "lane", "mq", "number", "opaque", "pipe")

    def __init__(self, pipe: SendPipeline, items: list[_Item], mq: MessageQueue, lane: _Lane | None) -> None:
        self.pipe = pipe
        self.number = pipe.requests
        pipe.requests += 1
        self.items = items
        self.mq = mq
        self.lane = lane
        self.finished = False
        self.opaque = 0
        self.deadline = 0.0
        self.addr = ""
        self.conn: RemotingProtocol | None = None

    def done(self) -> bool:
        return self.finished

    def set_result(self, resp: RemotingCommand) -> None:
        self.finished = True
        try:
            self.pipe._answered(self, resp)
        except Exception as exc:
            log.exception("handling the answer to a pipelined send failed")
            self.pipe._fail(self, ProtocolError(f"cannot handle the send answer: {exc!r}"))

    def set_exception(self, exception: BaseException) -> None:
        self.finished = True
        self.pipe._lost(self, exception)


class SendPipeline:
    """The engine behind `send_many` (module docstring). Loop-bound: use it on the producer's loop."""

    def __init__(self, producer: SendPort, options: PipelineOptions | None = None) -> None:
        self.options = opt = options or PipelineOptions()
        self._producer = producer
        self._client = producer.client
        self._loop = asyncio.get_running_loop()
        self._group = producer.client.ns(producer.group)
        self._signed = producer.client.pool.rpc_hook is not None  # ACL: frames go through the hook
        self._budget = producer.attempt_timeout
        self._rotation = producer.rotation
        self._max_in_flight = opt.max_in_flight
        self._max_batch = opt.max_batch
        self._capacity = opt.capacity
        self._compress_over = producer.compress_over
        self._queues: dict[str, list[MessageQueue]] = {}
        self._seq = 0
        self._emit = 0  # the next index to hand out
        self._held: dict[int, list[SendOutcome]] = {}  # runs finished before an earlier message, by first index
        self._ready: deque[SendOutcome] = deque()
        self._unkeyed: deque[_Item] = deque()
        self._lanes: dict[MessageQueue, _Lane] = {}
        self._lanes_ready: deque[_Lane] = deque()
        self._in_flight = 0  # requests holding a slot (on the wire, or connecting)
        self._slot_waiters: deque[asyncio.Future[None]] = deque()  # retries waiting for a slot
        self._outstanding = 0  # messages put and not yet finished
        self._wire: dict[int, _Request] = {}  # opaque -> request, oldest first (timeouts)
        self._timer: asyncio.TimerHandle | None = None
        self._flush_handle: asyncio.Handle | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.error: RocketMQError | None = None  # the first failure of the run
        self.stopped = False
        self.requests = 0  # SEND requests made (a retried one counts once)

    # -- feeding -------------------------------------------------------------------------------------
    async def put(self, msg: Message, key: str | None = None) -> None:
        """Accept ``msg`` (validated by the caller), waiting for room. ConfigError (properties too
        long) is raised before the message is accepted."""
        while not self.offer(msg, key):
            if msg.topic in self._queues or self.stopped:
                await self._wait()
            elif not await self._load_for(msg):
                return

    def offer(self, msg: Message, key: str | None = None) -> bool:
        """`put` without waiting: False (nothing done) when there is no room or the topic's route
        is not loaded yet."""
        return self.offer_many(((msg, key),)) == 1

    def offer_many(self, items: Sequence[tuple[Message, str | None]], start: int = 0) -> int:
        """`offer` for ``items[start:]``, (message, key) pairs validated by the caller, in order, until
        one does not fit (no room, or its topic's route is not loaded yet): returns the position of
        the first item not accepted (``len(items)`` when all were). A ConfigError (properties too
        long) is raised before its item is accepted; the items before it stay accepted.

        The per-message work of a chunk in one loop with its ids made at once: the pipelined path's
        hot spot."""
        room = self._capacity - self._outstanding
        if room <= 0:
            return start
        stop = min(len(items), start + room)
        if self.stopped:
            self._abort_unsent(items, start, stop)
            return stop
        ids = new_uniq_ids(stop - start)
        queues_of, unkeyed, lanes, compress_over = self._queues, self._unkeyed, self._lanes, self._compress_over
        seq = self._seq
        added = 0
        i = start
        topic: str | None = None
        queues: list[MessageQueue] = []
        retry = False
        try:
            while i < stop:
                msg, key = items[i]
                if msg.topic != topic:
                    found = queues_of.get(msg.topic)
                    if found is None:
                        break
                    topic, queues, retry = msg.topic, found, msg.topic.startswith(RETRY_PREFIX)
                size = len(msg.body)
                props = msg.properties
                wire: dict[str, str] | None = None
                if props:  # what `prepared` does, without the copy of the message
                    wire = full = dict(props)
                    uniq = full.get(PROPERTY_UNIQ_KEY) or ids[i - start]
                    full[PROPERTY_UNIQ_KEY] = uniq
                    full.setdefault(PROPERTY_WAIT, "true")
                    text = properties_to_string(full)
                    if len(text) * 4 > MAX_PROPERTIES_LEN and len(text.encode("utf-8")) > MAX_PROPERTIES_LEN:
                        raise ConfigError("properties", f"encoded properties exceed {MAX_PROPERTIES_LEN} bytes")
                    alone = size >= compress_over or retry or bool(full.get(PROPERTY_DELAY))
                else:
                    uniq = ids[i - start]
                    text = f"{PROPERTY_UNIQ_KEY}\x01{uniq}\x02{PROPERTY_WAIT}\x01true"
                    alone = size >= compress_over or retry
                item = _Item(seq, msg, wire, uniq, text, alone, 24 + size + len(text) * 4)
                seq += 1
                i += 1
                if key is None:
                    unkeyed.append(item)
                    added += 1
                    continue
                mq = select_by_key(queues, key)
                lane = lanes.get(mq) or self._open_lane(mq)
                if lane.broken is not None:
                    self._record(SendOutcome(item.seq, msg, None, SendAbortedError(
                        f"not sent: an earlier message of {mq} failed ({lane.broken})", lane.broken)))
                    continue
                lane.pending.append(item)
                added += 1
                if not lane.busy and len(lane.pending) == 1:
                    self._lanes_ready.append(lane)
        finally:
            self._seq = seq
            self._outstanding += added
            if added and self._flush_handle is None:
                self._flush_handle = self._loop.call_soon(self._flush)
        return i

    def _open_lane(self, mq: MessageQueue) -> _Lane:
        lane = self._lanes[mq] = _Lane(mq)
        return lane

    def _abort_unsent(self, items: Sequence[tuple[Message, str | None]], start: int, stop: int) -> None:
        """``items[start:stop]`` offered once the run stopped: accepted, `SendAbortedError` their outcome."""
        for i in range(start, stop):
            seq = self._seq
            self._seq = seq + 1
            self._record(SendOutcome(seq, items[i][0], None, self._aborted("the run stopped")))

    async def _load_for(self, msg: Message) -> bool:
        """Load the route of ``msg``'s topic; False when that failed (the failure is its outcome)."""
        try:
            await self._load(msg.topic)
            return True
        except RocketMQError as exc:
            seq = self._seq
            self._seq = seq + 1
            self._record(SendOutcome(seq, msg, None, exc))
            self._failed(exc)
            return False

    def take(self) -> list[SendOutcome]:
        """The outcomes ready so far, in submission order."""
        out = list(self._ready)
        self._ready.clear()
        return out

    @property
    def outstanding(self) -> int:
        return self._outstanding

    async def wait_ready(self) -> None:
        """Until an outcome is ready or nothing is outstanding."""
        while not self._ready and self._outstanding:
            await self._wait()

    async def finish(self) -> list[SendOutcome]:
        """Until every accepted message has its outcome; returns the ones not yet taken."""
        while self._outstanding:
            await self._wait()
        return self.take()

    def stop(self) -> None:
        """Send nothing more; messages not yet sent get SendAbortedError (in-flight ones finish)."""
        if self.stopped:
            return
        self.stopped = True
        aborted = list(self._unkeyed)
        self._unkeyed.clear()
        for lane in self._lanes.values():
            aborted.extend(lane.pending)
            lane.pending.clear()
        self._lanes_ready.clear()
        self._abort(aborted, "the run stopped")

    async def close(self) -> None:
        """Stop and wait (at most the send timeout, then give up on them) for what is in flight."""
        self.stop()
        try:
            await asyncio.wait_for(self.finish(), self._budget + 1.0)
        except asyncio.TimeoutError:
            log.warning("%d pipelined send(s) still unanswered at close", self._outstanding)
        for task in list(self._tasks):
            task.cancel()
        for opaque, req in list(self._wire.items()):
            req.finished = True
            if req.conn is not None:
                req.conn.forget(opaque)
        self._wire.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- internals: waking the feeder ----------------------------------------------------------------
    async def _wait(self) -> None:
        fut = self._wakeup
        if fut is None or fut.done():
            fut = self._wakeup = self._loop.create_future()
        await fut

    def _wake(self) -> None:
        fut = self._wakeup
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _record(self, outcome: SendOutcome) -> None:
        seq = outcome.index
        if seq != self._emit:
            self._held[seq] = [outcome]
            return
        self._ready.append(outcome)
        self._release(seq + 1)

    def _record_run(self, outcomes: list[SendOutcome]) -> None:
        """`_record` for the outcomes of one request (indexes increasing), held as one run when consecutive."""
        first = outcomes[0].index
        n = len(outcomes)
        if outcomes[-1].index - first != n - 1:  # a keyed queue's request: other messages came between
            for outcome in outcomes:
                self._record(outcome)
        elif first != self._emit:
            self._held[first] = outcomes
        else:
            self._ready.extend(outcomes)
            self._release(first + n)

    def _release(self, seq: int) -> None:
        """The outcomes before ``seq`` are ready: so are the held runs that follow them without a gap."""
        held = self._held
        ready = self._ready
        while held:
            run = held.pop(seq, None)
            if run is None:
                break
            ready.extend(run)
            seq += len(run)
        self._emit = seq
        self._wake()

    def _aborted(self, why: str) -> SendAbortedError:
        return SendAbortedError(f"not sent: {why}" + (f" after {self.error}" if self.error else ""), self.error)

    def _abort(self, items: list[_Item], why: str) -> None:
        if not items:
            return
        self._outstanding -= len(items)
        for item in items:
            self._record(SendOutcome(item.seq, item.msg, None, self._aborted(why)))
        self._wake()

    # -- internals: routes and connections ---------------------------------------------------------
    async def _load(self, topic: str) -> list[MessageQueue]:
        queues = await self._producer.publish_queues(topic)
        self._queues[topic] = queues
        # Open the brokers' connections now, so that sends take the synchronous path.
        for mq in {q.broker_name: q for q in queues}.values():
            try:
                await self._client.pool.get(await self._client.master_addr(mq), self._budget)
            except RocketMQError as exc:  # a send to it will try again (and may go elsewhere)
                log.debug("cannot connect to %s yet: %s", mq.broker_name, exc)
        return queues

    # -- internals: sending -----------------------------------------------------------------------
    def _take(self, pending: deque[_Item]) -> list[_Item]:
        first = pending.popleft()
        if self._max_batch == 1 or not pending or first.alone:
            return [first]
        items = [first]
        append, popleft, max_batch, limit = items.append, pending.popleft, self._max_batch, self._producer.max_message_size
        topic = first.msg.topic
        size = first.size
        while pending and len(items) < max_batch:
            nxt = pending[0]
            size += nxt.size
            if nxt.alone or size > limit or nxt.msg.topic != topic:
                break
            append(popleft())
        return items

    def _flush(self) -> None:
        self._flush_handle = None
        while self._in_flight < self._max_in_flight and not self._slot_waiters:
            if self._lanes_ready:
                lane = self._lanes_ready.popleft()
                if lane.busy or not lane.pending or lane.broken is not None:
                    continue
                lane.busy = True
                self._dispatch(_Request(self, self._take(lane.pending), lane.mq, lane))
            elif self._unkeyed:
                items = self._take(self._unkeyed)
                queues = self._queues[items[0].msg.topic]
                self._dispatch(_Request(self, items, queues[next(self._rotation) % len(queues)], None))
            else:
                break

    def _schedule_flush(self) -> None:
        if self._flush_handle is None and (self._lanes_ready or self._unkeyed):
            self._flush_handle = self._loop.call_soon(self._flush)

    def _release_slot(self) -> None:
        waiters = self._slot_waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():  # the slot passes to a waiting retry
                fut.set_result(None)
                return
        self._in_flight -= 1
        self._schedule_flush()

    async def _acquire_slot(self) -> None:
        if self._in_flight < self._max_in_flight and not self._slot_waiters:
            self._in_flight += 1
            return
        fut: asyncio.Future[None] = self._loop.create_future()
        self._slot_waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed a slot while being cancelled: give it back
                self._release_slot()
            raise

    def _dispatch(self, req: _Request) -> None:
        """Send ``req`` in a slot taken here; the synchronous path when the broker's connection is open."""
        self._in_flight += 1
        try:
            addr = self._client.broker_addr(req.mq.broker_name, MASTER_ID, exact=True)
        except RouteNotFoundError:
            addr = ""
        conn = self._client.pool.live(addr) if addr else None
        if conn is None:
            self._spawn(self._dispatch_slow(req))
            return
        self._write(req, conn, addr)

    async def _dispatch_slow(self, req: _Request) -> None:
        try:
            addr = await self._client.master_addr(req.mq)
            conn = await self._client.pool.get(addr, self._budget)
        except (ConnectionClosedError, RequestTimeoutError) as exc:  # nothing was written
            self._release_slot()
            self._not_sent(req, NotSentError(exc, req.mq.broker_name))
        except RocketMQError as exc:
            self._release_slot()
            self._fail(req, exc)
        else:
            self._write(req, conn, addr)

    def _command(self, req: _Request) -> RemotingCommand:
        items = req.items
        if len(items) == 1:
            return build_send_request(items[0].sent, req.mq, self._group, compress_over=self._compress_over)
        parts: list[bytes] = []
        extend = parts.extend
        for item in items:  # encode_batch, with the properties text already made
            msg = item.msg
            body = msg.body
            pbytes = item.text.encode()
            extend((_ITEM_HEAD.pack(22 + len(body) + len(pbytes), 0, 0, msg.flag, len(body)), body,
                    _H.pack(len(pbytes)), pbytes))
        mq = req.mq
        ext = {"a": self._group, "b": mq.topic, "c": DEFAULT_TOPIC, "d": DEFAULT_TOPIC_QUEUE_NUMS,
               "e": mq.queue_id, "f": 0, "g": int(time.time() * 1000), "h": 0, "i": f"{PROPERTY_WAIT}\x01true",
               "j": 0, "k": False, "m": True, "n": mq.broker_name}
        return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, ext, b"".join(parts))

    def _write(self, req: _Request, conn: RemotingProtocol, addr: str) -> None:
        req.addr, req.conn = addr, conn
        req.deadline = self._loop.time() + self._budget
        req.finished = False
        try:
            if len(req.items) == 1 and not self._signed and not req.mq.topic.startswith(RETRY_PREFIX):
                item = req.items[0]
                opaque = next_opaque()
                frame = self._producer.renderer.frame(item.msg, req.mq, opaque, int(time.time() * 1000), item.text)
                conn.send_encoded(opaque, frame, req)
            else:
                opaque = conn.send_command(self._command(req), req)
        except ConnectionClosedError as exc:  # closed before the write: nothing was sent
            self._release_slot()
            self._not_sent(req, NotSentError(exc, req.mq.broker_name))
            return
        except RocketMQError as exc:
            self._release_slot()
            self._fail(req, exc)
            return
        req.opaque = opaque
        self._wire[opaque] = req
        if self._timer is None:
            self._timer = self._loop.call_at(req.deadline, self._sweep)

    def _sweep(self) -> None:
        """Fail the requests whose answer is overdue (the oldest first: they were sent first)."""
        self._timer = None
        now = self._loop.time()
        wire = self._wire
        while wire:
            opaque = next(iter(wire))
            req = wire[opaque]
            if req.deadline > now:
                self._timer = self._loop.call_at(req.deadline, self._sweep)
                return
            del wire[opaque]
            req.finished = True
            if req.conn is not None:
                req.conn.forget(opaque)
            self._release_slot()
            self._fail(req, RequestTimeoutError(
                f"no answer to a send of {len(req.items)} message(s) from {req.addr} within {self._budget:.3f}s "
                "(the broker may have stored it)"))

    def _take_off_wire(self, req: _Request) -> None:
        if self._wire.pop(req.opaque, None) is not None:
            self._release_slot()

    def _answered(self, req: _Request, resp: RemotingCommand) -> None:
        self._take_off_wire(req)
        items = req.items
        try:
            if len(items) == 1:
                item = items[0]
                self._complete(req, [SendOutcome(item.seq, item.msg, send_result(resp, req.mq, item.uniq, req.addr),
                                                 None, req.number)])
                return
            queue, offset, status, offset_ids, region = send_answer(resp, req.mq, req.addr)
        except NotSentError as exc:
            self._not_sent(req, exc)
            return
        except RocketMQError as exc:
            self._fail(req, exc)
            return
        ids = offset_ids.split(",")
        answer = _Answer(queue, offset, status, ids if len(ids) == len(items) else None, region)
        number = req.number
        self._complete(req, [_StoredOutcome(item.seq, item.msg, number, answer, pos, item.uniq)
                             for pos, item in enumerate(items)])

    def _lost(self, req: _Request, exc: BaseException) -> None:
        self._take_off_wire(req)
        err = exc if isinstance(exc, RocketMQError) else ConnectionClosedError(str(exc))
        self._fail(req, err)  # written, then the connection went: the broker may have stored it

    def _complete(self, req: _Request, outcomes: list[SendOutcome]) -> None:
        self._record_run(outcomes)
        self._outstanding -= len(req.items)
        lane = req.lane
        if lane is not None:
            lane.busy = False
            if lane.pending:
                self._lanes_ready.append(lane)
                self._schedule_flush()
        self._wake()

    def _fail(self, req: _Request, exc: RocketMQError) -> None:
        for item in req.items:
            self._record(SendOutcome(item.seq, item.msg, None, exc, req.number))
        self._outstanding -= len(req.items)
        lane = req.lane
        if lane is not None:
            lane.busy = False
            lane.broken = exc
            rest = list(lane.pending)
            lane.pending.clear()
            self._outstanding -= len(rest)
            for item in rest:
                self._record(SendOutcome(item.seq, item.msg, None, SendAbortedError(
                    f"not sent: an earlier message of {lane.mq} failed ({exc})", exc)))
        self._failed(exc)
        self._wake()

    def _failed(self, exc: RocketMQError) -> None:
        if self.error is None:
            self.error = exc
        if self.options.stop_on_error:
            self.stop()

    # -- internals: retries -------------------------------------------------------------------------
    def _not_sent(self, req: _Request, exc: NotSentError) -> None:
        if self._producer.retry_times == 0:
            self._fail(req, exc.cause)
            return
        log.warning("send of %d message(s) to %s not stored (%s); retrying", len(req.items), req.mq, exc.cause)
        self._spawn(self._retry(req, exc))

    async def _retry(self, req: _Request, first: NotSentError) -> None:
        """The later attempts of a request whose first attempt the broker certainly did not store."""
        failed = [first]
        last_broker = first.broker
        try:
            async for attempt in AsyncRetrying(stop=stop_after_attempt(self._producer.retry_times + 1),
                                               wait=wait_random_exponential(multiplier=0.05, max=1.0),
                                               retry=retry_if_exception_type(NotSentError), reraise=True):
                with attempt:
                    if failed:  # the first attempt, made by the pipeline: tenacity waits, then retries
                        raise failed.pop()
                    if self.stopped:
                        raise self._aborted("the run stopped")
                    try:
                        results = await self._attempt(req, last_broker)
                    except NotSentError as exc:
                        last_broker = exc.broker
                        log.warning("send of %d message(s) not stored (%s); %s", len(req.items), exc.cause,
                                    "retrying" if attempt.retry_state.attempt_number <= self._producer.retry_times
                                    else "giving up")
                        raise
            self._complete(req, [SendOutcome(item.seq, item.msg, result, None, req.number)
                                 for item, result in zip(req.items, results, strict=True)])
        except NotSentError as exc:
            self._fail(req, exc.cause)
        except RocketMQError as exc:
            self._fail(req, exc)

    async def _attempt(self, req: _Request, last_broker: str) -> list[SendResult]:
        topic = req.mq.topic
        # re-read the route: the broker may be gone or the topic moved
        if req.lane is None:
            queues = self._queues[topic] = await self._producer.publish_queues(topic, refresh=True)
            req.mq = self._producer.pick_queue(queues, last_broker)
        else:  # keyed: the same queue, so that nothing of its key overtakes
            await self._client.get_route(topic, refresh=True)
        await self._acquire_slot()
        try:
            items = req.items
            if len(items) == 1:
                return [await self._producer.send_request(req.mq, self._command(req), items[0].uniq)]
            uniq = ",".join(i.uniq for i in items)
            return (await self._producer.send_request(req.mq, self._command(req), uniq)).split(len(items))
        finally:
            self._release_slot()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


__all__ = ["PipelineOptions", "SendAbortedError", "SendOutcome", "SendPipeline"]
