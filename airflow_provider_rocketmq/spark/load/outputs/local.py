"""The local kind: a Parquet dataset in a local or mounted POSIX directory (spark/load/ledger.py).

The commit point is a hard link of the next ledger entry (fails if it exists); a live
load is told from a crashed one by its ``flock`` (released by the kernel when the driver
dies), so `recover` removes a crashed uncommitted load at once and never touches a live one.
Tasks write straight into ``_rocketmq_loads/<load_id>/data/`` (the directory must be
the same one on the driver and every executor: a local directory in local mode, a shared
mount on a cluster), fsync each file and return its descriptor.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from airflow_provider_rocketmq.spark.load import ledger as lg

from .base import DataFile, OutputState
from .parquet_files import fsync_file, write_partition

if TYPE_CHECKING:
    import pyarrow as pa

KIND = "local"


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
    def __init__(self, store: lg.OutputStore, load: lg.LoadDir) -> None:
        self.store = store
        self.load = load
        self.load_id = load.load_id
        self._entry: lg.LedgerEntry | None = None

    def writer(self) -> LocalTaskWriter:
        return LocalTaskWriter(str(self.load.data_dir))

    def spark_target(self) -> str:
        """Where ``--writer spark`` lets ``df.write.partitionBy("window_id")`` write."""
        return str(self.load.data_dir)

    def spark_written(self) -> list[DataFile]:
        """The files a successful ``df.write`` left (Spark's commit protocol: no failed attempt's)."""
        return [DataFile(f.source, f.rows, f.bytes, _window_of(f.source)) for f in self.load.seal()]

    def commit(self, base: OutputState, ranges: lg.OffsetRanges, windows: Sequence[str],
               files: Sequence[DataFile], rows: int) -> None:
        ledger = base.token
        assert isinstance(ledger, lg.Ledger)
        for d in {(self.load.data_dir / f.path).parent for f in files} | {self.load.data_dir}:
            if d.is_dir():
                lg._fsync_path(d, directory=True)  # the tasks fsynced the files, not their directories
        published = [lg.PublishedFile(f.path, _published_name(f.path, self.load_id, i), f.rows, f.bytes)
                     for i, f in enumerate(sorted(files, key=lambda f: f.path))]
        self._entry = self.store.commit(self.load, ledger, ranges, windows, published, rows)

    def publish(self) -> None:
        assert self._entry is not None
        lg.crash_hook("before_publish")
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
        self.store = lg.OutputStore(path)
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
