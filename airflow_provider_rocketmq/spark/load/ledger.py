"""The load ledger's format: which queue offsets an output holds, as offset ranges and committed entries.

`OffsetRanges` is the arithmetic every load plans with (union, difference, intersection of
half-open intervals per (topic, broker, queue_id)). A `LedgerEntry` records one committed load:
the ranges it covered and the files holding their rows; the union of an output's entries is what
it holds, and no two entries overlap (a commit that would overlap raises `LedgerConflict`).
Parquet outputs keep one JSON entry per load under ``<output>/_rocketmq_ledger/`` and a load's
unpublished rows under ``<output>/_rocketmq_loads/<load_id>/``; how each kind commits is in
spark/load/outputs/. Imports neither Spark nor Airflow.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeGuard

LEDGER_DIR = "_rocketmq_ledger"
LOADS_DIR = "_rocketmq_loads"
LEDGER_VERSION = 1
ENTRY_RE = re.compile(r"^(\d{10})\.json$")  # an entry's file name; the group is its sequence number
LOAD_ID_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{12}$")

QueueKey = tuple[str, str, int]  # (topic, broker, queue_id)
Interval = tuple[int, int]  # [start, end)


class LedgerError(Exception):
    """The output's ledger is unreadable or contradicts the data; ``where`` names the file or setting."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


class LedgerConflict(LedgerError):
    """A concurrent load committed offsets this load also covers; nothing of this load was published."""


class CommitOutcomeUnknown(LedgerError):
    """The commit request failed in a way that does not say whether it took effect (its answer was
    lost), and reading the output back did not find it: the load's files are kept (it may land), and
    the next load of the output finds out (it publishes a load that committed, and discards one that
    did not once it is older than ``--abandon-after``)."""


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
        if not (_is_int(seq) and _is_int(rows) and isinstance(load_id, str) and LOAD_ID_RE.match(load_id)):
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
        if not isinstance(aborted, list) or not all(isinstance(a, str) and LOAD_ID_RE.match(a) for a in aborted):
            raise LedgerError(where, "aborted: expected a list of load ids")
        return cls(seq=seq, load_id=load_id, committed_at=str(d.get("committed_at", "")),
                   windows=tuple(windows), ranges=OffsetRanges.from_json(d.get("ranges"), where),
                   files=tuple(parsed), rows=rows, aborted=tuple(aborted))


def _inside(rel: str) -> bool:
    p = Path(rel)
    return bool(rel) and not p.is_absolute() and ".." not in p.parts


def entry_name(seq: int) -> str:
    return f"{seq:010d}.json"


def new_load_id() -> str:
    """A load's id: its start time (UTC, to the second) and 12 random hex digits."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:12]


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
