"""The contract every output kind of the load implements (no Spark, no Airflow here).

An output kind is where a load's rows end up and how the output remembers the queue offsets it
holds. `open_output` (spark/load/outputs/__init__.py) picks the kind from ``--output``, and
load_window.py drives every kind through the same steps on the Spark driver, in this order:
`Output.validate`, `Output.recover`, `Output.state`; then, only if there are offsets to load,
`Output.begin`, `PendingLoad.writer` (shipped to the Spark tasks), `PendingLoad.commit` (the atomic
commit point), `PendingLoad.publish` and `PendingLoad.close` - or `PendingLoad.abort` on any error
before the commit. What each step must guarantee is in its docstring. `LedgerConflict` makes the
job exit 3, `ConfigError`/`LedgerError` exit 2. A kind calls the crash points of
spark/load/crash_points.py that apply to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges

if TYPE_CHECKING:
    import pyarrow as pa

# the Arrow schema of the descriptors tasks send back to the driver (spark/load/outputs/tasks.py)
DATA_FILE_FIELDS = ("path", "rows", "bytes", "window_id")


@dataclass(frozen=True)
class DataFile:
    """One data file a Spark task wrote for a load; small, sent back to the driver.

    ``path``: where the file is, as the kind understands it (Parquet kinds: relative to the
    load's staging prefix, e.g. ``window_id=w1/part-....parquet``; Iceberg: the file's
    absolute URL). ``rows``/``bytes``: its row count and size. ``window_id``: every row of
    the file belongs to this window (writers split by window id)."""

    path: str
    rows: int
    bytes: int
    window_id: str


@dataclass(frozen=True)
class OutputState:
    """What an output holds at one moment: ``held`` offsets and the kind's ``token`` for that
    moment (the base a load commits against; opaque to load_window.py)."""

    held: OffsetRanges
    token: Any = None


@runtime_checkable
class TaskWriter(Protocol):
    """Writes one Spark partition's rows; pickled to the executors (keep it small: no clients,
    no open files; credentials it carries are never printed)."""

    def write(self, batches: Iterable[pa.RecordBatch], task_tag: str) -> list[DataFile]:
        """Write ``batches`` (may be empty: every output column, ``window_id`` included, bodies
        converted) as data files; return their small descriptors (rows never reach the driver).

        Files are durable when this returns (fsync, or a completed upload) and where readers of the
        output do not look yet (a ``_`` staging prefix, or data files no snapshot references).
        ``task_tag`` is unique per task *attempt*, so a retried or speculative attempt never
        overwrites another's file; files of failed attempts are simply never listed in a commit."""
        ...


@runtime_checkable
class PendingLoad(Protocol):
    """One load of an output between `Output.begin` and `close`/`abort`.

    Optional, looked up by name where a kind has them: ``discard(files)`` deletes files a plan wrote
    before it gave up (kinds whose staging `abort` would not remove them: Iceberg);
    ``json_variant = False``: ``--body-format json`` bodies stay validated text (no VARIANT);
    ``spark_target()``/``spark_written()``: where ``--writer spark`` writes and the files it left."""

    load_id: str

    def writer(self) -> TaskWriter:
        ...

    def commit(self, base: OutputState, ranges: OffsetRanges, windows: Sequence[str],
               files: Sequence[DataFile], rows: int) -> None:
        """The atomic commit point: once it returns the load is committed (whatever happens to the
        process next, `Output.recover` rolls it forward); if it raises, nothing of it is.

        A load committed since ``base`` whose ranges meet ``ranges`` makes it raise
        `LedgerConflict`; one whose ranges do not is no conflict: the kind retries on the new state.
        So two loads of one output never both commit the same offset."""
        ...

    def publish(self) -> None:
        """Make the committed files visible where the kind needs a step of its own (Parquet: out of
        the staging prefix); idempotent, repeated by `Output.recover` after a crash; a no-op where
        the commit publishes (Iceberg)."""
        ...

    def abort(self) -> None:
        """Nothing was committed: remove what this load wrote (best effort: what stays is invisible
        and `Output.recover` removes it)."""
        ...

    def close(self) -> None:
        """After a successful commit (and publish): release what the load holds (locks, leftovers)."""
        ...


@runtime_checkable
class Output(Protocol):
    """One output (``--output``) of one kind."""

    kind: str  # "local", "objectstore", "iceberg", ...
    url: str  # what messages name it by (never carries credentials)

    def validate(self) -> None:
        """Refuse what this kind cannot serve: `ConfigError` naming the field (``--output``, a storage
        option) and the reason, or `LedgerError` for an existing output it cannot read. A kind never
        falls back to a weaker mode silently."""
        ...

    def recover(self) -> list[str]:
        """Finish what crashed loads left: a load that reached its commit point is rolled forward
        (its files made visible), never back; one that did not is discarded (or left invisible
        until it can be discarded safely). One human line per load touched."""
        ...

    def state(self) -> OutputState:
        """What the output holds now, and the token a load commits against."""
        ...

    def begin(self) -> PendingLoad:
        """Reserve a load (``load_id`` unique per attempt); called only when there is something to load."""
        ...


def batches_by_window(batches: Iterable[pa.RecordBatch], column: str = "window_id"
                      ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Split record batches by their ``window_id`` value (rows keep their order); for writers
    that write one file per window id."""
    import pyarrow.compute as pc

    for batch in batches:
        if batch.num_rows == 0:
            continue
        ids = batch.column(batch.schema.get_field_index(column))
        values = pc.unique(ids).to_pylist()
        if len(values) == 1:
            yield str(values[0]), batch
            continue
        for value in values:
            yield str(value), batch.filter(pc.equal(ids, value))
