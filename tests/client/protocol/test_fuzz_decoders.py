"""Random, truncated, mutated and oversized input to every decoder: only typed errors come out."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_rocketmq.client.protocol import fastjson
from airflow_provider_rocketmq.client.protocol.admin_bodies import (
    ConsumerConnection,
    ConsumeStats,
    TopicStatsTable,
)
from airflow_provider_rocketmq.client.protocol.batch import PullFilter
from airflow_provider_rocketmq.client.protocol.columnar import decode_columns
from airflow_provider_rocketmq.client.protocol.command import (
    MAX_FRAME,
    FrameDecoder,
    decode_frame,
    decode_payload,
)
from airflow_provider_rocketmq.client.protocol.errors import FrameTooLargeError, RocketMQError
from airflow_provider_rocketmq.client.protocol.message import (
    decode_batch,
    decode_messages,
    parse_offset_msg_id,
    string_to_properties,
)
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.client.route import ClusterInfo, TopicRouteData
from tests import recorded_vectors as vectors

RECORDS = vectors.all_records()
FRAMES = [bytes.fromhex(r["frame_hex"]) for r in RECORDS]
BODIES = [f[4 + 4 + (int.from_bytes(f[4:8], "big") & 0xFFFFFF):] for f in FRAMES]
MESSAGE_BODIES = [b for r, b in zip(RECORDS, BODIES, strict=True) if (r.get("decoded") or {}).get("messages")]
JSON_BODIES = [b for r, b in zip(RECORDS, BODIES, strict=True) if r["body_text"] and b[:1] == b"{"]

_MQ = MessageQueue("T", "broker-a", 0)
_FILTERS = (PullFilter(None, None, False, ""), PullFilter(3, frozenset({"TagA"}), True, "ns"))


def _columns(data: bytes) -> None:
    for flt in _FILTERS:
        batch = decode_columns(data, _MQ, flt)
        if batch is not None:
            batch.record_batch  # noqa: B018 - the columns are built (and properties checked) on access


FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])

BODY_DECODERS: dict[str, Callable[[Any], Any]] = {
    "fastjson.loads": fastjson.loads,
    "TopicRouteData": TopicRouteData.from_body,
    "ClusterInfo": ClusterInfo.from_body,
    "ConsumeStats": ConsumeStats.from_body,
    "TopicStatsTable": TopicStatsTable.from_body,
    "ConsumerConnection": ConsumerConnection.from_body,
    "decode_messages": decode_messages,
    "decode_batch": decode_batch,
    "decode_columns": _columns,
    "decode_payload": decode_payload,
    "decode_frame": decode_frame,
    "parse_offset_msg_id": lambda b: parse_offset_msg_id(b.decode("latin-1")),
    "MessageQueue.from_json": lambda b: MessageQueue.from_json(fastjson.loads(b)),
    "string_to_properties": lambda b: string_to_properties(b.decode("utf-8", "replace")),
}


def _only_typed_errors(fn: Callable[[Any], Any], data: Any) -> None:
    with contextlib.suppress(RocketMQError):
        fn(data)
    # anything else (IndexError, struct.error, UnicodeDecodeError, RecursionError...) fails the test


@st.composite
def mutated(draw: st.DrawFn, corpus: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(corpus)))
    action = draw(st.sampled_from(["truncate", "flip", "insert", "splice", "raw"]))
    if action == "truncate" and data:
        return bytes(data[:draw(st.integers(0, len(data) - 1))])
    if action == "flip" and data:
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
        return bytes(data)
    if action == "insert":
        i = draw(st.integers(0, len(data)))
        return bytes(data[:i]) + draw(st.binary(max_size=16)) + bytes(data[i:])
    if action == "splice":
        other = draw(st.sampled_from(corpus))
        return bytes(data[:draw(st.integers(0, len(data)))]) + other[draw(st.integers(0, len(other))):]
    return draw(st.binary(max_size=512))


ANY_INPUT = st.one_of(mutated(FRAMES), mutated(MESSAGE_BODIES), mutated(JSON_BODIES), st.binary(max_size=256))


@pytest.mark.parametrize("name", sorted(BODY_DECODERS))
@FUZZ
@given(data=ANY_INPUT)
def test_decoder_raises_only_typed_errors(name: str, data: bytes) -> None:
    _only_typed_errors(BODY_DECODERS[name], data)


JSONISH = st.text(alphabet='{}[]:,"\\0123456789-.eEtrufalsn \t{{}}abc', max_size=80)


@FUZZ
@given(text=JSONISH)
def test_fastjson_text_tokens(text: str) -> None:
    for fn in (fastjson.loads, TopicRouteData.from_body, ConsumeStats.from_body, ClusterInfo.from_body):
        _only_typed_errors(fn, text)


@FUZZ
@given(chunks=st.lists(mutated(FRAMES), min_size=1, max_size=4), split=st.integers(1, 64))
def test_frame_decoder_stream(chunks: list[bytes], split: int) -> None:
    """Byte streams fed in small pieces: frames come out or a typed error does."""
    dec = FrameDecoder()
    stream = b"".join(chunks)
    try:
        for i in range(0, len(stream), split):
            dec.feed(stream[i:i + split])
    except RocketMQError:
        return
    rest = stream[len(stream) - dec.pending:]  # what the decoder kept: never a whole frame
    assert len(rest) < 4 or len(rest) < 4 + struct.unpack_from(">i", rest)[0]


def test_real_frames_split_anywhere_reassemble() -> None:
    stream = b"".join(FRAMES[:60])
    for split in (1, 7, 100, 4096):
        dec = FrameDecoder()
        out = []
        for i in range(0, len(stream), split):
            out += dec.feed(stream[i:i + split])
        assert [(c.code, c.opaque) for c in out] == [(decode_frame(f).code, decode_frame(f).opaque)
                                                    for f in FRAMES[:60]]
        assert dec.pending == 0


def test_oversized_frames_are_rejected_before_buffering() -> None:
    dec = FrameDecoder()
    with pytest.raises(FrameTooLargeError):
        dec.feed(struct.pack(">i", MAX_FRAME + 1) + b"\x00\x00\x00\x02")
    with pytest.raises(FrameTooLargeError):
        decode_payload(bytes(MAX_FRAME + 1))
    with pytest.raises(RocketMQError):
        FrameDecoder().feed(struct.pack(">i", -5) + b"xxxx")
    huge_header = struct.pack(">ii", 8, 0xFFFFFF) + b"{}"
    with pytest.raises(RocketMQError):
        decode_frame(huge_header)


def test_deeply_nested_json_is_a_typed_error() -> None:
    for text in ("[" * 100000, "{\"a\":" * 50000, "{{" * 30000):
        with pytest.raises(RocketMQError):
            fastjson.loads(text)
