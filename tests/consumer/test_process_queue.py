"""ProcessQueue: cached counts, bytes, span, min-offset tracking, orderly take/commit."""

from __future__ import annotations

from airflow_provider_rocketmq.client.consumer.process_queue import ProcessQueue, QueueState

from .helpers import stored_messages


def test_min_offset_tracking_out_of_order_completion():
    pq = ProcessQueue()
    msgs = stored_messages("T", range(10, 20), body_size=7)
    assert pq.put_messages(msgs) == 10
    assert (pq.count, pq.msg_size, pq.span()) == (10, 70, 9)
    # later batch completes first: the commit offset stays at the oldest unfinished one
    assert pq.remove_messages(msgs[5:]) == 10
    assert pq.remove_messages(msgs[:3]) == 13
    assert pq.remove_messages(msgs[3:5]) == 20  # empty: one past the largest offset seen
    assert (pq.count, pq.msg_size) == (0, 0)
    assert pq.remove_messages(msgs[:1]) == -1  # nothing cached


def test_duplicates_are_not_counted_twice():
    pq = ProcessQueue()
    msgs = stored_messages("T", range(5))
    pq.put_messages(msgs)
    assert pq.put_messages(stored_messages("T", range(3, 8))) == 3
    assert pq.count == 8 and pq.msg_size == 80
    assert pq.min_offset() == 0 and pq.max_offset() == 7


def test_orderly_take_commit_and_rollback_keep_order():
    pq = ProcessQueue()
    pq.put_messages(stored_messages("T", range(6)))
    first = pq.take_messages(2)
    assert [m.queue_offset for m in first] == [0, 1]
    pq.make_messages_consume_again(first)
    assert list(pq.msgs) == [0, 1, 2, 3, 4, 5] and not pq.consuming
    again = pq.take_messages(4)
    assert [m.queue_offset for m in again] == [0, 1, 2, 3]
    assert pq.commit() == 4
    assert pq.count == 2 and pq.msg_size == 20
    assert pq.commit() == -1


def test_expired_messages_only_from_old_batches():
    pq = ProcessQueue()
    msgs = stored_messages("T", range(4))
    pq.put_messages(msgs)
    token = pq.begin_batch(msgs[:2])
    assert pq.expired_messages(timeout=3600) == []
    assert [m.queue_offset for m in pq.expired_messages(timeout=0)] == [0, 1]
    pq.remove_messages(msgs[:1])
    assert [m.queue_offset for m in pq.expired_messages(timeout=0)] == [1]
    pq.end_batch(token)
    assert pq.expired_messages(timeout=0) == []


def test_drop_is_final():
    pq = ProcessQueue()
    assert pq.state is QueueState.ACTIVE and not pq.dropped
    pq.drop()
    assert pq.dropped
    info = pq.info(5)
    assert info["droped"] is True and info["commitOffset"] == 5
