"""Producer: SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (REFERENCE 2.4, 2.8), one at a time or pipelined.

Used by the produce operator and command, for demo data, tests and the consumer's retry fallback.
What it does like Java's DefaultMQProducer: V2 one-letter header, ``WAIT=true`` and a UNIQ_KEY on
every message, zlib (level 5) for single bodies above 4 KiB with sysFlag 0x301,
round-robin queue choice that moves to another broker after a failure, key-hash
choice (``String.hashCode % n``) for ordered sends, and the ``TBW102`` default
topic route when the topic does not exist yet (brokers with autoCreateTopic).

Retries are bounded (tenacity, jittered) and happen only when the message was
certainly *not* stored: the broker answered a retriable code (busy, flow
control, service not available, system error) or the connection could not be
opened (refused or timed out). A timeout or a connection lost after the frame was written is raised,
because the broker may have stored the message; the UNIQ_KEY stays the same on
every attempt so a duplicate would still be recognisable. (Java's ``retryTimesWhenSendFailed``
also resends after a timeout or a lost connection, which can store a message twice.)

`send_many` pipelines: many requests in flight on one connection per broker, a `SendOutcome`
per message, order kept per key (see pipeline.py for exactly what holds).
`Producer.send` takes a synchronous fast path when the topic's route and the broker's
connection are already there: the request is rendered in the calling thread and handed to the
loop thread with one callback, and the answer comes back through a lock, not a coroutine.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from ..config import ClientConfig
from ..connection import RemotingProtocol, next_opaque
from ..loop_thread import SyncFacade
from ..mqclient import ClientFacade, MQClient
from ..protocol.command import RemotingCommand
from ..protocol.errors import (
    ClientStateError,
    ConfigError,
    ConnectionClosedError,
    RequestTimeoutError,
    RouteNotFoundError,
)
from ..protocol.message import COMPRESS_OVER, PROPERTY_UNIQ_KEY, Message, encode_batch
from ..protocol.names import DEFAULT_TOPIC, RETRY_PREFIX
from ..protocol.queue import MessageQueue
from ..protocol.send_wire import (
    DEFAULT_TOPIC_QUEUE_NUMS,
    MAX_MESSAGE_SIZE,
    NotSentError,
    SendFrameRenderer,
    SendResult,
    build_batch_request,
    build_send_request,
    prepare_batch,
    prepared,
    select_by_key,
    send_result,
    validate_message,
)
from ..route import MASTER_ID, TopicRouteData
from .direct_send import DirectSender
from .message_id import new_uniq_id
from .pipeline import PipelineOptions, SendOutcome, SendPipeline

log = logging.getLogger(__name__)

SendItem = Message | tuple[Message, str | None]  # a message, or (message, key) for ordered sends


def _check_key(key: object) -> None:
    if key is not None and not isinstance(key, str):
        raise ConfigError("key", f"must be a string, got {type(key).__name__}")


def _check_target(topic: str, queue: MessageQueue | None, key: str | None, ns: Any) -> None:
    if queue is not None and not isinstance(queue, MessageQueue):
        raise ConfigError("queue", f"expected a MessageQueue(topic, broker_name, queue_id), got {queue!r}")
    if key is not None and not isinstance(key, str):
        raise ConfigError("key", f"must be a string, got {type(key).__name__}")
    if queue is not None and ns(queue.topic) != ns(topic):
        raise ConfigError("queue", f"queue {queue} belongs to another topic than {topic!r}")
    if queue is not None and key is not None:
        raise ConfigError("key", "give either queue= or key=, not both")


class AsyncProducer(ClientFacade):
    """asyncio producer (see module docstring). One `MQClient` unless one is passed in."""

    def __init__(self, config: ClientConfig | None = None, group: str = "DEFAULT_PRODUCER",
                 mqclient: MQClient | None = None, *, retry_times: int = 2,
                 compress_over: int = COMPRESS_OVER, max_message_size: int = MAX_MESSAGE_SIZE,
                 send_timeout: float | None = None, auto_create_topic: bool = True) -> None:
        if not group or not isinstance(group, str):
            raise ConfigError("group", "producer group must be a non-empty string")
        if isinstance(retry_times, bool) or not isinstance(retry_times, int) or not 0 <= retry_times <= 16:
            raise ConfigError("retry_times", f"must be an integer in [0, 16], got {retry_times!r}")
        if compress_over < 0:
            raise ConfigError("compress_over", "must be >= 0")
        if send_timeout is not None and (isinstance(send_timeout, bool) or not isinstance(send_timeout, (int, float))
                                         or not 0 < send_timeout <= 600):
            raise ConfigError("send_timeout", f"must be a number of seconds in (0, 600], got {send_timeout!r}")
        super().__init__(config, mqclient)
        self.group = group
        self.retry_times = retry_times
        self.compress_over = compress_over
        self.max_message_size = max_message_size
        self.send_timeout = send_timeout
        self.auto_create_topic = auto_create_topic
        self.renderer = SendFrameRenderer(self.client.ns(group), compress_over)
        self.rotation: Iterator[int] = itertools.count()  # the round robin over a topic's queues
        self._queue_cache: dict[str, tuple[TopicRouteData, list[MessageQueue]]] = {}
        self._valid_topics: set[str] = set()
        self._closed = False

    async def close(self) -> None:
        """Refuse further sends; close the connections if this producer created its MQClient."""
        self._closed = True
        await super().close()

    @property
    def attempt_timeout(self) -> float:
        """How long one attempt waits for its answer (connect included)."""
        return self.send_timeout if self.send_timeout is not None else self.client.timeout

    # -- queue selection ---------------------------------------------------------
    async def publish_queues(self, topic: str, refresh: bool = False) -> list[MessageQueue]:
        """Writable queues of ``topic`` (TBW102's brokers when the topic has no route at all).

        Like Java's ``tryToFindTopicPublishInfo``: a cached route without a writable queue is
        fetched again; a route that exists but offers no writable queue on a master (a read-only
        topic, say) is final - the send fails with ``RouteNotFoundError`` and never goes to
        TBW102's brokers, which would store the message in a topic its owner closed for writes.
        """
        try:
            route = await self.client.get_route(topic, refresh=refresh)
            queues = route.publish_queues(self.client.ns(topic))
            if not queues and not refresh:
                route = await self.client.get_route(topic, refresh=True)
                queues = route.publish_queues(self.client.ns(topic))
        except RouteNotFoundError:
            if not self.auto_create_topic:
                raise
        else:
            if queues:
                return queues
            raise RouteNotFoundError(f"No route info of this topic: {topic!r} has a route but no writable "
                                     f"queue on a master broker (read-only topic, or its master is down)")
        # Like Java: fall back to TBW102's brokers; a broker with autoCreateTopicEnable
        # creates the topic (4 queues) on the first send.
        try:
            default = await self.client.get_route(DEFAULT_TOPIC)
        except RouteNotFoundError:
            raise RouteNotFoundError(
                f"topic {topic!r} does not exist and the brokers do not auto-create topics "
                f"(create it first, e.g. `rocketmq-airflow topic create --topic {topic}`)") from None
        return _default_topic_queues(default, self.client.ns(topic))

    def cached_queues(self, topic: str) -> list[MessageQueue] | None:
        """The writable queues of ``topic``'s cached route, without I/O (any thread); None when the
        route is not cached or has no writable queue (then `publish_queues` decides)."""
        route = self.client.cached_route(topic)
        if route is None:
            return None
        hit = self._queue_cache.get(topic)
        if hit is not None and hit[0] is route:
            return hit[1]
        queues = route.publish_queues(self.client.ns(topic))
        if not queues:
            return None
        self._queue_cache[topic] = (route, queues)
        return queues

    def pick_queue(self, queues: list[MessageQueue], avoid_broker: str | None) -> MessageQueue:
        """The next queue of the round robin, on another broker than ``avoid_broker`` when there is one."""
        start = next(self.rotation)
        if avoid_broker is not None:
            for i in range(len(queues)):
                mq = queues[(start + i) % len(queues)]
                if mq.broker_name != avoid_broker:
                    return mq
        return queues[start % len(queues)]

    # -- sending ------------------------------------------------------------------
    async def send(self, msg: Message, queue: MessageQueue | None = None,
                   key: str | None = None) -> SendResult:
        """Send one message; ``queue`` pins the queue, ``key`` picks one by hash (ordered sends)."""
        validate_message(msg, self.max_message_size)
        sent, uniq = prepared(msg, new_uniq_id)
        group, compress_over = self.client.ns(self.group), self.compress_over

        def build(mq: MessageQueue) -> RemotingCommand:
            return build_send_request(sent, mq, group, compress_over=compress_over)
        return await self._send_with_retries(msg.topic, build, queue, key, uniq)

    async def send_batch(self, msgs: Iterable[Message], queue: MessageQueue | None = None,
                         key: str | None = None) -> SendResult:
        """Send messages of one topic in one SEND_BATCH_MESSAGE (all land in one queue)."""
        items = prepare_batch(msgs, new_uniq_id)
        for m in items:
            validate_message(m, self.max_message_size)
        size = len(encode_batch(items))
        if size > self.max_message_size:
            raise ConfigError("messages", f"batch of {size} bytes exceeds the maximum {self.max_message_size}")
        uniq = ",".join(m.properties[PROPERTY_UNIQ_KEY] for m in items)
        group = self.client.ns(self.group)
        return await self._send_with_retries(items[0].topic, lambda mq: build_batch_request(items, mq, group),
                                             queue, key, uniq)

    def pipeline(self, *, max_in_flight: int = 64, max_batch: int = 1, stop_on_error: bool = True) -> SendPipeline:
        """A `SendPipeline` for one run (call on the producer's loop); `send_many` drives one for you."""
        if self._closed:
            raise ClientStateError("producer is closed")
        return SendPipeline(self, PipelineOptions(max_in_flight, max_batch, stop_on_error))

    async def send_many(self, messages: Iterable[SendItem] | AsyncIterable[SendItem], *, key: str | None = None,
                        max_in_flight: int = 64, max_batch: int = 1,
                        stop_on_error: bool = True) -> AsyncIterator[SendOutcome]:
        """Send ``messages`` pipelined; yields one `SendOutcome` per message, in their order.

        An item is a `Message` or ``(message, key)``; ``key`` applies to items without one. See
        pipeline.py for the bounds and the order per key. A bad item (ConfigError) or an error of
        ``messages`` itself is raised once the messages before it have their outcomes (yielded first).
        """
        pipe = self.pipeline(max_in_flight=max_in_flight, max_batch=max_batch, stop_on_error=stop_on_error)
        _check_key(key)
        feed = (self._feed_async(pipe, messages, key) if isinstance(messages, AsyncIterable)
                else self._feed(pipe, messages, key))
        failure: BaseException | None = None
        try:
            try:
                async for ready in feed:
                    for outcome in ready:
                        yield outcome
            except Exception as exc:
                failure = exc
            while pipe.outstanding:
                await pipe.wait_ready()
                for outcome in pipe.take():
                    yield outcome
            for outcome in pipe.take():
                yield outcome
        finally:
            await feed.aclose()
            await pipe.close()
        if failure is not None:
            raise failure

    async def _feed(self, pipe: SendPipeline, messages: Iterable[SendItem],
                    key: str | None) -> AsyncGenerator[list[SendOutcome], None]:
        """Put ``messages`` in ``pipe`` one by one (waiting for room) until it stops; after each, the
        outcomes ready so far, when there are some."""
        for item in messages:
            msg, k = self.check_item(item, key)
            if not pipe.offer(msg, k):
                await pipe.put(msg, k)
            ready = pipe.take()
            if ready:
                yield ready
            if pipe.stopped:
                return

    async def _feed_async(self, pipe: SendPipeline, messages: AsyncIterable[SendItem],
                          key: str | None) -> AsyncGenerator[list[SendOutcome], None]:
        """`_feed` for an async source."""
        async for item in messages:
            msg, k = self.check_item(item, key)
            if not pipe.offer(msg, k):
                await pipe.put(msg, k)
            ready = pipe.take()
            if ready:
                yield ready
            if pipe.stopped:
                return

    def check_item(self, item: Any, key: str | None) -> tuple[Message, str | None]:
        """``item`` of `send_many` as (message, key), validated (ConfigError naming the field)."""
        if item.__class__ is Message:
            msg, k = item, key
        elif isinstance(item, tuple):
            if len(item) != 2:
                raise ConfigError("message", f"expected a Message or (Message, key), got a {len(item)}-tuple")
            msg, k = item
            if k is not None and not isinstance(k, str):
                raise ConfigError("key", f"must be a string, got {type(k).__name__}")
            k = key if k is None else k
        else:
            msg, k = item, key
        # validate_message, with the topic's name checked once per topic
        body = msg.body if msg.__class__ is Message else None
        if not body or len(body) > self.max_message_size or msg.topic not in self._valid_topics:
            validate_message(msg, self.max_message_size)
            if len(self._valid_topics) > 1024:
                self._valid_topics.clear()
            self._valid_topics.add(msg.topic)
        return msg, k

    async def _send_with_retries(self, topic: str, build: Any, queue: MessageQueue | None,
                                 key: str | None, uniq: str, failed: NotSentError | None = None) -> SendResult:
        if self._closed:
            raise ClientStateError("producer is closed")
        _check_target(topic, queue, key, self.client.ns)
        try:
            return await self._attempts(topic, build, queue, key, uniq, failed)
        except NotSentError as exc:  # every attempt was rejected: surface the broker's own error
            raise exc.cause from None

    async def _attempt(self, topic: str, build: Any, fixed: MessageQueue | None, key: str | None, uniq: str,
                       last_broker: str | None) -> SendResult:
        if fixed is not None:
            mq = MessageQueue(self.client.ns(fixed.topic), fixed.broker_name, fixed.queue_id)
        else:
            # after a failure, re-read the route: the broker may be gone or the topic moved
            queues = await self.publish_queues(topic, refresh=last_broker is not None)
            mq = select_by_key(queues, key) if key is not None else self.pick_queue(queues, last_broker)
        try:
            return await self.send_request(mq, build(mq), uniq)
        except NotSentError as exc:
            exc.queue = mq
            raise

    async def _attempts(self, topic: str, build: Any, fixed: MessageQueue | None,
                        key: str | None, uniq: str, failed: NotSentError | None) -> SendResult:
        if failed is None:  # the first attempt outside tenacity: most sends need no other
            try:
                return await self._attempt(topic, build, fixed, key, uniq, None)
            except NotSentError as exc:
                self._log_not_sent(exc, 1)
                failed = exc
        if self.retry_times == 0:
            raise failed
        pending = [failed]
        last_broker: str | None = failed.broker
        async for attempt in AsyncRetrying(stop=stop_after_attempt(self.retry_times + 1),
                                           wait=wait_random_exponential(multiplier=0.05, max=1.0),
                                           retry=retry_if_exception(lambda e: isinstance(e, NotSentError)),
                                           reraise=True):
            with attempt:
                if pending:  # the first attempt, already made: tenacity waits, then retries
                    raise pending.pop()
                try:
                    return await self._attempt(topic, build, fixed, key, uniq, last_broker)
                except NotSentError as exc:
                    last_broker = exc.broker
                    self._log_not_sent(exc, attempt.retry_state.attempt_number)
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _log_not_sent(self, exc: NotSentError, attempt: int) -> None:
        log.warning("send to %s not stored (%s); %s", exc.queue or exc.broker, exc.cause,
                    "retrying" if attempt <= self.retry_times else "giving up")

    async def send_request(self, mq: MessageQueue, cmd: RemotingCommand, uniq: str) -> SendResult:
        """One attempt of ``cmd`` to ``mq``'s master; `NotSentError` when the broker certainly did not
        store it (a refused or timed-out connect, a retriable answer)."""
        addr = await self.client.master_addr(mq)
        loop = asyncio.get_running_loop()
        budget = self.attempt_timeout
        deadline = loop.time() + budget  # one deadline for connect + reply
        try:
            await self.client.pool.get(addr, budget)  # connect first: a refused or timed-out connect sent nothing
        except (ConnectionClosedError, RequestTimeoutError) as exc:
            raise NotSentError(exc, mq.broker_name) from exc
        resp = await self.client.invoke(addr, cmd, max(deadline - loop.time(), 0.001))
        return send_result(resp, mq, uniq, addr)

    # -- the synchronous facade's fast path -------------------------------------------------
    def fast_plan(self, msg: Message, queue: MessageQueue | None, key: str | None) -> _FastSend | None:
        """Validate ``msg`` and, when its route and its broker's address are cached, render its first
        attempt without I/O (from any thread); None: take `send`."""
        validate_message(msg, self.max_message_size)
        if self._closed:
            raise ClientStateError("producer is closed")
        topic = msg.topic
        _check_target(topic, queue, key, self.client.ns)
        client = self.client
        if client.pool.rpc_hook is not None or topic.startswith(RETRY_PREFIX):
            return None
        if queue is not None:
            mq = MessageQueue(client.ns(queue.topic), queue.broker_name, queue.queue_id)
        else:
            queues = self.cached_queues(topic)
            if queues is None:
                return None
            mq = select_by_key(queues, key) if key is not None else queues[next(self.rotation) % len(queues)]
        try:
            addr = client.broker_addr(mq.broker_name, MASTER_ID, exact=True)
        except RouteNotFoundError:
            return None
        sent, uniq = prepared(msg, new_uniq_id)
        opaque = next_opaque()
        frame = self.renderer.frame(sent, mq, opaque, int(time.time() * 1000))
        return _FastSend(client.pool.live(addr), addr, mq, opaque, frame, sent, uniq)

    async def send_planned(self, fast: _FastSend, queue: MessageQueue | None, key: str | None,
                           failed: NotSentError | None) -> SendResult:
        """`send` of a message `fast_plan` prepared: the attempts after ``failed`` (which the broker
        did not store), or all of them; the UNIQ_KEY stays the same."""
        group, compress_over = self.client.ns(self.group), self.compress_over

        def build(mq: MessageQueue) -> RemotingCommand:
            return build_send_request(fast.sent, mq, group, compress_over=compress_over)
        return await self._send_with_retries(fast.sent.topic, build, queue, key, fast.uniq, failed)


class _FastSend:
    """A first attempt rendered by `AsyncProducer.fast_plan`; also the connection's sink for its
    answer, which wakes the calling thread through a lock."""

    __slots__ = ("_lock", "addr", "conn", "error", "frame", "mq", "opaque", "response", "sent", "uniq")

    def __init__(self, conn: RemotingProtocol | None, addr: str, mq: MessageQueue, opaque: int, frame: bytes,
                 sent: Message, uniq: str) -> None:
        self.conn, self.addr, self.mq, self.opaque, self.frame, self.sent, self.uniq = \
            conn, addr, mq, opaque, frame, sent, uniq
        self.response: RemotingCommand | None = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._lock.acquire()

    def start(self) -> None:
        """On the loop thread: write the frame (nothing written if the connection closed meanwhile)."""
        assert self.conn is not None
        try:
            self.conn.send_encoded(self.opaque, self.frame, self, coalesce=False)
        except ConnectionClosedError as exc:
            self.set_exception(NotSentError(exc, self.mq.broker_name))

    def done(self) -> bool:
        return self.response is not None or self.error is not None

    def set_result(self, result: RemotingCommand) -> None:
        if not self.done():
            self.response = result
            self._lock.release()

    def set_exception(self, exception: BaseException) -> None:
        if not self.done():
            self.error = exception
            self._lock.release()

    def wait(self, timeout: float) -> bool:
        return self._lock.acquire(timeout=max(timeout, 0.0))


def _default_topic_queues(route: TopicRouteData, topic: str) -> list[MessageQueue]:
    """Java MQClientInstance: queues of TBW102's brokers, min(4, readQueueNums) each (Java sets both
    counts of the default route to that figure before it builds the publish queues)."""
    out: list[MessageQueue] = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        b = route.broker(q.broker_name)
        if not q.writable or b is None or b.master_addr() is None:
            continue
        n = min(DEFAULT_TOPIC_QUEUE_NUMS, q.read_queue_nums)
        out.extend(MessageQueue(topic, q.broker_name, i) for i in range(n))
    if not out:
        raise RouteNotFoundError(f"no writable broker can auto-create topic {topic!r}")
    return out


class Producer(SyncFacade[AsyncProducer]):
    """Synchronous producer facade (context manager) over `AsyncProducer` on a private loop thread."""

    def __init__(self, config: ClientConfig | None = None, group: str = "DEFAULT_PRODUCER",
                 **options: Any) -> None:
        cfg = (config or ClientConfig()).validate()
        super().__init__("rocketmq-producer", lambda: AsyncProducer(cfg, group, **options))
        self._started = False
        # TLS and signed (ACL) requests stay on the loop thread's connections
        self._direct = None if cfg.use_tls or cfg.acl_enabled else DirectSender(cfg.request_timeout)

    @property
    def group(self) -> str:
        return self._impl.group

    def start(self) -> Producer:
        if not self._started:
            self._loop.run(self._impl.start())
            self._started = True
        return self

    def send(self, msg: Message, queue: MessageQueue | None = None, key: str | None = None,
             timeout: float | None = None) -> SendResult:
        """Send one message and wait for its result (``timeout``: the whole send, retries included).

        Once the topic's route is cached, the first attempt is rendered in this thread and goes out
        on this producer's blocking socket to the broker (`DirectSender`), or through the loop
        thread when another thread is using that socket; retries go through the loop thread.
        """
        self.start()
        impl = self._impl
        if self._loop.in_loop_thread:  # the answer could never arrive: the loop would be waiting for it
            raise RuntimeError("Producer.send() called from the producer's own loop thread (would deadlock)")
        fast = impl.fast_plan(msg, queue, key)
        if fast is None:
            return self._call(impl.send(msg, queue, key), timeout, "send")
        started = time.monotonic()
        budget = impl.attempt_timeout if timeout is None else min(impl.attempt_timeout, timeout)
        try:
            try:
                resp = None
                if self._direct is not None:
                    resp = self._direct.exchange(fast.addr, fast.mq.broker_name, fast.opaque, fast.frame, budget)
                if resp is None:
                    resp = self._through_loop(fast, budget)
                if resp is None:  # no connection open yet: the loop opens one
                    return self._call(impl.send_planned(fast, queue, key, None), timeout, "send")
            except RequestTimeoutError:
                if timeout is not None and timeout <= impl.attempt_timeout:
                    raise RequestTimeoutError(f"send did not finish within {timeout}s") from None
                raise
            return send_result(resp, fast.mq, fast.uniq, fast.addr)
        except NotSentError as exc:
            exc.queue = fast.mq
            impl._log_not_sent(exc, 1)
            if not impl.retry_times:
                raise exc.cause from None
            left = None if timeout is None else max(timeout - (time.monotonic() - started), 0.001)
            return self._call(impl.send_planned(fast, queue, key, exc), left, "send")

    def _through_loop(self, fast: _FastSend, budget: float) -> RemotingCommand | None:
        """The first attempt through the loop thread's connection (None: it has none open)."""
        if fast.conn is None:
            return None
        if not self._loop.is_alive:
            raise ClientStateError("Producer is closed")
        self._loop.loop.call_soon_threadsafe(fast.start)
        if not fast.wait(budget):
            self._loop.loop.call_soon_threadsafe(fast.conn.forget, fast.opaque)
            raise RequestTimeoutError(f"no response to code 310 from {fast.addr} within {budget:.3f}s")
        if fast.error is not None:
            raise fast.error
        return fast.response

    def send_batch(self, msgs: Iterable[Message], queue: MessageQueue | None = None,
                   key: str | None = None, timeout: float | None = None) -> SendResult:
        self.start()
        return self._call(self._impl.send_batch(list(msgs), queue, key), timeout, "send_batch")

    def send_many(self, messages: Iterable[SendItem], *, key: str | None = None, max_in_flight: int = 64,
                  max_batch: int = 1, stop_on_error: bool = True) -> Iterator[SendOutcome]:
        """`AsyncProducer.send_many` for synchronous code: yields one `SendOutcome` per message, in order.

        ``messages`` is read in this thread, in chunks handed to the loop thread (one hand-over per
        chunk, not per message); a chunk closes at 256 messages, at half the pipeline's room, or
        after 50 ms, so a slow generator's messages do not wait for a full chunk. A bad item
        (ConfigError) or an exception of ``messages`` is raised once the messages before it have
        their outcomes. Closing the iterator early stops the run and waits for what is in flight.
        """
        self.start()
        impl = self._impl
        _check_key(key)
        pipe = self._loop.run(_open_pipeline(impl, max_in_flight, max_batch, stop_on_error))
        chunk_size = max(1, min(256, pipe.options.capacity // 2))
        it = iter(messages)
        failure: BaseException | None = None
        try:
            while failure is None and not pipe.stopped:
                chunk: list[tuple[Message, str | None]] = []
                until = time.monotonic() + 0.05
                try:
                    for item in it:
                        chunk.append(impl.check_item(item, key))
                        if len(chunk) >= chunk_size or time.monotonic() > until:
                            break
                except Exception as exc:
                    failure = exc
                if not chunk and failure is None:
                    break
                outcomes, failure = self._loop.run(_feed(pipe, chunk, failure))
                yield from outcomes
            yield from self._loop.run(pipe.finish())
        finally:
            self._loop.run(pipe.close())
        if failure is not None:
            raise failure

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        return self._loop.run(self._impl.publish_queues(topic))

    def close(self) -> None:
        """Close the blocking sockets, the async producer and its loop thread. Idempotent."""
        if self._direct is not None:
            self._direct.close()
        super().close()

    def shutdown(self) -> None:
        """Same as close()."""
        self.close()

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _open_pipeline(impl: AsyncProducer, max_in_flight: int, max_batch: int,
                         stop_on_error: bool) -> SendPipeline:
    return impl.pipeline(max_in_flight=max_in_flight, max_batch=max_batch, stop_on_error=stop_on_error)


async def _feed(pipe: SendPipeline, chunk: list[tuple[Message, str | None]],
                failure: BaseException | None) -> tuple[list[SendOutcome], BaseException | None]:
    """Put a chunk (waiting for room); the outcomes ready so far, and the error that ended the chunk."""
    done, n = 0, len(chunk)
    try:
        while done < n:
            done = pipe.offer_many(chunk, done)
            if done < n:  # no room, or a topic without its route yet
                await pipe.put(*chunk[done])
                done += 1
    except ConfigError as exc:
        failure = exc
    return pipe.take(), failure


__all__ = ["AsyncProducer", "Producer", "SendResult"]
