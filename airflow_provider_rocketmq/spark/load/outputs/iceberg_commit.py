"""The commit of an Iceberg load: its data files and its ledger entry in one snapshot, or nothing.

One attempt: check the table's ledger against the load's ranges, build a fast-append snapshot
(the data files plus the summary properties of spark/load/outputs/iceberg_ledger.py) on main's current
snapshot, and ask the catalog to swap the table's metadata on the condition that main still
points at that snapshot (Iceberg's ``AssertRefSnapshotId`` requirement). Whether that swap is
atomic is the catalog's business: SQL (a conditional UPDATE), Hive (a lock), Glue (a version
check), DynamoDB (a conditional put) and REST catalogs that implement the spec are.

When another writer moved main first the catalog refuses (``CommitFailedException``) and nothing
of the attempt is visible; the next attempt starts from the new table state: if a concurrent load
now holds any of this load's ranges, `LedgerConflict` (this load's files are then never
referenced); otherwise the snapshot is rebuilt on the new head with the new cumulative ledger.

pyiceberg >= 0.11 retries a failed commit by itself, re-applying the append on the new head without
knowing about the ledger, so two loads of the same offsets could both land. The commit therefore
runs on a copy of the table whose in-memory properties say ``commit.retry.num-retries=0`` (never
written to the catalog: only the snapshot and ref updates are sent) and retries here instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from airflow_provider_rocketmq.spark.load import crash_points
from airflow_provider_rocketmq.spark.load.ledger import (
    CommitOutcomeUnknown,
    LedgerConflict,
    LedgerError,
    OffsetRanges,
)

from .base import DataFile
from .iceberg_files import iceberg_data_files
from .iceberg_ledger import LAST_LOAD, LoadSnapshot, TableLedger, find_load, read_ledger, summary_properties

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 8


def _without_retries(table: Table) -> Table:
    """``table`` with pyiceberg's own commit retries off (in memory only; see the module docstring)."""
    from pyiceberg.table import Table, TableProperties

    props = {**table.metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    metadata = table.metadata.model_copy(update={"properties": props})
    return Table(table.name(), metadata, table.metadata_location, table.io, table.catalog)


def _conflict(table: Table, ledger: TableLedger, ranges: OffsetRanges) -> LedgerConflict | None:
    clash = ledger.held & ranges
    if not clash:
        return None
    (topic, broker, queue_id), start, end = next(clash.intervals())
    by = f"load {ledger.last.load_id} (snapshot {ledger.last.snapshot_id})" if ledger.last else "another load"
    return LedgerConflict(".".join(table.name()), f"{by} committed {topic} {broker}:{queue_id} offsets "
                          f"[{start}, {end}) while this load ran; nothing of this load was committed: run it again")


def commit_load(table: Table, files: Sequence[DataFile], *, load_id: str, windows: Sequence[str],
                ranges: OffsetRanges, rows: int, base: TableLedger) -> LoadSnapshot:
    """Commit ``files`` as one snapshot recording ``ranges``; returns the load's snapshot.

    ``base`` is the ledger the load planned against. Raises `LedgerConflict` when a concurrent load
    committed overlapping ranges, or the catalog refused `COMMIT_ATTEMPTS` attempts (nothing of this
    load is in the table either way), `CommitOutcomeUnknown` when the catalog's answer was lost."""
    from pyiceberg.exceptions import CommitFailedException

    committer = _Committer(table, base, files, load_id, tuple(sorted(set(windows))), ranges, rows)
    try:
        for retry in Retrying(stop=stop_after_attempt(COMMIT_ATTEMPTS), reraise=True,
                              wait=wait_random_exponential(multiplier=0.2, max=5.0),
                              retry=retry_if_exception_type(CommitFailedException)):
            with retry:
                return committer.attempt()
    except CommitFailedException as exc:
        raise LedgerConflict(committer.name, f"the catalog refused {COMMIT_ATTEMPTS} commits of load {load_id} "
                             f"(other writers kept changing the table; last: {exc}); nothing of this load was "
                             "committed: run it again") from exc
    raise AssertionError("unreachable")  # pragma: no cover - Retrying re-raises


class _Committer:
    def __init__(self, table: Table, base: TableLedger, files: Sequence[DataFile], load_id: str,
                 windows: tuple[str, ...], ranges: OffsetRanges, rows: int) -> None:
        self.table, self.ledger = table, base
        self.data_files = iceberg_data_files(table.metadata, table.io, files)
        self.load_id, self.windows, self.ranges, self.rows = load_id, windows, ranges, rows
        self.attempts = 0

    @property
    def name(self) -> str:
        return ".".join(self.table.name())

    def attempt(self) -> LoadSnapshot:
        from pyiceberg.exceptions import CommitFailedException

        if self.attempts:  # a concurrent commit moved main: start from the table as it is now
            self.table = self.table.refresh()
            self.ledger = read_ledger(self.table.metadata, self.name)
        self.attempts += 1
        conflict = _conflict(self.table, self.ledger, self.ranges)
        if conflict is not None:
            raise conflict
        props = summary_properties(self.load_id, self.windows, self.ranges, self.ledger.held | self.ranges,
                                   self.rows)
        tx = _without_retries(self.table).transaction()
        tx.set_properties({LAST_LOAD: self.load_id})
        with tx.update_snapshot(snapshot_properties=props).fast_append() as append:
            for data_file in self.data_files:
                append.append_data_file(data_file)
        crash_points.reached(crash_points.MID_COMMIT)  # manifests and manifest list written, the catalog not asked
        try:
            committed = tx.commit_transaction()
        except CommitFailedException as exc:
            log.warning("commit of load %s refused (%s); retrying on the table's new state", self.load_id, exc)
            raise
        except Exception as exc:
            found = self._landed()
            if found is not None:
                return found
            raise CommitOutcomeUnknown(self.name, f"the commit of load {self.load_id} failed ({exc}) and its "
                                       "snapshot is not in the table now; its data files are kept in case it "
                                       "lands: run the load again") from exc
        found = find_load(committed.metadata, self.load_id)
        if found is None:  # pragma: no cover - the catalog accepted the commit
            raise LedgerError(self.name, f"load {self.load_id} committed but its snapshot is missing")
        return found

    def _landed(self) -> LoadSnapshot | None:
        try:
            return find_load(self.table.refresh().metadata, self.load_id)
        except Exception:
            return None
