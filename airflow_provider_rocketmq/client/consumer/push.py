"""Public push-consumer API: `PushConsumer` (thread-safe, sync) and `AsyncPushConsumer`.

Usage::

    consumer = PushConsumer("my_group", namesrv_addr="127.0.0.1:9876")
    consumer.subscribe("Orders", "TagA || TagB")
    consumer.register_listener(lambda msgs, ctx: ConsumeStatus.CONSUME_SUCCESS)
    with consumer:          # start() ... shutdown()
        ...

Sync listeners run in a thread pool of consume_thread_min threads; ``async def``
listeners run on the consumer's event loop. `start()` and `shutdown()` block
until the state change is complete.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..loop_thread import LoopThread
from ..protocol.batch import BatchDecoder
from ..protocol.errors import AclDeniedError, RocketMQError
from ..protocol.queue import MessageQueue
from .config import ConsumerConfig
from .consume_batch import BatchListener
from .core import ConsumerCore, check_group, make_config
from .listener import Listener
from .offset_store import OffsetPersistReport

T = TypeVar("T")
AssignmentCallback = Callable[[str, frozenset[MessageQueue], frozenset[MessageQueue]], Any]
FailureCallback = Callable[[RocketMQError], Any]


class AsyncPushConsumer:
    """The push consumer for asyncio code; every coroutine runs on the caller's loop."""

    def __init__(self, group: str, config: ConsumerConfig | None = None, **overrides: Any) -> None:
        check_group(group)
        self._core = ConsumerCore(group, make_config(config, overrides))

    @property
    def group(self) -> str:
        return self._core.group

    @property
    def config(self) -> ConsumerConfig:
        return self._core.config

    @property
    def client_id(self) -> str:
        return self._core.client_id

    def subscribe(self, topic: str, expression: str = "*") -> None:
        self._core.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self._core.unsubscribe(topic)
        self._core.wake_rebalance()

    def register_listener(self, fn: Listener, orderly: bool = False) -> None:
        self._core.register_listener(fn, orderly)

    def register_batch_listener(self, fn: BatchListener, decoder: BatchDecoder) -> None:
        """``fn(batch, ctx)`` once per pulled batch, ``decoder`` building the batches (see PushConsumer)."""
        self._core.register_batch_listener(fn, decoder)

    async def start(self) -> None:
        try:
            await self._core.start()
        except BaseException:
            await self._core.shutdown(0)
            raise

    async def shutdown(self, timeout: float | None = None) -> OffsetPersistReport:
        """Stop, drain (at most ``timeout`` s, default await_termination_when_shutdown), commit the
        owned queues' offsets, unregister; returns the `OffsetPersistReport` of that commit."""
        return await self._core.shutdown(timeout)

    @property
    def final_persist(self) -> OffsetPersistReport | None:
        """The report the last `shutdown` returned (None before it)."""
        return self._core.final_persist

    def suspend(self) -> None:
        self._core.suspend()

    def resume(self) -> None:
        self._core.resume()

    def assigned_queues(self) -> frozenset[MessageQueue]:
        return self._core.assigned_queues()

    def on_assignment(self, callback: AssignmentCallback) -> None:
        """``callback(topic, mq_all, mq_divided)`` after every assignment change (on the loop)."""
        self._core.add_assignment_callback(callback)

    def set_stop_offsets(self, offsets: Mapping[MessageQueue, int]) -> None:
        self._core.set_stop_offsets(dict(offsets))

    async def rebalance_now(self) -> bool:
        return await self._core.rebalance_now()

    async def persist_offsets(self) -> None:
        await self._core.persist_offsets()

    def stats(self) -> dict[str, Any]:
        return self._core.stats()

    @property
    def denied(self) -> AclDeniedError | None:
        """The last request the broker's ACL refused (heartbeat, rebalance, queue lock, offset read or
        commit, pull, send-back); the first one is also the consumer's `failure`."""
        return self._core.denied

    @property
    def failure(self) -> RocketMQError | None:
        """The consumer's terminal failure, None while it is healthy.

        An ACL refusal of any request the consumer needs (heartbeat, rebalance, queue lock, start
        offset, offset read or commit, pull, send-back) is terminal: unlike Java, which logs and
        retries, the consumer stops pulling and rebalancing at once, so that a missing permission
        shows as an error instead of a consumer that silently reads nothing. `start` raises it when it
        happens during start; afterwards it is here, in `on_failure` callbacks and in
        `raise_if_failed`. What was consumed before it is committed by `shutdown` as usual (those
        offsets were read); nothing after it is pulled.
        """
        return self._core.failure

    def on_failure(self, callback: FailureCallback) -> None:
        """``callback(error)`` once, on the consumer's event loop, when the consumer fails (at once if it
        failed already); it must be quick and must not block."""
        self._core.on_failure(callback)

    def raise_if_failed(self) -> None:
        """Raise the consumer's `failure`, if any (for callers that wait in a loop)."""
        if self._core.failure is not None:
            raise self._core.failure

    async def __aenter__(self) -> AsyncPushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()


class PushConsumer:
    """Java's DefaultMQPushConsumer for synchronous code; the engine runs in a background loop."""

    def __init__(self, group: str, config: ConsumerConfig | None = None, **overrides: Any) -> None:
        self._async = AsyncPushConsumer(group, config, **overrides)
        self._loop_thread: LoopThread | None = None

    @property
    def group(self) -> str:
        return self._async.group

    @property
    def config(self) -> ConsumerConfig:
        return self._async.config

    @property
    def client_id(self) -> str:
        return self._async.client_id

    def _call(self, fn: Callable[[], T]) -> T:
        """Run a small synchronous action on the loop thread (state lives there)."""
        lt = self._loop_thread
        if lt is None or lt.in_loop_thread:
            return fn()

        async def run() -> T:
            return fn()
        return lt.run(run())

    def subscribe(self, topic: str, expression: str = "*") -> None:
        self._call(lambda: self._async.subscribe(topic, expression))

    def unsubscribe(self, topic: str) -> None:
        self._call(lambda: self._async.unsubscribe(topic))

    def register_listener(self, fn: Listener, orderly: bool = False) -> None:
        self._async.register_listener(fn, orderly)

    def register_batch_listener(self, fn: BatchListener, decoder: BatchDecoder) -> None:
        """Instead of `register_listener`: ``fn(batch, ctx)`` once per pulled batch.

        ``decoder(body, mq, filter)`` turns each pull body into the batch ``fn`` gets (a
        `client.batch.PulledBatch`; `client.batch.decode_message_batch` gives `MessageExt`
        lists, `client.columnar.decode_columns` Arrow record batches). Batches of one queue
        reach ``fn`` in offset order, never concurrently; a sync ``fn`` runs on one dedicated
        thread, an ``async def fn`` on the consumer's loop. CONSUME_SUCCESS settles the whole
        batch; RECONSUME_LATER or an exception sends ``batch.messages()[ack_index + 1:]`` back
        for redelivery (clustering) or drops them with a warning (broadcasting).
        """
        self._async.register_batch_listener(fn, decoder)

    def start(self) -> None:
        if self._loop_thread is None:
            self._loop_thread = LoopThread(name=f"rocketmq-consumer-{self.group}")
        try:
            self._loop_thread.run(self._async.start())
        except BaseException:
            self._loop_thread.stop()
            self._loop_thread = None
            raise

    def shutdown(self, timeout: float | None = None) -> OffsetPersistReport:
        """See `AsyncPushConsumer.shutdown`: the `OffsetPersistReport` of the final offset commit
        (the previous one, or an empty one, when the consumer is not running)."""
        lt = self._loop_thread
        if lt is None:
            return self._async.final_persist or OffsetPersistReport(enabled=self.config.enable_offset_commit)
        try:
            return lt.run(self._async.shutdown(timeout))
        finally:
            lt.stop()
            self._loop_thread = None

    @property
    def final_persist(self) -> OffsetPersistReport | None:
        """See `AsyncPushConsumer.final_persist`."""
        return self._async.final_persist

    def suspend(self) -> None:
        self._call(self._async.suspend)

    def resume(self) -> None:
        self._call(self._async.resume)

    def assigned_queues(self) -> frozenset[MessageQueue]:
        return self._call(self._async.assigned_queues)

    def on_assignment(self, callback: AssignmentCallback) -> None:
        self._async.on_assignment(callback)

    def set_stop_offsets(self, offsets: Mapping[MessageQueue, int]) -> None:
        self._call(lambda: self._async.set_stop_offsets(offsets))

    def rebalance_now(self) -> bool:
        assert self._loop_thread is not None
        return self._loop_thread.run(self._async.rebalance_now())

    def persist_offsets(self) -> None:
        assert self._loop_thread is not None
        self._loop_thread.run(self._async.persist_offsets())

    def stats(self) -> dict[str, Any]:
        return self._call(self._async.stats)

    @property
    def denied(self) -> AclDeniedError | None:
        """See `AsyncPushConsumer.denied`."""
        return self._async.denied

    @property
    def failure(self) -> RocketMQError | None:
        """See `AsyncPushConsumer.failure`."""
        return self._async.failure

    def on_failure(self, callback: FailureCallback) -> None:
        """See `AsyncPushConsumer.on_failure`: ``callback`` runs on the consumer's loop thread (thread-safe
        and quick, e.g. setting a `threading.Event`)."""
        self._call(lambda: self._async.on_failure(callback))

    def raise_if_failed(self) -> None:
        """See `AsyncPushConsumer.raise_if_failed`."""
        self._async.raise_if_failed()

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


__all__ = ["AsyncPushConsumer", "PushConsumer"]
