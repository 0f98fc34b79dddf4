"""Helpers shared by the integration tests: recording listeners and consumer/producer shortcuts.

Consumption is awaited on a condition variable that listeners notify, never by sleeping.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_rocketmq.client import (
    ConsumeFromWhere,
    ConsumerConfig,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PushConsumer,
    SendResult,
)

from .backends import IntegrationCluster, wait_until

REPO = Path(__file__).resolve().parent.parent
SEQ = "it_seq"  # user property carrying a message's sequence number in its test


@dataclass(frozen=True)
class Received:
    """One delivery, as a listener saw it."""

    consumer: str
    queue: MessageQueue
    queue_offset: int
    seq: int
    keys: str
    tags: str
    reconsume_times: int
    msg: MessageExt


class Collector:
    """Thread-safe record of what listeners consumed, with a waitable condition."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.records: list[Received] = []

    def add(self, consumer: str, msgs: Iterable[MessageExt]) -> None:
        with self._cond:
            for m in msgs:
                queue = MessageQueue(m.topic, m.broker_name, m.queue_id)
                seq = int(m.properties.get(SEQ, "-1"))
                self.records.append(Received(consumer, queue, m.queue_offset, seq, m.keys or "",
                                             m.tags or "", m.reconsume_times, m))
            self._cond.notify_all()

    def listener(self, consumer: str,
                 decide: Callable[[MessageExt], Any] | None = None) -> Callable[[list[MessageExt], Any], Any]:
        """A concurrent listener recording every delivery; ``decide(msg)`` may return another status."""

        def on_messages(msgs: list[MessageExt], ctx: Any) -> Any:
            self.add(consumer, msgs)
            if decide is not None:
                for m in msgs:
                    status = decide(m)
                    if status is not None and status != ConsumeStatus.CONSUME_SUCCESS:
                        return status
            return ConsumeStatus.CONSUME_SUCCESS

        return on_messages

    def snapshot(self) -> list[Received]:
        with self._cond:
            return list(self.records)

    def seqs(self, consumer: str | None = None) -> set[int]:
        return {r.seq for r in self.snapshot() if consumer is None or r.consumer == consumer}

    def wait_for(self, predicate: Callable[[list[Received]], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.records):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; "
                                         f"{len(self.records)} deliveries so far")
                self._cond.wait(remaining)

    def wait_for_seqs(self, expected: Iterable[int], timeout: float, consumer: str | None = None) -> None:
        want = set(expected)
        self.wait_for(lambda recs: want <= {r.seq for r in recs if consumer is None or r.consumer == consumer},
                      timeout, f"{len(want)} distinct messages")


def consumer_config(cluster: IntegrationCluster, **overrides: Any) -> ConsumerConfig:
    """A consumer config tuned for tests: starts at the first offset, rebalances and persists fast."""
    values: dict[str, Any] = {
        "namesrv_addr": cluster.namesrv_addr,
        "instance_name": f"it_{uuid.uuid4().hex[:10]}",
        "consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        "consume_thread_min": 4,
        "consume_thread_max": 4,
        "rebalance_interval": 2.0,
        "heartbeat_broker_interval": 2.0,
        "persist_consumer_offset_interval": 1.0,
        "poll_name_server_interval": 5.0,
        "pull_time_delay_when_exception": 0.5,
        "await_termination_when_shutdown": 5.0,
    }
    values.update(overrides)
    return ConsumerConfig(**values)


def start_consumer(cluster: IntegrationCluster, group: str, topic: str, listener: Callable[..., Any],
                   expression: str = "*", orderly: bool = False, **overrides: Any) -> PushConsumer:
    consumer = PushConsumer(group, consumer_config(cluster, **overrides))
    consumer.subscribe(topic, expression)
    consumer.register_listener(listener, orderly=orderly)
    consumer.start()
    return consumer


def make_message(topic: str, seq: int, tags: str = "", keys: str = "", body: bytes | None = None,
                 **properties: str) -> Message:
    props = {SEQ: str(seq), **properties}
    return Message(topic, body if body is not None else f"message {seq}".encode(), tags=tags or None,
                   keys=keys or f"key-{seq}", properties=props)


def produce(producer: Producer, topic: str, seqs: Iterable[int], **kwargs: Any) -> list[SendResult]:
    return [producer.send(make_message(topic, s, **kwargs)) for s in seqs]


def assigned_map(consumers: dict[str, PushConsumer], topic: str) -> dict[str, frozenset[MessageQueue]]:
    return {name: frozenset(q for q in c.assigned_queues() if q.topic == topic) for name, c in consumers.items()}


def is_partition(assignment: dict[str, frozenset[MessageQueue]], all_queues: Iterable[MessageQueue]) -> bool:
    """True when the assigned sets are disjoint and together hold exactly ``all_queues``."""
    union: set[MessageQueue] = set()
    total = 0
    for qs in assignment.values():
        union |= qs
        total += len(qs)
    want = set(all_queues)
    return union == want and total == len(want)


def uncommitted_queues(cluster: IntegrationCluster, group: str, topic: str) -> dict[int, tuple[int, int]]:
    """Queues whose committed offset on the broker differs from the max offset: {queue_id: (committed, max)}."""
    hw = cluster.admin.high_water_marks(topic)
    out = {}
    for mq, end in hw.items():
        committed = cluster.admin.committed_offset(group, mq)
        if committed != end:
            out[mq.queue_id] = (committed, end)
    return out


def broker_offsets_caught_up(cluster: IntegrationCluster, group: str, topic: str) -> bool:
    """True when the broker's committed offset of every queue equals the queue's max offset."""
    behind = uncommitted_queues(cluster, group, topic)
    if behind:
        last_behind[(group, topic)] = behind
    return not behind


# the last mismatch seen per (group, topic), for failure messages
last_behind: dict[tuple[str, str], dict[int, tuple[int, int]]] = {}


def wait_offsets_committed(cluster: IntegrationCluster, group: str, topic: str, timeout: float = 15.0) -> None:
    """Wait until the broker holds every queue's max offset as the group's committed offset."""
    try:
        wait_until(lambda: broker_offsets_caught_up(cluster, group, topic), timeout, "offsets committed")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; queue: (committed, max) = {last_behind.get((group, topic))}") from None


def run_cli(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run the ``rocketmq-airflow`` command line from source in a subprocess."""
    code = "import sys; from airflow_provider_rocketmq.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=False)


SHUTDOWN_TIMEOUT = 30.0


def stop_consumers(*consumers: PushConsumer, timeout: float = SHUTDOWN_TIMEOUT) -> None:
    """Shut consumers down, failing (instead of hanging the suite) if one does not finish in time."""
    hung: list[str] = []
    for consumer in consumers:
        done = threading.Event()
        errors: list[BaseException] = []

        def run(c: PushConsumer = consumer, done: threading.Event = done,
                errors: list[BaseException] = errors) -> None:
            try:
                c.shutdown()
            except BaseException as exc:
                errors.append(exc)
            finally:
                done.set()

        threading.Thread(target=run, name="it-shutdown", daemon=True).start()
        if not done.wait(timeout):
            hung.append(consumer.client_id)
        elif errors:
            raise errors[0]
    if hung:
        raise AssertionError(f"PushConsumer.shutdown() did not return within {timeout:.0f} s: {hung}")


def airflow_connection_env(cluster: IntegrationCluster, conn_id: str) -> tuple[str, str]:
    """``(variable, value)`` exposing the cluster as an Airflow ``rocketmq`` connection (JSON form)."""
    host, port = cluster.namesrv_addr.split(";")[0].rsplit(":", 1)
    return f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "rocketmq", "host": host, "port": int(port)})
