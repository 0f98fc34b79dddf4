"""What a load's Spark task does with the rows it reads, whoever reads them (no Spark here).

A task gets its rows as Arrow record batches - read by itself from staged Parquet files or from the
brokers (spark/load/direct_plan.py), or handed over by Spark (spark/load/general_plan.py) - and
`TaskRows.take` classifies each row against its manifest's ranges (a `ManifestSpec`, built on the
driver from spark/load/claims.py):

- ``NEW``: in the manifest's own range: converted per ``--body-format`` and written;
- ``DUPLICATE``: a new offset that a manifest earlier in load order owns: counted, not written;
- ``LOADED``: an offset the output holds: counted, not written;
- ``OUTSIDE``: an offset the manifest does not claim: the task stops and the load fails.

Per queue, the task records the offsets of the rows it wrote as intervals of strictly increasing
runs (`TaskResult.intervals`); the driver's `check_disjoint` proves from them, before the commit,
that no offset was written twice: within a run offsets increase, and runs of all tasks do not
overlap. A staged window holding an offset twice fails that proof (`NeedsDedup`), never the output.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from airflow_provider_rocketmq.spark.load.outputs import DataFile

# (broker index, queue id) in one int64: queue ids are 32-bit
_QUEUE_SHIFT = 1 << 32
_QUEUE_BIAS = 1 << 31
NEW, LOADED, OUTSIDE, DUPLICATE = 0, 1, 2, 3
# increasing runs of one queue's new offsets in one batch beyond which the batch counts as unordered
# (the proof would need an interval per run: a shuffled window is left to the dedup plan)
MAX_RUNS_PER_BATCH = 64

Ranges = tuple[tuple[int, ...], tuple[int, ...]]  # sorted starts, ends


class NeedsDedup(Exception):
    """The rows may hold an offset twice: only a plan that removes repeated offsets may load them."""


@dataclass(frozen=True)
class ManifestSpec:
    """What a task needs to classify the rows of one manifest (small, pickled into tasks)."""

    order: int  # the manifest's place in load order
    window_id: str
    topic: str
    brokers: tuple[str, ...]  # sorted; a row's broker index is its position here
    # queue code -> (own, duplicate, loaded) ranges
    ranges: dict[int, tuple[Ranges, Ranges, Ranges]]


@dataclass
class TaskResult:
    files: list[DataFile] = field(default_factory=list)
    read: dict[int, int] = field(default_factory=dict)  # per manifest order: rows read
    loaded: dict[int, int] = field(default_factory=dict)  # ... rows whose offset the output held
    duplicates: dict[int, int] = field(default_factory=dict)  # ... rows another manifest owns
    new: dict[int, int] = field(default_factory=dict)  # ... rows handed to the writer
    intervals: dict[tuple[int, int], list[list[int]]] = field(default_factory=dict)  # (order, code) -> [lo, hi]
    unordered: bool = False  # a batch held a queue's new offsets in too many increasing runs
    outside: tuple[str, str, str, int, int] | None = None  # window, topic, broker, queue id, offset
    failure: str | None = None  # why the rows could not be read or converted: the load fails with it
    read_seconds: float = 0.0  # reading, classifying and converting
    write_seconds: float = 0.0  # the writer's own time (encoding, compression, upload)

    @property
    def stopped(self) -> bool:
        """The load fails (`outside` or `failure`): the task writes nothing more."""
        return self.outside is not None or self.failure is not None


def queue_code(broker_index: int, queue_id: int) -> int:
    return broker_index * _QUEUE_SHIFT + (queue_id + _QUEUE_BIAS)


def _split(r: OffsetRanges, key: tuple[str, str, int]) -> Ranges:
    iv = r.by_queue.get(key, ())
    return tuple(s for s, _ in iv), tuple(e for _, e in iv)


def manifest_spec(order: int, window_id: str, topic: str, own: OffsetRanges, loaded: OffsetRanges,
                  duplicate: OffsetRanges | None = None) -> ManifestSpec:
    """The spec of a manifest whose rows are written in ``own``, counted in ``duplicate`` and ``loaded``."""
    duplicate = duplicate or OffsetRanges()
    keys = {k for k in (*own.by_queue, *loaded.by_queue, *duplicate.by_queue) if k[0] == topic}
    brokers = tuple(sorted({b for _, b, _ in keys}))  # a manifest claims offsets of its own topic only
    ranges = {queue_code(brokers.index(b), q): (_split(own, (t, b, q)), _split(duplicate, (t, b, q)),
                                                 _split(loaded, (t, b, q)))
              for t, b, q in keys}
    return ManifestSpec(order, window_id, topic, brokers, ranges)


def check_disjoint(results: list[TaskResult]) -> None:
    """Raise `NeedsDedup` unless the new rows of all tasks can hold no offset twice."""
    if any(r.unordered for r in results):
        raise NeedsDedup("a batch holds a queue's offsets far out of order")
    by_key: dict[tuple[int, int], list[list[int]]] = {}
    for r in results:
        for key, intervals in r.intervals.items():
            by_key.setdefault(key, []).extend(intervals)
    for intervals in by_key.values():
        intervals.sort()
        for prev, cur in itertools.pairwise(intervals):
            if cur[0] <= prev[1]:
                raise NeedsDedup("two staged files or row groups cover the same offsets of a queue")


def output_schema(source: pa.Schema, body_format: str, drop: tuple[str, ...] = ()) -> pa.Schema:
    """The Arrow schema a plan hands the writers: ``source``'s columns but ``drop`` (every column
    nullable, as Spark's Parquet reader makes them; dictionaries decoded; body as text for utf8),
    ``window_id`` last."""
    import pyarrow as pa

    fields = []
    for f in source:
        if f.name == "window_id" or f.name in drop:
            continue
        typ = f.type
        if pa.types.is_dictionary(typ):
            typ = typ.value_type
        if f.name == "body" and body_format == "utf8" and (pa.types.is_binary(typ) or pa.types.is_large_binary(typ)):
            typ = pa.large_string() if pa.types.is_large_binary(typ) else pa.string()
        fields.append(pa.field(f.name, typ, nullable=True))
    fields.append(pa.field("window_id", pa.string(), nullable=True))
    return pa.schema(fields)


def column(batch: pa.RecordBatch, name: str) -> pa.Array:
    """A column of ``batch``, dictionary-decoded."""
    import pyarrow as pa

    col = batch.column(batch.schema.get_field_index(name))
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    return col


def _within(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    import numpy as np

    if not len(starts):
        return np.zeros(len(values), dtype=bool)
    i = np.searchsorted(starts, values, side="right") - 1
    return (i >= 0) & (values < ends[np.clip(i, 0, None)])


class _Classifier:
    """Classifies the rows of one manifest's batches (runs in the task)."""

    def __init__(self, spec: ManifestSpec) -> None:
        import numpy as np
        import pyarrow as pa

        self.spec = spec
        self.brokers = pa.array(spec.brokers, pa.string())
        self.ranges = {code: tuple(np.asarray(part, dtype=np.int64) for r in rs for part in r)
                       for code, rs in spec.ranges.items()}

    def classify(self, batch: pa.RecordBatch, result: TaskResult) -> np.ndarray:
        """Each row's class; records the new rows' intervals in ``result``."""
        import numpy as np
        import pyarrow.compute as pc

        topic_ok = pc.fill_null(pc.equal(column(batch, "topic"), self.spec.topic), False).to_numpy(
            zero_copy_only=False)
        broker = pc.fill_null(pc.index_in(column(batch, "broker"), value_set=self.brokers), -1).to_numpy(
            zero_copy_only=False).astype(np.int64)
        qid = pc.fill_null(column(batch, "queue_id"), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        offset = pc.fill_null(column(batch, "queue_offset"), -1).to_numpy(zero_copy_only=False).astype(np.int64)
        code = np.where(topic_ok & (broker >= 0), broker * _QUEUE_SHIFT + (qid + _QUEUE_BIAS), -1)
        order = np.argsort(code, kind="stable")  # stable: a queue's rows keep their order
        codes, offsets = code[order], offset[order]
        cuts = np.flatnonzero(codes[1:] != codes[:-1]) + 1
        cls_sorted = np.full(len(codes), OUTSIDE, dtype=np.int8)
        for s, e in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(codes)])), strict=True):
            c = int(codes[s])
            r = self.ranges.get(c)
            if r is None:
                continue  # outside: no range of this manifest on the row's queue
            seg = offsets[s:e]
            own = _within(seg, r[0], r[1])
            cls_sorted[s:e] = np.select([own, _within(seg, r[2], r[3]), _within(seg, r[4], r[5])],
                                        [NEW, DUPLICATE, LOADED], OUTSIDE)
            self._record(seg[own], c, result)
        cls = np.empty(len(codes), dtype=np.int8)
        cls[order] = cls_sorted
        return cls

    def _record(self, kept: np.ndarray, code: int, result: TaskResult) -> None:
        """Add the strictly increasing runs of ``kept`` (one queue's new offsets, in row order) to the
        queue's intervals; a run that continues the last interval without a hole extends it."""
        import numpy as np

        if not len(kept):
            return
        breaks = np.flatnonzero(kept[1:] <= kept[:-1]) + 1
        if len(breaks) >= MAX_RUNS_PER_BATCH:
            result.unordered = True
            return
        intervals = result.intervals.setdefault((self.spec.order, code), [])
        for a, b in itertools.pairwise((0, *breaks.tolist(), len(kept))):
            lo, hi = int(kept[a]), int(kept[b - 1])
            if intervals and lo == intervals[-1][1] + 1:
                intervals[-1][1] = hi
            else:
                intervals.append([lo, hi])


class TaskRows:
    """One task's classification, counts and conversion of the batches it reads, into ``result``."""

    def __init__(self, specs: dict[int, ManifestSpec], body_format: str, result: TaskResult) -> None:
        self.specs = specs
        self.body_format = body_format
        self.result = result
        self._classifiers: dict[int, _Classifier] = {}

    def take(self, order: int, batch: pa.RecordBatch, schema: pa.Schema, *,
             with_window: bool = True, bad_json: pa.Array | None = None) -> pa.RecordBatch | None:
        """The rows of ``batch`` (all of manifest ``order``) that the task writes, as ``schema`` has
        them (``window_id`` the manifest's when ``with_window``, else ``batch``'s column); None when
        none is. Sets ``result.outside`` (and returns None) at a row the manifest does not claim, or
        ``result.failure`` at a new row whose ``bad_json`` flag is set."""
        import numpy as np
        import pyarrow as pa

        result = self.result
        spec = self.specs[order]
        cl = self._classifiers.get(order) or self._classifiers.setdefault(order, _Classifier(spec))
        cls = cl.classify(batch, result)
        n = batch.num_rows
        counts = np.bincount(cls, minlength=4)
        for where, k in ((result.read, n), (result.loaded, counts[LOADED]), (result.duplicates, counts[DUPLICATE]),
                         (result.new, counts[NEW])):
            where[order] = where.get(order, 0) + int(k)
        if counts[OUTSIDE]:
            i = int(np.flatnonzero(cls == OUTSIDE)[0])
            result.outside = (spec.window_id, *(column(batch, c)[i].as_py()
                                                for c in ("topic", "broker", "queue_id", "queue_offset")))
            return None
        if not counts[NEW]:
            return None
        if counts[NEW] < n:
            keep = pa.array(cls == NEW)
            batch = batch.filter(keep)
            bad_json = None if bad_json is None else bad_json.filter(keep)
        if bad_json is not None and bad_json.true_count:
            i = int(np.flatnonzero(bad_json.to_numpy(zero_copy_only=False))[0])
            t, b, q, o = (column(batch, c)[i].as_py() for c in ("topic", "broker", "queue_id", "queue_offset"))
            result.failure = f"--body-format json: body of {t} {b}:{q} offset {o} is not valid JSON"
            return None
        window = pa.scalar(spec.window_id, pa.string()) if with_window else None
        return self._convert(batch, schema, window)

    def _convert(self, batch: pa.RecordBatch, schema: pa.Schema, window: pa.Scalar | None) -> pa.RecordBatch:
        import pyarrow as pa

        cols = []
        for f in schema:
            if f.name == "window_id" and window is not None:
                cols.append(pa.repeat(window, batch.num_rows))
                continue
            col = column(batch, f.name)
            if f.name == "body" and self.body_format == "utf8" and not pa.types.is_string(col.type) \
                    and not pa.types.is_large_string(col.type):
                col = col.view(f.type)  # as Spark's binary -> string cast: the bytes unchanged
            cols.append(col.cast(f.type) if col.type != f.type else col)
        return pa.RecordBatch.from_arrays(cols, schema=schema)
