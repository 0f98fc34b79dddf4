"""Messages and their binary codecs (REFERENCE 2.7-2.8).

Stored-message record (pull bodies, VIEW_MESSAGE_BY_ID, CONSUME_MESSAGE_DIRECTLY),
big-endian, records concatenated::

    int32 storeSize | int32 magic 0xDAA320A7 | int32 bodyCRC | int32 queueId | int32 flag
    int64 queueOffset | int64 commitLogOffset | int32 sysFlag | int64 bornTimestamp
    bornHost (4+4, or 16+4 if sysFlag&0x10) | int64 storeTimestamp
    storeHost (4+4, or 16+4 if sysFlag&0x20) | int32 reconsumeTimes | int64 preparedTxOffset
    int32 bodyLen | body | int8 topicLen (int16 for magic V2) | topic | int16 propsLen | props

Send-batch item::

    int32 totalSize | int32 magic 0 | int32 bodyCRC 0 | int32 flag | int32 bodyLen | body
    int16 propsLen | props

Properties are ``name\\x01value`` joined by ``\\x02``. Decoding is lazy where it
is cheap to be: properties are parsed on first access, bodies inflated once.
"""

from __future__ import annotations

import binascii
import functools
import ipaddress
import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar, overload

from .errors import CompressionUnavailableError, ConfigError, MessageDecodeError

MAGIC_V1 = -626843481  # 0xDAA320A7 as int32
MAGIC_V2 = -626843477  # 0xDAA320AB (5.x, int16 topic length)
BLANK_MAGIC = -875286124  # 0xCBD43194

FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20
COMPRESSION_MASK = 0x700
COMPRESSION_LZ4 = 1 << 8
COMPRESSION_ZSTD = 2 << 8
COMPRESSION_ZLIB = 3 << 8

COMPRESS_OVER = 4 * 1024  # Java producers compress bodies above 4 KiB
MAX_PROPERTIES_LEN = 32767

NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"

# Property keys (MessageConst.java)
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CONSUME_START_TIME = "CONSUME_START_TIME"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_ON = "TRACE_ON"

# bornHost/storeHost as IPv4: one struct for the whole fixed prefix up to bodyLen.
_FIXED_V4 = struct.Struct(">iiiiiqqiq4siq4siiqi")
_HEAD = struct.Struct(">iiiiiqqiq")  # up to bornTimestamp; hosts vary after it
# What the decoder reads at once from an IPv4 record: storeSize, magic, queueId, queueOffset, sysFlag,
# reconsumeTimes, bodyLength (the pads skip what `MessageExt` parses from its header on first use)
_EAGER_V4 = struct.Struct(">ii4xi4xq8xi32xi8xi")
_TAIL = struct.Struct(">iqi")  # reconsumeTimes, preparedTransactionOffset, bodyLength (after the hosts)
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_H = struct.Struct(">h")
_B = struct.Struct(">b")


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode``: over UTF-16 code units, int32 wrap-around, signed."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h >= 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """The consume-queue tagsCode the broker stores for a message's TAGS."""
    return java_string_hash(tags) if tags else 0


def properties_to_string(props: Mapping[str, str]) -> str:
    """``k\\x01v\\x02...`` without the trailing separator (4.9.4+ form)."""
    return PROPERTY_SEP.join([f"{k}{NAME_VALUE_SEP}{v}" for k, v in props.items() if k and v is not None])


def string_to_properties(text: str) -> dict[str, str]:
    """Parse properties; accepts both trailing-separator forms; drops empty keys or values."""
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(PROPERTY_SEP):
        k, sep, v = item.partition(NAME_VALUE_SEP)
        if sep and k and v:
            out[k] = v
    return out


def _dotted(ip: bytes) -> str:
    return f"{ip[0]}.{ip[1]}.{ip[2]}.{ip[3]}"


def _host(ip: bytes, port: int) -> str:
    """``ip:port`` of 4 or 16 address bytes (IPv6 as ``[addr]:port``, written as ``inet_ntop`` does)."""
    if len(ip) == 4:
        return f"{_dotted(ip)}:{port}"
    # inet_ntop writes the IPv4 part of a mapped (::ffff:a.b.c.d) or compatible (::a.b.c.d) address dotted
    if ip[:10] == bytes(10) and ip[10:12] == b"\xff\xff":
        text = "::ffff:" + _dotted(ip[12:])
    elif ip[:12] == bytes(12) and ip[12:14] != bytes(2):
        text = "::" + _dotted(ip[12:])
    else:
        text = ipaddress.IPv6Address(ip).compressed
    return f"[{text}]:{port}"


@functools.lru_cache(maxsize=1024)  # a store writes the same few hosts into every record
def _host_bytes(host: str) -> bytes:
    """``ip:port`` -> ip bytes + int32 port (IPv6 as ``[addr]:port``; an unparsable ip as 127.0.0.1)."""
    ip, _, port = host.rpartition(":")
    try:
        raw = ipaddress.ip_address(ip.strip("[]")).packed
    except ValueError:
        raw = b"\x7f\x00\x00\x01"
    return raw + _I.pack(int(port or 0))


def make_offset_msg_id(store_host: str, commit_log_offset: int) -> str:
    """offsetMsgId: hex(storeHost ip + int32 port + int64 commitLogOffset), upper case."""
    return binascii.hexlify(_host_bytes(store_host) + _Q.pack(commit_log_offset)).decode().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """Inverse of make_offset_msg_id: (store host, commit-log offset)."""
    try:
        raw = binascii.unhexlify(msg_id)
    except (binascii.Error, ValueError):
        raise MessageDecodeError(f"msgId {msg_id!r} is not hex") from None
    if len(raw) == 16:
        return _host(raw[:4], _I.unpack_from(raw, 4)[0]), _Q.unpack_from(raw, 8)[0]
    if len(raw) == 28:
        return _host(raw[:16], _I.unpack_from(raw, 16)[0]), _Q.unpack_from(raw, 20)[0]
    raise MessageDecodeError(f"msgId {msg_id!r} has {len(raw)} bytes, expected 16 or 28")


def decompress(body: bytes, sys_flag: int) -> bytes:
    kind = sys_flag & COMPRESSION_MASK
    try:
        if kind in (0, COMPRESSION_ZLIB):
            return zlib.decompress(body)
        if kind == COMPRESSION_LZ4:
            try:
                import lz4.frame
            except ImportError:
                raise CompressionUnavailableError(
                    "message body is LZ4-compressed; install the 'lz4' package to read it") from None
            return bytes(lz4.frame.decompress(body))
        if kind == COMPRESSION_ZSTD:
            try:
                import zstandard
            except ImportError:
                raise CompressionUnavailableError(
                    "message body is ZSTD-compressed; install the 'zstandard' package to read it") from None
            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(body))
    except CompressionUnavailableError:
        raise
    except Exception as exc:
        raise MessageDecodeError(f"cannot decompress message body: {exc}") from None
    raise MessageDecodeError(f"unknown compression type {kind >> 8} in sysFlag {sys_flag}")


class Message:
    """A message to send: topic, body, and properties (tags and keys live there)."""

    __slots__ = ("body", "flag", "properties", "topic")

    def __init__(self, topic: str, body: bytes | str, *, tags: str | None = None,
                 keys: str | Iterable[str] | None = None, properties: Mapping[str, str] | None = None,
                 flag: int = 0, delay_level: int = 0) -> None:
        self.topic = topic
        if isinstance(body, str):
            self.body = body.encode("utf-8")
        elif isinstance(body, (bytes, bytearray, memoryview)):
            self.body = bytes(body)
        else:  # bytes(5) would silently be five zero bytes
            raise ConfigError("body", f"must be bytes or str, got {type(body).__name__}")
        self.flag = flag
        self.properties: dict[str, str] = {}
        if properties:
            for k, v in properties.items():
                if NAME_VALUE_SEP in k or PROPERTY_SEP in k or NAME_VALUE_SEP in str(v) \
                        or PROPERTY_SEP in str(v):
                    raise ConfigError("properties", f"property {k!r} contains a reserved separator character")
                self.properties[k] = str(v)
        if tags:
            self.properties[PROPERTY_TAGS] = tags
        if keys:
            self.properties[PROPERTY_KEYS] = keys if isinstance(keys, str) else " ".join(keys)
        if delay_level:
            self.properties[PROPERTY_DELAY] = str(delay_level)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, tags={self.tags!r}, keys={self.keys!r}, body={len(self.body)}B)"


def _host_lengths(sys_flag: int) -> tuple[int, int]:
    """Address bytes of the born and store hosts (16 for IPv6, 4 for IPv4) in a stored record."""
    return 16 if sys_flag & FLAG_BORNHOST_V6 else 4, 16 if sys_flag & FLAG_STOREHOST_V6 else 4


# Header fields a decoded `MessageExt` parses on first use, in the order of its `_hdr` tuple
_LAZY_FIELDS = ("store_size", "body_crc", "flag", "commit_log_offset", "born_timestamp", "_born_host",
                "store_timestamp", "_store_host", "prepared_transaction_offset")
_UNSET: Any = object()  # a field of a hand-built message that nobody assigned
_T = TypeVar("_T")


class _HeaderField(Generic[_T]):
    """A `MessageExt` field kept in its lazily parsed header tuple (`MessageExt._header`)."""

    __slots__ = ("index", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.index = _LAZY_FIELDS.index(name)

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _HeaderField[_T]: ...
    @overload
    def __get__(self, obj: MessageExt, owner: type[Any]) -> _T: ...

    def __get__(self, obj: MessageExt | None, owner: type[Any]) -> _T | _HeaderField[_T]:
        if obj is None:
            return self
        h = obj._hdr
        if h is None:
            h = obj._header()
        value = h[self.index]
        if value is _UNSET:
            raise AttributeError(f"{type(obj).__name__!r} object has no attribute {self.name!r}")
        return value  # type: ignore[no-any-return]  # the tuple holds each field's own type

    def __set__(self, obj: MessageExt, value: _T) -> None:
        # a new tuple, never an update in place: copies of a message may share the old one
        h = obj._header()
        obj._hdr = h[:self.index] + (value,) + h[self.index + 1:]


class MessageExt:
    """A stored message as pulled from a broker.

    Properties are parsed on first use, and so are the header fields a consumer rarely reads
    (store size, body CRC, flag, commit-log offset, timestamps, hosts, prepared-transaction
    offset): a decoded message keeps its record header as one bytes object until one of them is
    read or assigned. Every field can be assigned.
    """

    __slots__ = ("_hdr", "_head", "_properties", "_props_raw", "body", "broker_name", "queue_id", "queue_offset",
                 "reconsume_times", "sys_flag", "topic")

    # Declared for type checkers; set by decode_messages (no per-field __init__ on the hot path).
    queue_id: int
    queue_offset: int
    sys_flag: int
    reconsume_times: int
    body: bytes
    topic: str
    _props_raw: bytes
    _properties: dict[str, str] | None
    broker_name: str
    _head: bytes  # the record from storeSize up to the body, until `_hdr` is parsed from it
    _hdr: tuple[Any, ...] | None  # the _LAZY_FIELDS values, once parsed or assigned

    store_size = _HeaderField[int]("store_size")
    body_crc = _HeaderField[int]("body_crc")
    flag = _HeaderField[int]("flag")
    commit_log_offset = _HeaderField[int]("commit_log_offset")
    born_timestamp = _HeaderField[int]("born_timestamp")
    _born_host = _HeaderField["tuple[bytes, int] | str"]("_born_host")
    store_timestamp = _HeaderField[int]("store_timestamp")
    _store_host = _HeaderField["tuple[bytes, int] | str"]("_store_host")
    prepared_transaction_offset = _HeaderField[int]("prepared_transaction_offset")

    def __init__(self) -> None:
        self._properties: dict[str, str] | None = None
        self._props_raw = b""
        self._head = b""
        self._hdr = None
        self.broker_name = ""

    def _header(self) -> tuple[Any, ...]:
        """The lazily parsed header fields (parsed now if they were not yet)."""
        h = self._hdr
        if h is not None:
            return h
        head, self._head = self._head, b""
        if not head:  # built by hand: only what gets assigned
            h = (_UNSET,) * len(_LAZY_FIELDS)
        elif not self.sys_flag & 0x30:
            (store_size, _, body_crc, _, flag, _, commit_log_offset, _, born_ts, bip, bport, store_ts, sip, sport,
             _, prep, _) = _FIXED_V4.unpack_from(head)
            h = (store_size, body_crc, flag, commit_log_offset, born_ts, (bip, bport), store_ts, (sip, sport), prep)
        else:  # IPv6 hosts (the decoder checked that the whole header is there)
            (store_size, _, body_crc, _, flag, _, commit_log_offset, _, born_ts) = _HEAD.unpack_from(head)
            p = _HEAD.size
            blen, slen = _host_lengths(self.sys_flag)
            born = (head[p:p + blen], _I.unpack_from(head, p + blen)[0])
            p += blen + 4
            (store_ts,) = _Q.unpack_from(head, p)
            p += 8
            store = (head[p:p + slen], _I.unpack_from(head, p + slen)[0])
            p += slen + 4
            (_, prep, _) = _TAIL.unpack_from(head, p)
            h = (store_size, body_crc, flag, commit_log_offset, born_ts, born, store_ts, store, prep)
        self._hdr = h
        return h

    # lazily decoded parts ------------------------------------------------------
    @property
    def properties(self) -> dict[str, str]:
        p = self._properties
        if p is None:
            try:
                p = string_to_properties(self._props_raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise MessageDecodeError("message properties are not UTF-8") from None
            self._properties = p
        return p

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._properties = value

    @property
    def born_host(self) -> str:
        h = self._born_host
        return h if isinstance(h, str) else _host(h[0], h[1])

    @property
    def store_host(self) -> str:
        h = self._store_host
        return h if isinstance(h, str) else _host(h[0], h[1])

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def offset_msg_id(self) -> str:
        h = self._store_host
        raw = (h[0] + _I.pack(h[1])) if not isinstance(h, str) else _host_bytes(h)
        return binascii.hexlify(raw + _Q.pack(self.commit_log_offset)).decode().upper()

    @property
    def msg_id(self) -> str:
        """The client message id (UNIQ_KEY) when present, else the offsetMsgId (Java getMsgId)."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    def get_property(self, name: str, default: str | None = None) -> str | None:
        return self.properties.get(name, default)

    def __repr__(self) -> str:
        return (f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
                f"tags={self.tags!r}, reconsume_times={self.reconsume_times}, body={len(self.body)}B)")


def decode_messages(data: bytes, *, decompress_body: bool = True, broker_name: str = "") -> list[MessageExt]:
    """Decode a concatenation of stored-message records (a pull response body).

    ``broker_name`` (not part of the record) is stamped on every message. The fields a consumer
    needs (queue id and offset, sys flag, reconsume times, body, topic) are decoded here; the rest
    of each record's header is kept as bytes and parsed on first use (`MessageExt`).
    """
    return decode_messages_sized(data, decompress_body=decompress_body, broker_name=broker_name)[0]


def decode_messages_sized(data: bytes, *, decompress_body: bool = True,
                          broker_name: str = "") -> tuple[list[MessageExt], int]:
    """`decode_messages`, plus the summed length of the decoded bodies: what a push consumer's
    byte flow control counts, tallied here from the record headers rather than by a second pass
    over the messages."""
    body_bytes = 0
    out: list[MessageExt] = []
    append = out.append
    pos = 0
    end = len(data)
    eager = _EAGER_V4.unpack_from
    fixed_size = _EAGER_V4.size
    short = _H.unpack_from
    byte = _B.unpack_from
    new = MessageExt.__new__
    # the records of one pull share their topic: its name is decoded once, then compared as bytes
    topic_raw = b""
    topic = ""
    while pos < end:
        try:
            store_size, magic, queue_id, queue_offset, sys_flag, reconsume, body_len = eager(data, pos)
        except struct.error:  # fewer bytes left than any record holds
            raise _short_record(data, pos) from None
        rec_end = pos + store_size
        if store_size < fixed_size or rec_end > end or (magic != MAGIC_V1 and magic != MAGIC_V2):
            raise _bad_record(store_size, magic, pos, end)
        m = new(MessageExt)
        m._properties = None
        m._hdr = None
        m.broker_name = broker_name
        try:
            if not sys_flag & 0x30:
                p = pos + fixed_size
            else:  # an IPv6 host: the layout after bornTimestamp differs
                blen, slen = _host_lengths(sys_flag)
                p = pos + _HEAD.size + blen + 4 + 8 + slen + 4  # born host + port, store time, store host + port
                reconsume, _, body_len = _TAIL.unpack_from(data, p)
                p += 16
            m._head = data[pos:p]
            if body_len < 0 or p + body_len > rec_end:
                raise MessageDecodeError(f"body length {body_len} overruns the record at {pos}")
            body = data[p:p + body_len]
            body_bytes += body_len
            p += body_len
            v1 = magic == MAGIC_V1  # the topic's length is an int8 (magic v1) or an int16 (v2)
            (tlen,) = byte(data, p) if v1 else short(data, p)
            p += 1 if v1 else 2
            if tlen < 0 or p + tlen > rec_end:
                raise MessageDecodeError(f"topic length {tlen} overruns the record at {pos}")
            if tlen != len(topic_raw) or not data.startswith(topic_raw, p):
                topic_raw = data[p:p + tlen]
                topic = topic_raw.decode("utf-8")
            p += tlen
            (plen,) = short(data, p)
            p += 2
            if plen < 0 or p + plen > rec_end:
                raise MessageDecodeError(f"properties length {plen} overruns the record at {pos}")
            m._props_raw = data[p:p + plen]
        except struct.error:
            raise MessageDecodeError(f"truncated message record at {pos}") from None
        except UnicodeDecodeError:
            raise MessageDecodeError(f"message topic at {pos} is not UTF-8") from None
        if sys_flag & FLAG_COMPRESSED and decompress_body:
            body = decompress(body, sys_flag)
            body_bytes += len(body) - body_len
        m.queue_id = queue_id
        m.queue_offset = queue_offset
        m.sys_flag = sys_flag
        m.reconsume_times = reconsume
        m.body = body
        m.topic = topic
        append(m)
        pos = rec_end
    return out, body_bytes


def _short_record(data: bytes, pos: int) -> MessageDecodeError:
    """The error for a record at ``pos`` shorter than the fixed IPv4 prefix."""
    end = len(data)
    if end - pos < 4:
        return MessageDecodeError(f"{end - pos} trailing bytes after the last message")
    try:
        store_size = _HEAD.unpack_from(data, pos)[0]
    except struct.error:
        return MessageDecodeError("truncated message record header")
    return MessageDecodeError(f"message record size {store_size} at {pos} overruns the body ({end})")


def _bad_record(store_size: int, magic: int, pos: int, end: int) -> MessageDecodeError:
    """The error for a record whose size or magic code is wrong."""
    if store_size < _EAGER_V4.size or pos + store_size > end:
        return MessageDecodeError(f"message record size {store_size} at {pos} overruns the body ({end})")
    return MessageDecodeError(f"bad magic code {magic & 0xFFFFFFFF:#x} at {pos}")


def encode_stored_message(*, topic: str, body: bytes, properties: str | Mapping[str, str], queue_id: int,
                          queue_offset: int, commit_log_offset: int, born_timestamp: int, born_host: str,
                          store_timestamp: int, store_host: str, flag: int = 0, sys_flag: int = 0,
                          reconsume_times: int = 0, prepared_transaction_offset: int = 0) -> bytes:
    """Encode one stored-message record exactly as a broker's commit log holds it.

    ``body`` is the stored (possibly compressed) body; ``sys_flag`` must say so.
    """
    props = properties if isinstance(properties, str) else properties_to_string(properties)
    pbytes = props.encode("utf-8")
    tbytes = topic.encode("utf-8")
    if len(pbytes) > MAX_PROPERTIES_LEN:
        raise ValueError(f"properties of {len(pbytes)} bytes exceed {MAX_PROPERTIES_LEN}")
    born = _host_bytes(born_host)
    store = _host_bytes(store_host)
    if len(born) == 20:
        sys_flag |= FLAG_BORNHOST_V6
    if len(store) == 20:
        sys_flag |= FLAG_STOREHOST_V6
    v2 = len(tbytes) > 127
    magic = MAGIC_V2 if v2 else MAGIC_V1
    tlen = _H.pack(len(tbytes)) if v2 else bytes([len(tbytes)])
    crc = zlib.crc32(body) & 0x7FFFFFFF
    rest = b"".join([
        _I.pack(magic), _I.pack(crc), _I.pack(queue_id), _I.pack(flag), _Q.pack(queue_offset),
        _Q.pack(commit_log_offset), _I.pack(sys_flag), _Q.pack(born_timestamp), born,
        _Q.pack(store_timestamp), store, _I.pack(reconsume_times), _Q.pack(prepared_transaction_offset),
        _I.pack(len(body)), body, tlen, tbytes, _H.pack(len(pbytes)), pbytes,
    ])
    return _I.pack(len(rest) + 4) + rest


def encode_batch(messages: Iterable[Message]) -> bytes:
    """SEND_BATCH_MESSAGE body: one item per message (each carries its own properties)."""
    out = []
    for msg in messages:
        pbytes = properties_to_string(msg.properties).encode("utf-8")
        if len(pbytes) > MAX_PROPERTIES_LEN:
            raise ValueError(f"properties of {len(pbytes)} bytes exceed {MAX_PROPERTIES_LEN}")
        size = 4 + 4 + 4 + 4 + 4 + len(msg.body) + 2 + len(pbytes)
        out.append(struct.pack(">iiiii", size, 0, 0, msg.flag, len(msg.body)) + msg.body
                   + _H.pack(len(pbytes)) + pbytes)
    return b"".join(out)


class BatchItem:
    """One decoded SEND_BATCH_MESSAGE item (what a broker receives)."""

    __slots__ = ("body", "flag", "properties")

    def __init__(self, flag: int, body: bytes, properties: dict[str, str]) -> None:
        self.flag = flag
        self.body = body
        self.properties = properties


def decode_batch(data: bytes) -> list[BatchItem]:
    items: list[BatchItem] = []
    pos = 0
    end = len(data)
    try:
        while pos < end:
            size, _magic, _crc, flag, blen = struct.unpack_from(">iiiii", data, pos)
            if size < 22 or pos + size > end or blen < 0 or 20 + blen + 2 > size:
                raise MessageDecodeError(f"batch item of size {size} at {pos} overruns the body")
            body = data[pos + 20:pos + 20 + blen]
            (plen,) = _H.unpack_from(data, pos + 20 + blen)
            pstart = pos + 22 + blen
            if plen < 0 or pstart + plen > pos + size:
                raise MessageDecodeError(f"batch item properties overrun at {pos}")
            props = string_to_properties(data[pstart:pstart + plen].decode("utf-8"))
            items.append(BatchItem(flag, body, props))
            pos += size
    except struct.error:
        raise MessageDecodeError(f"truncated batch item at {pos}") from None
    except UnicodeDecodeError:
        raise MessageDecodeError(f"batch item properties at {pos} are not UTF-8") from None
    return items
