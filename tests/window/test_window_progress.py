"""Window progress (window/progress.py): the lines a window reports, on a fake clock.

The collector is the real one, fed with pulled batches (tests/window_batches.py); only time is
faked, so every figure of a line is known exactly. The last test runs a real window on the
embedded broker with a clock that jumps 31 s at every read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, Producer, PushConsumer
from airflow_provider_rocketmq.client.consumer.config import ConsumerConfig
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.window.collector import QueueKey, WindowCollector, parse_tag_expression
from airflow_provider_rocketmq.window.progress import Figures, WindowProgress
from airflow_provider_rocketmq.window.runner import (
    WINDOW_CONSUMER_DEFAULTS,
    Listener,
    WindowSpec,
    register_window_listener,
    run_window,
)
from tests.window_batches import batch

Q0: QueueKey = ("b", 0)
Q1: QueueKey = ("b", 1)


class Clock:
    """Set ``now`` by hand; or give ``step`` and every read moves it on by that much."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        value = self.now
        self.now += self.step
        return value


class CountingCollector(WindowCollector):
    """The real collector, counting how often progress reads it."""

    reads = 0

    def slices(self) -> Any:
        self.reads += 1
        return super().slices()


class FromZero:
    """Every queue of the window starts at offset 0."""

    def initial(self, key: QueueKey) -> int:
        return 0

    def floor(self, key: QueueKey) -> int:
        return 0


def collector(high_water: dict[QueueKey, int], expression: str = "*") -> CountingCollector:
    c = CountingCollector(high_water, sink=lambda b: None, starts=FromZero(), tags=parse_tag_expression(expression))
    c.take_queues(high_water)
    return c


def body_bytes(key: QueueKey, offsets: range) -> int:
    return batch(key, offsets).body_bytes


def at(clock: Clock, progress: WindowProgress, t: float) -> None:
    clock.now = t
    progress.tick()


def test_a_line_every_interval_with_the_window_figures() -> None:
    clock, lines = Clock(), []
    c = collector({Q0: 100, Q1: 300})
    progress = WindowProgress(interval=30, emit=lines.append, clock=clock)
    progress.attach(c)
    at(clock, progress, 10)
    c.offer(batch(Q0, range(50)))
    at(clock, progress, 29.9)
    assert lines == []  # nothing before the first interval
    at(clock, progress, 30)
    size = body_bytes(Q0, range(50))
    assert lines == [(f"50 of 400 messages staged (12.5%, {size} B) in 30 s; 0 of 2 queues done; "
                     f"last 30 s: 1.7 msg/s, {size / 30:.0f} B/s; ETA 3 min 30 s; most left: b:1 300, b:0 50")]
    c.offer(batch(Q0, range(50, 100)))
    c.offer(batch(Q1, range(100)))
    at(clock, progress, 45)
    at(clock, progress, 60)
    assert len(lines) == 2
    # 150 messages in the last 30 s: 5/s, 200 offsets left -> 40 s; the finished queue is not listed
    assert lines[1].startswith("200 of 400 messages staged (50.0%, ")
    assert "in 1 min 00 s; 1 of 2 queues done; last 30 s: 5.0 msg/s, " in lines[1]
    assert lines[1].endswith("; ETA 40 s; most left: b:1 200")
    # a late tick reports once and keeps the cadence (next at 120, not at 100 + 30)
    at(clock, progress, 100)
    at(clock, progress, 119)
    assert len(lines) == 3 and "in 1 min 40 s;" in lines[2] and "last 40 s: 0.0 msg/s" in lines[2]
    assert "ETA unknown (no progress)" in lines[2]
    at(clock, progress, 120)
    assert len(lines) == 4 and "last 20 s:" in lines[3]
    at(clock, progress, 240)  # three intervals late: one line, no burst of catching up
    at(clock, progress, 241)
    at(clock, progress, 269)
    assert len(lines) == 5 and "last 2 min 00 s:" in lines[4]
    progress.detach()
    assert progress.last is not None and progress.last.messages == 200 and progress.consuming_seconds == 269


def test_a_window_shorter_than_the_interval_reports_nothing() -> None:
    clock, lines = Clock(), []
    c = collector({Q0: 10})
    progress = WindowProgress(interval=30, emit=lines.append, clock=clock)
    progress.attach(c)
    c.offer(batch(Q0, range(10)))
    at(clock, progress, 29.99)
    clock.now = 29.99
    progress.detach()
    assert lines == []
    assert progress.last is not None and progress.last.messages == 10  # the figures are still recorded
    assert progress.first is not None and progress.first.messages == 0


def test_interval_zero_reports_no_lines() -> None:
    clock, lines = Clock(), []
    progress = WindowProgress(interval=0, emit=lines.append, clock=clock)
    progress.attach(collector({Q0: 10}))
    for t in range(0, 3600, 7):
        at(clock, progress, t)
    assert lines == []


def test_ticks_between_reports_never_read_the_collector() -> None:
    clock = Clock()
    c = collector({Q0: 1000})
    progress = WindowProgress(interval=30, emit=lambda text: None, clock=clock)
    progress.attach(c)
    reads = c.reads  # the attach sample
    for i in range(1, 1000):
        at(clock, progress, i * 0.02)  # 20 s of ticks every 20 ms
    assert c.reads == reads
    at(clock, progress, 30)
    assert c.reads == reads + 1


def test_a_max_messages_bound_below_the_backlog_is_the_target() -> None:
    clock, lines = Clock(), []
    c = collector({Q0: 1000})
    progress = WindowProgress(interval=10, emit=lines.append, max_messages=100, clock=clock)
    progress.attach(c)
    c.offer(batch(Q0, range(25)))
    at(clock, progress, 10)
    assert lines[0].startswith("25 messages (")
    assert " of max_messages 100 staged (25.0%) in 10 s;" in lines[0]
    assert "last 10 s: 2.5 msg/s" in lines[0] and "ETA 30 s" in lines[0]  # 75 left at 2.5/s


def test_tag_filtered_offsets_are_reported_apart_from_staged_messages() -> None:
    clock, lines = Clock(), []
    c = collector({Q0: 40}, expression="TagA")
    progress = WindowProgress(interval=30, emit=lines.append, clock=clock)
    progress.attach(c)
    c.offer(batch(Q0, range(20), tags=["TagA" if i % 4 == 0 else "TagB" for i in range(20)]))
    at(clock, progress, 30)
    assert lines[0].startswith("5 messages (")
    assert " staged; 20 of 40 offsets read (50.0%) in 30 s;" in lines[0]
    assert "ETA 30 s" in lines[0]  # 20 offsets in 30 s, 20 left


def test_before_any_queue_is_assigned_the_line_says_so() -> None:
    clock, lines = Clock(), []
    c = CountingCollector({Q0: 10}, sink=lambda b: None, starts=FromZero())  # no queue taken yet
    progress = WindowProgress(interval=30, emit=lines.append, clock=clock)
    progress.attach(c)
    at(clock, progress, 30)
    assert lines == ["no queue assigned yet after 30 s"]


def test_the_live_sink_gets_figures_at_its_own_pace_and_a_last_one_at_detach() -> None:
    clock, seen = Clock(), []
    c = collector({Q0: 100})
    progress = WindowProgress(interval=0, live=seen.append, live_interval=0.25, clock=clock)
    progress.attach(c)
    at(clock, progress, 0.0)
    for t in (0.1, 0.2):
        at(clock, progress, t)
    assert len(seen) == 1
    c.offer(batch(Q0, range(40)))
    at(clock, progress, 2.0)
    assert len(seen) == 2
    f: Figures = seen[-1]
    assert (f.completed, f.target, f.rate) == (40, 100, 20.0)
    assert f.brief().startswith(f"{body_bytes(Q0, range(40))} B; 20 msg/s; ETA 3 s; slowest b:0 60 left")
    c.offer(batch(Q0, range(40, 100)))
    clock.now = 3.0
    progress.detach()
    assert len(seen) == 3 and seen[-1].fraction == 1.0 and seen[-1].slowest == ()


# -- a real window ------------------------------------------------------------------------------------

def test_a_real_window_reports_through_the_runner(embedded_cluster_factory: Callable[..., EmbeddedCluster],
                                                  tmp_path: Path) -> None:
    cluster = embedded_cluster_factory(brokers=1, queues=2)
    cluster.create_topic("ProgT", 2)
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), group="prog_p") as producer:
        for mq in producer.publish_queues("ProgT"):
            producer.send_batch([Message("ProgT", b"x" * 10) for _ in range(20)], queue=mq)
    config = ConsumerConfig(namesrv_addr=cluster.namesrv_addr, **WINDOW_CONSUMER_DEFAULTS,
                            enable_offset_commit=False, consume_from_where="CONSUME_FROM_FIRST_OFFSET")

    def factory(listener: Listener) -> Any:
        consumer = PushConsumer("prog_g", config)
        consumer.subscribe("ProgT", "*")
        register_window_listener(consumer, listener)
        return consumer

    lines: list[str] = []
    progress = WindowProgress(interval=30, emit=lines.append, clock=Clock(step=31))  # every tick is due
    spec = WindowSpec(topic="ProgT", consumer_group="prog_g", staging_dir=str(tmp_path / "w"),
                      assignment_timeout=20)
    with Admin(ClientConfig(namesrv_addr=cluster.namesrv_addr)) as admin:
        result = run_window(spec, admin, factory, progress=progress)
        assert result.messages == 40
        # the loop ticks at least once after the queues are assigned, and every tick is due
        counts = [int(line.split(" ", 1)[0]) for line in lines if " of 40 messages staged (" in line]
        assert counts and counts == sorted(counts) and counts[-1] <= 40, lines
        assert all(line.startswith("no queue assigned yet after ") for line in lines[:len(lines) - len(counts)])
        assert progress.last is not None and progress.first is not None
        assert (progress.last.messages, progress.last.bytes, progress.last.total) == (40, 400, 40)
        assert len(progress.last.queues) == 2
        again = WindowProgress(interval=30, emit=lines.append)
        assert run_window(spec, admin, factory, progress=again).reused
        assert again.first is None  # a window found staged consumes nothing: no progress
