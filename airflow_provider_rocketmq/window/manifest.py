"""The window manifest (version 2): the one owner of the hand-off format from a window to the load.

A bounded window is handed to the Spark load as ``manifest.json`` plus, for a staged window, the
Parquet files it lists (an offsets window lists none: the load reads its ranges from the brokers).
This module holds the dataclasses, the atomic write, the read, the validation (`validate_manifest`)
and the staged Parquet schemas.

Staged files come in two layouts, told apart by their columns, read back by `staged_rows`:
``raw`` (`staged_file_schema`, what windows write since manifest version 2): the properties as
their stored string plus the store host and the commit-log offset; ``messages``
(`staged_schema`, version 1's only layout): the properties map, ``msg_id``, ``tags``, ``keys``.
Loads see every staged row in the ``messages`` layout. A version-1 manifest lists
``messages`` files only; a version-2 one either (its windows write ``raw`` ones). Version 2 exists
so that a loader of version 1, which cannot read ``raw`` files, refuses the manifest by its version
instead of failing on a missing column.

This module imports neither Airflow nor Spark (the Spark driver imports it);
pyarrow is imported lazily, so reading and validating a manifest works without it (only writing
Parquet and the row-count check need it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_rocketmq.client.protocol.errors import RocketMQError
from airflow_provider_rocketmq.window.staging import StagingLocation, fsync_dir, is_url

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_provider_rocketmq.client.protocol.message import MessageExt

MANIFEST_VERSION = 2
READABLE_VERSIONS = (1, 2)
MANIFEST_NAME = "manifest.json"
# how the window reaches Spark: "staging" (Parquet files listed in the manifest) or "offsets" (only
# the queue ranges; Spark reads them from the brokers through the rocketmq data source). A manifest
# without the field is a staging one.
HANDOFF_STAGING = "staging"
HANDOFF_OFFSETS = "offsets"
HANDOFFS = (HANDOFF_STAGING, HANDOFF_OFFSETS)
_CHUNK = 1 << 20


class ManifestError(RocketMQError, ValueError):
    """A manifest (or a file it lists) is malformed or does not match; ``field`` names what is wrong."""

    def __init__(self, field: str, message: str, *, path: str | os.PathLike[str] | None = None) -> None:
        where = f"{os.fspath(path)}: " if path is not None else ""
        super().__init__(f"{where}{field}: {message}")
        self.field = field
        self.path = None if path is None else os.fspath(path)


@dataclass(frozen=True)
class QueueRange:
    """The part of one queue a window covers: offsets ``[start_offset, end_offset)`` except ``gaps``,
    ``[lo, hi)`` ranges inside it that another window holds (committed by another member while this
    one ran, or gone): the Spark loader must not count those as loaded by this window."""

    broker: str
    queue_id: int
    start_offset: int
    end_offset: int
    high_water: int
    messages: int
    gaps: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class FileEntry:
    """One staged Parquet file; ``path`` is relative to the manifest's directory."""

    path: str
    rows: int
    bytes: int
    sha256: str


@dataclass
class WindowManifest:
    """Everything the Spark load needs to know about one staged window."""

    window_id: str
    topic: str
    consumer_group: str
    expression: str = "*"
    namesrv: str = ""
    queues: list[QueueRange] = field(default_factory=list)
    files: list[FileEntry] = field(default_factory=list)
    messages: int = 0
    bytes: int = 0
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    version: int = MANIFEST_VERSION
    handoff: str = HANDOFF_STAGING

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, *, path: str | os.PathLike[str] | None = None) -> WindowManifest:
        """Build from parsed JSON, checking the schema (types and required keys) only."""
        if not isinstance(data, dict):
            raise ManifestError("manifest", "expected a JSON object", path=path)
        version = _get(data, "version", int, path)
        if version not in READABLE_VERSIONS:
            raise ManifestError("version", f"unsupported manifest version {version!r} "
                                f"(this provider reads {', '.join(map(str, READABLE_VERSIONS))})", path=path)
        queues_raw = _get(data, "queues", list, path)
        files_raw = _get(data, "files", list, path)
        queues = [QueueRange(
            broker=_get(q, "broker", str, path, at),
            queue_id=_get(q, "queue_id", int, path, at),
            start_offset=_get(q, "start_offset", int, path, at),
            end_offset=_get(q, "end_offset", int, path, at),
            high_water=_get(q, "high_water", int, path, at),
            messages=_get(q, "messages", int, path, at),
            gaps=_gaps(q, path, at),
        ) for q, at in _objects(queues_raw, "queues", path)]
        files = [FileEntry(
            path=_get(f, "path", str, path, at),
            rows=_get(f, "rows", int, path, at),
            bytes=_get(f, "bytes", int, path, at),
            sha256=_get(f, "sha256", str, path, at),
        ) for f, at in _objects(files_raw, "files", path)]
        return cls(
            version=version,
            window_id=_get(data, "window_id", str, path),
            topic=_get(data, "topic", str, path),
            consumer_group=_get(data, "consumer_group", str, path),
            expression=_get(data, "expression", str, path),
            created_at=_get(data, "created_at", str, path),
            namesrv=_get(data, "namesrv", str, path),
            queues=queues,
            files=files,
            messages=_get(data, "messages", int, path),
            bytes=_get(data, "bytes", int, path),
            handoff=_get(data, "handoff", str, path) if "handoff" in data else HANDOFF_STAGING,
        )


def _objects(items: list[Any], field: str, path: Any) -> Iterator[tuple[dict[str, Any], str]]:
    """Each element of a list of JSON objects with its field prefix (``queues[3].``)."""
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ManifestError(f"{field}[{i}]", "expected an object", path=path)
        yield item, f"{field}[{i}]."


def _gaps(q: Mapping[str, Any], path: Any, prefix: str) -> tuple[tuple[int, int], ...]:
    """A queue's optional ``gaps``: a list of ``[lo, hi]`` integer pairs (absent in older manifests)."""
    raw = q.get("gaps", [])
    if not isinstance(raw, list):
        raise ManifestError(prefix + "gaps", f"expected a list, got {type(raw).__name__}", path=path)
    out = []
    for i, g in enumerate(raw):
        if not (isinstance(g, list) and len(g) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in g)):
            raise ManifestError(f"{prefix}gaps[{i}]", "expected [lo, hi] (integers)", path=path)
        out.append((g[0], g[1]))
    return tuple(out)


def _get(d: Mapping[str, Any], key: str, typ: type, path: Any, prefix: str = "") -> Any:
    if key not in d:
        raise ManifestError(prefix + key, "missing", path=path)
    value = d[key]
    # bool is an int subclass in Python; a JSON true is never a valid offset or count
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise ManifestError(prefix + key, f"expected {typ.__name__}, got {type(value).__name__}", path=path)
    return value


def new_window_id() -> str:
    """A window id that is safe as a directory and partition value (``YYYYmmddTHHMMSSZ-<hex>``)."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:12]


# --- durability helpers ---------------------------------------------------------------------------

def _atomic_write(target: Path, write: Any) -> None:
    """Write through ``write(tmp_path)`` into a temp file next to ``target``, fsync, rename, fsync dir."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's content, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


# --- manifest I/O -----------------------------------------------------------------------------------

def _split_manifest_location(path: str | os.PathLike[str], storage_options: Mapping[str, Any] | None,
                              ) -> tuple[StagingLocation, str]:
    """``.../manifest.json`` or a window directory (local or URL) -> (the directory, the file name)."""
    text = os.fspath(path)
    if is_url(text):
        head, _, tail = text.rstrip("/").rpartition("/")
        if tail.endswith(".json"):
            return StagingLocation(head, storage_options), tail
        return StagingLocation(text, storage_options), MANIFEST_NAME
    p = Path(text.removeprefix("file://"))
    if p.is_dir():
        return StagingLocation(p), MANIFEST_NAME
    return StagingLocation(p.parent), p.name


def manifest_url(path: str | os.PathLike[str]) -> str:
    """The manifest file a path or URL designates (a window directory -> its ``manifest.json``)."""
    location, name = _split_manifest_location(path, None)
    return location.url(name)


def staged_file_urls(manifest_path: str | os.PathLike[str], manifest: WindowManifest) -> list[str]:
    """Where each file of ``manifest`` lives: its ``path`` resolved against the manifest's directory
    (local paths stay paths; remote ones are URLs with the manifest's scheme)."""
    location, _ = _split_manifest_location(manifest_path, None)
    return [location.url(f.path) for f in manifest.files]


def write_manifest(manifest: WindowManifest, path: str | os.PathLike[str], *,
                   storage_options: Mapping[str, Any] | None = None) -> Path | str:
    """Validate (without re-hashing files) and write ``manifest`` atomically to ``path``.

    ``path`` may be a directory (local or URL), in which case ``manifest.json`` inside it is
    used. Locally: temp file + fsync + rename + directory fsync; on an object store the
    object appears only once its upload completed. Returns the manifest's `Path` (local) or URL.
    """
    location, name = _split_manifest_location(path, storage_options)
    target = location.url(name)
    validate_manifest(manifest, location, verify_files=False, path=target)
    text = json.dumps(manifest.to_dict(), indent=2, sort_keys=True) + "\n"
    location.make_dirs()
    location.write_bytes(name, text.encode("utf-8"))
    return location.path / name if location.local else target


def read_manifest(path: str | os.PathLike[str], *, verify_files: bool = True,
                  storage_options: Mapping[str, Any] | None = None) -> WindowManifest:
    """Read and validate a manifest (path, window directory or URL); with ``verify_files`` also
    check every file's size, sha256 and rows."""
    location, name = _split_manifest_location(path, storage_options)
    where = location.url(name)
    try:
        raw = location.read_bytes(name)
    except FileNotFoundError:
        raise ManifestError("manifest", "file not found", path=where) from None
    except OSError as exc:
        raise ManifestError("manifest", f"cannot read: {exc}", path=where) from exc
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError("manifest", f"not valid JSON ({exc})", path=where) from None
    manifest = WindowManifest.from_dict(data, path=where)
    validate_manifest(manifest, location, verify_files=verify_files, path=where)
    return manifest


def validate_manifest(manifest: WindowManifest, base_dir: str | os.PathLike[str] | StagingLocation, *,
                      verify_files: bool = True, path: str | os.PathLike[str] | None = None) -> None:
    """Check the manifest's invariants; raise `ManifestError` naming the first bad field.

    Invariants: non-empty ids; per queue ``0 <= start <= end <= high_water`` and
    ``messages <= end - start`` (each offset is staged once); no queue twice;
    ``messages`` = sum of queue messages = sum of file rows; file paths relative
    and inside ``base_dir``; ``handoff`` is ``staging`` or ``offsets``, and an offsets
    manifest stages nothing (no files, every count 0). With ``verify_files``: every file
    exists with the recorded size and SHA-256, and (when pyarrow is importable) the
    recorded rows.
    """
    location = base_dir if isinstance(base_dir, StagingLocation) else StagingLocation(base_dir)
    where = path if path is not None else location.location
    _check_header(manifest, where)
    seen: set[tuple[str, int]] = set()
    for i, q in enumerate(manifest.queues):
        _check_queue(q, f"queues[{i}]", seen, where)
    _check_totals(manifest, where)
    paths: set[str] = set()
    layouts: list[str] = []
    for i, fe in enumerate(manifest.files):
        _check_file_entry(fe, f"files[{i}]", paths, where)
        if verify_files:
            layout = _verify_file(location, fe, f"files[{i}]", where, manifest.version)
            if layout is not None and layouts and layout != layouts[0]:  # a reader takes one layout per window
                raise ManifestError(f"files[{i}].path", f"{fe.path} has the {layout} layout, files[0] the "
                                    f"{layouts[0]} one: a window's files share one layout", path=where)
            layouts.append(layout or "")


def _check_header(manifest: WindowManifest, where: Any) -> None:
    if manifest.version not in READABLE_VERSIONS:
        raise ManifestError("version", f"unsupported manifest version {manifest.version!r}", path=where)
    for name in ("window_id", "topic", "consumer_group"):
        if not getattr(manifest, name):
            raise ManifestError(name, "must not be empty", path=where)
    if "/" in manifest.window_id or "\\" in manifest.window_id or manifest.window_id in (".", ".."):
        raise ManifestError("window_id", f"{manifest.window_id!r} is not usable as a directory name",
                            path=where)
    for name in ("messages", "bytes"):
        if getattr(manifest, name) < 0:
            raise ManifestError(name, "must be >= 0", path=where)


def _check_queue(q: QueueRange, f: str, seen: set[tuple[str, int]], where: Any) -> None:
    """One queue's range; ``seen``: the queues before it (one is added)."""
    if not q.broker:
        raise ManifestError(f + ".broker", "must not be empty", path=where)
    if q.queue_id < 0:
        raise ManifestError(f + ".queue_id", "must be >= 0", path=where)
    if (q.broker, q.queue_id) in seen:
        raise ManifestError(f, f"queue {q.broker}:{q.queue_id} listed twice", path=where)
    seen.add((q.broker, q.queue_id))
    if q.start_offset < 0:
        raise ManifestError(f + ".start_offset", "must be >= 0", path=where)
    if q.end_offset < q.start_offset:
        raise ManifestError(f + ".end_offset", f"{q.end_offset} < start_offset {q.start_offset}", path=where)
    if q.high_water < q.end_offset:
        raise ManifestError(f + ".high_water", f"{q.high_water} < end_offset {q.end_offset}", path=where)
    prev = q.start_offset
    for j, (lo, hi) in enumerate(q.gaps):
        if not prev <= lo < hi <= q.end_offset:
            raise ManifestError(f"{f}.gaps[{j}]", f"[{lo}, {hi}) must be non-empty, sorted, disjoint and "
                                f"inside [{q.start_offset}, {q.end_offset})", path=where)
        prev = hi
    own = q.end_offset - q.start_offset - sum(hi - lo for lo, hi in q.gaps)
    if not 0 <= q.messages <= own:
        raise ManifestError(f + ".messages", f"{q.messages} outside 0..{own} "
                            "(end_offset - start_offset - gaps)", path=where)


def _check_totals(manifest: WindowManifest, where: Any) -> None:
    if manifest.handoff not in HANDOFFS:
        raise ManifestError("handoff", f"must be one of {', '.join(HANDOFFS)}, got {manifest.handoff!r}", path=where)
    if manifest.handoff == HANDOFF_OFFSETS and (manifest.files or manifest.messages or manifest.bytes
                                                or any(q.messages for q in manifest.queues)):
        raise ManifestError("handoff", "an offsets hand-off stages nothing: files must be empty and messages, "
                            "bytes and every queue's messages 0", path=where)
    queue_total = sum(q.messages for q in manifest.queues)
    if queue_total != manifest.messages:
        raise ManifestError("messages", f"{manifest.messages} != sum of queue messages {queue_total}",
                            path=where)
    row_total = sum(fe.rows for fe in manifest.files)
    if row_total != manifest.messages:
        raise ManifestError("messages", f"{manifest.messages} != sum of file rows {row_total}", path=where)


def _check_file_entry(fe: FileEntry, f: str, paths: set[str], where: Any) -> None:
    """One file's entry (not the file); ``paths``: those of the entries before it (one is added)."""
    rel = Path(fe.path)
    if not fe.path or rel.is_absolute() or ".." in rel.parts or "://" in fe.path:
        raise ManifestError(f + ".path", f"{fe.path!r} must be a relative path inside the window "
                            "directory", path=where)
    if fe.path in paths:
        raise ManifestError(f + ".path", f"{fe.path!r} listed twice", path=where)
    paths.add(fe.path)
    if fe.rows < 0 or fe.bytes < 0:
        raise ManifestError(f + (".rows" if fe.rows < 0 else ".bytes"), "must be >= 0", path=where)
    if len(fe.sha256) != 64 or any(c not in "0123456789abcdef" for c in fe.sha256):
        raise ManifestError(f + ".sha256", "must be 64 lowercase hex digits", path=where)


def _verify_file(location: StagingLocation, fe: FileEntry, f: str, where: Any, version: int) -> str | None:
    """Check one listed file against its entry; its layout (None when pyarrow is missing)."""
    try:
        size = location.size(fe.path)
    except FileNotFoundError:
        raise ManifestError(f + ".path", f"{fe.path} does not exist", path=where) from None
    if size != fe.bytes:
        raise ManifestError(f + ".bytes", f"{fe.path} has {size} bytes, manifest says {fe.bytes}", path=where)
    digest = location.sha256(fe.path)
    if digest != fe.sha256:
        raise ManifestError(f + ".sha256", f"{fe.path} checksum mismatch (file {digest[:12]}..., "
                            f"manifest {fe.sha256[:12]}...)", path=where)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None  # the checksum already pins the content; the row count is the writer's bookkeeping
    try:
        with location.open_read(fe.path) as fh:
            meta = pq.read_metadata(fh)
            names = meta.schema.to_arrow_schema().names
    except (pa.ArrowException, OSError) as exc:  # ArrowInvalid and friends for non-Parquet bytes
        raise ManifestError(f + ".path", f"{fe.path} is not a readable Parquet file ({exc})",
                            path=where) from None
    if meta.num_rows != fe.rows:
        raise ManifestError(f + ".rows", f"{fe.path} has {meta.num_rows} rows, manifest says {fe.rows}",
                            path=where)
    layouts = {"messages": STAGED_COLUMNS} if version == 1 else {"raw": STAGED_FILE_COLUMNS,
                                                                 "messages": STAGED_COLUMNS}
    for layout, cols in layouts.items():
        if set(cols) <= set(names):
            return layout
    missing = "; ".join(f"{name}: {', '.join(c for c in cols if c not in names)}" for name, cols in layouts.items())
    raise ManifestError(f + ".path", f"{fe.path} is not a staged file of manifest version {version} "
                        f"(columns missing for the layout {missing})", path=where)


# --- staged Parquet ---------------------------------------------------------------------------------

# the columns loads see (the ``messages`` layout: `MESSAGE_SCHEMA` + ``window_id``)
STAGED_COLUMNS = ("topic", "broker", "queue_id", "queue_offset", "msg_id", "tags", "keys", "properties",
                  "born_timestamp", "store_timestamp", "reconsume_times", "body", "window_id")
# the columns windows write (the ``raw`` layout: `raw_message_schema()` + ``window_id``)
STAGED_FILE_COLUMNS = ("topic", "broker", "queue_id", "queue_offset", "store_host", "commit_log_offset",
                       "properties_raw", "born_timestamp", "store_timestamp", "reconsume_times", "body", "window_id")


def staged_schema() -> pa.Schema:
    """The staged rows as loads see them: `MESSAGE_SCHEMA` (client/protocol/columnar.py) + ``window_id``
    (the ``messages`` layout); `STAGED_SCHEMA` is the same object."""
    global _SCHEMA
    if _SCHEMA is None:
        import pyarrow as pa

        from airflow_provider_rocketmq.client.protocol.columnar import message_schema

        _SCHEMA = message_schema().append(pa.field("window_id", pa.string(), nullable=False))
    return _SCHEMA


def staged_file_schema() -> pa.Schema:
    """The Parquet schema windows write (the ``raw`` layout): `raw_message_schema()`
    (client/protocol/columnar.py) + ``window_id``."""
    global _FILE_SCHEMA
    if _FILE_SCHEMA is None:
        import pyarrow as pa

        from airflow_provider_rocketmq.client.protocol.columnar import raw_message_schema

        _FILE_SCHEMA = raw_message_schema().append(pa.field("window_id", pa.string(), nullable=False))
    return _FILE_SCHEMA


_SCHEMA: pa.Schema | None = None
_FILE_SCHEMA: pa.Schema | None = None


def __getattr__(name: str) -> Any:
    # STAGED_SCHEMA is built on first access so that importing this module never needs pyarrow
    if name == "STAGED_SCHEMA":
        return staged_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def staged_rows(data: pa.RecordBatch | pa.Table) -> Any:
    """Rows read from a staged file of either layout, in the ``messages`` layout (`staged_schema`'s
    columns, in its order; a ``raw`` batch's message ids, tags, keys and properties map derived from
    its properties string). A batch gives a batch, a table a table."""
    import pyarrow as pa

    from airflow_provider_rocketmq.client.protocol.raw_columns import is_raw_schema, messages_from_raw

    if isinstance(data, pa.RecordBatch):
        return messages_from_raw(data)
    if not is_raw_schema(data.schema):
        return data
    batches = [messages_from_raw(b) for b in data.to_batches()]
    return pa.Table.from_batches(batches, schema=staged_rows_schema(data.schema))


def staged_rows_schema(file_schema: pa.Schema) -> pa.Schema:
    """The schema `staged_rows` gives for a file of ``file_schema`` (either layout)."""
    import pyarrow as pa

    from airflow_provider_rocketmq.client.protocol.columnar import message_schema
    from airflow_provider_rocketmq.client.protocol.raw_columns import is_raw_schema

    if not is_raw_schema(file_schema):
        return file_schema
    known = set(staged_file_schema().names) - {"window_id"}
    return pa.schema([*message_schema(), *(f for f in file_schema if f.name not in known)])


def staged_row(msg: MessageExt, window_id: str) -> dict[str, Any]:
    """The staged row of one pulled message (body as decoded by the client, i.e. decompressed)."""
    return {
        "topic": msg.topic, "broker": msg.broker_name, "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset, "msg_id": msg.msg_id, "tags": msg.tags, "keys": msg.keys,
        "properties": dict(msg.properties), "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp, "reconsume_times": msg.reconsume_times,
        "body": bytes(msg.body), "window_id": window_id,
    }


def write_parquet_file(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike[str],
                       base_dir: str | os.PathLike[str] | None = None, *,
                       compression: str = "zstd") -> FileEntry:
    """Write row dicts (keys of `STAGED_COLUMNS`) to one Parquet file durably; return its entry.

    The file is written to a temp name, fsynced, renamed into place and the
    directory fsynced, so a crash never leaves a half file under the final name.
    ``path`` in the returned entry is relative to ``base_dir`` (default: the file's
    directory), as the manifest wants. A missing optional column value is null;
    a missing or wrongly typed required one raises `ManifestError`.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = staged_schema()
    cols: dict[str, list[Any]] = {name: [] for name in STAGED_COLUMNS}
    n = 0
    for i, row in enumerate(rows):
        for name in STAGED_COLUMNS:
            value = row.get(name)
            if isinstance(value, dict) and name == "properties":
                value = list(value.items())  # pyarrow's map type takes (key, value) pairs
            cols[name].append(value)
        n = i + 1
    try:
        table = pa.Table.from_arrays([pa.array(cols[f.name], type=f.type) for f in schema], schema=schema)
        table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        raise ManifestError("rows", f"cannot stage rows: {exc}", path=path) from None
    for f in schema:
        if not f.nullable and table.column(f.name).null_count:
            raise ManifestError(f"rows.{f.name}", "required column has null values", path=path)
    target = Path(path)
    _atomic_write(target, lambda tmp: pq.write_table(table, tmp, compression=compression))
    base = Path(base_dir) if base_dir is not None else target.parent
    rel = os.path.relpath(target.resolve(), Path(base).resolve())
    return FileEntry(path=Path(rel).as_posix(), rows=n, bytes=target.stat().st_size,
                     sha256=file_sha256(target))
