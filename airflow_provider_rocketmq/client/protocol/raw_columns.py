"""Columns of the raw layout (properties kept as their stored string) back to `MESSAGE_SCHEMA`.

`to_raw_record_batch` (client/protocol/columnar.py) builds the raw layout from pulled batches:
the properties string as stored (``name\\x01value\\x02...``), the store host and the commit-log
offset instead of the columns `to_record_batch` derives from them (the properties map, ``tags``,
``keys``, ``msg_id``). Splitting the properties and formatting the message ids is most of what
building `MESSAGE_SCHEMA` columns costs, and the map column is the costliest to encode in
Parquet; a writer that only stores the messages (the window's) skips both. `messages_from_raw`
derives the missing columns where the messages are read (the load's tasks): the result equals
`to_record_batch` of the same batches.

numpy and pyarrow are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .columnar import message_schema, offset_msg_ids, raw_message_schema, split_properties
from .message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["is_raw_schema", "messages_from_raw"]


def is_raw_schema(schema: pa.Schema) -> bool:
    """Whether ``schema`` has the raw layout's columns (else it is taken for `MESSAGE_SCHEMA`'s)."""
    return "properties_raw" in schema.names


def messages_from_raw(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A raw-layout batch as `MESSAGE_SCHEMA` columns, followed by ``batch``'s columns that neither
    schema names (e.g. a staged ``window_id``); a batch without ``properties_raw`` is returned as it is.

    Dictionary-encoded and large string/binary columns (as other readers may give them) are accepted.
    """
    if not is_raw_schema(batch.schema):
        return batch
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    raw = _plain(batch.column(batch.schema.get_field_index("properties_raw")), pa.string())
    if raw.null_count:
        raw = pc.fill_null(raw, "")
    if raw.offset:  # the split reads the buffers from element 0
        raw = pa.concat_arrays([raw])
    props, (tags, keys, uniq) = split_properties(raw, n, (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY))
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
    import pyarrow as pa

    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    return col if col.type == typ else col.cast(typ)


def _offset_ids(batch: pa.RecordBatch, n: int) -> Any:
    """The offset message id of every row (store host + commit-log offset); null where either is."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    host = _plain(batch.column(batch.schema.get_field_index("store_host")), pa.binary())
    clo_col = batch.column(batch.schema.get_field_index("commit_log_offset"))
    valid = None
    if host.null_count or clo_col.null_count:
        valid = np.asarray(pc.and_(host.is_valid(), clo_col.is_valid()).to_numpy(zero_copy_only=False))
    clo_values = clo_col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    clo = np.ascontiguousarray(clo_values.astype(">i8")).view(np.uint8).reshape(n, 8)
    hosts: Any
    offsets = np.frombuffer(host.buffers()[1], dtype=np.int32)[host.offset:host.offset + n + 1]
    lengths = None if host.null_count else np.diff(offsets)
    if lengths is not None and n and (lengths == lengths[0]).all() and lengths[0] in (8, 20):
        width = int(lengths[0])
        hosts = np.frombuffer(host.buffers()[2], dtype=np.uint8)[int(offsets[0]):int(offsets[0]) + n * width]
        hosts = hosts.reshape(n, width)
    else:
        hosts = [np.frombuffer(h or b"", dtype=np.uint8) for h in host.to_pylist()]
    ids = offset_msg_ids(hosts, clo, n)
    if valid is not None and not valid.all():
        ids = pc.if_else(pa.array(valid), ids, pa.nulls(n, pa.string()))
    return ids
