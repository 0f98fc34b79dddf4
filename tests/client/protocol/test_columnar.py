"""The columnar decoder agrees with decode_messages + the pull filter on every body, recorded or generated."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_rocketmq.client.config import ClientConfig
from airflow_provider_rocketmq.client.producer.message_id import new_uniq_id
from airflow_provider_rocketmq.client.protocol import columnar
from airflow_provider_rocketmq.client.protocol.batch import PullFilter, decode_message_batch
from airflow_provider_rocketmq.client.protocol.columnar import (
    MESSAGE_COLUMNS,
    ColumnBatch,
    decode_columns,
    message_schema,
    raw_message_schema,
    string_column,
    to_raw_record_batch,
    to_record_batch,
)
from airflow_provider_rocketmq.client.protocol.errors import MessageDecodeError, RocketMQError
from airflow_provider_rocketmq.client.protocol.message import (
    PROPERTY_RETRY_TOPIC,
    MessageExt,
    decode_messages,
    encode_stored_message,
)
from airflow_provider_rocketmq.client.protocol.names import strip_namespace
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.client.protocol.raw_columns import messages_from_raw
from tests import recorded_vectors as vectors

MQ = MessageQueue("Topic", "broker-b", 3)
ALL = PullFilter(stop=None, tags=None, restore_retry_topic=False, namespace="")


def _pull_bodies() -> list[tuple[str, bytes]]:
    out = []
    for rec in vectors.all_records():
        if (rec.get("decoded") or {}).get("messages"):
            frame = bytes.fromhex(rec["frame_hex"])
            out.append((vectors.rec_id(rec), frame[8 + (int.from_bytes(frame[4:8], "big") & 0xFFFFFF):]))
    return out


PULL_BODIES = _pull_bodies()


def reference(body: bytes, mq: MessageQueue, flt: PullFilter) -> list[MessageExt]:
    """decode_messages, then what the pull service does to a message list (client/consumer/pull.py)."""
    msgs = decode_messages(body, broker_name=mq.broker_name)
    if flt.stop is not None:
        msgs = [m for m in msgs if m.queue_offset < flt.stop]
    if flt.tags is not None:
        msgs = [m for m in msgs if m.tags in flt.tags]
    for m in msgs:
        if flt.restore_retry_topic and m.properties.get(PROPERTY_RETRY_TOPIC):
            m.topic = m.properties[PROPERTY_RETRY_TOPIC]
        if flt.namespace:
            m.topic = ClientConfig(namespace=flt.namespace).without_namespace(m.topic)
    return msgs


def row_of(m: MessageExt) -> dict[str, Any]:
    return {"topic": m.topic, "broker": m.broker_name, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "msg_id": m.msg_id, "tags": m.tags, "keys": m.keys, "properties": dict(m.properties),
            "born_timestamp": m.born_timestamp, "store_timestamp": m.store_timestamp,
            "reconsume_times": m.reconsume_times, "body": m.body}


def rows_of(rb: Any) -> list[dict[str, Any]]:
    rows = rb.to_pylist()
    for r in rows:
        r["properties"] = dict(r["properties"])
    return rows


def assert_same(body: bytes, mq: MessageQueue = MQ, flt: PullFilter = ALL) -> ColumnBatch | None:
    expected = reference(body, mq, flt)
    official = decode_message_batch(body, mq, flt)  # the consumer's reference decoder agrees too
    assert [row_of(m) for m in (official.messages() if official else [])] == [row_of(m) for m in expected]
    batch = decode_columns(body, mq, flt)
    if not expected:
        assert batch is None
        return None
    assert batch is not None
    assert rows_of(batch.record_batch) == [row_of(m) for m in expected]
    assert batch.record_batch.schema == message_schema()
    assert (batch.first_offset, batch.last_offset, batch.count) == \
        (expected[0].queue_offset, expected[-1].queue_offset, len(expected))
    assert batch.body_bytes == sum(len(m.body) for m in expected)
    assert list(batch.queue_offsets) == [m.queue_offset for m in expected]
    assert list(batch.body_sizes) == [len(m.body) for m in expected]
    assert batch.tags() == [m.tags for m in expected]
    if batch.count > 1:  # a subset is a batch of its own, columns and summary
        sub = batch.select([0, batch.count - 1])
        assert sub is not None and (sub.count, sub.first_offset, sub.last_offset) == \
            (2, expected[0].queue_offset, expected[-1].queue_offset)
        assert rows_of(sub.record_batch) == [row_of(expected[0]), row_of(expected[-1])]
    assert [row_of(m) for m in batch.messages()] == [row_of(m) for m in expected]
    # the raw layout (properties as stored) gives the same columns back
    raw = to_raw_record_batch([batch])
    assert raw.schema == raw_message_schema()
    assert messages_from_raw(raw).equals(batch.record_batch)
    return batch


def stored(i: int, *, topic: str = "Topic", body: bytes | None = None, props: str | dict[str, str] | None = None,
           sys_flag: int = 0, born: str = "10.0.0.1:5555", store: str = "10.0.0.2:10911", reconsume: int = 0) -> bytes:
    return encode_stored_message(
        topic=topic, body=body if body is not None else b"body-%d" % i,
        properties=props if props is not None else {"UNIQ_KEY": new_uniq_id(), "TAGS": "TagA", "KEYS": f"k{i}"},
        queue_id=3, queue_offset=100 + i, commit_log_offset=5000 + 97 * i, born_timestamp=1_700_000_000_000 + i,
        born_host=born, store_timestamp=1_700_000_000_500 + i, store_host=store, sys_flag=sys_flag,
        reconsume_times=reconsume)


# -- recorded bodies -------------------------------------------------------------------------------

def test_the_recording_has_pull_bodies() -> None:
    assert len(PULL_BODIES) >= 5 and sum(len(decode_messages(b)) for _, b in PULL_BODIES) >= 20


@pytest.mark.parametrize("body", [b for _, b in PULL_BODIES], ids=[i for i, _ in PULL_BODIES])
def test_recorded_pull_bodies_equal_decode_messages(body: bytes) -> None:
    assert_same(body)
    assert_same(body, MessageQueue("%RETRY%g", "broker-a", 0), ALL._replace(restore_retry_topic=True))


def test_recorded_bodies_in_one_record_batch() -> None:
    batches = [decode_columns(b, MQ, ALL) for _, b in PULL_BODIES]
    rb = to_record_batch([b for b in batches if b is not None])
    assert rows_of(rb) == [row_of(m) for _, b in PULL_BODIES for m in reference(b, MQ, ALL)]


# -- generated bodies ------------------------------------------------------------------------------

def test_ipv6_hosts_mixed_with_ipv4() -> None:
    body = b"".join([stored(0, born="[2001:db8::1]:4000", store="[::1]:10911"), stored(1),
                     stored(2, store="[fe80::2]:10911"), stored(3, born="[::1]:1")])
    assert_same(body)
    no_uniq = b"".join([stored(0, store="[::1]:10911", props="TAGS\x01A"), stored(1, props="TAGS\x01A")])
    batch = assert_same(no_uniq)  # msg_id = offset msg id, 56 and 32 hex digits
    assert batch is not None and [len(x) for x in batch.record_batch.column(4).to_pylist()] == [56, 32]
    all_v6 = b"".join(stored(i, born="[::1]:1", store="[2001:db8::9]:10911", props="A\x01b") for i in range(3))
    assert_same(all_v6)


def test_compressed_bodies_are_inflated() -> None:
    big = b"payload " * 1000
    parts = [stored(0, body=zlib.compress(big), sys_flag=0x1), stored(1)]
    lz4_frame = pytest.importorskip("lz4.frame")
    zstandard = pytest.importorskip("zstandard")
    parts += [stored(2, body=lz4_frame.compress(big), sys_flag=0x101),
              stored(3, body=zstandard.ZstdCompressor().compress(big), sys_flag=0x201)]
    batch = assert_same(b"".join(parts))
    assert batch is not None and batch.body_bytes == 3 * len(big) + len(b"body-1")
    with pytest.raises(MessageDecodeError):
        decode_columns(stored(0, body=b"not zlib", sys_flag=0x1), MQ, ALL)


def test_retry_topic_restored_and_namespace_stripped() -> None:
    mq = MessageQueue("ns1%%RETRY%grp", "broker-a", 0)
    body = b"".join([
        stored(0, topic="%RETRY%ns1%grp", props={"RETRY_TOPIC": "ns1%Orders", "UNIQ_KEY": "U0"}, reconsume=2),
        stored(1, topic="%RETRY%ns1%grp", props={"UNIQ_KEY": "U1"}, reconsume=1),  # no RETRY_TOPIC: kept
        stored(2, topic="%RETRY%ns1%grp", props={"RETRY_TOPIC": "ns1%Other"}),
    ])
    batch = assert_same(body, mq, PullFilter(None, None, True, "ns1"))
    assert batch is not None
    assert batch.record_batch.column(0).to_pylist() == ["Orders", "%RETRY%grp", "Other"]
    assert_same(b"".join([stored(0, topic="ns1%T"), stored(1, topic="other%T")]), mq,
                PullFilter(None, None, False, "ns1"))
    assert strip_namespace("ns1", "%DLQ%ns1%g") == "%DLQ%g" and strip_namespace("", "T") == "T"


def test_tag_filter_and_stop_trimming() -> None:
    body = b"".join(stored(i, props={"TAGS": "ABC"[i % 3], "UNIQ_KEY": f"U{i}"}) for i in range(10))
    for flt in (PullFilter(105, None, False, ""), PullFilter(None, frozenset({"A", "C"}), False, ""),
                PullFilter(107, frozenset({"B"}), False, ""), PullFilter(100, None, False, ""),
                PullFilter(None, frozenset({"Z"}), False, ""), PullFilter(1000, frozenset({"A"}), False, "")):
        assert_same(body, MQ, flt)
    batch = decode_columns(body, MQ, PullFilter(105, frozenset({"B"}), False, ""))
    assert batch is not None and batch.record_batch.column(3).to_pylist() == [101, 104]
    # batches trimmed differently still concatenate in order
    b1 = decode_columns(body, MQ, PullFilter(None, frozenset({"A"}), False, ""))
    b2 = decode_columns(body, MQ, PullFilter(103, None, False, ""))
    assert b1 is not None and b2 is not None
    assert to_record_batch([b1, b2]).column(3).to_pylist() == [100, 103, 106, 109, 100, 101, 102]


def test_property_strings_parse_like_string_to_properties() -> None:
    raws = ["", "TAGS\x01A\x02TAGS\x01B", "KEYS\x01\x02\x01v\x02noval\x02TAGS\x01T\x02", "a\x01b\x01c\x02x\x01y",
            "UNIQ_KEY\x01U1\x02UNIQ_KEY\x01U2\x02KEYS\x01k", "\x02\x02\x02", "名\x01值\x02TAGS\x01标签"]
    body = b"".join(stored(i, props=p) for i, p in enumerate(raws))
    batch = assert_same(body)
    assert batch is not None and batch.record_batch.column(5).to_pylist()[1] == "B"  # the last TAGS wins


def test_long_topic_uses_magic_v2() -> None:
    assert_same(b"".join([stored(0, topic="T" * 200), stored(1, topic="T" * 200), stored(2)]))


def test_corrupt_input_is_a_decode_error() -> None:
    good = stored(0) + stored(1)
    bad_utf8_props = bytearray(stored(0, props={"A": "xy"}))
    bad_utf8_props[-1] = 0xFF
    with pytest.raises(MessageDecodeError):  # properties are checked when the columns are built
        _ = decode_columns(bytes(bad_utf8_props), MQ, ALL).record_batch  # type: ignore[union-attr]
    bad_topic = bytearray(stored(0, topic="T\u00e9"))
    bad_topic[bad_topic.index("T\u00e9".encode()) + 1] = 0xFF
    for data in (good[:-1], good + b"\x00\x00", good[:50], bytes(bad_topic),
                 good[:4] + b"\x00\x00\x00\x00" + good[8:]):
        with pytest.raises(MessageDecodeError):
            decode_columns(data, MQ, ALL)
    assert decode_columns(b"", MQ, ALL) is None


def test_empty_and_column_names() -> None:
    assert tuple(message_schema().names) == MESSAGE_COLUMNS
    assert to_record_batch([]).num_rows == 0


# -- property-based: random message sets, random filters -------------------------------------------

HOSTS = st.sampled_from(["10.1.2.3:10911", "[2001:db8::7]:10911", "127.0.0.1:1"])
TEXT = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
               max_size=8)


@st.composite
def messages(draw: st.DrawFn) -> list[bytes]:
    out = []
    for i in range(draw(st.integers(1, 12))):
        props: dict[str, str] = draw(st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "RETRY_TOPIC",
                                                                      "x", "名"]), TEXT, max_size=4))
        raw = "\x02".join(f"{k}\x01{v}" for k, v in props.items()) + draw(st.sampled_from(["", "\x02", "\x02z"]))
        body = draw(st.binary(max_size=64))
        flag = 0
        if draw(st.booleans()):
            body, flag = zlib.compress(body), 0x301
        out.append(stored(i, topic=draw(st.sampled_from(["T", "ns%T", "%RETRY%ns%g", "L" * 130])), body=body,
                          props=raw, sys_flag=flag, born=draw(HOSTS), store=draw(HOSTS),
                          reconsume=draw(st.integers(0, 16))))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=messages(), stop=st.one_of(st.none(), st.integers(99, 113)),
       tags=st.one_of(st.none(), st.frozensets(st.sampled_from(["a", "b", ""]), max_size=2)),
       restore=st.booleans(), namespace=st.sampled_from(["", "ns"]))
def test_generated_bodies_equal_reference(parts: list[bytes], stop: int | None, tags: frozenset[str] | None,
                                          restore: bool, namespace: str) -> None:
    assert_same(b"".join(parts), MQ, PullFilter(stop, tags, restore, namespace))


# -- fuzz: the same inputs are refused, and only with a typed error ---------------------------------

def materialise(body: bytes) -> list[dict[str, Any]]:
    return [row_of(m) for m in decode_messages(body, broker_name=MQ.broker_name)]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from([b for _, b in PULL_BODIES] + [stored(0) + stored(1, store="[::1]:2")])))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["truncate", "flip", "insert"]))
        if action == "truncate" and data:
            data = data[:draw(st.integers(0, len(data) - 1))]
        elif action == "flip" and data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        else:
            i = draw(st.integers(0, len(data)))
            data[i:i] = draw(st.binary(max_size=8))
    return bytes(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(mutated(), st.binary(max_size=300)))
def test_fuzz_accepts_and_refuses_like_decode_messages(data: bytes) -> None:
    try:
        expected: list[dict[str, Any]] | None = materialise(data)
    except RocketMQError:
        expected = None
    try:
        batch = decode_columns(data, MQ, ALL)
        got = [] if batch is None else rows_of(batch.record_batch)
    except RocketMQError:
        got = None
    assert got == expected


# -- the uniform-properties fast path (_split_uniform) ----------------------------------------------

def _props_column(body: bytes) -> Any:
    """The raw property strings of a body's records, as `to_record_batch` hands them to the splitters."""
    import pyarrow as pa

    msgs = decode_messages(body)
    return pa.array([m._props_raw.decode("utf-8") for m in msgs], pa.string()), len(msgs)


WANTED = ("TAGS", "KEYS", "UNIQ_KEY", "RETRY_TOPIC")


def _split_both(body: bytes) -> tuple[Any, Any]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    raw, n = _props_column(body)
    return (columnar._split_uniform(raw, n, pa, np, WANTED), columnar._split_properties(raw, n, pa, pc, np, WANTED))


def test_uniform_properties_take_the_fast_path_and_equal_the_general_one() -> None:
    # what a real 4.9.7 broker returns for the project's producer: WAIT stored twice, no trailing separator
    real = [f"UNIQ_KEY\x01U{i:031d}\x02WAIT\x01true\x02CLUSTER\x01DefaultCluster\x02WAIT\x01true" for i in range(40)]
    java = [f"TAGS\x01T{i % 3}\x02KEYS\x01k{i} x\x02名\x01值{i}\x02" for i in range(40)]  # trailing separator
    for raws in (real, java, ["A\x01b"] * 3):
        body = b"".join(stored(i, props=p) for i, p in enumerate(raws))
        fast, general = _split_both(body)
        assert fast is not None, raws[0]
        assert fast[0].equals(general[0])  # the same map, entries in the same order
        assert all(a.equals(b) for a, b in zip(fast[1], general[1], strict=True))
        assert_same(body)


@pytest.mark.parametrize("raws", [
    ["A\x01b", "A\x01b\x02"],  # trailing separator in some records only
    ["A\x01b\x02C\x01d", "A\x01b\x02E\x01d"],  # a different name
    ["A\x01b\x02C\x01d", "A\x01b\x02CC\x01d"],  # a name of another length
    ["A\x01b\x02CX\x01d", "A\x01b\x02CY\x01d"],  # same length, other bytes
    ["A\x01bbbbbbbbbbbbbbbbbbbbbbbbbbbb\x02ABCDEFGHIJ\x01d", "A\x01b\x02ABCDEFGHIK\x01d"],  # differs after 8 bytes
    ["A\x01\x02C\x01d", "A\x01b\x02C\x01d"],  # an empty value
    ["\x01b\x02C\x01d", "\x01b\x02C\x01d"],  # an empty name
    ["A\x01b\x01c", "A\x01b\x01c"],  # a value holding a name-value separator
    ["A\x01b\x01c\x01d", "A\x01b\x01c\x01d"],  # the same, the separators' count odd as in a uniform layout
    ["junk\x02A\x01b", "junk\x02A\x01b"],  # an item without separator
    ["A\x02b\x02c\x02d", "A\x02b\x02c\x02d"],  # items without separators where names and values would be
    ["A\x01b\x02\x02C\x01d", "A\x01b\x02\x02C\x01d"],  # an empty item
    ["", ""],  # no properties at all
])
def test_irregular_properties_fall_back_to_the_general_path(raws: list[str]) -> None:
    body = b"".join(stored(i, props=p) for i, p in enumerate(raws))
    fast, _ = _split_both(body)
    assert fast is None
    assert_same(body)


UNIFORM_VALUE = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                        min_size=1, max_size=12)


@st.composite
def uniform_messages(draw: st.DrawFn) -> list[bytes]:
    names = draw(st.lists(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "RETRY_TOPIC", "WAIT", "名", "ABCDEFGHIJKLM"]),
                          min_size=1, max_size=6))
    trailing = draw(st.booleans())
    out = []
    for i in range(draw(st.integers(1, 40))):
        raw = "\x02".join(f"{k}\x01{draw(UNIFORM_VALUE)}" for k in names) + ("\x02" if trailing else "")
        out.append(stored(i, props=raw, topic=draw(st.sampled_from(["T", "%RETRY%ns%g"]))))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=uniform_messages(), restore=st.booleans(), namespace=st.sampled_from(["", "ns"]))
def test_generated_uniform_properties_equal_reference(parts: list[bytes], restore: bool, namespace: str) -> None:
    body = b"".join(parts)
    fast, general = _split_both(body)
    assert fast is not None
    assert fast[0].equals(general[0]) and all(a.equals(b) for a, b in zip(fast[1], general[1], strict=True))
    assert_same(body, MQ, PullFilter(None, None, restore, namespace))


# -- the plain-records index accepts nothing the general index refuses --------------------------

PLAIN_INDEXES = [columnar._index_plain_records, columnar._index_plain_bulk]


def _both_indexes(data: bytes, plain_index: Any = columnar._index_plain_records) -> tuple[Any, Any]:
    try:
        plain: Any = plain_index(data)
    except (columnar._NotPlain, struct.error, IndexError, UnicodeDecodeError):
        plain = "not plain"
    try:
        general: Any = columnar._index_any_records(data)
    except MessageDecodeError:
        general = "refused"
    return plain, general


@pytest.mark.parametrize("plain_index", PLAIN_INDEXES)
def test_the_plain_index_takes_the_recorded_pull_bodies_and_agrees(plain_index: Any) -> None:
    taken = 0
    for _, body in PULL_BODIES:
        plain, general = _both_indexes(body, plain_index)
        assert general != "refused"
        if plain != "not plain":
            taken += 1
            assert plain == general
    assert taken > 0


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(mutated(), st.binary(max_size=300), messages().map(b"".join),
                      st.lists(st.integers(0, 40), min_size=1, max_size=12).map(
                          lambda ns: b"".join(stored(i, body=b"x" * n) for i, n in enumerate(ns)))))
def test_the_plain_index_returns_what_the_general_one_does_or_hands_over(data: bytes) -> None:
    for plain_index in PLAIN_INDEXES:
        plain, general = _both_indexes(data, plain_index)
        if plain != "not plain":
            assert plain == general


def _patched(record: bytes, at: int, raw: bytes) -> bytes:
    return record[:at] + raw + record[at + len(raw):]


@pytest.mark.parametrize("plain_index", PLAIN_INDEXES)
@pytest.mark.parametrize("case", ["other topic, not UTF-8", "properties past the record", "negative properties length",
                                  "negative body length", "zero record size", "negative record size"])
def test_the_plain_index_hands_malformed_records_to_the_general_one(case: str, plain_index: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columnar, "BULK_INDEX_BYTES", 0 if plain_index is columnar._index_plain_bulk else 1 << 30)
    first = stored(0, topic="TA", body=b"abc", props="A\x01b")
    second = stored(1, topic="TA", body=b"abc", props="A\x01b")
    plen_at = 88 + 3 + 1 + 2  # prefix, body, topic length byte, topic
    if case == "other topic, not UTF-8":
        second = _patched(second, 88 + 3 + 1, b"T\xff")
    elif case == "properties past the record":
        second = _patched(second, plen_at, struct.pack(">h", 3 + 4))  # 4 bytes more than the record holds
    elif case == "negative properties length":
        second = _patched(second, plen_at, struct.pack(">h", -1))
    elif case == "negative body length":
        second = _patched(second, 84, struct.pack(">i", -3))
    else:  # a walk that only follows sizes must not spin on these
        second = _patched(second, 0, struct.pack(">i", 0 if case == "zero record size" else -len(first)))
    body = first + second + stored(2, topic="TA", body=b"abc", props="A\x01b")
    plain, general = _both_indexes(body, plain_index)
    assert general == "refused" and plain == "not plain"
    with pytest.raises(MessageDecodeError):
        decode_columns(body, MQ, ALL)


def test_batches_of_one_topic_each_but_different_topics_keep_their_topics_in_one_record_batch() -> None:
    a = decode_columns(b"".join(stored(i, topic="TopicA") for i in range(3)), MQ, ALL)
    b = decode_columns(b"".join(stored(i, topic="TopicB") for i in range(2)), MQ, ALL)
    mixed = decode_columns(stored(0, topic="TopicA") + stored(1, topic="TopicB"), MQ, ALL)
    assert a is not None and b is not None and mixed is not None
    assert to_record_batch([a, a]).column(0).to_pylist() == ["TopicA"] * 6
    assert to_record_batch([a, b]).column(0).to_pylist() == ["TopicA"] * 3 + ["TopicB"] * 2
    assert to_record_batch([a, mixed]).column(0).to_pylist() == ["TopicA"] * 4 + ["TopicB"]


def test_string_column_repeats_its_value() -> None:
    assert string_column("w-1", 3).to_pylist() == ["w-1"] * 3
    assert string_column("", 2).to_pylist() == ["", ""]
    assert string_column("名", 0).to_pylist() == []
