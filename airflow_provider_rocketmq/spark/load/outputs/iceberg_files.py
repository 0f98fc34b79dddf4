"""Data files of an Iceberg load: written by Spark tasks, described to Iceberg on the driver.

Task side (`IcebergTaskWriter`, a `TaskWriter` run by spark/load/outputs/tasks.py): each task casts
its Arrow batches to the table's column types with the table's Parquet field ids (so every
Iceberg reader resolves columns by id, whatever their names become), splits them by window id
and by the table's partition spec, and writes Parquet files through the table's FileIO
(``pyiceberg.io``: local disk, ``s3://``, ``gs://``, ``abfs://``, ``hdfs://``...) where the
table's location provider puts data files. When that FileIO is pyiceberg's ``PyArrowFileIO`` (the
default), the driver resolves its pyarrow filesystem and the tasks write through that same
filesystem object (`_ArrowFiles`): importing ``pyiceberg.io.pyarrow`` cost a fresh Python worker
~1.7 CPU-s here (it imports ``pyarrow.dataset``, which imports pandas), about twice the time this
writer takes to encode 500,000 100-byte rows. Data files go to
``<data path>/<partition path>/<load_id>-<task tag>-<n>-<random>.parquet``. The partition
source values and spec id go into the file's Parquet key-value metadata. It returns one
`DataFile` descriptor per file (absolute path, rows, bytes, window id): rows never pass
through the driver. A task that fails removes the files it started (best effort).

Driver side (`iceberg_data_files`): reads each file's footer (one small read per file) for the
column statistics Iceberg keeps in manifests and for the partition values, and builds
pyiceberg ``DataFile``s for one snapshot (spark/load/outputs/iceberg_commit.py).

A file no snapshot references (a killed driver, a failed or speculative task attempt, a load
that lost a conflict) is invisible to every Iceberg reader; it stays as an orphan file under
the table's data path until it is removed (docs/airflow.md, "Iceberg table output").
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from .base import DataFile

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile as IcebergDataFile
    from pyiceberg.partitioning import PartitionKey, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.types import IcebergType

# the loader's columns, in the order the files hold them
COLUMNS = ("topic", "broker", "queue_id", "queue_offset", "msg_id", "tags", "keys", "properties",
           "born_timestamp", "store_timestamp", "reconsume_times", "body", "window_id")
ROW_GROUP_BYTES = 64 << 20  # Arrow bytes buffered per open file before a row group is written
TASK_BUFFER_BYTES = 128 << 20  # ... and for all open files of a task (many windows in one load)
DEFAULT_TARGET_FILE_BYTES = 512 << 20  # Iceberg's write.target-file-size-bytes default
# Parquet key-value metadata the driver reads back
META_PARTITION = b"rocketmq.partition-source"
META_SPEC_ID = b"rocketmq.spec-id"
FOOTER_READERS = 8  # threads reading footers on the driver


# --- Arrow schema with Iceberg field ids ----------------------------------------------------------

def _id(field_id: int) -> dict[str, str]:
    return {"PARQUET:field_id": str(field_id)}


def _arrow_type(typ: IcebergType) -> pa.DataType:
    import pyarrow as pa
    from pyiceberg.types import BinaryType, IntegerType, LongType, MapType, StringType

    if isinstance(typ, MapType):
        return pa.map_(pa.field("key", _arrow_type(typ.key_type), nullable=False, metadata=_id(typ.key_id)),
                       pa.field("value", _arrow_type(typ.value_type), nullable=not typ.value_required,
                                metadata=_id(typ.value_id)))
    simple = {StringType: pa.string(), LongType: pa.int64(), IntegerType: pa.int32(), BinaryType: pa.binary()}
    for kind, arrow in simple.items():
        if isinstance(typ, kind):
            return arrow
    raise TypeError(f"no Arrow type for {typ}")  # iceberg_table.check_table lets no other type through


def arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema of the loader's columns as the table types them, with Parquet field ids."""
    import pyarrow as pa

    fields = []
    for name in COLUMNS:
        f = schema.find_field(name)
        fields.append(pa.field(name, _arrow_type(f.field_type), nullable=not f.required, metadata=_id(f.field_id)))
    return pa.schema(fields)


# --- partitioning ---------------------------------------------------------------------------------

class _Partitioner:
    """Splits batches by window id and the partition spec's transforms (computed with pyarrow)."""

    def __init__(self, schema: Schema, spec: PartitionSpec) -> None:
        self.schema = schema
        self.spec = spec
        self.fields = [(pf, schema.find_column_name(pf.source_id),
                        pf.transform.pyarrow_transform(schema.find_type(pf.source_id))) for pf in spec.fields]

    def split(self, batch: pa.RecordBatch) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...], pa.RecordBatch]]:
        """(window id + partition values, one row's partition source values, rows) per group."""
        import pyarrow as pa
        import pyarrow.compute as pc

        keys = [batch.column("window_id")] + [fn(batch.column(source)) for _, source, fn in self.fields]
        names = [f"k{i}" for i in range(len(keys))]
        if all(len(pc.unique(k)) == 1 for k in keys):  # the usual case: one window, one partition
            groups = [tuple(k[0].as_py() for k in keys)]
        else:
            groups = [tuple(row[n] for n in names) for row in
                      pa.table(dict(zip(names, keys, strict=True))).group_by(names, use_threads=False).aggregate([]).to_pylist()]
        for values in groups:
            part = batch
            if len(groups) > 1:
                mask = None
                for k, v in zip(keys, values, strict=True):
                    m = pc.is_null(k) if v is None else pc.fill_null(pc.equal(k, pa.scalar(v, k.type)), False)
                    mask = m if mask is None else pc.and_(mask, m)
                part = batch.filter(mask)
            sources = tuple(part.column(source)[0].as_py() for _, source, _ in self.fields)
            yield values, sources, part

    def key(self, sources: Sequence[Any]) -> PartitionKey | None:
        from pyiceberg.partitioning import PartitionFieldValue, PartitionKey

        if not self.fields:
            return None
        return PartitionKey(field_values=[PartitionFieldValue(pf, v) for (pf, _, _), v in zip(self.fields, sources, strict=True)],
                            partition_spec=self.spec, schema=self.schema)


# --- task side ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class IcebergTaskWriter:
    """Writes a task's rows as data files of one load (pickled into the Spark tasks: the table's
    location, properties, schema and spec, and only the FileIO properties of its catalog)."""

    load_id: str
    location: str
    table_properties: dict[str, str]
    io_properties: dict[str, str]
    schema_json: str
    spec_json: str
    spec_id: int
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
    arrow_files: _ArrowFiles | None = None  # the FileIO's pyarrow filesystem, when it has one

    @classmethod
    def of(cls, table: Table, load_id: str, io_properties: dict[str, str]) -> IcebergTaskWriter:
        from pyiceberg.io import load_file_io
        from pyiceberg.table.locations import load_location_provider

        props = dict(table.metadata.properties)
        target = int(props.get("write.target-file-size-bytes", DEFAULT_TARGET_FILE_BYTES))
        location = table.metadata.location
        io = load_file_io({**props, **io_properties}, location)  # the FileIO the tasks would load
        sample = load_location_provider(location, props).new_data_location("probe.parquet")
        return cls(load_id, location, props, io_properties, table.schema().model_dump_json(),
                   table.spec().model_dump_json(), table.spec().spec_id, target, _ArrowFiles.of(io, sample))

    def file_io(self) -> FileIO | _ArrowFiles:
        """What the task writes, sizes and deletes files through."""
        if self.arrow_files is not None:
            return self.arrow_files
        from pyiceberg.io import load_file_io

        return load_file_io({**self.table_properties, **self.io_properties}, self.location)

    def write(self, batches: Iterable[pa.RecordBatch], task_tag: str) -> list[DataFile]:
        files = _TaskFiles(self, task_tag)
        try:
            for batch in batches:
                if batch.num_rows:
                    files.write(batch)
            return files.close()
        except BaseException:
            files.abort()
            raise

    def __repr__(self) -> str:  # the FileIO properties may hold credentials
        return f"IcebergTaskWriter(load_id={self.load_id!r}, location={self.location!r})"


@dataclass
class _OpenFile:
    path: str
    window_id: str
    sources: tuple[Any, ...]
    stream: Any
    writer: Any
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_bytes: int = 0
    written_bytes: int = 0
    rows: int = 0


class _TaskFiles:
    """The data files of one task attempt."""

    def __init__(self, plan: IcebergTaskWriter, task_tag: str) -> None:
        from pyiceberg.partitioning import PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.table.locations import load_location_provider

        self.plan = plan
        self.task_tag = task_tag
        self.schema = Schema.model_validate_json(plan.schema_json)
        self.arrow = arrow_schema(self.schema)
        self.partitioner = _Partitioner(self.schema, PartitionSpec.model_validate_json(plan.spec_json))
        self.io = plan.file_io()
        self.locations = load_location_provider(plan.location, plan.table_properties)
        codec = plan.table_properties.get("write.parquet.compression-codec", "zstd")
        level = plan.table_properties.get("write.parquet.compression-level")
        self.parquet_options: dict[str, Any] = {
            "compression": "none" if codec == "uncompressed" else codec,
            "compression_level": int(level) if level else None}
        self.open: dict[tuple[Any, ...], _OpenFile] = {}
        self.done: list[DataFile] = []
        self.started: list[str] = []

    def write(self, batch: pa.RecordBatch) -> None:
        batch = batch.select(list(COLUMNS)).cast(self.arrow)
        for values, sources, part in self.partitioner.split(batch):
            f = self.open.get(values) or self._start(values, sources)
            f.pending.append(part)
            f.pending_bytes += part.nbytes
            f.rows += part.num_rows
            if f.pending_bytes >= ROW_GROUP_BYTES:
                self._flush(f)
                if f.written_bytes >= self.plan.target_file_bytes:
                    self._finish(values)
            if sum(o.pending_bytes for o in self.open.values()) >= TASK_BUFFER_BYTES:
                self._flush(max(self.open.values(), key=lambda o: o.pending_bytes))

    def _start(self, values: tuple[Any, ...], sources: tuple[Any, ...]) -> _OpenFile:
        import pyarrow.parquet as pq

        name = f"{self.plan.load_id}-{self.task_tag}-{len(self.started):05d}-{uuid.uuid4().hex[:8]}.parquet"
        path = self.locations.new_data_location(name, self.partitioner.key(sources))
        self.started.append(path)
        stream = self.io.new_output(path).create(overwrite=False)
        meta = {META_PARTITION: json.dumps(list(sources)).encode(), META_SPEC_ID: str(self.plan.spec_id).encode()}
        writer = pq.ParquetWriter(stream, self.arrow.with_metadata(meta), **self.parquet_options)
        f = self.open[values] = _OpenFile(path, str(values[0]), sources, stream, writer)
        return f

    def _flush(self, f: _OpenFile) -> None:
        import pyarrow as pa

        if f.pending:
            f.writer.write_table(pa.Table.from_batches(f.pending, schema=f.writer.schema))
            f.written_bytes += f.pending_bytes
            f.pending, f.pending_bytes = [], 0

    def _finish(self, values: tuple[Any, ...]) -> None:
        f = self.open.pop(values)
        self._flush(f)
        f.writer.close()
        f.stream.close()  # the upload completes here (object stores): the file is durable
        self.done.append(DataFile(f.path, f.rows, len(self.io.new_input(f.path)), f.window_id))

    def close(self) -> list[DataFile]:
        for values in list(self.open):
            self._finish(values)
        return self.done

    def abort(self) -> None:
        """Remove every file this attempt started (they would be orphans: no commit lists them)."""
        for f in self.open.values():
            with contextlib.suppress(Exception):  # best effort: the file is deleted next
                f.writer.close()
            with contextlib.suppress(Exception):
                f.stream.close()
        self.open.clear()
        delete_files(self.io, self.started)


def _arrow_path(location: str) -> tuple[str, str, str] | None:
    """(scheme, netloc, filesystem path) as ``PyArrowFileIO.parse_location`` gives them for a URL
    with a scheme; None for a bare path (`_ArrowFiles.of` checks both agree on the table's)."""
    uri = urlparse(location)
    if len(uri.scheme) < 2:  # a bare path, or a Windows drive letter
        return None
    if uri.scheme in ("hdfs", "viewfs"):
        return uri.scheme, uri.netloc, uri.path
    return uri.scheme, uri.netloc, f"{uri.netloc}{uri.path}"


@dataclass(frozen=True)
class _ArrowFiles:
    """The calls `_TaskFiles` makes on a ``PyArrowFileIO`` (``new_output(..).create``, ``len(new_input(..))``,
    ``delete``), made on the pyarrow filesystem that FileIO resolved on the driver for the table's data
    location; the same filesystem object, options and checks, without importing ``pyiceberg.io.pyarrow``
    in the task. A location on another scheme or host goes through a FileIO loaded as before."""

    scheme: str
    netloc: str
    fs: Any  # pyarrow.fs.FileSystem (pickles with its options)
    local: bool  # pyiceberg's local filesystem creates parent directories first
    buffer_size: int
    io_properties: dict[str, str] = field(repr=False)  # for locations elsewhere; may hold credentials

    @classmethod
    def of(cls, io: FileIO, sample_location: str) -> _ArrowFiles | None:
        from pyiceberg.io.pyarrow import BUFFER_SIZE, ONE_MEGABYTE, PyArrowFileIO

        ours = _arrow_path(sample_location)
        if type(io) is not PyArrowFileIO or ours is None or io.parse_location(sample_location, io.properties) != ours:
            return None  # another FileIO (py-io-impl, fsspec...) or a path form we do not map: the FileIO
        fs = io.fs_by_scheme(ours[0], ours[1])
        local = type(fs).__name__ == "PyArrowLocalFileSystem"
        return cls(ours[0], ours[1], fs, local, int(io.properties.get(BUFFER_SIZE, ONE_MEGABYTE)), dict(io.properties))

    def _path(self, location: str) -> str | None:
        parsed = _arrow_path(location)
        if parsed is None or parsed[:2] != (self.scheme, self.netloc):
            return None
        return parsed[2]

    def _other(self, location: str) -> FileIO:
        from pyiceberg.io import load_file_io

        return load_file_io(self.io_properties, location)

    def _file(self, location: str, method: str) -> _ArrowFile | Any:
        path = self._path(location)
        return getattr(self._other(location), method)(location) if path is None else _ArrowFile(self, location, path)

    def new_output(self, location: str) -> _ArrowFile | Any:
        return self._file(location, "new_output")

    def new_input(self, location: str) -> _ArrowFile | Any:
        return self._file(location, "new_input")

    def delete(self, location: str) -> None:
        path = self._path(location)
        if path is None:
            self._other(location).delete(location)
            return
        self.fs.delete_file(path)  # a missing file: FileNotFoundError (pyarrow maps ENOENT / S3's 404)


@dataclass(frozen=True)
class _ArrowFile:
    files: _ArrowFiles
    location: str
    path: str

    def _info(self) -> Any:
        from pyarrow.fs import FileType

        info = self.files.fs.get_file_info(self.path)
        if info.type == FileType.NotFound:
            raise FileNotFoundError(f"Cannot get file info, file not found: {self.location}")
        return info

    def __len__(self) -> int:
        return int(self._info().size)

    def create(self, overwrite: bool = False) -> Any:
        if not overwrite:
            with contextlib.suppress(FileNotFoundError):
                self._info()
                raise FileExistsError(f"Cannot create file, already exists: {self.location}")
        if self.files.local:
            self.files.fs.create_dir(os.path.dirname(self.path), recursive=True)
        return self.files.fs.open_output_stream(self.path, buffer_size=self.files.buffer_size)


def delete_files(io: FileIO | _ArrowFiles, paths: Iterable[str]) -> list[str]:
    """Delete ``paths`` (best effort); returns those that could not be deleted."""
    left = []
    for path in paths:
        try:
            io.delete(path)
        except FileNotFoundError:
            pass
        except Exception:
            left.append(path)
    return left


# --- driver side ----------------------------------------------------------------------------------

def _footer(io: FileIO, path: str) -> pq.FileMetaData:
    import pyarrow.parquet as pq

    with io.new_input(path).open() as fh:
        return pq.read_metadata(fh)


def iceberg_data_files(metadata: TableMetadata, io: FileIO, files: Sequence[DataFile]) -> list[IcebergDataFile]:
    """pyiceberg ``DataFile``s (record counts, column statistics, partition) of the files tasks wrote."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile as IcebergDataFile
    from pyiceberg.manifest import DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    schema = metadata.schema()
    stats_plan = compute_statistics_plan(schema, metadata.properties)
    id_mapping = parquet_path_to_id_mapping(schema)
    specs = metadata.specs()
    with ThreadPoolExecutor(max_workers=min(FOOTER_READERS, max(1, len(files)))) as pool:
        footers = list(pool.map(lambda f: _footer(io, f.path), files))
    out = []
    for f, footer in zip(files, footers, strict=True):
        kv = footer.metadata or {}
        spec_id = int(kv.get(META_SPEC_ID, b"0"))
        key = _Partitioner(schema, specs[spec_id]).key(json.loads(kv.get(META_PARTITION, b"[]")))
        if footer.num_rows != f.rows:
            raise ValueError(f"{f.path}: {footer.num_rows} rows in the file, {f.rows} reported by its task")
        stats = data_file_statistics_from_parquet_metadata(footer, stats_plan, id_mapping)
        out.append(IcebergDataFile.from_args(
            _table_format_version=metadata.format_version, content=DataFileContent.DATA, file_path=f.path,
            file_format=FileFormat.PARQUET, partition=key.partition if key is not None else Record(),
            file_size_in_bytes=f.bytes, sort_order_id=None, spec_id=spec_id, equality_ids=None,
            key_metadata=None, **stats.to_serialized_dict()))
    return out
