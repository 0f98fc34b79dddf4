"""The contract every output kind of `load_window.py` implements (no Spark, no Airflow here).

An *output kind* is where a load's rows end up and how the output remembers which queue
offsets it holds: a Parquet dataset in a local directory (spark/load/outputs/local.py), a
Parquet dataset on an object store reached through fsspec (spark/load/outputs/objectstore.py),
an Apache Iceberg table. `load_window.py` drives every kind through the same steps, in
this order, on the Spark driver:

1. ``out = open_output(arg, options)`` (spark/outputs/__init__.py) picks the kind from the
   ``--output`` argument and returns an `Output`; nothing is read or written yet.
   ``out.validate()`` refuses what the kind cannot serve with a `ConfigError` naming the
   field (``--output``, a storage option) and the reason (e.g. "this filesystem has no
   atomic create-if-absent"), or a `LedgerError` for an existing output it cannot read.
   A kind never falls back to a weaker mode silently.
2. ``out.recover()`` finishes what crashed loads left: a load whose commit point was
   reached is rolled *forward* (its files made visible), never back; a load that never
   committed is discarded (or left invisible until it can be discarded safely). Returns
   one human line per load it touched (printed as ``load_window: note: ...``).
3. ``state = out.state()`` reads what the output holds now: `OutputState.held` (the union
   of every committed load's `OffsetRanges`) and an opaque ``token`` the kind later commits
   against (a ledger sequence number, an Iceberg snapshot id).
4. The driver works out the offsets to load (``claims - state.held``). If there are none,
   the kind is not called again: no load, no commit, no empty entry.
5. ``load = out.begin()`` reserves a `PendingLoad` (``load.load_id``, unique per attempt).
6. ``writer = load.writer()`` is a picklable `TaskWriter`. Spark ships it to the executors;
   each task calls ``writer.write(batches, task_tag)`` with the Arrow record batches of its
   partition (every output column, ``window_id`` included, bodies already converted) and
   returns small `DataFile` descriptors (path, rows, bytes, window id). Rows never pass
   through the driver; only descriptors do. ``task_tag`` is unique per task *attempt*
   (partition and attempt number), so a retried or speculative attempt never overwrites
   another's file; files of failed attempts are simply never listed in a commit.
   A writer must make its files durable before returning (fsync, or a completed upload)
   and must write them where readers of the output do not look yet (a ``_``-prefixed
   staging prefix, or table data files that no snapshot references).
7. ``load.commit(state, ranges, windows, files, rows)`` is the commit point, atomic: after
   it returns the load is committed (whatever happens to the process next, `recover` rolls
   it forward); if it raises, nothing of the load is committed. It must detect a concurrent
   load that committed since ``state`` and whose ranges meet ``ranges``: then it raises
   `LedgerConflict` (the job exits 3; running it again loads what is still missing). A
   concurrent commit whose ranges do not meet this load's is not a conflict: the kind
   retries on the new state (a new ledger number, a new table snapshot). Two loads of one
   output never both commit the same offset.
8. ``load.publish()`` makes the committed files visible where the kind needs a separate step
   (Parquet: move or copy out of the staging prefix); idempotent, safe to repeat, and
   repeated by `recover` after a crash. Kinds whose commit is the publication (Iceberg)
   do nothing here.
9. ``load.close()`` releases what the load holds (locks, staging leftovers). On any error
   before the commit point the driver calls ``load.abort()`` instead, which removes what
   the load wrote (best effort: what it leaves stays invisible and `recover` removes it).

Exit codes and messages stay those of load_window.py: `LedgerConflict` -> 3,
`ConfigError`/`LedgerError` -> 2. Crash points for the fault tests are `crash_hook` names
(spark/load/ledger.py): ``task_write`` (a task kills the driver while tasks write),
``before_commit``, ``before_publish``, ``mid_publish``; a kind calls the ones that apply.
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
        """Write ``batches`` (may be empty) as durable, not yet visible data files; return them."""
        ...


@runtime_checkable
class PendingLoad(Protocol):
    """One load of an output between `Output.begin` and `close`/`abort`."""

    load_id: str

    def writer(self) -> TaskWriter:
        ...

    def commit(self, base: OutputState, ranges: OffsetRanges, windows: Sequence[str],
               files: Sequence[DataFile], rows: int) -> None:
        """The atomic commit point (`LedgerConflict` on an overlapping concurrent commit)."""
        ...

    def publish(self) -> None:
        """Make the committed files visible (idempotent; no-op where the commit publishes)."""
        ...

    def abort(self) -> None:
        """Nothing was committed: remove what this load wrote (best effort)."""
        ...

    def close(self) -> None:
        """After a successful commit (and publish): release what the load holds."""
        ...


@runtime_checkable
class Output(Protocol):
    """One output (``--output``) of one kind."""

    kind: str  # "local", "objectstore", "iceberg", ...
    url: str  # what messages name it by (never carries credentials)

    def validate(self) -> None:
        """Refuse what this kind cannot serve: `ConfigError(field, reason)` / `LedgerError`."""
        ...

    def recover(self) -> list[str]:
        """Roll committed crashed loads forward, discard uncommitted ones; one note per load."""
        ...

    def state(self) -> OutputState:
        ...

    def begin(self) -> PendingLoad:
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
