"""The object-store kind: a Parquet dataset on S3, GCS or Azure Blob, through fsspec.

Layout under the output URL (the same as a local output's, without lock files)::

    <url>/window_id=<id>/part-<load_id>-<n>.parquet          published rows
    <url>/_rocketmq_ledger/<seq:010d>.json                   one entry per committed load
    <url>/_rocketmq_loads/<load_id>/window_id=<id>/part-...  a load's rows before publication

**Commit point.** A load commits by creating ledger entry ``seq`` *if absent*: one request
that the store executes atomically — S3 ``PutObject`` with ``If-None-Match: *`` (s3fs),
GCS ``ifGenerationMatch=0`` (gcsfs), Azure Blob ``overwrite=False`` (adlfs), all reached as
fsspec's ``pipe_file(..., mode="create")``. Whoever creates ``seq`` first wins; the other
reads it, raises `LedgerConflict` if its ranges meet its own, else tries ``seq + 1``. A
filesystem without such a request is refused (`ConfigError`); before the first commit
`validate` also *probes* the store (create the same object twice: the second must fail),
which catches S3-compatible stores that ignore ``If-None-Match``. A store that honours it but
not atomically (check-then-write under concurrency) cannot be detected from outside.

**No locks.** Nothing a crash leaves can block the output. A load's liveness is unknown, so
an uncommitted load is discarded only once it is older than ``abandon_after`` seconds (its id
carries its start time), and only after an *abort entry* naming it is committed to the ledger:
a load checks every entry after its base before its own commit succeeds, so a load that was
declared abandoned can never commit afterwards (it fails with `LedgerConflict`, exit 3).

**What readers see.** Rows are written under ``_rocketmq_loads/`` (readers skip ``_``
names), committed, then *published*: each file is copied (server-side, one atomic object
creation per file) to its final name, then the load's staging prefix is deleted. Copies are
idempotent and the committed entry lists them, so a crash during publication is finished by
the next load or `recover` of the output, before it plans. Hence a reader of the published
dataset (``window_id=*/part-*.parquet``) sees only rows of committed loads, each file whole,
each row at most once; between a crash during publication and the next load of the output it
may see only part of the last committed load's files (never a duplicate). The ledger lists
every committed file, so a reader that needs whole loads only can read the entries' ``path``
(published) files of loads whose staging prefix is gone.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, TYPE_CHECKING, Any

from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.spark.load import crash_points
from airflow_provider_rocketmq.spark.load.ledger import (
    ENTRY_RE,
    LEDGER_DIR,
    LOAD_ID_RE,
    LOADS_DIR,
    CommitOutcomeUnknown,
    Ledger,
    LedgerConflict,
    LedgerEntry,
    LedgerError,
    OffsetRanges,
    PublishedFile,
    entry_name,
    new_load_id,
)

from .base import DataFile, OutputState
from .parquet_files import write_partition

if TYPE_CHECKING:
    import pyarrow as pa

KIND = "objectstore"
DEFAULT_ABANDON_AFTER = 6 * 3600.0  # seconds: far longer than any load should run

# fsspec filesystems whose pipe_file(mode="create") is one atomic conditional request
_EXCLUSIVE_CREATE = {
    "s3fs.core.S3FileSystem": "S3 PutObject If-None-Match: *",
    "gcsfs.core.GCSFileSystem": "GCS ifGenerationMatch=0",
    "adlfs.spec.AzureBlobFileSystem": "Azure Blob upload overwrite=False",
}
_SUPPORTED = "s3:// (s3fs), gs:// (gcsfs), abfs:// or az:// (adlfs), or a local or mounted directory"


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__name__}"


def exclusive_create_method(fs_class: type) -> str | None:
    """How instances of ``fs_class`` create an object only if absent, atomically; None if they cannot."""
    for cls in fs_class.__mro__:
        if _class_name(cls) in _EXCLUSIVE_CREATE:
            return _EXCLUSIVE_CREATE[_class_name(cls)]
    return None


def filesystem_class(url: str) -> type:
    """fsspec's filesystem class for ``url``'s protocol, not instantiated (`ConfigError` if unknown
    or its package is missing)."""
    protocol = url.split("://", 1)[0]
    try:
        from fsspec import get_filesystem_class
    except ImportError:  # pragma: no cover - fsspec comes with the spark and airflow extras
        raise ConfigError("--output", f"{url}: an object store output needs fsspec") from None
    try:
        return get_filesystem_class(protocol)  # type: ignore[no-any-return]  # fsspec is untyped
    except (ImportError, ValueError) as exc:
        raise ConfigError("--output", f"{url}: no filesystem for {protocol}:// ({exc}); "
                          f"supported: {_SUPPORTED}") from None


def _in_flight_conflict(exc: BaseException) -> bool:
    return not isinstance(exc, FileExistsError) and "ConditionalRequestConflict" in str(exc)


def _redact(text: str, options: Mapping[str, Any]) -> str:
    for value in options.values():
        if isinstance(value, str) and len(value) >= 4:
            text = text.replace(value, "***")
    return text


@dataclass(frozen=True)
class ObjectStoreTaskWriter:
    """Writes a task's rows under the load's staging prefix through fsspec (in the executor)."""

    protocol: str
    staging: str  # the load's staging prefix, without protocol
    storage_options: dict[str, Any] = field(repr=False)

    def write(self, batches: Iterable[pa.RecordBatch], task_tag: str) -> list[DataFile]:
        import fsspec

        fs = fsspec.filesystem(self.protocol, **self.storage_options)

        def open_file(rel: str) -> IO[bytes]:
            # a buffered upload: the object appears whole when the file closes, or never
            return fs.open(f"{self.staging}/{rel}", "wb")  # type: ignore[no-any-return]  # fsspec is untyped

        return write_partition(batches, task_tag, open_file)


class _NothingLeft(Exception):
    """Every load an abort entry was to name committed first."""


class ObjectStoreParquetOutput:
    """A ledger-managed Parquet dataset on an object store (see the module docstring)."""

    kind = KIND

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 abandon_after: float | None = None) -> None:
        self.url = url.rstrip("/")
        self.protocol = self.url.split("://", 1)[0]
        self.storage_options = dict(storage_options or {})
        self.abandon_after = DEFAULT_ABANDON_AFTER if abandon_after is None else abandon_after
        self._fs: Any = None
        self._root = ""
        self._entries: dict[int, LedgerEntry] = {}  # entries never change once created

    # -- the filesystem ----------------------------------------------------------------------------
    @property
    def fs(self) -> Any:
        if self._fs is None:
            try:
                from fsspec.core import url_to_fs
            except ImportError:  # pragma: no cover - fsspec comes with the spark and airflow extras
                raise ConfigError("--output", f"{self.url}: an object store output needs fsspec") from None
            try:
                self._fs, self._root = url_to_fs(self.url, **self.storage_options)
            except (ImportError, ValueError, TypeError, OSError) as exc:
                raise ConfigError("--output", f"{self.url}: {_redact(str(exc), self.storage_options)} "
                                  f"(install the filesystem's package: s3fs, gcsfs or adlfs)") from None
            self._root = self._root.rstrip("/")
        return self._fs

    @property
    def root(self) -> str:
        """The output's path on its filesystem (no protocol)."""
        _ = self.fs
        return self._root

    def _path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    @property
    def ledger_dir(self) -> str:
        return self._path(LEDGER_DIR)

    @property
    def loads_dir(self) -> str:
        return self._path(LOADS_DIR)

    def _ls(self, path: str) -> list[str]:
        self.fs.invalidate_cache(path)  # listings are cached by s3fs/gcsfs: the ledger must be fresh
        try:
            return [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False)]
        except FileNotFoundError:
            return []

    def _create(self, path: str, data: bytes) -> None:
        """Create ``path`` holding ``data`` if it does not exist (`FileExistsError` if it does).

        S3 answers 409 ConditionalRequestConflict while another conditional write of the same key
        is in flight; that request changed nothing, so it is retried (bounded, jittered)."""
        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

        for attempt in Retrying(retry=retry_if_exception(_in_flight_conflict), stop=stop_after_attempt(6),
                                wait=wait_random_exponential(multiplier=0.2, max=3), reraise=True):
            with attempt:
                self.fs.pipe_file(path, data, mode="create")

    # -- validation --------------------------------------------------------------------------------
    def validate(self) -> None:
        cls = filesystem_class(self.url)
        method = exclusive_create_method(cls)
        if method is None:
            raise ConfigError("--output", f"{self.url}: {self.protocol}:// ({_class_name(cls)}) has no atomic "
                              "create-if-absent through fsspec, which the ledger's commit needs (no lock files "
                              f"are used); supported: {_SUPPORTED}")
        try:
            names = self._ls(self.root)
        except Exception as exc:
            raise ConfigError("--output", f"{self.url}: cannot list the output: {type(exc).__name__}: "
                              f"{_redact(str(exc), self.storage_options)}") from None
        if names and LEDGER_DIR not in names:
            others = sorted(n for n in names if n != LOADS_DIR)
            if others:
                raise LedgerError("--output", f"{self.url} holds {others[0]!r} but no {LEDGER_DIR}/: not "
                                     "an output of this loader; load into a new prefix")
        self._probe(method)

    def _probe(self, method: str) -> None:
        probe = f"{self.ledger_dir}/.probe-{uuid.uuid4().hex}"
        try:
            self._create(probe, b"probe\n")
        except Exception as exc:
            raise ConfigError("--output", f"{self.url}: cannot create objects under {LEDGER_DIR}/: "
                              f"{type(exc).__name__}: {_redact(str(exc), self.storage_options)}") from None
        try:
            try:
                self._create(probe, b"again\n")
            except FileExistsError:
                return
            except Exception as exc:
                raise ConfigError("--output", f"{self.url}: the create-if-absent request ({method}) failed: "
                                  f"{type(exc).__name__}: {_redact(str(exc), self.storage_options)}") from None
            raise ConfigError("--output", f"{self.url}: the store overwrote an existing object despite the "
                              f"create-if-absent condition ({method}): it cannot commit the ledger atomically "
                              "(an S3-compatible store that ignores If-None-Match?)")
        finally:
            with contextlib.suppress(OSError):
                self.fs.rm(probe)

    # -- the ledger ------------------------------------------------------------------------------
    def _entry_path(self, seq: int) -> str:
        return f"{self.ledger_dir}/{entry_name(seq)}"

    def _parse_entry(self, seq: int, body: bytes) -> LedgerEntry:
        where = f"{self.url}/{LEDGER_DIR}/{entry_name(seq)}"
        try:
            entry = LedgerEntry.from_dict(json.loads(body), where)
        except (ValueError, UnicodeDecodeError) as exc:
            raise LedgerError(where, f"not valid JSON ({exc})") from None
        if entry.seq != seq:
            raise LedgerError(where, f"seq {entry.seq} does not match the name")
        self._entries[seq] = entry
        return entry

    def _read_new_entry(self, seq: int) -> LedgerEntry:
        """Entry ``seq``, which another load may have created after this one's last listing."""
        if seq in self._entries:
            return self._entries[seq]
        path = self._entry_path(seq)
        # s3fs answers cat_file from a cached listing of the ledger when it has one: a listing
        # taken before the other load created this entry would say it does not exist
        self.fs.invalidate_cache(path)
        return self._parse_entry(seq, self.fs.cat_file(path))

    def read(self) -> Ledger:
        seqs = sorted(int(m.group(1)) for n in self._ls(self.ledger_dir) if (m := ENTRY_RE.match(n)))
        for i, seq in enumerate(seqs, start=1):
            if seq != i:
                raise LedgerError(f"{self.url}/{LEDGER_DIR}", f"entry {entry_name(i)} is missing (next is {seq})")
        # every load reads the whole ledger: the entries this process has not seen are fetched
        # concurrently (one GET each, sizes from the fresh listing), not one round trip after another
        missing = [s for s in seqs if s not in self._entries]
        if missing:
            bodies = self.fs.cat([self._entry_path(s) for s in missing])  # a list in: a dict out
            by_name = {k.rstrip("/").rsplit("/", 1)[-1]: v for k, v in bodies.items()}
            for s in missing:
                self._parse_entry(s, by_name[entry_name(s)])
        return Ledger(self.url, tuple(self._entries[s] for s in seqs))

    def _append(self, seq: int, make: Any, *, load_id: str, check: Any) -> LedgerEntry:
        """Create the first free entry from ``seq`` on: ``make(seq)`` builds it; every entry found
        in the way goes through ``check(entry)`` (which may raise). An entry already holding
        ``load_id`` is ours (a create the client retried after a lost answer).

        A create that fails without saying whether it took effect (its answers lost: connection
        resets, timeouts, 5xx after the client's retries) is checked by reading entry ``seq`` back:
        ours -> committed; another load's -> as for an existing entry; absent or unreadable ->
        `CommitOutcomeUnknown` (the request may still land, so the caller keeps the load's files)."""
        while True:
            entry: LedgerEntry = make(seq)
            body = (json.dumps(entry.to_dict(), indent=1, sort_keys=True) + "\n").encode()
            try:
                self._create(self._entry_path(seq), body)
                self._entries[seq] = entry
                return entry
            except FileExistsError:
                other = self._read_new_entry(seq)
            except Exception as exc:
                other = self._entry_after_lost_answer(seq, load_id, exc)
            if other.load_id == load_id:
                return other
            check(other)
            seq += 1

    def _entry_after_lost_answer(self, seq: int, load_id: str, exc: Exception) -> LedgerEntry:
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

        where = f"{self.url}/{LEDGER_DIR}/{entry_name(seq)}"
        try:
            for attempt in Retrying(retry=retry_if_exception_type(OSError), stop=stop_after_attempt(5),
                                    wait=wait_random_exponential(multiplier=0.5, max=5), reraise=True):
                with attempt:
                    try:
                        return self._read_new_entry(seq)
                    except FileNotFoundError:
                        break
        except Exception as again:
            raise CommitOutcomeUnknown(where, f"creating the ledger entry of load {load_id} failed "
                                          f"({_redact(str(exc), self.storage_options)}) and it cannot be read "
                                          f"back ({_redact(str(again), self.storage_options)}); the load's files "
                                          "are kept: run the load again") from exc
        raise CommitOutcomeUnknown(where, f"creating the ledger entry of load {load_id} failed "
                                      f"({_redact(str(exc), self.storage_options)}) and it is not there now; the "
                                      "load's files are kept in case the request still lands: run the load again "
                                      "(a later load publishes this one if it landed, and discards it after "
                                      "--abandon-after if not)") from exc

    # -- recovery --------------------------------------------------------------------------------
    def recover(self) -> list[str]:
        load_ids = sorted(n for n in self._ls(self.loads_dir) if LOAD_ID_RE.match(n))
        if not load_ids:
            return []
        ledger = self.read()
        committed = {e.load_id: e for e in ledger.entries}
        aborted = {a for e in ledger.entries for a in e.aborted}
        notes, stale = [], []
        for load_id in load_ids:
            if load_id in committed:
                self._publish(committed[load_id])
                notes.append(f"finished publishing load {load_id} (its driver stopped after the commit)")
            elif load_id in aborted:
                self.fs.rm(self._path(LOADS_DIR, load_id), recursive=True)
                notes.append(f"removed load {load_id} (discarded earlier; none of its rows were visible)")
            elif _age(load_id) >= self.abandon_after:
                stale.append(load_id)
        if stale:
            for load_id, fate in self._abort(ledger.last_seq + 1, stale).items():
                if fate == "aborted":
                    self.fs.rm(self._path(LOADS_DIR, load_id), recursive=True)
                    notes.append(f"removed load {load_id} (uncommitted and older than {self.abandon_after:g} s: "
                                 "abandoned; none of its rows were visible)")
                else:
                    notes.append(f"finished publishing load {load_id} (it committed while this load recovered)")
        return notes

    def _abort(self, seq: int, load_ids: list[str]) -> dict[str, str]:
        """Commit an abort entry for ``load_ids``; a load that commits first is published instead."""
        fates = dict.fromkeys(load_ids, "aborted")
        my_id = new_load_id()

        def check(other: LedgerEntry) -> None:
            # another recovery's abort entry naming the same loads is harmless: they stay aborted
            if other.load_id in fates:
                fates[other.load_id] = "committed"
                self._publish(other)
            if "aborted" not in fates.values():
                raise _NothingLeft

        def make(s: int) -> LedgerEntry:
            return LedgerEntry(seq=s, load_id=my_id, committed_at=_now(), windows=(), ranges=OffsetRanges(),
                                  files=(), rows=0, aborted=tuple(i for i, f in fates.items() if f == "aborted"))

        with contextlib.suppress(_NothingLeft):  # every candidate committed meanwhile: no abort entry
            self._append(seq, make, load_id=my_id, check=check)
        return fates

    def _publish(self, entry: LedgerEntry) -> None:
        """Copy ``entry``'s files to their published names (each copy atomic, skipped when done),
        then delete its staging prefix. Safe to repeat."""
        staging = self._path(LOADS_DIR, entry.load_id)
        where = f"{self.url}/{LEDGER_DIR}/{entry_name(entry.seq)}"
        self.fs.invalidate_cache()
        for f in entry.files:
            src, dst = f"{staging}/{f.source}", self._path(f.path)
            if self.fs.exists(dst):
                size = self.fs.size(dst)
                if size != f.bytes:
                    raise LedgerError(where, f"{f.path} is published with {size} bytes, the entry says "
                                         f"{f.bytes}: written by something else than this loader?")
                continue
            if not self.fs.exists(src):
                raise LedgerError(where, f"{f.path} is neither published nor in load {entry.load_id}'s "
                                     "staging prefix")
            try:
                self.fs.copy(src, dst)
            except FileNotFoundError:
                # another load's recover() published this committed load meanwhile and removed its staging
                self.fs.invalidate_cache()
                if not self.fs.exists(dst):
                    raise
            crash_points.reached(crash_points.MID_PUBLISH)
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(staging, recursive=True)

    # -- loads -----------------------------------------------------------------------------------
    def state(self) -> OutputState:
        ledger = self.read()
        return OutputState(ledger.held(), ledger)

    def begin(self) -> ObjectStorePendingLoad:
        return ObjectStorePendingLoad(self, new_load_id())


class ObjectStorePendingLoad:
    def __init__(self, out: ObjectStoreParquetOutput, load_id: str) -> None:
        self.out = out
        self.load_id = load_id
        self.staging = out._path(LOADS_DIR, load_id)
        self._entry: LedgerEntry | None = None
        self._unknown = False

    def writer(self) -> ObjectStoreTaskWriter:
        return ObjectStoreTaskWriter(self.out.protocol, self.staging, self.out.storage_options)

    def spark_target(self) -> str:
        """Where ``--writer spark`` lets ``df.write`` write (Hadoop's name for S3 is s3a)."""
        protocol = "s3a" if self.out.protocol == "s3" else self.out.protocol
        return f"{protocol}://{self.staging}"

    def spark_written(self) -> list[DataFile]:
        """The Parquet files a successful ``df.write`` left under the staging prefix."""
        import pyarrow.parquet as pq

        fs = self.out.fs
        fs.invalidate_cache()
        out = []
        for path, info in sorted(fs.find(self.staging, detail=True).items()):
            rel = path[len(self.staging) + 1:]
            if any(part.startswith(("_", ".")) for part in rel.split("/")) or not rel.endswith(".parquet"):
                continue
            with fs.open(path, "rb") as fh:
                rows = pq.read_metadata(fh).num_rows
            first = rel.split("/", 1)[0]
            window = first.split("=", 1)[1] if first.startswith("window_id=") else ""
            from urllib.parse import unquote

            out.append(DataFile(rel, rows, int(info["size"]), unquote(window)))
        return out

    def commit(self, base: OutputState, ranges: OffsetRanges, windows: Sequence[str],
               files: Sequence[DataFile], rows: int) -> None:
        try:
            self._commit(base, ranges, windows, files, rows)
        except CommitOutcomeUnknown:
            self._unknown = True  # its entry may land: abort must keep the staged files it names
            raise

    def _commit(self, base: OutputState, ranges: OffsetRanges, windows: Sequence[str],
                files: Sequence[DataFile], rows: int) -> None:
        ledger = base.token
        assert isinstance(ledger, Ledger)
        published = tuple(PublishedFile(f.path, _published_name(f.path, self.load_id, i), f.rows, f.bytes)
                          for i, f in enumerate(sorted(files, key=lambda f: f.path)))

        def check(other: LedgerEntry) -> None:
            where = f"{self.out.url}/{LEDGER_DIR}/{entry_name(other.seq)}"
            if self.load_id in other.aborted:
                raise LedgerConflict(where, f"load {other.load_id} found this load abandoned (older than "
                                        f"{self.out.abandon_after:g} s) and discarded it; nothing of this load "
                                        "was published: run it again")
            clash = other.ranges & ranges
            if clash:
                (key, start, end), *_ = clash.intervals()
                raise LedgerConflict(where, f"load {other.load_id} committed {key[0]} {key[1]}:{key[2]} "
                                        f"offsets [{start}, {end}) while this load ran; nothing of this load "
                                        "was published: run it again")

        def make(seq: int) -> LedgerEntry:
            return LedgerEntry(seq=seq, load_id=self.load_id, committed_at=_now(),
                               windows=tuple(sorted(set(windows))), ranges=ranges, files=published, rows=rows)

        self._entry = self.out._append(ledger.last_seq + 1, make, load_id=self.load_id, check=check)

    def publish(self) -> None:
        assert self._entry is not None
        crash_points.reached(crash_points.BEFORE_PUBLISH)
        self.out._publish(self._entry)

    def abort(self) -> None:
        if self._unknown:
            return  # the entry may still land: a later load publishes these files, or discards them
        # what stays is invisible; a later load discards it once it is older than abandon_after
        with contextlib.suppress(OSError):  # FileNotFoundError included
            self.out.fs.rm(self.staging, recursive=True)

    def close(self) -> None:
        self._entry = None


def _published_name(rel: str, load_id: str, i: int) -> str:
    head = rel.rsplit("/", 1)[0] if "/" in rel else ""
    name = f"part-{load_id}-{i:05d}.parquet"
    return f"{head}/{name}" if head else name


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _age(load_id: str) -> float:
    started = datetime.strptime(load_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    return (datetime.now(timezone.utc) - started).total_seconds()
