"""The Iceberg kind: an Apache Iceberg table in any pyiceberg catalog (extra ``iceberg``).

``--output iceberg://<catalog>/<namespace>.<table>[?create=true][&partition=window_id|none]``
(spark/load/outputs/iceberg_table.py: catalog properties come from pyiceberg's configuration and a
properties file, never from the command line).

- **Ledger**: in the table itself, in the summary of the one snapshot each load commits
  (spark/load/outputs/iceberg_ledger.py); `state` reads it from main's history.
- **Writing**: Spark tasks write Parquet data files through the table's FileIO
  (spark/load/outputs/iceberg_files.py); only descriptors reach the driver.
- **Commit point**: the catalog's atomic swap of the table's metadata, conditional on main
  still being the snapshot the load checked (spark/load/outputs/iceberg_commit.py); a concurrent
  commit makes the load re-check the ledger on the new state: `LedgerConflict` if the other
  load holds any of its offsets, else a new snapshot on the new head. The commit is the
  publication: readers see all of a load's rows once its snapshot is current, and never
  rows of a load that did not commit.
- **Crashes**: nothing to roll forward or back. Files of a load that never committed are
  referenced by no metadata (orphans, invisible); those the driver knows of when a commit is
  refused are deleted; those of a killed driver stay until removed (docs/airflow.md).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from airflow_provider_rocketmq.spark.load import crash_points
from airflow_provider_rocketmq.spark.load.ledger import CommitOutcomeUnknown, OffsetRanges, new_load_id

from .base import DataFile, OutputState
from .iceberg_files import IcebergTaskWriter, delete_files
from .iceberg_ledger import TableLedger, read_ledger
from .iceberg_table import IcebergTarget, io_properties, open_catalog, open_table, parse_target

if TYPE_CHECKING:
    from pyiceberg.table import Table

KIND = "iceberg"


class IcebergPendingLoad:
    json_variant = False  # --body-format json: validated JSON text (pyiceberg writes no VARIANT)

    def __init__(self, table: Table, load_id: str) -> None:
        self.table = table
        self.load_id = load_id
        self._files: list[DataFile] = []
        self._unknown = False

    def writer(self) -> IcebergTaskWriter:
        return IcebergTaskWriter.of(self.table, self.load_id, io_properties(self.table))

    def commit(self, base: OutputState, ranges: OffsetRanges, windows: Sequence[str],
               files: Sequence[DataFile], rows: int) -> None:
        from .iceberg_commit import commit_load

        assert isinstance(base.token, TableLedger)
        self._files = list(files)
        try:
            snapshot = commit_load(self.table, files, load_id=self.load_id, windows=windows, ranges=ranges,
                                   rows=rows, base=base.token)
        except CommitOutcomeUnknown:
            self._unknown = True  # its files may be referenced: abort must keep them
            raise
        _note(f"load {self.load_id} committed snapshot {snapshot.snapshot_id} of {'.'.join(self.table.name())} "
              f"({rows} rows in {len(files)} data files)")

    def publish(self) -> None:
        crash_points.reached(crash_points.BEFORE_PUBLISH)

    def discard(self, files: Sequence[DataFile]) -> None:
        """Delete files tasks wrote for a plan the load gave up before its commit (never referenced)."""
        left = delete_files(self.table.io, (f.path for f in files))
        if left:
            _note(f"load {self.load_id}: could not delete {len(left)} unused data files (never referenced "
                  f"by the table; e.g. {left[0]})")

    def abort(self) -> None:
        """Delete the files this load's commit listed (never referenced: the commit did not land)."""
        if self._unknown or not self._files:
            return
        left = delete_files(self.table.io, (f.path for f in self._files))
        if left:
            _note(f"load {self.load_id}: could not delete {len(left)} uncommitted data files (never "
                  f"referenced by the table; e.g. {left[0]})")

    def close(self) -> None:
        self._files = []


class IcebergOutput:
    """An Iceberg table; the catalog and table are opened by `validate`."""

    kind = KIND

    def __init__(self, arg: str, catalog_properties: Mapping[str, str], body_format: str) -> None:
        self.target: IcebergTarget = parse_target(arg)
        self.url = str(self.target)
        self.catalog_properties = dict(catalog_properties)
        self.body_format = body_format
        self._table: Table | None = None

    @property
    def table(self) -> Table:
        if self._table is None:
            self.validate()
        assert self._table is not None
        return self._table

    def validate(self) -> None:
        catalog = open_catalog(self.target, self.catalog_properties)
        self._table, created = open_table(catalog, self.target, self.body_format)
        if created:
            _note(f"created table {self.target.table_name} at {self._table.metadata.location}")

    def recover(self) -> list[str]:
        return []  # a load is committed by one catalog call or not at all

    def state(self) -> OutputState:
        ledger = read_ledger(self.table.refresh().metadata, self.target.table_name)
        return OutputState(ledger.held, ledger)

    def begin(self) -> IcebergPendingLoad:
        return IcebergPendingLoad(self.table, new_load_id())


def _note(text: str) -> None:
    print(f"load_window: note: {text}", file=sys.stderr, flush=True)
