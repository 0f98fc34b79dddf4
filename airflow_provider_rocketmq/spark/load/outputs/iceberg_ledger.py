"""The load ledger of an Iceberg table, kept in the summaries of the snapshots the loads commit.

Every load commits exactly one snapshot on the table's ``main`` branch; its summary carries

- ``rocketmq.ledger-version`` (``1``), ``rocketmq.load-id``, ``rocketmq.windows`` (JSON list),
  ``rocketmq.rows``;
- ``rocketmq.ranges``: the offset ranges ``[start, end)`` per (topic, broker, queue_id) this load
  added;
- ``rocketmq.held``: every range the table holds once this snapshot is current (the ``held`` of
  the newest load snapshot before it, plus ``rocketmq.ranges``).

Ranges are compact JSON ``[[topic, broker, queue_id, [start, end, start, end, ...]], ...]``;
longer than `COMPRESS_OVER` characters they are stored as ``zlib:`` + base64 of the zlib'd JSON
(a summary lives in every later ``metadata.json`` until the snapshot expires).

What the table holds is the ``held`` of the newest load snapshot among the ancestors of
``main``'s current snapshot: other writers' snapshots in between (compaction, deletes) are
passed over; after a rollback the rolled-back loads are no longer ancestors, so their ranges
(whose rows a reader no longer sees) count as not held and load again. Because ``held`` is
cumulative, expiring older snapshots loses nothing as long as that newest load snapshot stays.

Every load's commit also sets the table property `LAST_LOAD` (its load id). When no ancestor
is a load snapshot but the property names a load, `read_ledger` tells a rollback to before
every load (the named load's snapshot is still in the metadata, the history is whole: nothing
is held) from a ledger lost to snapshot expiry (the history stops at an expired parent, or the
named snapshot is gone: pyiceberg's expiry clears the parent id of the oldest kept snapshot):
then it raises `LedgerError` rather than load everything again as new.
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from airflow_provider_rocketmq.spark.load.ledger import LedgerError, OffsetRanges

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

LEDGER_VERSION = "1"
PROP_VERSION = "rocketmq.ledger-version"
PROP_LOAD_ID = "rocketmq.load-id"
PROP_WINDOWS = "rocketmq.windows"
PROP_RANGES = "rocketmq.ranges"
PROP_HELD = "rocketmq.held"
PROP_ROWS = "rocketmq.rows"
# table property every load's commit sets to its load id (tells a rollback from an expired ledger)
LAST_LOAD = "rocketmq.last-load"
COMPRESS_OVER = 2048
_ZLIB = "zlib:"


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def encode_ranges(ranges: OffsetRanges) -> str:
    items = [[t, b, q, [x for iv in ivs for x in iv]] for (t, b, q), ivs in sorted(ranges.by_queue.items())]
    text = json.dumps(items, separators=(",", ":"), ensure_ascii=False)
    if len(text) <= COMPRESS_OVER:
        return text
    return _ZLIB + base64.b64encode(zlib.compress(text.encode(), 9)).decode("ascii")


def decode_ranges(text: str, where: str) -> OffsetRanges:
    """Parse `encode_ranges` output; `LedgerError` naming ``where`` on anything else."""
    try:
        if text.startswith(_ZLIB):
            text = zlib.decompress(base64.b64decode(text[len(_ZLIB):], validate=True)).decode()
        items = json.loads(text)
    except (ValueError, zlib.error) as exc:
        raise LedgerError(where, f"not a valid ranges value ({exc})") from None
    if not isinstance(items, list):
        raise LedgerError(where, "expected a JSON list of [topic, broker, queue_id, [start, end, ...]]")
    parsed: list[tuple[tuple[str, str, int], int, int]] = []
    for i, item in enumerate(items):
        ok = (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str) and isinstance(item[1], str)
              and _is_int(item[2]) and isinstance(item[3], list) and len(item[3]) % 2 == 0
              and all(_is_int(x) for x in item[3]))
        if not ok:
            raise LedgerError(where, f"item {i}: expected [topic, broker, queue_id, [start, end, ...]]")
        bounds: list[int] = item[3]
        for start, end in zip(bounds[::2], bounds[1::2], strict=True):  # even length: checked above
            if not 0 <= start < end:
                raise LedgerError(where, f"item {i}: needs 0 <= start < end, got [{start}, {end})")
            parsed.append(((item[0], item[1], item[2]), start, end))
    return OffsetRanges.of(parsed)


@dataclass(frozen=True)
class LoadSnapshot:
    """One load's snapshot, as read back from its summary."""

    snapshot_id: int
    load_id: str
    windows: tuple[str, ...]
    ranges: OffsetRanges
    held: OffsetRanges
    rows: int


def summary_properties(load_id: str, windows: tuple[str, ...], ranges: OffsetRanges, held: OffsetRanges,
                       rows: int) -> dict[str, str]:
    """The summary properties of a load's snapshot (``held``: all the table holds with it)."""
    return {PROP_VERSION: LEDGER_VERSION, PROP_LOAD_ID: load_id,
            PROP_WINDOWS: json.dumps(list(windows), separators=(",", ":"), ensure_ascii=False),
            PROP_RANGES: encode_ranges(ranges), PROP_HELD: encode_ranges(held), PROP_ROWS: str(rows)}


def _summary(snapshot: Snapshot) -> dict[str, Any]:
    summary = snapshot.summary
    return dict(summary.additional_properties) if summary is not None else {}


def load_of(snapshot: Snapshot) -> LoadSnapshot | None:
    """The load a snapshot records, or None for another writer's snapshot."""
    props = _summary(snapshot)
    if PROP_VERSION not in props:
        return None
    where = f"snapshot {snapshot.snapshot_id}"
    if props[PROP_VERSION] != LEDGER_VERSION:
        raise LedgerError(where, f"{PROP_VERSION} {props[PROP_VERSION]!r} is not supported (expected "
                          f"{LEDGER_VERSION}; written by a newer loader?)")
    missing = [k for k in (PROP_LOAD_ID, PROP_WINDOWS, PROP_RANGES, PROP_HELD, PROP_ROWS) if k not in props]
    if missing:
        raise LedgerError(where, f"summary lacks {', '.join(missing)}")
    try:
        windows = json.loads(props[PROP_WINDOWS])
        rows = int(props[PROP_ROWS])
    except ValueError:
        windows, rows = None, -1
    if not (isinstance(windows, list) and all(isinstance(w, str) for w in windows)) or rows < 0:
        raise LedgerError(where, f"{PROP_WINDOWS} must be a JSON list of strings and {PROP_ROWS} an integer")
    return LoadSnapshot(snapshot.snapshot_id, props[PROP_LOAD_ID], tuple(windows),
                        decode_ranges(props[PROP_RANGES], f"{where} {PROP_RANGES}"),
                        decode_ranges(props[PROP_HELD], f"{where} {PROP_HELD}"), rows)


@dataclass(frozen=True)
class TableLedger:
    """What a table holds as of one metadata version: ``base`` is main's snapshot id then."""

    held: OffsetRanges
    last: LoadSnapshot | None
    base: int | None


def _lineage(metadata: TableMetadata) -> tuple[list[Snapshot], bool]:
    """main's current snapshot and its ancestors still in the metadata, newest first; and whether
    the history is complete (it ends at a snapshot without a parent, or there is no snapshot)."""
    out: list[Snapshot] = []
    ref = metadata.refs.get("main")
    snapshot_id = ref.snapshot_id if ref is not None else None
    while snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            return out, False
        out.append(snapshot)
        snapshot_id = snapshot.parent_snapshot_id
    return out, True


def read_ledger(metadata: TableMetadata, table: str) -> TableLedger:
    """The ranges the table holds (see the module docstring); `LedgerError` when it cannot tell."""
    lineage, complete = _lineage(metadata)
    base = lineage[0].snapshot_id if lineage else None
    for snapshot in lineage:
        load = load_of(snapshot)
        if load is not None:
            return TableLedger(load.held, load, base)
    last = metadata.properties.get(LAST_LOAD)
    if last is not None:
        kept = any(_summary(s).get(PROP_LOAD_ID) == last for s in metadata.snapshots)
        if not complete or not kept:
            raise LedgerError(table, f"the table was loaded (last by load {last}) but main's history no longer "
                              "holds a load snapshot: it was expired while another writer's snapshot was current. "
                              "The loaded offset ranges are unknown, so this load stops rather than risk "
                              "duplicates. When expiring snapshots keep the newest one whose summary has "
                              f"{PROP_HELD}; if the table holds none of the loaded rows any more, remove the table "
                              f"property {LAST_LOAD} to load from scratch")
    return TableLedger(OffsetRanges(), None, base)


def find_load(metadata: TableMetadata, load_id: str) -> LoadSnapshot | None:
    """The snapshot load ``load_id`` committed, if it is in main's history (an unknown commit outcome)."""
    for snapshot in _lineage(metadata)[0]:
        if _summary(snapshot).get(PROP_LOAD_ID) == load_id:
            return load_of(snapshot)
    return None
