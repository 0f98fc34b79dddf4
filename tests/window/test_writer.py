"""StagingWriter: the thread is woken by amounts of data, not per batch, and still never loses or
blocks on a batch (back-pressure with batches larger than half the queue, small tails at close)."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_provider_rocketmq.client.protocol.columnar import ColumnBatch
from airflow_provider_rocketmq.window.staging import StagingLocation
from airflow_provider_rocketmq.window.writer import StagingWriter, WriterError
from tests.window_batches import batch

A0 = ("broker-a", 0)


def _staged_offsets(tmp_path: Path, writer: StagingWriter) -> list[int]:
    files = writer.close()
    return [o for f in files for o in pq.read_table(tmp_path / f.path).column("queue_offset").to_pylist()]


def _put_all(writer: StagingWriter, batches: list[ColumnBatch]) -> threading.Thread:
    t = threading.Thread(target=lambda: [writer.put(b) for b in batches], daemon=True)
    t.start()
    return t


def test_batches_below_the_wake_threshold_are_written_at_close(tmp_path: Path) -> None:
    writer = StagingWriter(StagingLocation(tmp_path), "w1", row_group_bytes=64 << 20, queue_bytes=64 << 20).start()
    for i in range(3):
        writer.put(batch(A0, [2 * i, 2 * i + 1]))
    assert _staged_offsets(tmp_path, writer) == list(range(6))
    assert writer.rows == 6


def test_a_batch_larger_than_the_room_left_waits_for_the_thread_and_gets_through(tmp_path: Path) -> None:
    small = batch(A0, [0])
    big = batch(A0, list(range(1, 41)), body=b"x" * 200)
    # less than half the queue waits when the big batch arrives: the thread must still be woken
    queue_bytes = 2 * small.raw_bytes + big.raw_bytes // 2
    assert small.raw_bytes < queue_bytes // 2 < big.raw_bytes
    writer = StagingWriter(StagingLocation(tmp_path), "w1", row_group_bytes=queue_bytes,
                           queue_bytes=queue_bytes).start()
    producer = _put_all(writer, [small, big, batch(A0, [41])])
    producer.join(10)
    assert not producer.is_alive(), "put() never got room"
    assert _staged_offsets(tmp_path, writer) == list(range(42))


def test_many_batches_through_a_small_queue_keep_their_order(tmp_path: Path) -> None:
    batches = [batch(A0, list(range(3 * i, 3 * i + 3))) for i in range(300)]
    writer = StagingWriter(StagingLocation(tmp_path), "w1", row_group_bytes=4 * batches[0].raw_bytes,
                           queue_bytes=5 * batches[0].raw_bytes, rows_per_file=250).start()
    producer = _put_all(writer, batches)
    producer.join(30)
    assert not producer.is_alive()
    assert _staged_offsets(tmp_path, writer) == list(range(900))
    assert len(writer.files) == 4  # 250 + 250 + 250 + 150 rows


def test_a_put_blocked_for_room_raises_when_the_writer_is_aborted(tmp_path: Path) -> None:
    gate = threading.Event()

    class Stuck(StagingWriter):
        def _write_group(self, group):  # type: ignore[no-untyped-def]
            gate.wait(10)  # the thread is busy encoding: nothing more is taken meanwhile
            super()._write_group(group)

    one = batch(A0, [0])
    writer = Stuck(StagingLocation(tmp_path), "w1", row_group_bytes=one.raw_bytes, queue_bytes=one.raw_bytes).start()
    writer.put(one)  # taken at once, then stuck in _write_group
    writer.put(batch(A0, [1]))  # waits in the queue
    failed: list[BaseException] = []

    def third() -> None:
        try:
            writer.put(batch(A0, [2]))
        except WriterError as exc:
            failed.append(exc)

    t = threading.Thread(target=third)
    t.start()
    t.join(0.2)
    assert t.is_alive()  # no room: back-pressure
    abort = threading.Thread(target=writer.abort)
    abort.start()
    t.join(10)
    gate.set()
    abort.join(10)
    assert [type(e) for e in failed] == [WriterError]
    with pytest.raises(WriterError):
        writer.close()


def test_reserve_room_refuses_while_full_and_calls_back_once_the_thread_takes_the_queue(tmp_path: Path) -> None:
    gate = threading.Event()
    in_write = threading.Event()

    class Held(StagingWriter):
        def _write_group(self, group):  # type: ignore[no-untyped-def]
            in_write.set()
            gate.wait(10)
            super()._write_group(group)

    one = batch(A0, [0])
    size = one.raw_bytes
    writer = Held(StagingLocation(tmp_path), "w1", row_group_bytes=size, queue_bytes=2 * size).start()
    writer.put(one)
    assert in_write.wait(10)  # the thread holds batch 0 in _write_group
    assert writer.reserve_room(size, lambda: None)
    writer.put(batch(A0, [1]))
    assert writer.reserve_room(size, lambda: None)  # 2 x size fits exactly
    writer.put(batch(A0, [2]))
    woken = threading.Event()
    assert not writer.reserve_room(size, woken.set)  # full: the caller is called back instead
    assert not woken.wait(0.2)
    gate.set()  # the thread finishes the group and takes the queue
    assert woken.wait(10)
    assert writer.reserve_room(size, lambda: None)
    writer.put(batch(A0, [3]))
    assert _staged_offsets(tmp_path, writer) == [0, 1, 2, 3]


def test_reserve_room_callers_are_called_back_when_the_writer_aborts(tmp_path: Path) -> None:
    gate = threading.Event()
    in_write = threading.Event()

    class Held(StagingWriter):
        def _write_group(self, group):  # type: ignore[no-untyped-def]
            in_write.set()
            gate.wait(60)
            super()._write_group(group)

    one = batch(A0, [0])
    writer = Held(StagingLocation(tmp_path), "w1", row_group_bytes=one.raw_bytes,
                  queue_bytes=one.raw_bytes).start()
    writer.put(one)
    assert in_write.wait(10)
    writer.put(batch(A0, [1]))
    woken = threading.Event()
    assert not writer.reserve_room(one.raw_bytes, woken.set)
    aborting = threading.Thread(target=writer.abort)
    aborting.start()
    assert woken.wait(10)
    assert writer.reserve_room(one.raw_bytes, lambda: None)  # then put() raises the writer's error
    with pytest.raises(WriterError):
        writer.put(batch(A0, [3]))
    gate.set()
    aborting.join(10)
