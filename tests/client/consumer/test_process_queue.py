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


def test_expired_messages_only_from_calls_seen_running_twice():
    pq = ProcessQueue()
    msgs = stored_messages("T", range(4))
    pq.put_messages(msgs)
    token, fl = pq.begin_batch(msgs)
    assert pq.expired_messages(timeout=0, step=2) == []  # handed over, no call started: not consuming
    fl.current = msgs[0]
    assert pq.expired_messages(timeout=0, step=2) == []  # first look at the running call
    assert pq.expired_messages(timeout=3600, step=2) == []  # seen running, but not for that long
    assert [m.queue_offset for m in pq.expired_messages(timeout=0, step=2)] == [0, 1]  # the call's two
    pq.remove_messages(msgs[:1])
    assert [m.queue_offset for m in pq.expired_messages(timeout=0, step=2)] == [1]
    fl.current = msgs[2]  # the next call started: its clock starts afresh
    assert pq.expired_messages(timeout=0, step=2) == []
    assert [m.queue_offset for m in pq.expired_messages(timeout=0, step=2)] == [2, 3]
    pq.end_batch(token)
    assert pq.expired_messages(timeout=0, step=2) == []


def test_drop_is_final():
    pq = ProcessQueue()
    assert pq.state is QueueState.ACTIVE and not pq.dropped
    pq.drop()
    assert pq.dropped
    info = pq.info(5)
    assert info["droped"] is True and info["commitOffset"] == 5


def test_batches_removed_whole_or_one_by_one_keep_counts_bytes_span_and_offsets_exact():
    pq = ProcessQueue()
    a = stored_messages("T", range(4), body_size=3)
    b = stored_messages("T", range(4, 8), body_size=5)
    c = stored_messages("T", range(8, 12), body_size=7)
    for batch in (a, b, c):
        pq.put_messages(batch)
    assert (pq.count, pq.msg_size, pq.span()) == (12, 60, 11)
    assert pq.remove_messages(b) == 0  # a later batch first: the commit offset waits for the oldest
    assert (pq.count, pq.msg_size, pq.span()) == (8, 40, 11)
    # a's failures: the successes leave one by one, the failed one stays
    assert pq.remove_messages([a[0], a[1], a[3]]) == 2
    assert (pq.count, pq.msg_size, pq.min_offset(), pq.max_offset()) == (5, 31, 2, 11)
    assert pq.remove_messages(c[2:]) == 2
    assert pq.max_offset() == 9 and pq.span() == 7
    assert list(pq.msgs) == [2, 8, 9]
    assert pq.remove_messages([a[2]]) == 8  # a is gone: the next batch's first live message
    assert pq.remove_messages(c) == 12  # the rest of c (10, 11 already gone are skipped)
    assert (pq.count, pq.msg_size, pq.span()) == (0, 0, 0)
    assert pq.remove_messages(c) == -1


def test_orderly_take_spans_batches_and_skips_removed_messages():
    pq = ProcessQueue()
    a, b = stored_messages("T", range(3)), stored_messages("T", range(3, 6))
    pq.put_messages(a)
    pq.put_messages(b)
    pq.remove_messages([a[1]])
    taken = pq.take_messages(3)
    assert [m.queue_offset for m in taken] == [0, 2, 3]
    assert pq.count == 5 and pq.msg_size == 50 and list(pq.msgs) == [4, 5]
    pq.make_messages_consume_again(taken[1:])
    assert list(pq.msgs) == [2, 3, 4, 5] and list(pq.consuming) == [0]
    assert [m.queue_offset for m in pq.take_messages(10)] == [2, 3, 4, 5]
    assert pq.commit() == 6 and (pq.count, pq.msg_size) == (0, 0)


def test_a_batch_pulled_again_after_a_seek_adds_only_what_is_not_cached():
    pq = ProcessQueue()
    first = stored_messages("T", range(6))
    pq.put_messages(first)
    pq.remove_messages(first[:2])  # consumed one by one
    again = stored_messages("T", range(8))  # the queue was re-read from 0
    assert pq.put_messages(again) == 4  # 0, 1 (no longer cached) and 6, 7
    assert pq.count == 8 and pq.msg_size == 80 and pq.span() == 7 and pq.min_offset() == 0
    assert list(pq.msgs) == list(range(8))
    assert pq.remove_messages(again) == 8  # removes by offset: the first pull's copies too
    assert (pq.count, pq.msg_size) == (0, 0)


def test_a_byte_tally_from_the_decoder_is_taken_unless_the_batch_was_trimmed():
    pq = ProcessQueue()
    first = stored_messages("T", range(4), body_size=10)
    assert pq.put_messages(first, 40) == 4 and pq.msg_size == 40
    # a re-read after a seek keeps only the new offsets: the tally of the whole pull does not apply
    again = stored_messages("T", range(2, 6), body_size=10)
    assert pq.put_messages(again, 999) == 2 and pq.msg_size == 60
    assert pq.remove_messages(first) == 4 and pq.remove_messages(again) == 6
    assert (pq.count, pq.msg_size) == (0, 0)


def test_span_reads_the_last_live_offset_of_untouched_and_trimmed_batches():
    pq = ProcessQueue()
    a, b = stored_messages("T", range(4)), stored_messages("T", range(4, 9))
    pq.put_messages(a)
    pq.put_messages(b)
    assert (pq.span(), pq.max_offset()) == (8, 8)
    pq.remove_messages(b[-2:])  # the newest two leave one by one
    assert (pq.span(), pq.max_offset()) == (6, 6)
    assert [m.queue_offset for m in pq.take_messages(3)] == [0, 1, 2]  # orderly take moves the head
    assert (pq.span(), pq.min_offset()) == (3, 3)
