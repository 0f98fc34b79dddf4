"""WindowCollector: contiguous prefixes, tag filtering, bounds (no broker needed: pure bookkeeping)."""

from __future__ import annotations

import threading

import pytest

from airflow_provider_rocketmq.client.errors import ConfigError
from airflow_provider_rocketmq.client.message import MessageExt
from airflow_provider_rocketmq.window.collector import WindowCollector, parse_tag_expression

A0 = ("broker-a", 0)
A1 = ("broker-a", 1)


def msg(key: tuple[str, int], offset: int, tags: str | None = "T", body: bytes = b"x") -> MessageExt:
    m = MessageExt()
    m.broker_name, m.queue_id, m.queue_offset, m.body, m.topic = key[0], key[1], offset, body, "t"
    m.properties = {"TAGS": tags} if tags is not None else {}
    return m


def offsets(slice_) -> list[int]:
    return [m.queue_offset for m in slice_.messages]


def test_out_of_order_delivery_only_counts_the_contiguous_prefix() -> None:
    c = WindowCollector({A0: 5})
    c.set_start(A0, 0)
    c.add([msg(A0, 3), msg(A0, 4), msg(A0, 0)])
    assert not c.complete([A0])
    (s,) = c.take()
    assert (s.start, s.end, offsets(s)) == (0, 1, [0])  # 1 and 2 missing: 3, 4 are not staged
    c.add([msg(A0, 2), msg(A0, 1)])
    assert c.complete([A0])
    (s,) = c.take()
    assert (s.start, s.end, offsets(s)) == (0, 5, [0, 1, 2, 3, 4])


def test_messages_before_start_is_declared_are_replayed() -> None:
    c = WindowCollector({A0: 3})
    c.add([msg(A0, 1), msg(A0, 2)])
    assert c.pending_keys() == {A0}
    c.set_start(A0, 1)
    assert c.complete([A0])
    assert offsets(c.take()[0]) == [1, 2]


def test_offsets_outside_the_window_and_redeliveries_are_ignored() -> None:
    c = WindowCollector({A0: 3})
    c.set_start(A0, 1)
    c.add([msg(A0, 0), msg(A0, 1), msg(A0, 1), msg(A0, 2), msg(A0, 3), msg(("broker-b", 0), 0)])
    (s,) = c.take()
    assert (s.start, s.end, offsets(s)) == (1, 3, [1, 2])


def test_tag_filter_covers_offsets_without_staging_them() -> None:
    c = WindowCollector({A0: 4}, tags=parse_tag_expression("A || B"))
    c.set_start(A0, 0)
    c.add([msg(A0, 0, "A"), msg(A0, 1, "C"), msg(A0, 2, None), msg(A0, 3, "B")])
    assert c.complete([A0])
    (s,) = c.take()
    assert (s.end, offsets(s)) == (4, [0, 3])


def test_max_messages_is_shared_round_robin_and_end_offsets_follow() -> None:
    c = WindowCollector({A0: 10, A1: 10}, max_messages=5)
    c.set_start(A0, 0)
    c.set_start(A1, 4)
    c.add([msg(A0, o) for o in range(10)] + [msg(A1, o) for o in range(4, 10)])
    assert c.bound_reached()
    s0, s1 = c.take()
    assert (s0.end, len(s0.messages), s1.end, len(s1.messages)) == (3, 3, 6, 2)


def test_bounds_count_only_what_could_be_staged() -> None:
    c = WindowCollector({A0: 10}, max_messages=3, max_bytes=30)
    c.set_start(A0, 0)
    c.add([msg(A0, o, body=b"0123456789") for o in range(2, 10)])  # 0 and 1 still on their way
    assert not c.bound_reached()  # a window stopped now would stage nothing
    c.add([msg(A0, 0)])
    assert not c.bound_reached()
    c.add([msg(A0, 1)])
    assert c.bound_reached()
    c.set_start(A0, 5)  # someone else committed up to 5: what is below no longer counts
    assert c.bound_reached()  # 5..9 are contiguous from the new start: 5 messages, 50 bytes
    (s,) = c.take()
    assert (s.start, s.end, offsets(s)) == (5, 8, [5, 6, 7])


def test_max_bytes_bound_never_leaves_the_window_empty() -> None:
    c = WindowCollector({A0: 3}, max_bytes=5)
    c.set_start(A0, 0)
    c.add([msg(A0, o, body=b"0123456789") for o in range(3)])
    (s,) = c.take()
    assert (s.end, offsets(s)) == (1, [0])


def test_raising_the_start_drops_what_someone_else_committed() -> None:
    c = WindowCollector({A0: 6})
    c.set_start(A0, 0)
    c.add([msg(A0, 3), msg(A0, 4), msg(A0, 5)])
    assert not c.complete([A0])
    c.set_start(A0, 3)
    assert c.complete([A0])
    (s,) = c.take()
    assert (s.start, s.end, offsets(s)) == (3, 6, [3, 4, 5])


def test_empty_queue_is_complete_at_once() -> None:
    c = WindowCollector({A0: 7})
    c.set_start(A0, 7)
    assert c.complete([A0])
    assert c.take()[0].messages == []


def test_wait_for_change_wakes_on_add() -> None:
    c = WindowCollector({A0: 10_000})
    c.set_start(A0, 0)
    woke = threading.Event()

    def waiter() -> None:
        c.wait_for_change(30)
        woke.set()

    t = threading.Thread(target=waiter)
    t.start()
    offset = 0
    while not woke.is_set() and offset < 1000:  # the waiter may not be waiting yet: add again
        c.add([msg(A0, offset)])
        offset += 1
        woke.wait(0.05)
    t.join(5)
    assert woke.is_set()


def test_bad_expression_names_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        parse_tag_expression(" || ")
    assert err.value.field == "expression"
