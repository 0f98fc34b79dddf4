"""Message codecs beyond the recorded frames: IPv6 hosts, LZ4/ZSTD, property forms, ordering."""

from __future__ import annotations

import copy
import pickle
import sys
import zlib

import pytest

from airflow_provider_rocketmq.client.protocol.errors import (
    CompressionUnavailableError,
    ConfigError,
    MessageDecodeError,
)
from airflow_provider_rocketmq.client.protocol.message import (
    Message,
    MessageExt,
    decode_batch,
    decode_messages,
    decode_messages_sized,
    encode_batch,
    encode_stored_message,
    make_offset_msg_id,
    parse_offset_msg_id,
    string_to_properties,
)
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue


def _stored(body: bytes, sys_flag: int = 0, born: str = "127.0.0.2:5000", store: str = "127.0.0.1:10911",
            props: str = "TAGS\x01T\x02KEYS\x01a b") -> bytes:
    return encode_stored_message(topic="Topic", body=body, properties=props, queue_id=1, queue_offset=7,
                                 commit_log_offset=1234, born_timestamp=1, born_host=born,
                                 store_timestamp=2, store_host=store, sys_flag=sys_flag)


def test_ipv6_hosts_and_offset_msg_id() -> None:
    raw = _stored(b"x", born="[2001:db8::1]:4000", store="[::1]:10911")
    (m,) = decode_messages(raw)
    assert m.sys_flag & 0x30 == 0x30
    assert m.born_host == "[2001:db8::1]:4000" and m.store_host == "[::1]:10911"
    assert len(m.offset_msg_id) == 56
    assert parse_offset_msg_id(m.offset_msg_id) == ("[::1]:10911", 1234)
    assert parse_offset_msg_id(make_offset_msg_id("127.0.0.1:10911", 1176865714)) == \
        ("127.0.0.1:10911", 1176865714)
    with pytest.raises(MessageDecodeError):
        parse_offset_msg_id("ABC")


@pytest.mark.parametrize("ip", ["::1", "2001:db8::1", "::", "::ffff:1.2.3.4", "::ffff:0.0.0.0", "::1.2.3.4",
                                "::2", "::1:0:0", "fe80::a:0:0:1", "1:0:0:2:0:0:0:3", "1::2:3:4:5:6:7"])
def test_ipv6_hosts_are_written_as_inet_ntop_writes_them(ip: str) -> None:
    """The codec formats addresses with `ipaddress` (no socket module): the text stays what
    `socket.inet_ntop` gives, IPv4-mapped and -compatible forms included."""
    import socket

    text = socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, ip))
    (m,) = decode_messages(_stored(b"x", born=f"[{ip}]:4000", store=f"[{ip}]:10911"))
    assert m.born_host == f"[{text}]:4000" and m.store_host == f"[{text}]:10911"
    assert parse_offset_msg_id(m.offset_msg_id) == (f"[{text}]:10911", 1234)


def test_records_of_different_topics_in_one_body_keep_their_own_topic() -> None:
    # the decoder reuses the previous record's topic name while the bytes match: a change of
    # topic, also to one of the same length, an empty one or an IPv6 record, must show
    topics = ["TopicA", "TopicA", "TopicB", "", "TopicA", "Other", "TopicA"]
    hosts = ["127.0.0.2:5000"] * 5 + ["[2001:db8::1]:4000", "127.0.0.2:5000"]
    body = b"".join(encode_stored_message(
        topic=t, body=str(i).encode(), properties="", queue_id=1, queue_offset=i, commit_log_offset=i,
        born_timestamp=1, born_host=h, store_timestamp=2, store_host="127.0.0.1:10911")
        for i, (t, h) in enumerate(zip(topics, hosts, strict=True)))
    msgs = decode_messages(body)
    assert [(m.topic, m.body, m.queue_offset) for m in msgs] == \
        [(t, str(i).encode(), i) for i, t in enumerate(topics)]
    assert msgs[5].born_host == "[2001:db8::1]:4000"


def test_a_topic_that_is_not_utf8_is_a_decode_error_even_after_a_valid_record() -> None:
    good = encode_stored_message(topic="TopicA", body=b"x", properties="", queue_id=1, queue_offset=0,
                                 commit_log_offset=0, born_timestamp=1, born_host="127.0.0.2:5000",
                                 store_timestamp=2, store_host="127.0.0.1:10911")
    bad = bytearray(good)
    at = bytes(bad).index(b"TopicA")
    bad[at:at + 6] = b"Topi\xff\xfe"  # same length as the previous record's topic
    with pytest.raises(MessageDecodeError, match="topic at .* is not UTF-8"):
        decode_messages(good + bytes(bad))


@pytest.mark.parametrize("born, store", [("127.0.0.2:5000", "127.0.0.1:10911"),
                                         ("[2001:db8::1]:4000", "[::1]:10911"),
                                         ("127.0.0.2:5000", "[::1]:10911")])
def test_header_fields_parsed_on_first_use_keep_assigned_values(born: str, store: str) -> None:
    raw = encode_stored_message(topic="Topic", body=b"b", properties="", queue_id=3, queue_offset=2**40,
                                commit_log_offset=2**50 + 7, born_timestamp=1_700_000_000_123, born_host=born,
                                store_timestamp=1_700_000_000_456, store_host=store, flag=9,
                                reconsume_times=2)
    (m,) = decode_messages(raw + raw)[:1]
    m.born_timestamp = 5  # assigned before anything parsed the header: the parse must not undo it
    assert (m.flag, m.commit_log_offset, m.store_timestamp, m.born_host, m.store_host) == \
        (9, 2**50 + 7, 1_700_000_000_456, born, store)
    assert (m.born_timestamp, m.store_size, m.queue_offset, m.queue_id, m.reconsume_times) == \
        (5, len(raw), 2**40, 3, 2)
    assert parse_offset_msg_id(m.offset_msg_id) == (store, 2**50 + 7)
    (again,) = pickle.loads(pickle.dumps(decode_messages(raw)))
    assert (again.store_timestamp, again.born_host, again.body) == (1_700_000_000_456, born, b"b")
    twin = copy.copy(again)
    twin.store_timestamp = 1
    assert (again.store_timestamp, twin.store_timestamp, twin.flag) == (1_700_000_000_456, 1, 9)


def test_unknown_or_unset_message_attributes_are_attribute_errors() -> None:
    (m,) = decode_messages(_stored(b"x"))
    with pytest.raises(AttributeError, match="no attribute 'queue_ofset'"):
        m.queue_ofset  # type: ignore[attr-defined]  # noqa: B018 - the misspelling is the point
    blank = MessageExt()
    with pytest.raises(AttributeError, match="store_timestamp"):
        blank.store_timestamp  # noqa: B018 - nothing to parse: unset, as before
    blank.store_timestamp = 3
    assert blank.store_timestamp == 3


def test_zlib_lz4_zstd_bodies() -> None:
    body = b"payload " * 1000
    (m,) = decode_messages(_stored(zlib.compress(body), sys_flag=0x1))  # legacy: type bits 0 = zlib
    assert m.body == body
    lz4_frame = pytest.importorskip("lz4.frame")
    (m,) = decode_messages(_stored(lz4_frame.compress(body), sys_flag=0x101))
    assert m.body == body
    zstandard = pytest.importorskip("zstandard")
    (m,) = decode_messages(_stored(zstandard.ZstdCompressor().compress(body), sys_flag=0x201))
    assert m.body == body
    (m,) = decode_messages(_stored(b"not zlib", sys_flag=0x301), decompress_body=False)
    assert m.body == b"not zlib"
    with pytest.raises(MessageDecodeError, match="decompress"):
        decode_messages(_stored(b"not zlib", sys_flag=0x301))


def test_the_sized_decoder_tallies_decoded_body_lengths() -> None:
    """The push consumer's byte flow control reads this tally: decompressed lengths, as Java's
    msgSize counts them, or the stored ones when bodies are left compressed."""
    big = b"payload " * 1000
    zipped = zlib.compress(big)
    raw = _stored(b"abc") + _stored(zipped, sys_flag=0x1) + _stored(b"") + _stored(b"x" * 300)
    msgs, body_bytes = decode_messages_sized(raw)
    assert [len(m.body) for m in msgs] == [3, len(big), 0, 300]
    assert body_bytes == 3 + len(big) + 300
    kept, stored_bytes = decode_messages_sized(raw, decompress_body=False)
    assert stored_bytes == 3 + len(zipped) + 300 == sum(len(m.body) for m in kept)
    assert decode_messages_sized(b"") == ([], 0)
    with pytest.raises(MessageDecodeError):
        decode_messages_sized(raw[:-1])


def test_missing_compression_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lz4", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "lz4.frame", None)
    with pytest.raises(CompressionUnavailableError, match="install the 'lz4' package"):
        decode_messages(_stored(b"\x04\x22\x4d\x18", sys_flag=0x101))


def test_properties_both_trailing_forms_and_empty_parts() -> None:
    with_sep = "a\x011\x02b\x012\x02"
    without = "a\x011\x02b\x012"
    assert string_to_properties(with_sep) == string_to_properties(without) == {"a": "1", "b": "2"}
    assert string_to_properties("k\x01\x02\x01v\x02ok\x01yes") == {"ok": "yes"}


def test_batch_round_trip_and_message_validation() -> None:
    msgs = [Message("T", f"b{i}", tags="X", keys=["k", str(i)], properties={"n": "值"}) for i in range(3)]
    items = decode_batch(encode_batch(msgs))
    assert [(i.body, i.properties["KEYS"], i.properties["n"]) for i in items] == \
        [(f"b{i}".encode(), f"k {i}", "值") for i in range(3)]
    with pytest.raises(ConfigError, match="separator") as info:
        Message("T", b"x", properties={"bad\x01key": "v"})
    assert info.value.field == "properties"
    with pytest.raises(ConfigError) as info:
        Message("T", 5)  # type: ignore[arg-type]
    assert info.value.field == "body"


def test_message_queue_sorts_like_java_and_prints_like_java() -> None:
    mqs = [MessageQueue("b", "broker-a", 1), MessageQueue("a", "broker-b", 0), MessageQueue("a", "broker-a", 10),
           MessageQueue("a", "broker-a", 2)]
    assert sorted(mqs) == [MessageQueue("a", "broker-a", 2), MessageQueue("a", "broker-a", 10),
                           MessageQueue("a", "broker-b", 0), MessageQueue("b", "broker-a", 1)]
    assert str(mqs[0]) == "MessageQueue [topic=b, brokerName=broker-a, queueId=1]"
    assert MessageQueue.from_json(mqs[0].to_json()) == mqs[0]
