"""The load ledger: which queue offsets a `load_window` output already holds, kept inside the output.

Layout of an output directory (docs/CONTRACTS.md, "Load ledger")::

    <output>/window_id=<id>/part-<load_id>-<n>.parquet   published rows: what every reader sees
    <output>/_rocketmq_ledger/<seq:010d>.json            one entry per committed load (the commit record)
    <output>/_rocketmq_loads/<load_id>.lock              flock held by the live driver of a load
    <output>/_rocketmq_loads/<load_id>/data/             a load's rows before they are published

A load (1) writes its rows under ``_rocketmq_loads/<load_id>/data`` and fsyncs them,
(2) commits by creating the next ledger entry exclusively (temp file, fsync, hard link
to the final name: it fails if a concurrent load took that number first), (3) publishes
by renaming each file into its ``window_id=`` directory. Names starting with ``_`` are
hidden from Spark and pyarrow readers, so a reader never sees rows of an uncommitted
load. A crash before (2) leaves an abandoned load directory (discarded later); a crash
after (2) leaves rows that are committed but not yet published: invisible (never
duplicated) until the next load of the output, or `recover`, finishes the renames.

Each entry records the offset ranges ``[start, end)`` per (topic, broker, queue_id) the
load covered; their union is what the output holds. Entries never overlap: a commit
whose ranges meet a range committed after the load's snapshot raises `LedgerConflict`.

`OutputStore` needs a POSIX file system with hard links and ``flock`` (local disk, NFSv4, a
mounted volume). Object stores keep the same entries (`LedgerEntry`, `OffsetRanges`) but
commit by a conditional create and have no locks: spark/load/outputs/objectstore.py. Imports
neither Spark nor Airflow.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeGuard

LEDGER_DIR = "_rocketmq_ledger"
LOADS_DIR = "_rocketmq_loads"
LEDGER_VERSION = 1
_ENTRY_RE = re.compile(r"^(\d{10})\.json$")
_LOAD_ID_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{12}$")

QueueKey = tuple[str, str, int]  # (topic, broker, queue_id)
Interval = tuple[int, int]  # [start, end)


class LedgerError(Exception):
    """The output's ledger is unreadable or contradicts the data; ``where`` names the file or setting."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


class LedgerConflict(LedgerError):
    """A concurrent load committed offsets this load also covers; nothing of this load was published."""


# --- offset ranges --------------------------------------------------------------------------------

def _merge(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    out: list[list[int]] = []
    for start, end in sorted(i for i in intervals if i[0] < i[1]):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return tuple((s, e) for s, e in out)


def _subtract(a: tuple[Interval, ...], b: tuple[Interval, ...]) -> tuple[Interval, ...]:
    out: list[Interval] = []
    for start, end in a:
        cur = start
        for bs, be in b:
            if be <= cur or bs >= end:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
            if cur >= end:
                break
        if cur < end:
            out.append((cur, end))
    return tuple(out)


@dataclass(frozen=True)
class OffsetRanges:
    """Disjoint, sorted half-open offset intervals per (topic, broker, queue_id); immutable."""

    by_queue: Mapping[QueueKey, tuple[Interval, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, items: Iterable[tuple[QueueKey, int, int]]) -> OffsetRanges:
        acc: dict[QueueKey, list[Interval]] = {}
        for key, start, end in items:
            acc.setdefault(key, []).append((start, end))
        return cls({k: m for k, v in acc.items() if (m := _merge(v))})

    def __bool__(self) -> bool:
        return bool(self.by_queue)

    def __or__(self, other: OffsetRanges) -> OffsetRanges:
        keys = set(self.by_queue) | set(other.by_queue)
        return OffsetRanges({k: _merge(self.by_queue.get(k, ()) + other.by_queue.get(k, ())) for k in keys})

    def __sub__(self, other: OffsetRanges) -> OffsetRanges:
        out = {}
        for k, iv in self.by_queue.items():
            rest = _subtract(iv, other.by_queue[k]) if k in other.by_queue else iv
            if rest:
                out[k] = rest
        return OffsetRanges(out)

    def __and__(self, other: OffsetRanges) -> OffsetRanges:
        return self - (self - other)

    def intervals(self) -> Iterator[tuple[QueueKey, int, int]]:
        for key in sorted(self.by_queue):
            for start, end in self.by_queue[key]:
                yield key, start, end

    def offsets(self) -> int:
        """How many offsets the ranges cover."""
        return sum(end - start for _, start, end in self.intervals())

    def to_json(self) -> list[dict[str, Any]]:
        return [{"topic": t, "broker": b, "queue_id": q, "start_offset": s, "end_offset": e}
                for (t, b, q), s, e in self.intervals()]

    @classmethod
    def from_json(cls, items: Any, where: str) -> OffsetRanges:
        if not isinstance(items, list):
            raise LedgerError(where, "ranges: expected a list")
        parsed = []
        for i, r in enumerate(items):
            at = f"ranges[{i}]"
            if not isinstance(r, dict):
                raise LedgerError(where, f"{at}: expected an object")
            t, b, q, s, e = (r.get(k) for k in ("topic", "broker", "queue_id", "start_offset", "end_offset"))
            if not (isinstance(t, str) and isinstance(b, str) and _is_int(q) and _is_int(s) and _is_int(e)):
                raise LedgerError(where, f"{at}: expected topic, broker (strings) and queue_id, "
                                  "start_offset, end_offset (integers)")
            if not 0 <= s < e:
                raise LedgerError(where, f"{at}: needs 0 <= start_offset < end_offset, got [{s}, {e})")
            parsed.append(((t, b, q), s, e))
        return cls.of(parsed)


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


# --- ledger entries -------------------------------------------------------------------------------

@dataclass(frozen=True)
class PublishedFile:
    """One data file of a load: ``source`` under the load's data dir, ``path`` its place in the output."""

    source: str
    path: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class LedgerEntry:
    """One committed load: the offset ranges it covers and the files holding their rows.

    An entry with ``aborted`` load ids (object-store outputs, spark/load/outputs/objectstore.py)
    covers no ranges: it records that those loads were found abandoned and discarded, so
    none of them may commit after it."""

    seq: int
    load_id: str
    committed_at: str
    windows: tuple[str, ...]
    ranges: OffsetRanges
    files: tuple[PublishedFile, ...]
    rows: int
    aborted: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {"version": LEDGER_VERSION, "seq": self.seq, "load_id": self.load_id,
               "committed_at": self.committed_at, "windows": list(self.windows),
               "ranges": self.ranges.to_json(), "rows": self.rows,
               "files": [{"source": f.source, "path": f.path, "rows": f.rows, "bytes": f.bytes}
                         for f in self.files]}
        if self.aborted:
            out["aborted"] = list(self.aborted)
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str) -> LedgerEntry:
        if not isinstance(d, dict):
            raise LedgerError(where, "expected a JSON object")
        if d.get("version") != LEDGER_VERSION:
            raise LedgerError(where, f"unsupported ledger version {d.get('version')!r} "
                              f"(expected {LEDGER_VERSION})")
        seq, load_id, rows = d.get("seq"), d.get("load_id"), d.get("rows")
        if not (_is_int(seq) and _is_int(rows) and isinstance(load_id, str) and _LOAD_ID_RE.match(load_id)):
            raise LedgerError(where, "seq, load_id and rows are required (integer, load id, integer)")
        windows, files = d.get("windows"), d.get("files")
        if not isinstance(windows, list) or not all(isinstance(w, str) for w in windows):
            raise LedgerError(where, "windows: expected a list of strings")
        if not isinstance(files, list):
            raise LedgerError(where, "files: expected a list")
        parsed: list[PublishedFile] = []
        for i, f in enumerate(files):
            ok = isinstance(f, dict) and all(isinstance(f.get(k), str) for k in ("source", "path")) \
                and all(_is_int(f.get(k)) for k in ("rows", "bytes"))
            if not ok or not _inside(f["source"]) or not _inside(f["path"]):
                raise LedgerError(where, f"files[{i}]: expected relative source/path inside the output "
                                  "and integer rows/bytes")
            parsed.append(PublishedFile(f["source"], f["path"], f["rows"], f["bytes"]))
        aborted = d.get("aborted", [])
        if not isinstance(aborted, list) or not all(isinstance(a, str) and _LOAD_ID_RE.match(a) for a in aborted):
            raise LedgerError(where, "aborted: expected a list of load ids")
        return cls(seq=seq, load_id=load_id, committed_at=str(d.get("committed_at", "")),
                   windows=tuple(windows), ranges=OffsetRanges.from_json(d.get("ranges"), where),
                   files=tuple(parsed), rows=rows, aborted=tuple(aborted))


def _inside(rel: str) -> bool:
    p = Path(rel)
    return bool(rel) and not p.is_absolute() and ".." not in p.parts


def new_load_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:12]


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


# --- the ledger of one output ---------------------------------------------------------------------

@dataclass(frozen=True)
class Ledger:
    """A snapshot of an output's committed entries."""

    output: Path | str  # a directory, or an object store URL
    entries: tuple[LedgerEntry, ...]

    @property
    def last_seq(self) -> int:
        return self.entries[-1].seq if self.entries else 0

    def held(self) -> OffsetRanges:
        out = OffsetRanges()
        for e in self.entries:
            out = out | e.ranges
        return out

    def by_load_id(self, load_id: str) -> LedgerEntry | None:
        return next((e for e in self.entries if e.load_id == load_id), None)


@dataclass
class Recovery:
    """What `recover` found: loads whose publication it finished, and abandoned loads it removed."""

    published: list[str] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)  # loads whose driver is still alive


class OutputStore:
    """The ledger and load directories of one local output directory."""

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
            m = _ENTRY_RE.match(p.name)
            if m:
                entries.append(self._read_entry(p, int(m.group(1))))
        for i, e in enumerate(entries, start=1):
            if e.seq != i:
                raise LedgerError(str(self.ledger_dir), f"entry {i:010d}.json is missing (next is {e.seq})")
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
        return self.ledger_dir / f"{seq:010d}.json"

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
            crash_hook("mid_publish")
        for d in touched:
            _fsync_path(d, directory=True)

    def recover(self) -> Recovery:
        """Finish publishing committed loads and remove abandoned ones whose driver is gone.

        A load is left alone while its driver holds its lock (it may still commit)."""
        out = Recovery()
        if not self.loads_dir.is_dir():
            return out
        ids = {p.name.removesuffix(".lock") for p in self.loads_dir.iterdir() if _LOAD_ID_RE.match(
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

    def __init__(self, store: OutputStore, load_id: str, fd: int) -> None:
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


# --- test hook ------------------------------------------------------------------------------------

CRASH_ENV = "ROCKETMQ_LOAD_WINDOW_TEST_CRASH"
CRASH_EXIT = 70
CRASH_POINTS = ("task_write", "before_commit", "before_publish", "mid_publish")


BARRIER_ENV = "ROCKETMQ_LOAD_WINDOW_TEST_BARRIER"  # "<directory>:<parties>"
BARRIER_TIMEOUT = 1200.0


def crash_hook(point: str) -> None:
    """Tests only: end the process at ``point`` when $ROCKETMQ_LOAD_WINDOW_TEST_CRASH names it
    (off by default), as a killed driver would, without any clean-up. With
    $ROCKETMQ_LOAD_WINDOW_TEST_BARRIER=DIR:N, ``before_commit`` first waits until N loads
    (processes) reached it, so that concurrent loads commit against the same ledger state."""
    barrier = os.environ.get(BARRIER_ENV)
    if barrier and point == "before_commit":
        _barrier(barrier)
    if os.environ.get(CRASH_ENV) == point:
        os.write(2, f"load_window: test crash at {point}\n".encode())
        os._exit(CRASH_EXIT)


def _barrier(spec: str) -> None:
    import time

    directory, _, parties = spec.rpartition(":")
    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / f"{os.getpid()}-{uuid.uuid4().hex[:8]}").touch()
    deadline = time.monotonic() + BARRIER_TIMEOUT
    while len(list(Path(directory).iterdir())) < int(parties):
        if time.monotonic() > deadline:
            raise LedgerError(BARRIER_ENV, f"only {len(list(Path(directory).iterdir()))} of {parties} loads "
                              "arrived")
        time.sleep(0.05)  # other processes: no event to await across them

