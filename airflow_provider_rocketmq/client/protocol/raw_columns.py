"""Messages as columns with their properties kept as one raw string: cheap to build, complete.

`to_raw_record_batch` builds `raw_message_schema` columns from pulled batches: the
properties string as stored (``name\\x01value\\x02...``), the store host and the commit-log
offset instead of the columns `to_record_batch` derives from them (the properties map,
``tags``, ``keys``, ``msg_id``). Splitting the properties and formatting the message ids is
most of what building `MESSAGE_SCHEMA` columns costs, and the map column is the costliest
to encode in Parquet; a writer that only stores the messages skips both. `messages_from_raw`
derives the missing columns later, where the messages are read (the window's staged files
in the load's tasks): the result equals `to_record_batch` of the same batches.

numpy and pyarrow are imported on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .columnar import (
    _NAMED,
    ColumnBatch,
    _binaries,
    _body_column,
    _broker_column,
    _ints,
    _Lazy,
    _offset_msg_ids,
    _records,
    _rewrite_topics,
    message_schema,
    split_properties,
)
from .message import PROPERTY_RETRY_TOPIC

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["is_raw_schema", "messages_from_raw", "raw_message_schema", "to_raw_record_batch"]


def raw_message_schema() -> pa.Schema:
    """The raw layout's schema: `MESSAGE_SCHEMA`'s columns with ``store_host``, ``commit_log_offset``
    and ``properties_raw`` in place of ``msg_id``, ``tags``, ``keys`` and ``properties`` (built on first
    use: importing this module needs no pyarrow)."""
    global _SCHEMA
    if _SCHEMA is None:
        import pyarrow as pa

        fields = {f.name: f for f in message_schema()}
        _SCHEMA = pa.schema([
            fields["topic"], fields["broker"], fields["queue_id"], fields["queue_offset"],
            pa.field("store_host", pa.binary()),  # ip + port: 8 bytes (IPv4) or 20 (IPv6)
            pa.field("commit_log_offset", pa.int64()),
            pa.field("properties_raw", pa.string(), nullable=False),
            fields["born_timestamp"], fields["store_timestamp"], fields["reconsume_times"], fields["body"],
        ])
    return _SCHEMA


_SCHEMA: pa.Schema | None = None


def is_raw_schema(schema: pa.Schema) -> bool:
    """Whether ``schema`` has the raw layout's columns (else it is taken for `MESSAGE_SCHEMA`'s)."""
    return "properties_raw" in schema.names


def to_raw_record_batch(batches: Sequence[ColumnBatch]) -> pa.RecordBatch:
    """The messages of ``batches``, in order, as one `pyarrow.RecordBatch` with `raw_message_schema()`
    (topics rewritten by the pull filter as `to_record_batch` does)."""
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


def messages_from_raw(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A raw-layout batch as `MESSAGE_SCHEMA` columns, followed by ``batch``'s columns that neither
    schema names (e.g. a staged ``window_id``); a batch without ``properties_raw`` is returned as it is.

    Dictionary-encoded and large string/binary columns (as other readers may give them) are accepted.
    """
    if not is_raw_schema(batch.schema):
        return batch
    _Lazy.load()
    pa, pc = _Lazy.pa, _Lazy.pc
    n = batch.num_rows
    raw = _plain(batch.column(batch.schema.get_field_index("properties_raw")), pa.string())
    if raw.null_count:
        raw = pc.fill_null(raw, "")
    if raw.offset:  # the split reads the buffers from element 0
        raw = pa.concat_arrays([raw])
    props, (tags, keys, uniq, _retry) = split_properties(raw, n, _NAMED)
    msg_id = uniq
    if uniq.null_count:
        msg_id = pc.coalesce(uniq, _offset_ids(batch, n))
    derived = {"msg_id": msg_id, "tags": tags, "keys": keys, "properties": props}
    fields, arrays = [], []
    for f in message_schema():
        if f.name in derived:
            arrays.append(derived[f.name])
        else:
            arrays.append(_plain(batch.column(batch.schema.get_field_index(f.name)), f.type))
        fields.append(f)
    known = set(raw_message_schema().names)
    for f, col in zip(batch.schema, batch.columns, strict=True):
        if f.name not in known:
            fields.append(f)
            arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _plain(col: Any, typ: Any) -> Any:
    """``col`` as ``typ``: dictionaries decoded, large offsets narrowed, nothing else changed."""
    pa = _Lazy.pa
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    return col if col.type == typ else col.cast(typ)


def _offset_ids(batch: pa.RecordBatch, n: int) -> Any:
    """The offset message id of every row (store host + commit-log offset); null where either is."""
    pa, np = _Lazy.pa, _Lazy.np
    host = _plain(batch.column(batch.schema.get_field_index("store_host")), pa.binary())
    clo_col = batch.column(batch.schema.get_field_index("commit_log_offset"))
    valid = None
    if host.null_count or clo_col.null_count:
        valid = np.asarray(_Lazy.pc.and_(host.is_valid(), clo_col.is_valid()).to_numpy(zero_copy_only=False))
    clo_values = clo_col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    clo = np.ascontiguousarray(clo_values.astype(">i8")).view(np.uint8).reshape(n, 8)
    hosts: Any
    lengths = None if host.null_count else np.diff(np.frombuffer(host.buffers()[1], dtype=np.int32)[
        host.offset:host.offset + n + 1])
    if lengths is not None and n and (lengths == lengths[0]).all() and lengths[0] in (8, 20):
        first = int(np.frombuffer(host.buffers()[1], dtype=np.int32)[host.offset])
        width = int(lengths[0])
        hosts = np.frombuffer(host.buffers()[2], dtype=np.uint8)[first:first + n * width].reshape(n, width)
    else:
        hosts = [np.frombuffer(h or b"", dtype=np.uint8) for h in host.to_pylist()]
    ids = _offset_msg_ids(hosts, clo, n, pa, np)
    if valid is not None and not valid.all():
        ids = _Lazy.pc.if_else(pa.array(valid), ids, pa.nulls(n, pa.string()))
    return ids
