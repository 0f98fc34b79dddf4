"""Pull bodies straight to Arrow columns: the columnar decoder of batch listeners (the window's).

`decode_columns` is a `BatchDecoder`: it walks a pull body (stored-message records,
layout in `message.py`) once to find where each record starts, then reads every
field of every record at once with numpy gathers over the raw bytes and builds the
Arrow arrays in C: no `MessageExt`, dict or row per message. Variable-length
fields (body, topic, properties) become Arrow arrays without a Python copy: the
whole pull body is wrapped zero-copy as a binary array whose elements alternate
between the wanted field and the bytes up to the next one, and the even elements
are taken. Properties are split with `pyarrow.compute` on their raw strings;
tags, keys and the message id are read from the split.

Semantics are those of `decode_messages` followed by the pull service's filter:
the same records are accepted or refused (`MessageDecodeError`), bodies are
inflated (zlib, LZ4, ZSTD), properties parse like `string_to_properties` (items
without a separator or with an empty name or value are dropped, the last of
duplicate names wins), `msg_id` is UNIQ_KEY or else the offset message id.

`to_raw_record_batch` builds the raw layout instead (the properties kept as their stored string,
plus the store host and commit-log offset): no properties split, no message-id text, for a writer
that only stores the messages; client/protocol/raw_columns.py derives the rest where they are read.

numpy and pyarrow are imported on first use (the client itself needs neither).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

from .batch import PullFilter
from .errors import MessageDecodeError
from .message import (
    FLAG_BORNHOST_V6,
    FLAG_COMPRESSED,
    FLAG_STOREHOST_V6,
    MAGIC_V1,
    MAGIC_V2,
    NAME_VALUE_SEP,
    PROPERTY_KEYS,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SEP,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageExt,
    decode_messages,
    decompress,
    string_to_properties,
)
from .names import strip_namespace
from .queue import MessageQueue

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["MESSAGE_COLUMNS", "ColumnBatch", "decode_columns", "message_schema", "offset_msg_ids", "raw_message_schema",
           "split_properties", "string_column", "to_raw_record_batch", "to_record_batch"]

MESSAGE_COLUMNS = ("topic", "broker", "queue_id", "queue_offset", "msg_id", "tags", "keys", "properties",
                   "born_timestamp", "store_timestamp", "reconsume_times", "body")

_MIN_RECORD = 88  # the fixed IPv4 prefix up to bodyLen; decode_messages refuses shorter records
_HEAD_LEN = 48  # up to bornTimestamp: the part every record has at the same place
_I = struct.Struct(">i")


def message_schema() -> pa.Schema:
    """`MESSAGE_SCHEMA` (built on first use; pyarrow is imported lazily)."""
    global _SCHEMA
    if _SCHEMA is None:
        import pyarrow as pa

        _SCHEMA = pa.schema([
            pa.field("topic", pa.string(), nullable=False),
            pa.field("broker", pa.string(), nullable=False),
            pa.field("queue_id", pa.int32(), nullable=False),
            pa.field("queue_offset", pa.int64(), nullable=False),
            pa.field("msg_id", pa.string()),
            pa.field("tags", pa.string()),
            pa.field("keys", pa.string()),
            pa.field("properties", pa.map_(pa.string(), pa.string())),
            pa.field("born_timestamp", pa.int64()),
            pa.field("store_timestamp", pa.int64()),
            pa.field("reconsume_times", pa.int32()),
            pa.field("body", pa.binary()),
        ])
    return _SCHEMA


_SCHEMA: pa.Schema | None = None


def __getattr__(name: str) -> Any:
    if name == "MESSAGE_SCHEMA":  # built on first access so that importing this module needs no pyarrow
        return message_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Lazy:
    """numpy/pyarrow modules and constant tables, loaded once on the first decode."""

    np: Any = None
    pa: Any = None
    pc: Any = None
    head: Any = None  # structured dtype of the fixed IPv4 prefix
    hex_table: Any = None  # byte -> two upper-case hex ASCII digits

    @classmethod
    def load(cls) -> None:
        if cls.np is not None:
            return
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        cls.head = np.dtype([
            ("store_size", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
            ("queue_offset", ">i8"), ("commit_log_offset", ">i8"), ("sys_flag", ">i4"),
            ("born_timestamp", ">i8"), ("born_host", "V8"), ("store_timestamp", ">i8"), ("store_host", "V8"),
            ("reconsume_times", ">i4"), ("prepared_offset", ">i8"), ("body_len", ">i4"),
        ])
        assert cls.head.itemsize == _MIN_RECORD
        digits = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
        cls.hex_table = np.stack([digits[np.arange(256) >> 4], digits[np.arange(256) & 15]], axis=1)
        cls.pc = pc
        cls.pa = pa
        cls.np = np


class ColumnBatch:
    """One pull result of one queue: a `PulledBatch` whose Arrow columns are built on first use.

    `decode_columns` validates every record and keeps the raw pull body plus where each
    kept record starts. `record_batch` builds the columns of this batch alone;
    `to_record_batch` builds those of many batches in one pass, which spreads the fixed
    cost of the Arrow calls over thousands of messages instead of one pull's 32.
    """

    __slots__ = ("_body", "_filter", "_inflated", "_rb", "_starts", "_topic", "body_bytes", "body_sizes", "count",
                 "first_offset", "last_offset", "mq", "queue_offsets")

    mq: MessageQueue
    first_offset: int
    last_offset: int
    count: int
    body_bytes: int
    queue_offsets: list[int]  # of each kept message, in order
    body_sizes: list[int]  # body length of each kept message (inflated)

    def __init__(self, mq: MessageQueue, body: bytes, starts: list[int], offsets: list[int],
                 sizes: list[int], inflated: dict[int, bytes] | None, flt: PullFilter,
                 topic: bytes | None = None) -> None:
        self.mq = mq
        self.first_offset = offsets[0]
        self.last_offset = offsets[-1]
        self.count = len(starts)
        self.body_bytes = sum(sizes)
        # the index's lists as they are: an int64 array would cost ~10 us per pull to convert on the
        # loop thread, and the ~30 bytes more per number only count for the few thousand messages
        # a window's caches and writer queue hold (thresholds of 1,000 messages per queue by default)
        self.queue_offsets = offsets
        self.body_sizes = sizes
        self._body = body
        self._starts = starts  # byte offsets of the kept records in body
        self._inflated = inflated  # record start -> inflated body, for compressed records
        self._topic = topic  # the (UTF-8-checked) topic of every record, when they share one
        self._filter = flt
        self._rb: pa.RecordBatch | None = None

    @property
    def raw_bytes(self) -> int:
        """Bytes this batch keeps alive (the whole pull body, even for a subset): for memory budgets."""
        return len(self._body)

    def select(self, indices: Sequence[int]) -> ColumnBatch | None:
        """The kept messages at ``indices`` (ascending) as a batch of their own; None when empty."""
        if not indices:
            return None
        if len(indices) == self.count:
            return self
        return ColumnBatch(self.mq, self._body, [self._starts[i] for i in indices],
                           [self.queue_offsets[i] for i in indices], [self.body_sizes[i] for i in indices],
                           self._inflated, self._filter, self._topic)

    def tags(self) -> list[str | None]:
        """The TAGS property of each kept message, read without building the columns (a tag filter
        applied by a listener, e.g. the window's). Raises `MessageDecodeError` for non-UTF-8 properties."""
        out: list[str | None] = []
        body = self._body
        for start in self._starts:
            raw = _properties_of(body, start)
            try:
                out.append(string_to_properties(raw.decode("utf-8")).get(PROPERTY_TAGS) if raw else None)
            except UnicodeDecodeError:
                raise MessageDecodeError(f"message properties at {start} are not UTF-8") from None
        return out

    @property
    def record_batch(self) -> pa.RecordBatch:
        """The kept messages as a `pyarrow.RecordBatch` with `MESSAGE_SCHEMA`."""
        rb = self._rb
        if rb is None:
            rb = self._rb = to_record_batch([self])
        return rb

    def messages(self) -> list[MessageExt]:
        """The kept records as `MessageExt` (failure paths), topics rewritten as in the columns."""
        kept = set(self._starts)
        out = []
        pos = 0
        flt = self._filter
        for m in decode_messages(self._body, broker_name=self.mq.broker_name):
            if pos in kept:
                if flt.restore_retry_topic:
                    m.topic = m.properties.get(PROPERTY_RETRY_TOPIC) or m.topic
                if flt.namespace:
                    m.topic = strip_namespace(flt.namespace, m.topic)
                out.append(m)
            pos += m.store_size
        return out

    def __repr__(self) -> str:
        return (f"ColumnBatch({self.mq}, offsets {self.first_offset}..{self.last_offset}, count={self.count}, "
                f"body_bytes={self.body_bytes})")


# size, magic, queueOffset, sysFlag, bodyLen of the fixed IPv4 prefix (the rest is skipped)
_V4_WALK = struct.Struct(">ii12xq8xi44xi")
_H = struct.Struct(">h")
_V6_TAIL = struct.Struct(">iqi")  # reconsumeTimes, preparedTransactionOffset, bodyLen


def decode_columns(body: bytes, mq: MessageQueue, filter: PullFilter) -> ColumnBatch | None:
    """Decode one pull body into a `ColumnBatch` after ``filter``; None when nothing is kept.

    Raises `MessageDecodeError` for a record `decode_messages` refuses (sizes, magic,
    lengths, topic not UTF-8, a body that does not inflate). Properties that are not
    UTF-8 are found when the columns are built (`record_batch`, `to_record_batch`), which
    raise `MessageDecodeError` then, as `MessageExt.properties` does on first access
    (with a tag filter, here: the tags are read at once).
    """
    if not body:
        return None
    starts, offsets, sizes, inflated, topic = _index_records(body)
    stop = filter.stop
    batch = ColumnBatch(mq, body, starts, offsets, sizes, inflated, filter, topic)
    if stop is not None and offsets[-1] >= stop:  # a pull returns one queue's offsets in order
        kept = batch.select([i for i, off in enumerate(offsets) if off < stop])
        if kept is None:
            return None
        batch = kept
    if filter.tags is None:
        return batch
    # the exact tag filter (tag-hash collisions): read the tags without building the columns
    wanted = filter.tags
    return batch.select([i for i, tag in enumerate(batch.tags()) if tag in wanted])


# starts, queue offsets, body sizes, inflated bodies by start, the topic when every record has the same
_RecordIndex = tuple[list[int], list[int], list[int], dict[int, bytes] | None, bytes | None]


class _NotPlain(Exception):
    """A record `_index_plain_records` does not handle (or a malformed one): `_index_any_records` takes the body."""


_PLAIN_FLAGS_OFF = FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6 | FLAG_COMPRESSED
# bodies from this size on take `_index_plain_bulk` (numpy's fixed cost, ~50 us, would outweigh what it
# saves on a pull's 32 records; a data-source flush joins thousands)
BULK_INDEX_BYTES = 1 << 20
_TAILS: dict[int, Any] = {}  # topic length -> unpack_from of (topic length, topic, properties length)


def _index_records(data: bytes) -> _RecordIndex:
    """Validate every record as `decode_messages` does; return their starts, queue offsets,
    body sizes (inflated) and the inflated bodies of compressed records."""
    try:
        return _index_plain_bulk(data) if len(data) >= BULK_INDEX_BYTES else _index_plain_records(data)
    except (_NotPlain, struct.error, IndexError, UnicodeDecodeError):
        return _index_any_records(data)  # raises the precise MessageDecodeError for a malformed body


def _index_plain_records(data: bytes) -> _RecordIndex:
    """`_index_any_records` for a body of plain records - IPv4 hosts, uncompressed, magic v1, one topic:
    what a pull of one queue returns - with fewer Python operations per record: topic length, topic and
    properties length in one read past the body, one sum for the bounds; anything else raises.

    A record is accepted when the general index accepts it: its layout fits in its size
    (88-byte prefix + body + topic length byte + topic + properties length + properties, no
    length negative), the topic is the first record's (UTF-8-checked once), and the records
    tile the body exactly.
    """
    topic, fixed = _first_plain_topic(data)
    topic_len = len(topic)
    end = len(data)
    unpack = _V4_WALK.unpack_from
    tail = _TAILS.get(topic_len)
    if tail is None:
        tail = _TAILS[topic_len] = struct.Struct(f">b{topic_len}sh").unpack_from
    starts: list[int] = []
    offsets: list[int] = []
    sizes: list[int] = []
    add_start, add_offset, add_size = starts.append, offsets.append, sizes.append
    pos = 0
    while pos < end:
        size, magic, queue_offset, sys_flag, body_len = unpack(data, pos)
        t = pos + _MIN_RECORD + body_len
        tlen, record_topic, plen = tail(data, t)
        if (magic != MAGIC_V1 or sys_flag & _PLAIN_FLAGS_OFF or (body_len | plen) < 0 or tlen != topic_len
                or body_len + plen > size - fixed or record_topic != topic):
            raise _NotPlain
        add_start(pos)
        add_offset(queue_offset)
        add_size(body_len)
        pos += size
    if pos != end:  # the last record overruns the body
        raise _NotPlain
    return starts, offsets, sizes, None, topic


def _first_plain_topic(data: bytes) -> tuple[bytes, int]:
    """The first record's topic (UTF-8-checked) and the fixed bytes of its plain records (the prefix,
    topic length byte, topic, properties length); `_NotPlain` unless it is a plain record."""
    _, magic, _, _, body_len = _V4_WALK.unpack_from(data, 0)
    t = _MIN_RECORD + body_len
    if magic != MAGIC_V1 or body_len < 0 or data[t] > 127:
        raise _NotPlain
    topic = data[t + 1:t + 1 + data[t]]
    topic.decode("utf-8")
    return topic, _MIN_RECORD + 3 + len(topic)


def _index_plain_bulk(data: bytes) -> _RecordIndex:
    """`_index_plain_records` for big buffers (a data-source flush: thousands of records): the Python
    loop only follows the record sizes; every other check runs over all records at once in numpy
    (0.23 against 0.34-0.51 µs per record, 57,000 records of 100-byte messages). The same records are
    accepted."""
    topic, fixed = _first_plain_topic(data)
    end = len(data)
    size_at = _I.unpack_from
    starts: list[int] = []
    add = starts.append
    pos = 0
    for _ in range(end // fixed + 1):  # bounded: a record of size <= 0 cannot make the walk spin
        if pos >= end:
            break
        add(pos)
        pos += size_at(data, pos)[0]
    if pos != end:  # overran the body, or sizes too small for plain records
        raise _NotPlain
    _Lazy.load()
    np = _Lazy.np
    buf = np.frombuffer(data, dtype=np.uint8)
    at = np.array(starts, dtype=np.int64)
    head = _windows(buf, _MIN_RECORD, np)[at].view(_Lazy.head)[:, 0]  # IndexError: a record past the end
    body_len = head["body_len"].astype(np.int64)
    if ((head["magic"] != MAGIC_V1) | ((head["sys_flag"] & _PLAIN_FLAGS_OFF) != 0) | (body_len < 0)).any():
        raise _NotPlain
    t = at + _MIN_RECORD + body_len  # each record's topic length byte
    p = t + 1 + len(topic)  # ... and its properties length
    if int(p.max()) + 2 > end or (buf[t] != len(topic)).any():
        raise _NotPlain
    if topic and (_windows(buf, len(topic), np)[t + 1] != np.frombuffer(topic, dtype=np.uint8)).any():
        raise _NotPlain
    plen = _big_endian_ints(buf, p, 2, np)
    if ((plen < 0) | (body_len + plen > head["store_size"].astype(np.int64) - fixed)).any():
        raise _NotPlain
    return starts, head["queue_offset"].tolist(), body_len.tolist(), None, topic


def _index_any_records(data: bytes) -> _RecordIndex:
    """Every record checked field by field (IPv6 hosts, compressed bodies, magic v2, mixed topics), in
    the order `decode_messages` checks them."""
    starts: list[int] = []
    offsets: list[int] = []
    sizes: list[int] = []
    inflated: dict[int, bytes] | None = None
    pos = 0
    end = len(data)
    unpack = _V4_WALK.unpack_from
    unpack_h = _H.unpack_from
    last_topic = None
    mixed = False
    try:
        while pos < end:
            if end - pos < _MIN_RECORD:
                raise _short_record(pos, end)
            size, magic, queue_offset, sys_flag, body_len = unpack(data, pos)
            if size < _MIN_RECORD or pos + size > end or (magic != MAGIC_V1 and magic != MAGIC_V2):
                raise _bad_record(size, magic, pos, end)
            if sys_flag & (FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6):
                p = pos + _HEAD_LEN + (20 if sys_flag & FLAG_BORNHOST_V6 else 8) + 8 \
                    + (20 if sys_flag & FLAG_STOREHOST_V6 else 8)
                body_len = _V6_TAIL.unpack_from(data, p)[2]
                p += 16
            else:
                p = pos + _MIN_RECORD
            rec_end = pos + size
            if body_len < 0 or p + body_len > rec_end:
                raise MessageDecodeError(f"body length {body_len} overruns the record at {pos}")
            body_start = p
            p += body_len
            if magic == MAGIC_V1:  # the topic's length: a signed int8 (magic v1) or int16 (v2)
                tlen = _SIGNED_BYTE[data[p]]
                p += 1
            else:
                (tlen,) = unpack_h(data, p)
                p += 2
            if tlen < 0 or p + tlen > rec_end:
                raise MessageDecodeError(f"topic length {tlen} overruns the record at {pos}")
            topic = data[p:p + tlen]
            if topic != last_topic:
                _check_utf8(topic, pos)
                mixed = last_topic is not None
                last_topic = topic
            p += tlen
            (plen,) = unpack_h(data, p)
            if plen < 0 or p + 2 + plen > rec_end:
                raise MessageDecodeError(f"properties length {plen} overruns the record at {pos}")
            if sys_flag & FLAG_COMPRESSED:
                inflated = inflated if inflated is not None else {}
                inflated[pos] = raw = decompress(data[body_start:body_start + body_len], sys_flag)
                body_len = len(raw)
            starts.append(pos)
            offsets.append(queue_offset)
            sizes.append(body_len)
            pos += size
    except (struct.error, IndexError):
        raise MessageDecodeError(f"truncated message record at {pos}") from None
    return starts, offsets, sizes, inflated, None if mixed else last_topic


_SIGNED_BYTE = tuple(b - 256 if b > 127 else b for b in range(256))  # a byte read as an int8


def _check_utf8(topic: bytes, pos: int) -> None:
    try:
        topic.decode("utf-8")
    except UnicodeDecodeError:
        raise MessageDecodeError(f"message topic at {pos} is not UTF-8") from None


def _short_record(pos: int, end: int) -> MessageDecodeError:
    if end - pos < 4:
        return MessageDecodeError(f"{end - pos} trailing bytes after the last message")
    return MessageDecodeError(f"message record at {pos} overruns the body ({end})")


def _bad_record(size: int, magic: int, pos: int, end: int) -> MessageDecodeError:
    if size < _MIN_RECORD or pos + size > end:
        return MessageDecodeError(f"message record size {size} at {pos} overruns the body ({end})")
    return MessageDecodeError(f"bad magic code {magic & 0xFFFFFFFF:#x} at {pos}")


def _properties_of(data: bytes, pos: int) -> bytes:
    """The raw property bytes of the (validated) record at ``pos``."""
    _size, magic, _, sys_flag, body_len = _V4_WALK.unpack_from(data, pos)
    if sys_flag & (FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6):
        p = pos + _HEAD_LEN + (20 if sys_flag & FLAG_BORNHOST_V6 else 8) + 8 \
            + (20 if sys_flag & FLAG_STOREHOST_V6 else 8)
        body_len = _V6_TAIL.unpack_from(data, p)[2]
        p += 16 + body_len
    else:
        p = pos + _MIN_RECORD + body_len
    if magic == MAGIC_V1:
        tlen = data[p]
        p += 1 + (tlen - 256 if tlen > 127 else tlen)
    else:
        p += 2 + _H.unpack_from(data, p)[0]
    (plen,) = _H.unpack_from(data, p)
    return data[p + 2:p + 2 + plen]


def to_record_batch(batches: Sequence[ColumnBatch]) -> pa.RecordBatch:
    """The messages of ``batches``, in order, as one `pyarrow.RecordBatch` with `MESSAGE_SCHEMA`."""
    _Lazy.load()
    pa, pc, np = _Lazy.pa, _Lazy.pc, _Lazy.np
    schema = message_schema()
    if len(batches) == 1 and batches[0]._rb is not None:
        return batches[0]._rb
    batches = [b for b in batches if b.count]
    if not batches:
        return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)
    r = _records(batches)
    props, (tags, keys, uniq, retry_topic) = split_properties(r.props_raw, r.n, _NAMED)
    topic = _rewrite_topics(batches, r.counts, r.topic, retry_topic, pa, pc, np)
    msg_id = uniq
    if uniq.null_count:
        msg_id = pc.coalesce(uniq, offset_msg_ids(r.f.store_host, r.mat[:, 28:36], r.n))
    head = r.head
    columns = [
        topic,
        _broker_column(batches, r.counts, r.n),
        _ints(head["queue_id"].astype(np.int32), pa),
        _ints(head["queue_offset"].astype(np.int64), pa),
        msg_id,
        tags,
        keys,
        props,
        _ints(head["born_timestamp"].astype(np.int64), pa),
        _ints(r.f.store_timestamp.astype(np.int64), pa),
        _ints(r.f.reconsume_times.astype(np.int32), pa),
        _body_column(batches, r.bases, r.data, r.starts, r.f),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


# the properties that have columns of their own, and the one a retry topic's restore reads
_NAMED = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, PROPERTY_RETRY_TOPIC)


class _Records:
    """The fields of the kept records of some batches, gathered once (see `_records`)."""

    __slots__ = ("bases", "counts", "data", "f", "head", "mat", "n", "props_raw", "starts", "topic")

    def __init__(self, data: bytes, starts: Any, bases: Any, counts: Any, mat: Any, head: Any, f: _Fields,
                 topic: Any, props_raw: Any) -> None:
        self.data = data  # the batches' pull bodies, concatenated
        self.starts = starts  # each record's start in data
        self.bases = bases  # each batch's start in data
        self.counts = counts  # each batch's record count
        self.n = len(starts)
        self.mat = mat  # (n, 88) fixed prefixes
        self.head = head  # mat as the fixed prefix's structured dtype
        self.f = f
        self.topic = topic  # as stored (before the pull filter's rewrites)
        self.props_raw = props_raw  # each record's properties string, UTF-8 checked


def _records(batches: Sequence[ColumnBatch]) -> _Records:
    """Every field of the kept records of ``batches`` (none empty), read with numpy gathers."""
    np = _Lazy.np
    data, starts, bases, counts = _concatenated(batches, np)
    n = len(starts)
    buf = np.frombuffer(data, dtype=np.uint8)
    # (records, 88): every fixed prefix, gathered through a sliding-window view of the bytes (no
    # (records x 88) index array: that would take 8 bytes of index per byte gathered)
    mat = _windows(buf, _MIN_RECORD, np)[starts]
    head = mat.view(_Lazy.head)[:, 0]
    if ((head["sys_flag"] & (FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6)) != 0).any():
        f = _fields_any_host(buf, starts, head, np)
    else:
        f = _Fields(head["body_len"].astype(np.int64), starts + _MIN_RECORD, head["store_timestamp"],
                    head["reconsume_times"], mat[:, 64:72])
    topic, props_raw = _topics_and_raw_properties(batches, data, buf, head["magic"], f, n)
    return _Records(data, starts, bases, counts, mat, head, f, topic, props_raw)


def raw_message_schema() -> pa.Schema:
    """The raw layout's schema: `MESSAGE_SCHEMA`'s columns with ``store_host``, ``commit_log_offset``
    and ``properties_raw`` (the properties as stored) in place of ``msg_id``, ``tags``, ``keys`` and
    ``properties``, which client/protocol/raw_columns.py derives from them (built on first use)."""
    global _RAW_SCHEMA
    if _RAW_SCHEMA is None:
        import pyarrow as pa

        fields = {f.name: f for f in message_schema()}
        _RAW_SCHEMA = pa.schema([
            fields["topic"], fields["broker"], fields["queue_id"], fields["queue_offset"],
            pa.field("store_host", pa.binary()),  # ip + port: 8 bytes (IPv4) or 20 (IPv6)
            pa.field("commit_log_offset", pa.int64()),
            pa.field("properties_raw", pa.string(), nullable=False),
            fields["born_timestamp"], fields["store_timestamp"], fields["reconsume_times"], fields["body"],
        ])
    return _RAW_SCHEMA


_RAW_SCHEMA: pa.Schema | None = None


def to_raw_record_batch(batches: Sequence[ColumnBatch]) -> pa.RecordBatch:
    """The messages of ``batches``, in order, as one `pyarrow.RecordBatch` with `raw_message_schema()`
    (topics rewritten by the pull filter as `to_record_batch` does). Cheaper than `to_record_batch`:
    no properties split (only a %RETRY% queue's restore splits what it reads), no message-id text;
    for a writer that only stores the messages."""
    _Lazy.load()
    pa, pc, np = _Lazy.pa, _Lazy.pc, _Lazy.np
    schema = raw_message_schema()
    batches = [b for b in batches if b.count]
    if not batches:
        return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)
    r = _records(batches)
    retry_topic = None
    if any(b._filter.restore_retry_topic for b in batches):  # %RETRY% queues only: split what it needs
        retry_topic = split_properties(r.props_raw, r.n, (PROPERTY_RETRY_TOPIC,))[1][0]
    head = r.head
    columns = [
        _rewrite_topics(batches, r.counts, r.topic, retry_topic, pa, pc, np),
        _broker_column(batches, r.counts, r.n),
        _ints(head["queue_id"].astype(np.int32), pa),
        _ints(head["queue_offset"].astype(np.int64), pa),
        _host_column(r.f.store_host, r.n),
        _ints(head["commit_log_offset"].astype(np.int64), pa),
        r.props_raw,
        _ints(head["born_timestamp"].astype(np.int64), pa),
        _ints(r.f.store_timestamp.astype(np.int64), pa),
        _ints(r.f.reconsume_times.astype(np.int32), pa),
        _body_column(batches, r.bases, r.data, r.starts, r.f),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _host_column(store_host: Any, n: int) -> Any:
    pa, np = _Lazy.pa, _Lazy.np
    if isinstance(store_host, list):  # IPv4 and IPv6 store hosts mixed
        return _binaries([bytes(h) for h in store_host], pa, np)
    width = store_host.shape[1]
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(np.ascontiguousarray(store_host))])


def _concatenated(batches: Sequence[ColumnBatch], np: Any) -> tuple[bytes, Any, Any, Any]:
    """The batches' pull bodies as one buffer: (buffer, every kept record's start in it, each batch's
    base offset in it, each batch's record count)."""
    counts = np.fromiter((b.count for b in batches), dtype=np.int64, count=len(batches))
    if len(batches) == 1:
        return batches[0]._body, np.array(batches[0]._starts, dtype=np.int64), np.zeros(1, dtype=np.int64), counts
    data = b"".join([b._body for b in batches])
    lengths = np.fromiter((len(b._body) for b in batches), dtype=np.int64, count=len(batches))
    bases = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    starts = np.fromiter(chain.from_iterable(b._starts for b in batches), dtype=np.int64,
                         count=int(counts.sum())) + np.repeat(bases, counts)
    return data, starts, bases, counts


def _topics_and_raw_properties(batches: Sequence[ColumnBatch], data: bytes, buf: Any, magic: Any, f: _Fields,
                               n: int) -> tuple[Any, Any]:
    """The topic column (as stored) and the raw properties strings (UTF-8 checked)."""
    pa, np = _Lazy.pa, _Lazy.np
    body_end = f.body_start + f.body_len
    v2 = magic == MAGIC_V2  # int16 topic length instead of int8
    tlen = buf[body_end].view(np.int8).astype(np.int64)
    if v2.any():
        tlen = np.where(v2, _big_endian_ints(buf, np.where(v2, body_end, 0), 2, np), tlen)
    t_start = body_end + np.where(v2, 2, 1)
    t_end = t_start + tlen
    plen = _big_endian_ints(buf, t_end, 2, np)
    shared = batches[0]._topic
    if shared is not None and all(b._topic == shared for b in batches):
        topic = string_column(shared.decode("utf-8"), n)  # one topic (the usual group): no per-record copy
    else:  # the index checked every topic's UTF-8 already
        topic = _interleaved(data, t_start, tlen, pa, np).cast(pa.string())
    try:  # the cast validates UTF-8
        props_raw = _interleaved(data, t_end + 2, plen, pa, np).cast(pa.string())
    except pa.ArrowInvalid:
        raise MessageDecodeError("message properties are not UTF-8") from None
    return topic, props_raw


def split_properties(raw: pa.Array, n: int, wanted: Sequence[str]) -> tuple[pa.Array, list[pa.Array]]:
    """Raw properties strings (``name\\x01value\\x02...``, UTF-8) -> the properties map column and
    the columns of the ``wanted`` names' values (null where a record lacks one)."""
    _Lazy.load()
    pa, pc, np = _Lazy.pa, _Lazy.pc, _Lazy.np
    if not n:
        return pa.nulls(0, pa.map_(pa.string(), pa.string())), [pa.nulls(0, pa.string()) for _ in wanted]
    split = _split_uniform(raw, n, pa, np, wanted)
    return split if split is not None else _split_properties(raw, n, pa, pc, np, wanted)


def _body_column(batches: Sequence[ColumnBatch], bases: Any, data: bytes, starts: Any, f: _Fields) -> Any:
    """The bodies, inflated where they were stored compressed."""
    pa, np = _Lazy.pa, _Lazy.np
    if not any(b._inflated for b in batches):
        return _interleaved(data, f.body_start, f.body_len, pa, np)
    inflated = {int(base) + pos: raw for b, base in zip(batches, bases, strict=True) if b._inflated
                for pos, raw in b._inflated.items()}
    bodies = [inflated[s] if s in inflated else data[b:b + ln] for s, b, ln in
              zip(starts.tolist(), f.body_start.tolist(), f.body_len.tolist(), strict=True)]
    return _binaries(bodies, pa, np)


def _broker_column(batches: Sequence[ColumnBatch], counts: Any, n: int) -> Any:
    pa, np = _Lazy.pa, _Lazy.np
    brokers = sorted({b.mq.broker_name for b in batches})
    if len(brokers) == 1:
        return string_column(brokers[0], n)
    code = np.repeat(np.array([brokers.index(b.mq.broker_name) for b in batches], dtype=np.int32), counts)
    return _strings(brokers, pa, np).take(_ints(code, pa))


def _rewrite_topics(batches: Sequence[ColumnBatch], counts: Any, topic: Any, retry_topic: Any, pa: Any, pc: Any,
                    np: Any) -> Any:
    """The pull filter's topic rewrites: original topic of retries, then the namespace stripped."""
    restore = [b._filter.restore_retry_topic for b in batches]
    if all(restore):
        topic = pc.coalesce(retry_topic, topic)
    elif any(restore):
        mask = _bools(np.repeat(np.array(restore), counts), pa, np)
        topic = pc.if_else(pc.and_(mask, pc.is_valid(retry_topic)), retry_topic, topic)
    spaces = [b._filter.namespace for b in batches]
    for ns in sorted(set(spaces)):
        if not ns:
            continue
        mapped = _map_strings(topic, lambda t, ns=ns: strip_namespace(ns, t), pa, pc)
        if all(s == ns for s in spaces):
            return mapped
        mask = _bools(np.repeat(np.array([s == ns for s in spaces]), counts), pa, np)
        topic = pc.if_else(mask, mapped, topic)
    return topic


class _Fields:
    """What differs between IPv4 and IPv6 records, as arrays over the records."""

    __slots__ = ("body_len", "body_start", "reconsume_times", "store_host", "store_timestamp")

    def __init__(self, body_len: Any, body_start: Any, store_timestamp: Any, reconsume_times: Any,
                 store_host: Any) -> None:
        self.body_len = body_len
        self.body_start = body_start
        self.store_timestamp = store_timestamp
        self.reconsume_times = reconsume_times
        self.store_host = store_host  # (n, 8) or (n, 20) uint8 ip+port; a list of rows when mixed


def _windows(buf: Any, width: int, np: Any) -> Any:
    """A read-only (len - width + 1, width) view of ``buf``: row i = bytes i..i+width-1."""
    return np.lib.stride_tricks.sliding_window_view(buf, width)


def _big_endian_ints(buf: Any, pos: Any, width: int, np: Any) -> Any:
    """Big-endian signed ints of ``width`` bytes at each of ``pos`` (all inside ``buf``)."""
    return np.ascontiguousarray(_windows(buf, width, np)[pos]).view(f">i{width}")[:, 0].astype(np.int64)


def _fields_any_host(buf: Any, starts: Any, head: Any, np: Any) -> _Fields:
    """Field positions when some records carry IPv6 hosts (20-byte host fields)."""
    sys_flag = head["sys_flag"]
    born_len = np.where(sys_flag & FLAG_BORNHOST_V6, 20, 8)
    store_len = np.where(sys_flag & FLAG_STOREHOST_V6, 20, 8)
    p_store_ts = starts + _HEAD_LEN + born_len
    p_store_host = p_store_ts + 8
    p_reconsume = p_store_host + store_len
    # like decode_messages (struct reads): past the record is tolerated here, past the body is not
    if (p_reconsume + 16 > len(buf)).any():
        i = int(np.argmax(p_reconsume + 16 > len(buf)))
        raise MessageDecodeError(f"truncated message record at {int(starts[i])}")
    store_ts = _big_endian_ints(buf, p_store_ts, 8, np)
    reconsume = _big_endian_ints(buf, p_reconsume, 4, np).astype(np.int32)
    body_len = _big_endian_ints(buf, p_reconsume + 12, 4, np)
    if (store_len == 8).all():
        store_host: Any = _windows(buf, 8, np)[p_store_host]
    elif (store_len == 20).all():
        store_host = _windows(buf, 20, np)[p_store_host]
    else:
        store_host = [buf[p:p + n] for p, n in zip(p_store_host.tolist(), store_len.tolist(), strict=True)]
    return _Fields(body_len, p_reconsume + 16, store_ts, reconsume, store_host)


def _interleaved(body: Any, begin: Any, length: Any, pa: Any, np: Any, kind: Any = None) -> Any:
    """The byte ranges ``[begin, begin+length)`` (ascending, disjoint) as a binary array, copied in C.

    The body is wrapped zero-copy as a binary array of 2n-1 elements, alternately a wanted
    range and the gap up to the next one; taking the even elements gathers the ranges.
    ``kind=pa.string()`` when the ranges are known to be UTF-8 (no validating cast then).
    """
    n = len(begin)
    offsets = np.empty(2 * n, dtype=np.int32)
    offsets[0::2] = begin
    offsets[1::2] = begin + length
    arr = pa.Array.from_buffers(kind or pa.binary(), 2 * n - 1, [None, pa.py_buffer(offsets), pa.py_buffer(body)])
    return arr.take(_ints(np.arange(0, 2 * n, 2, dtype=np.int32), pa))


def _split_uniform(raw: Any, n: int, pa: Any, np: Any, wanted: Sequence[str]) -> tuple[Any, list[Any]] | None:
    """`_split_properties` for the usual case, in a few vectorised passes; None when it does not apply.

    It applies when every record has the same property names in the same order (what one
    producer sends, plus what the broker adds), each pair ``name\\x01value`` with a non-empty
    name and value, pairs separated by ``\\x02``, with a trailing ``\\x02`` in every record or
    in none. Then every record has the same separators in the same order, pair j of every
    record is found by reshaping their positions, and each name is compared once per column
    instead of split out per record. ``raw`` is UTF-8 (validated) and the splits are at ASCII
    bytes, so names and values are UTF-8 too.
    """
    data = raw.buffers()[2]
    if raw.offset or data is None:
        return None
    buf = np.frombuffer(data, dtype=np.uint8)
    bounds = _uniform_bounds(raw, buf, n, np)
    if bounds is None:
        return None
    found = _uniform_names(data, buf, bounds, np)
    if found is None:
        return None
    names, v_begin, v_len = found
    k = len(names)
    kinds = pa.string()
    # the map's entries record by record: column j of (record, name) written from row j
    begin_rm = np.empty((n, k), dtype=np.int64)
    len_rm = np.empty((n, k), dtype=np.int64)
    for j in range(k):
        begin_rm[:, j] = v_begin[j]
        len_rm[:, j] = v_len[j]
    values = _interleaved(data, begin_rm.reshape(-1), len_rm.reshape(-1), pa, np, kinds)
    lengths = np.fromiter((len(x) for x in names), dtype=np.int32, count=k)
    key_offsets = np.zeros(n * k + 1, dtype=np.int32)
    np.cumsum(np.tile(lengths, n), out=key_offsets[1:])
    keys = pa.Array.from_buffers(kinds, n * k, [None, pa.py_buffer(key_offsets), pa.py_buffer(b"".join(names) * n)])
    props = pa.MapArray.from_arrays(_ints(np.arange(0, n * k + 1, k, dtype=np.int32), pa), keys, values)
    named = []
    for name in wanted:
        raw_name = name.encode("utf-8")
        if raw_name in names:
            j = names.index(raw_name)
            named.append(_interleaved(data, v_begin[j], v_len[j], pa, np, kinds))
        else:
            named.append(pa.nulls(n, kinds))
    return props, named


def _uniform_bounds(raw: Any, buf: Any, n: int, np: Any) -> Any:
    """The separator positions of ``raw``'s n records as (separator, record) rows, bounded by each
    record's start - 1 above and its end below (when it has no trailing separator); None unless every
    record has the same number of separators, alternating \\x01 \\x02, with nothing empty between."""
    offs = np.frombuffer(raw.buffers()[1], dtype=np.int32)[:n + 1].astype(np.int64)
    lo = int(offs[0])
    seg = buf[lo:int(offs[-1])]
    sep = np.flatnonzero((seg - np.uint8(1)) < 2) + lo  # \x01 and \x02 (0 wraps to 255)
    m = len(sep) // n
    if m == 0 or len(sep) != n * m:
        return None
    # positions as (separator, record): every pass below runs over rows of n contiguous numbers.
    # Over (record, separator) rows of m numbers numpy loops m at a time, slower and holding the
    # GIL throughout (it lets it go only for loops of 500 elements and more): that starved the
    # consumer's loop thread while the window's writer thread built a row group
    sep = np.ascontiguousarray(sep.reshape(n, m).T)
    start, end = offs[:-1], offs[1:]
    # exactly m separators in each record, in the order 1 2 1 2 ... (so each pair has one \x01)
    if not ((sep[0] >= start).all() and (sep[-1] < end).all()):
        return None
    kinds_seen = buf[sep]
    if not ((kinds_seen[0::2] == 1).all() and (kinds_seen[1::2] == 2).all()):
        return None
    trailing = m % 2 == 0
    if trailing and not (sep[-1] == end - 1).all():
        return None
    # every name and value between its separators (record ends count as separators) is not empty
    bounds = np.empty((m + 1 + (not trailing), n), dtype=np.int64)
    bounds[0] = start - 1
    bounds[1:m + 1] = sep
    if not trailing:
        bounds[-1] = end
    if not (np.diff(bounds, axis=0) > 1).all():
        return None
    return bounds


def _uniform_names(data: Any, buf: Any, bounds: Any, np: Any) -> tuple[list[bytes], Any, Any] | None:
    """The property names every record has in the same places (the last of a name given twice),
    with where each one's values begin and how long they are, as (name, record) rows; None when a
    name differs between records."""
    k = len(bounds) // 2  # pairs: bounds are (start - 1, \x01, \x02, \x01, ..., end or the last \x02)
    name_begin = bounds[0:2 * k:2] + 1
    name_end = bounds[1:2 * k + 1:2]
    value_end = bounds[2:2 * k + 2:2]
    widths = name_end[:, :1] - name_begin[:, :1]
    if not (name_end - name_begin == widths).all():
        return None
    names = []
    for j in range(k):
        if not _same_bytes(data, buf, name_begin[j], int(widths[j, 0]), np):
            return None
        names.append(buf[name_begin[j, 0]:name_end[j, 0]].tobytes())
    # a name given twice (a real 4.9.7 broker stores WAIT twice): the last one wins, kept where it
    # stands, as in the general path
    kept = [j for j, name in enumerate(names) if name not in names[j + 1:]]
    v_begin = name_end[kept] + 1  # (name, record)
    return [names[j] for j in kept], v_begin, value_end[kept] - v_begin


def _same_bytes(data: Any, buf: Any, pos: Any, width: int, np: Any) -> bool:
    """Whether the ``width`` bytes at each of ``pos`` are the same, 8 at a time (unaligned words)."""
    words = (width + 7) // 8
    if int(pos.max()) + 8 * words > len(buf):  # a word would read past the buffer: byte by byte
        rows = _windows(buf, width, np)[pos]
        return bool((rows == rows[0]).all())
    view = np.ndarray((len(buf) - 7,), dtype="<u8", buffer=data, strides=(1,))
    for w in range(words):
        got = view[pos + 8 * w]
        left = width - 8 * w
        if left < 8:
            got &= np.uint64((1 << (8 * left)) - 1)
        if not (got == got[0]).all():
            return False
    return True


def _split_properties(raw: Any, n: int, pa: Any, pc: Any, np: Any,
                      wanted: Sequence[str]) -> tuple[Any, list[Any]]:
    """``k\\x01v\\x02...`` strings -> a map array and the values of ``wanted`` names (null when absent)."""
    items = pc.split_pattern(raw, PROPERTY_SEP)
    flat = items.flatten()
    parent = _np_ints(pc.list_parent_indices(items), np)
    pairs = pc.split_pattern(flat, NAME_VALUE_SEP, max_splits=1)
    # a pair needs the separator and a non-empty name and value (string_to_properties)
    lengths = _np_ints(pc.list_value_length(pairs), np).astype(np.int64)
    ok = lengths == 2
    kv = pairs.flatten()
    # each pair contributes one or two strings; the name is first
    first = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    idx = first[ok]
    keys = kv.take(_ints(idx, pa))
    values = kv.take(_ints(idx + 1, pa))
    parent = parent[ok]
    nonempty = (_np_ints(pc.binary_length(keys), np) > 0) & (_np_ints(pc.binary_length(values), np) > 0)
    if not nonempty.all():
        sel = _ints(np.flatnonzero(nonempty), pa)
        keys, values, parent = keys.take(sel), values.take(sel), parent[nonempty]
    # the last of duplicate names wins (dict semantics); names are few, so count (record, name) pairs
    codes = pc.dictionary_encode(keys)
    code = _np_ints(codes.indices, np).astype(np.int64)
    width = len(codes.dictionary)
    if len(code):
        combined = parent.astype(np.int64) * width + code
        if n * width <= 1 << 16:
            dup = (np.bincount(combined, minlength=n * width) > 1).any()
        else:
            dup = len(np.unique(combined)) != len(combined)
        if dup:
            _, last_rev = np.unique(combined[::-1], return_index=True)
            last = np.sort(len(combined) - 1 - last_rev)
            sel = _ints(last, pa)
            keys, values, parent, code = keys.take(sel), values.take(sel), parent[last], code[last]
    counts = np.bincount(parent, minlength=n) if len(parent) else np.zeros(n, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    props = pa.MapArray.from_arrays(_ints(offsets, pa), keys, values)
    named = []
    names = codes.dictionary.to_pylist()
    for name in wanted:
        pos = np.full(n, -1, dtype=np.int64)
        if name in names:
            hit = np.flatnonzero(code == names.index(name))
            pos[parent[hit]] = hit
        named.append(values.take(_ints(pos, pa, valid=pos >= 0, np=np)))
    return props, named


# -- numpy <-> Arrow without pyarrow's conversion functions: pa.array(), pa.scalar() and to_numpy()
# import pandas (about 50 MB of RSS and a second of CPU) when it is installed, as it is with Airflow

def _ints(values: Any, pa: Any, *, valid: Any = None, np: Any = None) -> Any:
    """An Arrow int32/int64 array over a numpy array (nulls where ``valid`` is False)."""
    values = values if values.flags.c_contiguous else values.copy()
    kind = pa.int32() if values.dtype.itemsize == 4 else pa.int64()
    if values.dtype.itemsize not in (4, 8) or values.dtype.byteorder == ">":
        values = values.astype("<i8")
        kind = pa.int64()
    bitmap = None
    nulls = 0
    if valid is not None:
        nulls = int(len(valid) - valid.sum())
        if nulls:
            bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(kind, len(values), [bitmap, pa.py_buffer(values)], null_count=nulls)


def _bools(values: Any, pa: Any, np: Any) -> Any:
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(np.packbits(values, bitorder="little"))])


def _np_ints(arr: Any, np: Any) -> Any:
    """The values of an Arrow integer array without nulls, as numpy (zero-copy)."""
    width = arr.type.bit_width // 8
    data = np.frombuffer(arr.buffers()[1], dtype=f"<i{width}")
    return data[arr.offset:arr.offset + len(arr)]


def _strings(items: Sequence[str], pa: Any, np: Any) -> Any:
    return _binaries([s.encode("utf-8") for s in items], pa, np).cast(pa.string())


def _binaries(items: Sequence[bytes], pa: Any, np: Any) -> Any:
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in items], out=offsets[1:])
    kind, width = (pa.binary(), np.int32) if offsets[-1] < 2**31 else (pa.large_binary(), np.int64)
    arr = pa.Array.from_buffers(kind, len(items), [None, pa.py_buffer(offsets.astype(width)),
                                                   pa.py_buffer(b"".join(items))])
    return arr if kind == pa.binary() else arr.cast(pa.binary())


def string_column(value: str, n: int) -> pa.Array:
    """``value`` repeated ``n`` times as an Arrow string array (e.g. a constant ``window_id`` column)."""
    _Lazy.load()
    pa, np = _Lazy.pa, _Lazy.np
    raw = value.encode("utf-8")
    if n * len(raw) >= 2**31:  # beyond int32 offsets
        return _strings([value], pa, np).take(_ints(np.zeros(n, dtype=np.int32), pa))
    offsets = np.arange(0, (n + 1) * len(raw), len(raw), dtype=np.int32) if raw else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _map_strings(arr: Any, fn: Any, pa: Any, pc: Any) -> Any:
    """Apply ``fn`` to each distinct string of ``arr`` (topics: a handful per batch)."""
    enc = pc.dictionary_encode(arr)
    mapped = _strings([fn(s) for s in enc.dictionary.to_pylist()], pa, _Lazy.np)
    return mapped.take(enc.indices)


def offset_msg_ids(store_host: Any, clo: Any, n: int) -> pa.Array:
    """hex(storeHost ip + int32 port + int64 commitLogOffset), upper case, for every record
    (``store_host``: (n, 8) or (n, 20) uint8, or a list of rows when mixed; ``clo``: the raw
    big-endian commit-log offsets, (n, 8) uint8)."""
    _Lazy.load()
    pa, np = _Lazy.pa, _Lazy.np
    if isinstance(store_host, list):  # IPv4 and IPv6 store hosts mixed (never seen; kept simple)
        ids = [(bytes(h) + bytes(c)).hex().upper() for h, c in zip(store_host, clo, strict=True)]
        return _strings(ids, pa, np)
    raw = np.concatenate([store_host, clo], axis=1)
    width = raw.shape[1] * 2
    text = _Lazy.hex_table[raw].reshape(-1)
    offsets = np.arange(0, n * width + 1, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text)])
