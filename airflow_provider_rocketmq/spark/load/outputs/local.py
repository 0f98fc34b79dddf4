"""The local kind: a ledger-managed Parquet dataset in a local or mounted POSIX directory.

Layout::

    <output>/window_id=<id>/part-<load_id>-<n>.parquet   published rows: what every reader sees
    <output>/_rocketmq_ledger/<seq:010d>.json            one entry per committed load (the commit point)
    <output>/_rocketmq_loads/<load_id>.lock              flock held by the live driver of a load
    <output>/_rocketmq_loads/<load_id>/data/             a load's rows before they are published

A load's tasks write under its data directory (the same directory on the driver and every
executor: a local one in local mode, a shared mount on a cluster) and fsync each file; the
driver commits by hard-linking the next ledger entry into place (it fails if a concurrent load
took that number: no overwrite), then publishes by renaming each file into its ``window_id=``
directory. ``_`` names are hidden from Spark and pyarrow readers, so no reader sees rows of an
uncommitted load. A live load is told from a crashed one by its ``flock`` (released by the
kernel when the driver dies): `LocalStore.recover` finishes the publication of a crashed
committed load, removes a crashed uncommitted one at once, and never touches a live one.
Needs hard links and ``flock`` (local disk, NFSv4, a mounted volume).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING

from airflow_provider_rocketmq.spark.load import crash_points
from airflow_provider_rocketmq.spark.load.ledger import (
    ENTRY_RE,
    LEDGER_DIR,
    LOAD_ID_RE,
    LOADS_DIR,
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
from .parquet_files import fsync_file, write_partition

if TYPE_CHECKING:
    import pyarrow as pa

KIND = "local"


# --- durability helpers ---------------------------------------------------------------------------

def _fsync_path(path: Path, *, directory: bool = False) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on directories; renames stay atomic
    finally:
        os.close(fd)


def _holds(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file ``fd`` has open: a flock on a lock file that another
    process has meanwhile unlinked (or replaced) locks nothing anyone else will look at."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _makedirs(path: Path) -> None:
    """mkdir -p, fsyncing each new directory's parent so the directory survives a crash."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir()
        _fsync_path(d.parent, directory=True)


# --- the ledger and load directories -------------------------------------------------------------

@dataclass
class Recovery:
    """What `recover` found: loads whose publication it finished, and abandoned loads it removed."""

    published: list[str] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)  # loads whose driver is still alive


class LocalStore:
    """The ledger entries and load directories of one local output directory (see the module docstring)."""

    def __init__(self, output: str | os.PathLike[str]) -> None:
        self.output = Path(output).resolve()
        self.ledger_dir = self.output / LEDGER_DIR
        self.loads_dir = self.output / LOADS_DIR

    # -- reading -----------------------------------------------------------------------------------
    def check_layout(self) -> None:
        """Refuse an existing, non-empty directory that is not a ledger-managed output."""
        if not self.output.exists():
            return
        if not self.output.is_dir():
            raise LedgerError("--output", f"{self.output} exists and is not a directory")
        if self.ledger_dir.is_dir():
            return
        others = sorted(p.name for p in self.output.iterdir() if p.name != LOADS_DIR)
        if others:
            raise LedgerError("--output", f"{self.output} holds {others[0]!r} but no {LEDGER_DIR}/: not an "
                              "output of this loader (or written by a version without a ledger); "
                              "load into a new directory")

    def read(self) -> Ledger:
        if not self.ledger_dir.is_dir():
            return Ledger(self.output, ())
        entries = []
        for p in sorted(self.ledger_dir.iterdir()):
            m = ENTRY_RE.match(p.name)
            if m:
                entries.append(self._read_entry(p, int(m.group(1))))
        for i, e in enumerate(entries, start=1):
            if e.seq != i:
                raise LedgerError(str(self.ledger_dir), f"entry {entry_name(i)} is missing (next is {e.seq})")
        return Ledger(self.output, tuple(entries))

    def _read_entry(self, p: Path, seq: int) -> LedgerEntry:
        try:
            entry = LedgerEntry.from_dict(json.loads(p.read_bytes()), str(p))
        except (ValueError, UnicodeDecodeError) as exc:
            raise LedgerError(str(p), f"not valid JSON ({exc})") from None
        if entry.seq != seq:
            raise LedgerError(str(p), f"seq {entry.seq} does not match the file name")
        return entry

    def entry_path(self, seq: int) -> Path:
        return self.ledger_dir / entry_name(seq)

    # -- one load ----------------------------------------------------------------------------------
    def begin(self) -> LoadDir:
        """Reserve a load directory, locked by this process for as long as it lives."""
        _makedirs(self.ledger_dir)
        _makedirs(self.loads_dir)
        for _ in range(8):
            load_id = new_load_id()
            lock_path = self.loads_dir / f"{load_id}.lock"
            try:
                fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
            except FileExistsError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)  # a recovery took the brand-new lock first; try another id
                continue
            if not _holds(fd, lock_path):
                os.close(fd)  # a recovery took it, discarded it and unlinked it before our flock
                continue
            load = LoadDir(self, load_id, fd)
            load.data_dir.parent.mkdir()
            return load
        raise LedgerError(str(self.loads_dir), "could not reserve a load directory")

    def commit(self, load: LoadDir, base: Ledger, ranges: OffsetRanges, windows: Iterable[str],
               files: Iterable[PublishedFile], rows: int) -> LedgerEntry:
        """Create the next ledger entry for ``load``; `LedgerConflict` if a load committed since
        ``base`` covers any of ``ranges`` (then nothing of ``load`` may be published)."""
        seq = base.last_seq + 1
        files = tuple(files)
        tmp = self.ledger_dir / f".{load.load_id}.json.tmp"
        while True:
            target = self.entry_path(seq)
            if target.exists():
                other = self._read_entry(target, seq)
                clash = other.ranges & ranges
                if clash:
                    (key, start, end), *_ = clash.intervals()
                    raise LedgerConflict(str(target), f"load {other.load_id} committed {key[0]} {key[1]}:"
                                         f"{key[2]} offsets [{start}, {end}) while this load ran; nothing "
                                         "of this load was published: run it again")
                seq += 1
                continue
            entry = LedgerEntry(seq=seq, load_id=load.load_id,
                                committed_at=datetime.now(timezone.utc).isoformat(),
                                windows=tuple(sorted(set(windows))), ranges=ranges, files=files, rows=rows)
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(entry.to_dict(), fh, indent=1, sort_keys=True)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, target)  # atomic and never clobbers: the commit point
            except FileExistsError:
                continue  # a concurrent load took this number: check it for overlap, try the next
            finally:
                tmp.unlink(missing_ok=True)
            _fsync_path(self.ledger_dir, directory=True)
            return entry

    def publish(self, entry: LedgerEntry) -> None:
        """Move ``entry``'s files from its load directory into place; safe to repeat after a crash."""
        data = self.loads_dir / entry.load_id / "data"
        touched: set[Path] = set()
        for f in entry.files:
            src, dst = data / f.source, self.output / f.path
            if src.exists():
                _makedirs(dst.parent)
                os.replace(src, dst)
                touched.add(dst.parent)
            elif not dst.exists():
                raise LedgerError(str(self.entry_path(entry.seq)),
                                  f"{f.path} is neither published nor in load {entry.load_id}'s directory")
            crash_points.reached(crash_points.MID_PUBLISH)
        for d in touched:
            _fsync_path(d, directory=True)

    def recover(self) -> Recovery:
        """Finish publishing committed loads and remove abandoned ones whose driver is gone.

        A load is left alone while its driver holds its lock (it may still commit)."""
        out = Recovery()
        if not self.loads_dir.is_dir():
            return out
        ids = {p.name.removesuffix(".lock") for p in self.loads_dir.iterdir() if LOAD_ID_RE.match(
            p.name.removesuffix(".lock"))}
        ledger: Ledger | None = None
        for load_id in sorted(ids):
            lock_path = self.loads_dir / f"{load_id}.lock"
            fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    out.busy.append(load_id)
                    continue
                if not _holds(fd, lock_path):
                    continue  # its driver finished (or another recovery ran) between listing and flock
                # the driver is gone, so the ledger cannot change for this load any more
                ledger = ledger or self.read()
                entry = ledger.by_load_id(load_id)
                if entry is None:
                    out.discarded.append(load_id)
                    (self.ledger_dir / f".{load_id}.json.tmp").unlink(missing_ok=True)
                else:
                    if (self.loads_dir / load_id).is_dir():
                        self.publish(entry)
                    out.published.append(load_id)
                shutil.rmtree(self.loads_dir / load_id, ignore_errors=True)
                lock_path.unlink(missing_ok=True)
            finally:
                os.close(fd)
        if out.published or out.discarded:
            _fsync_path(self.loads_dir, directory=True)
        return out


class LoadDir:
    """A reserved ``_rocketmq_loads/<load_id>`` directory; the flock on its lock file lives with ``fd``."""

    def __init__(self, store: LocalStore, load_id: str, fd: int) -> None:
        self.store = store
        self.load_id = load_id
        self._fd: int | None = fd
        self.data_dir = store.loads_dir / load_id / "data"

    def data_files(self) -> list[Path]:
        """The Parquet files a writer left in ``data_dir`` (Hadoop's ``_SUCCESS``/``.crc`` excluded)."""
        if not self.data_dir.is_dir():
            return []
        return sorted(p for p in self.data_dir.rglob("*") if p.is_file()
                      and not any(part.startswith(("_", ".")) for part in p.relative_to(self.data_dir).parts))

    def seal(self) -> list[PublishedFile]:
        """fsync the data files and name each file's place in the output (``part-<load_id>-<n>``)."""
        import pyarrow.parquet as pq

        out = []
        for i, src in enumerate(self.data_files()):
            _fsync_path(src)
            rel = src.relative_to(self.data_dir)
            dst = rel.parent / f"part-{self.load_id}-{i:05d}.parquet"
            out.append(PublishedFile(rel.as_posix(), dst.as_posix(), pq.read_metadata(src).num_rows,
                                     src.stat().st_size))
        for d in {src.parent for src in self.data_files()} | {self.data_dir}:
            if d.is_dir():
                _fsync_path(d, directory=True)
        return out

    def finish(self) -> None:
        """Remove the (now empty or abandoned) load directory and release the lock."""
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)
        (self.store.loads_dir / f"{self.load_id}.lock").unlink(missing_ok=True)
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# --- the output kind ------------------------------------------------------------------------------

@dataclass(frozen=True)
class LocalTaskWriter:
    """Writes a task's rows under the load's data directory (picklable: just the path)."""

    data_dir: str

    def write(self, batches: Iterable[pa.RecordBatch], task_tag: str) -> list[DataFile]:
        def open_file(rel: str) -> IO[bytes]:
            path = Path(self.data_dir) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            return open(path, "wb")

        return write_partition(batches, task_tag, open_file, fsync_file)


class LocalPendingLoad:
    def __init__(self, store: LocalStore, load: LoadDir) -> None:
        self.store = store
        self.load = load
        self.load_id = load.load_id
        self._entry: LedgerEntry | None = None

    def writer(self) -> LocalTaskWriter:
        return LocalTaskWriter(str(self.load.data_dir))

    def spark_target(self) -> str:
        """Where ``--writer spark`` lets ``df.write.partitionBy("window_id")`` write."""
        return str(self.load.data_dir)

    def spark_written(self) -> list[DataFile]:
        """The files a successful ``df.write`` left (Spark's commit protocol: no failed attempt's)."""
        return [DataFile(f.source, f.rows, f.bytes, _window_of(f.source)) for f in self.load.seal()]

    def commit(self, base: OutputState, ranges: OffsetRanges, windows: Sequence[str],
               files: Sequence[DataFile], rows: int) -> None:
        ledger = base.token
        assert isinstance(ledger, Ledger)
        for d in {(self.load.data_dir / f.path).parent for f in files} | {self.load.data_dir}:
            if d.is_dir():
                _fsync_path(d, directory=True)  # the tasks fsynced the files, not their directories
        published = [PublishedFile(f.path, _published_name(f.path, self.load_id, i), f.rows, f.bytes)
                     for i, f in enumerate(sorted(files, key=lambda f: f.path))]
        self._entry = self.store.commit(self.load, ledger, ranges, windows, published, rows)

    def publish(self) -> None:
        assert self._entry is not None
        crash_points.reached(crash_points.BEFORE_PUBLISH)
        self.store.publish(self._entry)
        self._entry = None
        self.load.finish()

    def abort(self) -> None:
        self.load.finish()

    def close(self) -> None:
        self.load.close()  # a load whose publish failed stays for `recover` (its entry is committed)


def _published_name(rel: str, load_id: str, i: int) -> str:
    return (Path(rel).parent / f"part-{load_id}-{i:05d}.parquet").as_posix()


def _window_of(rel: str) -> str:
    from urllib.parse import unquote

    first = Path(rel).parts[0]
    return unquote(first.split("=", 1)[1]) if first.startswith("window_id=") else ""


class LocalParquetOutput:
    """A ledger-managed Parquet dataset in a local or mounted directory."""

    kind = KIND

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.store = LocalStore(path)
        self.url = str(self.store.output)

    def validate(self) -> None:
        self.store.check_layout()

    def recover(self) -> list[str]:
        found = self.store.recover()
        return ([f"finished publishing load {i} (its driver stopped after the commit)" for i in found.published]
                + [f"removed load {i} (its driver stopped before the commit; none of its rows were visible)"
                   for i in found.discarded])

    def state(self) -> OutputState:
        ledger = self.store.read()
        return OutputState(ledger.held(), ledger)

    def begin(self) -> LocalPendingLoad:
        return LocalPendingLoad(self.store, self.store.begin())
