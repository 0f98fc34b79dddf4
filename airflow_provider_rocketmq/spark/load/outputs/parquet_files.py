"""Writing a Spark partition's rows as Parquet files with pyarrow (runs inside Spark tasks).

Shared by the Parquet kinds: one file per (task attempt, window id), rolled over every
`ROWS_PER_FILE` rows, named ``window_id=<id>/part-<task_tag>-<n>.parquet`` under the load's
staging prefix. The ``window_id`` column is not stored in the file: it is the Hive
partition directory, as Spark's ``partitionBy`` writes it (readers get it back from the path).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote

from .base import DataFile, batches_by_window

if TYPE_CHECKING:
    import pyarrow as pa

ROWS_PER_FILE = 1_000_000  # readers parallelise by file; a task's share of a big window is split
PARTITION_COLUMN = "window_id"
# columns whose values are (nearly) all distinct: a dictionary would hold every value, costing a hash per
# value and, below its 1 MiB page limit, more bytes than plain values (offsets load, 100-byte messages:
# ~20 % less writer CPU and ~25 % smaller files without them)
PLAIN_COLUMNS = frozenset({"queue_offset", "msg_id", "born_timestamp", "store_timestamp",
                           "properties.key_value.value"})  # values hold UNIQ_KEY


def partition_dir(window_id: str) -> str:
    """Hive-style directory of one window id; special characters %-escaped as Spark does."""
    return f"{PARTITION_COLUMN}={quote(window_id, safe=' ')}"


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """Parquet column paths of ``schema``'s leaves but `PLAIN_COLUMNS`: what ``use_dictionary`` is given."""
    import pyarrow as pa

    def leaves(name: str, typ: pa.DataType) -> list[str]:
        if pa.types.is_struct(typ):
            return [p for f in typ for p in leaves(f"{name}.{f.name}", f.type)]
        if pa.types.is_map(typ):
            return [f"{name}.key_value.key", *leaves(f"{name}.key_value.value", typ.item_type)]
        if pa.types.is_list(typ) or pa.types.is_large_list(typ):
            return leaves(f"{name}.list.element", typ.value_type)
        return [name]

    return [p for f in schema for p in leaves(f.name, f.type) if p not in PLAIN_COLUMNS]


def write_partition(batches: Iterable[pa.RecordBatch], task_tag: str,
                    open_file: Callable[[str], IO[bytes]], finish: Callable[[IO[bytes]], None] | None = None,
                    rows_per_file: int = ROWS_PER_FILE) -> list[DataFile]:
    """Write ``batches`` through ``open_file(relative_path)`` (a binary file object the caller's
    filesystem provides); ``finish(f)`` runs before each file is closed (e.g. fsync). Returns one
    `DataFile` per file, ``path`` relative to the staging prefix."""
    import pyarrow.parquet as pq

    out: list[DataFile] = []
    open_: dict[str, tuple[str, IO[bytes], Any, int]] = {}  # window -> (path, file, writer, rows)
    counter = 0

    def close(window_id: str) -> None:
        path, fh, writer, rows = open_.pop(window_id)
        writer.close()
        size = fh.tell()
        if finish is not None:
            finish(fh)
        fh.close()
        out.append(DataFile(path, rows, size, window_id))

    try:
        for window_id, batch in batches_by_window(batches, PARTITION_COLUMN):
            data = batch.drop_columns([PARTITION_COLUMN])
            if window_id not in open_:
                path = f"{partition_dir(window_id)}/part-{task_tag}-{counter:05d}.parquet"
                counter += 1
                fh = open_file(path)
                writer = pq.ParquetWriter(fh, data.schema, compression="snappy",
                                          use_dictionary=dictionary_columns(data.schema))
                open_[window_id] = (path, fh, writer, 0)
            path, fh, writer, rows = open_[window_id]
            writer.write_batch(data)
            open_[window_id] = (path, fh, writer, rows + data.num_rows)
            if rows + data.num_rows >= rows_per_file:
                close(window_id)
        for window_id in list(open_):
            close(window_id)
    except BaseException:
        for _, fh, _, _ in open_.values():
            # an object store's buffered upload is dropped; a local file stays, listed by no commit
            discard = getattr(fh, "discard", None)
            if discard is not None:
                discard()
            else:
                fh.close()
        raise
    return out


def fsync_file(fh: IO[bytes]) -> None:
    fh.flush()
    os.fsync(fh.fileno())
