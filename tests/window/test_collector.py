"""WindowCollector: queue starts, contiguous prefixes of pulled batches, tag filtering, bounds, gaps (no broker)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from airflow_provider_rocketmq.client.protocol.columnar import ColumnBatch
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.window.collector import WindowCollector, parse_tag_expression
from tests.window_batches import batch

A0 = ("broker-a", 0)
A1 = ("broker-a", 1)


class Sink:
    """What the writer receives, per queue, in order."""

    def __init__(self) -> None:
        self.batches: list[ColumnBatch] = []

    def __call__(self, b: ColumnBatch) -> None:
        self.batches.append(b)

    def offsets(self, key: tuple[str, int] = A0) -> list[int]:
        return [o for b in self.batches if (b.mq.broker_name, b.mq.queue_id) == key for o in b.queue_offsets]


class Starts:
    """The collector's `QueueStarts` with set answers (0 unless given), recording what it was asked."""

    def __init__(self, initial: dict[tuple[str, int], int] | None = None,
                 floor: dict[tuple[str, int], int] | None = None) -> None:
        self.initial_of = dict(initial or {})
        self.floor_of = dict(floor or {})
        self.asked: list[tuple[str, tuple[str, int]]] = []

    def initial(self, key: tuple[str, int]) -> int:
        self.asked.append(("initial", key))
        return self.initial_of.get(key, 0)

    def floor(self, key: tuple[str, int]) -> int:
        self.asked.append(("floor", key))
        return self.floor_of.get(key, 0)


def collector(high_water: dict[tuple[str, int], int], starts: Starts | None = None,
              **kwargs: Any) -> tuple[WindowCollector, Sink]:
    sink = Sink()
    return WindowCollector(high_water, sink=sink, starts=starts or Starts(), **kwargs), sink


def test_contiguous_batches_are_staged_as_they_arrive() -> None:
    c, sink = collector({A0: 5})
    c.take_queues([A0])
    c.offer(batch(A0, [0, 1]))
    assert sink.offsets() == [0, 1] and not c.complete([A0])
    c.offer(batch(A0, [2, 3, 4]))
    assert sink.offsets() == [0, 1, 2, 3, 4] and c.complete([A0])
    (s,) = c.slices()
    assert (s.start, s.end, s.messages, s.bytes) == (0, 5, 5, sum(len(b"b%d" % i) for i in range(5)))


def test_the_start_is_resolved_on_the_first_batch_of_a_queue_not_taken_yet() -> None:
    starts = Starts(initial={A0: 1})
    c, sink = collector({A0: 3}, starts)
    c.offer(batch(A0, [1, 2]))
    assert starts.asked == [("initial", A0)] and sink.offsets() == [1, 2] and c.complete([A0])


def test_a_queue_start_is_asked_once_and_only_incomplete_queues_refresh_their_floor() -> None:
    starts = Starts(initial={A0: 2})
    c, _ = collector({A0: 4, A1: 3}, starts)
    c.take_queues([A0])
    c.take_queues([A0, A1])  # A0 has its start: the runner asks on every turn, the collector once
    assert starts.asked == [("initial", A0), ("initial", A1)]
    c.offer(batch(A1, [0, 1, 2]))
    c.offer(batch(A0, [5]))  # a gap, explained by nothing: A0 is settled, complete
    c.take_queues([A0, A1])
    starts.asked.clear()
    c.refresh_floors([A0, A1])
    assert starts.asked == [] and c.complete([A0, A1])
    c2, _ = collector({A0: 4, A1: 3}, starts)
    c2.take_queues([A0, A1])
    c2.offer(batch(A1, [0, 1, 2]))
    starts.asked.clear()
    c2.refresh_floors([A0, A1])
    assert starts.asked == [("floor", A0)]


def test_redeliveries_offsets_outside_the_window_and_foreign_queues_are_ignored() -> None:
    c, sink = collector({A0: 4}, Starts(initial={A0: 1}))
    c.take_queues([A0])
    c.offer(batch(A0, [0, 1]))  # 0 is below the start
    c.offer(batch(A0, [1, 2]))  # 1 again
    c.offer(batch(A0, [3, 4, 5]))  # past the high-water mark
    c.offer(batch(("broker-b", 0), [0]))  # not part of the snapshot
    assert sink.offsets() == [1, 2, 3]
    (s,) = c.slices()
    assert (s.start, s.end, s.messages) == (1, 4, 3)


def test_tag_filter_covers_offsets_without_staging_them() -> None:
    c, sink = collector({A0: 4}, tags=parse_tag_expression("A || B"))
    c.take_queues([A0])
    c.offer(batch(A0, [0, 1, 2, 3], tags=["A", "C", None, "B"]))
    assert c.complete([A0]) and sink.offsets() == [0, 3]
    (s,) = c.slices()
    assert (s.end, s.messages) == (4, 2)


def test_max_messages_trims_the_batch_and_the_end_offset_follows() -> None:
    c, sink = collector({A0: 10, A1: 10}, Starts(initial={A1: 4}), max_messages=5)
    c.take_queues([A0, A1])
    c.offer(batch(A0, [0, 1, 2]))
    assert not c.bound_reached()
    c.offer(batch(A1, [4, 5, 6, 7]))
    assert c.bound_reached()
    c.offer(batch(A0, [3, 4]))  # nothing more is admitted
    s0, s1 = c.slices()
    assert (s0.end, s0.messages, s1.end, s1.messages) == (3, 3, 6, 2)
    assert sink.offsets(A0) == [0, 1, 2] and sink.offsets(A1) == [4, 5]


def test_max_bytes_bound_never_leaves_the_window_empty() -> None:
    c, sink = collector({A0: 3}, max_bytes=5)
    c.take_queues([A0])
    c.offer(batch(A0, [0, 1, 2], body=b"0123456789"))
    (s,) = c.slices()
    assert (s.end, s.messages) == (1, 1) and c.bound_reached() and sink.offsets() == [0]


def test_a_gap_explained_by_another_members_commit_moves_the_frontier() -> None:
    c, sink = collector({A0: 6}, Starts(floor={A0: 3}))
    c.take_queues([A0])
    c.offer(batch(A0, [3, 4, 5]))  # the consumer started at 3: 0..2 were committed by someone else
    assert c.complete([A0]) and sink.offsets() == [3, 4, 5]
    (s,) = c.slices()
    assert (s.start, s.end, s.messages) == (3, 6, 3)


def test_an_unexplained_gap_settles_the_queue_where_it_is() -> None:
    c, sink = collector({A0: 10})
    c.take_queues([A0])
    c.offer(batch(A0, [0, 1]))
    c.offer(batch(A0, [5, 6]))  # 2..4 never came and nobody else has them
    assert c.complete([A0])  # no point waiting for an idle timeout
    (s,) = c.slices()
    assert (s.end, s.messages) == (2, 2) and sink.offsets() == [0, 1]


def test_raising_the_start_keeps_what_was_staged_and_moves_on() -> None:
    starts = Starts()
    c, sink = collector({A0: 8}, starts)
    c.take_queues([A0])
    c.offer(batch(A0, [0, 1]))
    starts.floor_of[A0] = 5  # offsets 2..4 were committed by another member meanwhile
    c.refresh_floors([A0])
    c.offer(batch(A0, [2, 3, 4, 5]))  # our consumer was behind: only 5 is ours
    c.offer(batch(A0, [6, 7]))
    assert c.complete([A0]) and sink.offsets() == [0, 1, 5, 6, 7]
    (s,) = c.slices()
    assert (s.start, s.end, s.messages) == (0, 8, 5)
    assert s.gaps == ((2, 5),)  # the loader must not count 2..4 as loaded by this window


def test_gaps_in_a_row_merge_and_a_jump_before_staging_moves_the_start_instead() -> None:
    starts = Starts()
    c, sink = collector({A0: 20}, starts)

    def floor(offset: int) -> None:
        starts.floor_of[A0] = offset
        c.refresh_floors([A0])

    c.take_queues([A0])
    floor(3)  # nothing staged yet: the range starts at 3, no gap
    c.offer(batch(A0, [3, 4]))
    floor(8)
    floor(10)  # no progress in between: one gap [5, 10)
    c.offer(batch(A0, [10, 11]))
    floor(15)
    c.offer(batch(A0, [15, 16, 17, 18, 19]))
    (s,) = c.slices()
    assert (s.start, s.end, s.messages, s.gaps) == (3, 20, 9, ((5, 10), (12, 15)))
    assert sink.offsets() == [3, 4, 10, 11, 15, 16, 17, 18, 19]


def test_empty_queue_is_complete_at_once() -> None:
    c, _ = collector({A0: 7}, Starts(initial={A0: 7}))
    c.take_queues([A0])
    assert c.complete([A0]) and c.slices()[0].messages == 0


def test_close_waits_for_a_batch_still_in_the_sink_and_then_admits_nothing() -> None:
    entered, release = threading.Event(), threading.Event()
    got: list[ColumnBatch] = []

    def slow_sink(b: ColumnBatch) -> None:
        entered.set()
        release.wait(10)
        got.append(b)

    c = WindowCollector({A0: 10}, sink=slow_sink, starts=Starts())
    c.take_queues([A0])
    t = threading.Thread(target=c.offer, args=(batch(A0, [0, 1]),))
    t.start()
    assert entered.wait(10)
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (c.close(), closed.set()))
    closer.start()
    assert not closed.wait(0.2)  # the batch admitted is still on its way to the writer
    release.set()
    assert closed.wait(10)
    c.offer(batch(A0, [2]))
    assert [list(b.queue_offsets) for b in got] == [[0, 1]] and c.slices()[0].end == 2
    t.join(5)
    closer.join(5)


def test_the_runner_is_woken_when_a_queue_completes() -> None:
    c, _ = collector({A0: 3})
    c.take_queues([A0])
    woke = threading.Event()

    def runner() -> None:  # the runner loop's shape: re-check, then wait
        while not c.complete([A0]):
            c.wait_for_change(30)
        woke.set()

    t = threading.Thread(target=runner)
    t.start()
    before = c.version
    c.offer(batch(A0, [0, 1]))  # progress: counted (idle detection), no wake-up needed
    assert c.version > before and not woke.is_set()
    c.offer(batch(A0, [2]))
    assert woke.wait(10)
    t.join(5)


def test_bad_expression_names_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        parse_tag_expression(" || ")
    assert err.value.field == "expression"


def test_admitted_batches_do_not_wake_the_runner_until_its_decision_may_change() -> None:
    # a wake-up per pulled batch would cost the runner thread a loop turn (and a GIL hand-off) each
    c, _ = collector({A0: 100})
    c.take_queues([A0])
    returned = threading.Event()
    t = threading.Thread(target=lambda: (c.wait_for_change(30), returned.set()))
    t.start()
    for i in range(10):
        c.offer(batch(A0, [i]))
    assert not returned.wait(0.3)
    c.notify()
    assert returned.wait(10)
    t.join(5)
