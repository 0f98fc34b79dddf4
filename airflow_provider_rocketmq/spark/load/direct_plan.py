"""The direct plan: Spark tasks read the staged Parquet files themselves and write the new rows in one pass.

It applies when every manifest to read is staged Parquet, the body format is utf8 or binary, the
writer is ``tasks`` and the manifests' new ranges (claim minus held) are pairwise disjoint. The
driver splits the staged files into runs of whole row groups (`plan_tasks`) and runs one Spark task
per run (``RDD.mapPartitions``: no row enters the JVM or the driver, no shuffle). Each task reads its
row groups with pyarrow (+ fsspec for URLs), classifies each row with numpy against its manifest's
ranges (new, already loaded, outside -> the load fails), converts the body and hands the new rows to
the output's `TaskWriter`; it returns its files, counts and, per queue, the offset intervals its new
rows cover.

Why no offset is written twice: across manifests, a row is written only when its offset lies in its
own manifest's new range, and those ranges are disjoint. Within one manifest, the driver checks that
the intervals every task reported per queue are pairwise disjoint (`check_disjoint`), and within an
interval the offsets come from batches that each were strictly increasing and started above the
previous one's end. If that proof fails (a staged window with a repeated or reordered offset), the
plan gives up before the commit (`PlanGaveUp`) and the general plan loads the windows. So this plan
changes how fast a load runs, never what it writes; its counts have ``duplicates = 0``.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_rocketmq.spark.load.crash_points import TaskCrash
from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges
from airflow_provider_rocketmq.spark.load.plan import LoadInput, PlanGaveUp
from airflow_provider_rocketmq.spark.load.staged import LoadError, is_url, local_path

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from airflow_provider_rocketmq.spark.load.outputs import DataFile, PendingLoad, TaskWriter
    from airflow_provider_rocketmq.spark.load.report import LoadReport

ROWS_PER_TASK = 1_000_000  # at least one task per this many rows, and at least one per core
BATCH_ROWS = 65_536
FOOTER_READERS = 8
# (broker index, queue id) in one int64: queue ids are 32-bit
_QUEUE_SHIFT = 1 << 32
_QUEUE_BIAS = 1 << 31
NEW, LOADED, OUTSIDE = 0, 1, 2


class NeedsDedup(Exception):
    """The staged rows may hold an offset twice: the general plan (with its dedup) must load them."""


@dataclass(frozen=True)
class ManifestSpec:
    """What a task needs to classify the rows of one manifest (small, pickled into tasks)."""

    order: int  # the manifest's place in load order
    window_id: str
    topic: str
    brokers: tuple[str, ...]  # sorted; a row's broker index is its position here
    # queue code -> (new starts, new ends, loaded starts, loaded ends), each sorted
    ranges: dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]]


@dataclass(frozen=True)
class RowGroupRun:
    """Consecutive row groups of one staged file: part of a task's work."""

    order: int  # the manifest's place in load order
    path: str
    row_groups: tuple[int, ...]
    rows: int


@dataclass
class TaskResult:
    files: list[DataFile] = field(default_factory=list)
    read: dict[int, int] = field(default_factory=dict)  # per manifest order: rows read
    loaded: dict[int, int] = field(default_factory=dict)  # ... rows whose offset the output held
    new: dict[int, int] = field(default_factory=dict)  # ... rows handed to the writer
    intervals: dict[tuple[int, int], list[list[int]]] = field(default_factory=dict)  # (order, code) -> [lo, hi]
    unordered: bool = False  # a batch held a queue's offsets out of strict increasing order
    outside: tuple[str, str, str, int, int] | None = None  # window, topic, broker, queue id, offset
    read_seconds: float = 0.0  # reading, classifying and converting
    write_seconds: float = 0.0  # the writer's own time (encoding, compression, upload)


def queue_code(broker_index: int, queue_id: int) -> int:
    return broker_index * _QUEUE_SHIFT + (queue_id + _QUEUE_BIAS)


def manifest_spec(order: int, window_id: str, topic: str, new: OffsetRanges, loaded: OffsetRanges) -> ManifestSpec:
    keys = set(new.by_queue) | set(loaded.by_queue)
    brokers = tuple(sorted({b for t, b, _ in keys if t == topic}))
    ranges = {}
    for key in keys:
        t, broker, qid = key
        if t != topic:
            continue  # a manifest claims offsets of its own topic only
        n, ld = new.by_queue.get(key, ()), loaded.by_queue.get(key, ())
        ranges[queue_code(brokers.index(broker), qid)] = (
            tuple(s for s, _ in n), tuple(e for _, e in n), tuple(s for s, _ in ld), tuple(e for _, e in ld))
    return ManifestSpec(order, window_id, topic, brokers, ranges)


def claims_disjoint(claims: Sequence[OffsetRanges]) -> bool:
    """True when no offset lies in two of ``claims``."""
    seen = OffsetRanges()
    for c in claims:
        if c & seen:
            return False
        seen = seen | c
    return True


def _open_staged(path: str) -> Any:
    if is_url(path):
        import fsspec

        return fsspec.open(path, "rb").open()
    return open(local_path(path), "rb")


def _row_groups(path: str) -> list[int]:
    import pyarrow.parquet as pq

    with _open_staged(path) as fh:
        meta = pq.read_metadata(fh)
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


def plan_tasks(files: Sequence[tuple[int, str]], parallelism: int,
               rows_per_task: int = ROWS_PER_TASK) -> list[list[RowGroupRun]]:
    """Split ``(order, path)`` staged files into runs of whole row groups, in load order:
    at least ``parallelism`` tasks (when there are enough row groups) and at most
    ``rows_per_task`` rows per task where row groups allow. Reads each file's footer."""
    with ThreadPoolExecutor(max_workers=max(1, min(FOOTER_READERS, len(files)))) as pool:
        groups = list(pool.map(lambda f: _row_groups(f[1]), files))
    total = sum(sum(g) for g in groups)
    if total == 0:
        return []
    tasks = max(parallelism, math.ceil(total / rows_per_task))
    target = math.ceil(total / tasks)
    out: list[list[RowGroupRun]] = []
    current: list[RowGroupRun] = []
    current_rows = 0
    for (order, path), sizes in zip(files, groups, strict=True):
        run: list[int] = []
        run_rows = 0
        for i, rows in enumerate(sizes):
            if rows == 0:
                continue
            run.append(i)
            run_rows += rows
            if current_rows + run_rows >= target:
                current.append(RowGroupRun(order, path, tuple(run), run_rows))
                out.append(current)
                current, current_rows, run, run_rows = [], 0, [], 0
        if run:
            current.append(RowGroupRun(order, path, tuple(run), run_rows))
            current_rows += run_rows
    if current:
        out.append(current)
    return out


def check_disjoint(results: Sequence[TaskResult]) -> None:
    """Raise `NeedsDedup` unless the new rows of all tasks can hold no offset twice."""
    if any(r.unordered for r in results):
        raise NeedsDedup("a staged batch holds a queue's offsets out of order")
    by_key: dict[tuple[int, int], list[list[int]]] = {}
    for r in results:
        for key, intervals in r.intervals.items():
            by_key.setdefault(key, []).extend(intervals)
    for intervals in by_key.values():
        intervals.sort()
        for prev, cur in itertools.pairwise(intervals):
            if cur[0] <= prev[1]:
                raise NeedsDedup("two staged files or row groups cover the same offsets of a queue")


def output_schema(staged: pa.Schema, body_format: str) -> pa.Schema:
    """The Arrow schema the general plan hands the writers (Spark's: every column nullable; body
    as text for utf8); ``window_id`` last."""
    import pyarrow as pa

    fields = []
    for f in staged:
        if f.name == "window_id":
            continue
        typ = f.type
        if pa.types.is_dictionary(typ):
            typ = typ.value_type
        if f.name == "body" and body_format == "utf8":
            typ = pa.large_string() if pa.types.is_large_binary(typ) else pa.string()
        fields.append(pa.field(f.name, typ, nullable=True))
    fields.append(pa.field("window_id", pa.string(), nullable=True))
    return pa.schema(fields)


def _column(batch: pa.RecordBatch, name: str) -> pa.Array:
    col = batch.column(batch.schema.get_field_index(name))
    import pyarrow as pa

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
        self.ranges = {code: tuple(np.asarray(r, dtype=np.int64) for r in rs) for code, rs in spec.ranges.items()}

    def classify(self, batch: pa.RecordBatch, result: TaskResult) -> np.ndarray:
        """Each row's class (NEW, LOADED, OUTSIDE); records new rows' intervals in ``result``."""
        import numpy as np
        import pyarrow.compute as pc

        topic_ok = pc.fill_null(pc.equal(_column(batch, "topic"), self.spec.topic), False).to_numpy(
            zero_copy_only=False)
        broker = pc.fill_null(pc.index_in(_column(batch, "broker"), value_set=self.brokers), -1).to_numpy(
            zero_copy_only=False).astype(np.int64)
        qid = pc.fill_null(_column(batch, "queue_id"), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        offset = pc.fill_null(_column(batch, "queue_offset"), -1).to_numpy(zero_copy_only=False).astype(np.int64)
        code = np.where(topic_ok & (broker >= 0), broker * _QUEUE_SHIFT + (qid + _QUEUE_BIAS), -1)
        order = np.argsort(code, kind="stable")  # stable: a queue's rows keep their order
        codes, offsets = code[order], offset[order]
        cuts = np.flatnonzero(codes[1:] != codes[:-1]) + 1
        cls_sorted = np.full(len(codes), OUTSIDE, dtype=np.int8)
        for s, e in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(codes)])), strict=True):
            c = int(codes[s])
            ranges = self.ranges.get(c)
            if ranges is None:
                continue  # outside: no range of this manifest on the row's queue
            seg = offsets[s:e]
            new = _within(seg, ranges[0], ranges[1])
            loaded = _within(seg, ranges[2], ranges[3])
            cls_sorted[s:e] = np.where(new, NEW, np.where(loaded, LOADED, OUTSIDE))
            kept = seg[new]
            if not len(kept):
                continue
            if len(kept) > 1 and not bool(np.all(kept[1:] > kept[:-1])):
                result.unordered = True
            lo, hi = int(kept.min()), int(kept.max())
            intervals = result.intervals.setdefault((self.spec.order, c), [])
            if intervals and lo > intervals[-1][1]:
                intervals[-1][1] = hi  # a run of increasing batches: one interval
            else:
                intervals.append([lo, hi])
        cls = np.empty(len(codes), dtype=np.int8)
        cls[order] = cls_sorted
        return cls


@dataclass(frozen=True)
class DirectTask:
    """One task's work but its row groups: what every task of the load shares (pickled once into the closure)."""

    specs: dict[int, ManifestSpec]
    schema_json: str  # the output Arrow schema, serialized
    body_format: str
    writer: TaskWriter
    fsspec_conf: dict[str, dict[str, Any]]

    def run(self, runs: list[RowGroupRun], task_tag: str) -> TaskResult:
        import pyarrow as pa
        import pyarrow.ipc

        if self.fsspec_conf:  # the driver's fsspec configuration (e.g. $FSSPEC_S3) for staged URLs
            import fsspec.config

            for k, v in self.fsspec_conf.items():
                fsspec.config.conf.setdefault(k, v)
        schema = pyarrow.ipc.read_schema(pa.py_buffer(bytes.fromhex(self.schema_json)))
        result = TaskResult()
        t0 = time.perf_counter()
        result.files = self.writer.write(self._batches(runs, schema, result), task_tag)
        result.write_seconds = max(0.0, time.perf_counter() - t0 - result.read_seconds)
        return result

    def _batches(self, runs: list[RowGroupRun], schema: pa.Schema, result: TaskResult) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        classifiers: dict[int, _Classifier] = {}
        fields = [f for f in schema if f.name != "window_id"]
        for run in runs:
            spec = self.specs[run.order]
            cl = classifiers.get(run.order) or classifiers.setdefault(run.order, _Classifier(spec))
            window = pa.scalar(spec.window_id, pa.string())
            t = time.perf_counter()
            with _open_staged(run.path) as fh:
                for batch in pq.ParquetFile(fh).iter_batches(batch_size=BATCH_ROWS, row_groups=list(run.row_groups),
                                                             use_threads=False):
                    cls = cl.classify(batch, result)
                    n_new = int(np.count_nonzero(cls == NEW))
                    result.read[run.order] = result.read.get(run.order, 0) + batch.num_rows
                    result.loaded[run.order] = result.loaded.get(run.order, 0) + int(np.count_nonzero(cls == LOADED))
                    result.new[run.order] = result.new.get(run.order, 0) + n_new
                    if result.outside is None and bool(np.any(cls == OUTSIDE)):
                        i = int(np.flatnonzero(cls == OUTSIDE)[0])
                        result.outside = (spec.window_id, *(_column(batch, c)[i].as_py() for c in
                                                            ("topic", "broker", "queue_id", "queue_offset")))
                    if result.outside is not None:
                        result.read_seconds += time.perf_counter() - t
                        return  # the load fails: nothing more to write
                    if n_new == 0:
                        continue
                    if n_new < batch.num_rows:
                        batch = batch.filter(pa.array(cls == NEW))
                    out = self._output_batch(batch, schema, fields, window)
                    result.read_seconds += time.perf_counter() - t
                    yield out
                    t = time.perf_counter()
            result.read_seconds += time.perf_counter() - t

    def _output_batch(self, batch: pa.RecordBatch, schema: pa.Schema, fields: list[pa.Field],
                      window: pa.Scalar) -> pa.RecordBatch:
        """``batch``'s columns as the output ``schema`` has them, ``window_id`` added."""
        import pyarrow as pa

        cols = []
        for f in fields:
            col = _column(batch, f.name)
            if f.name == "body" and self.body_format == "utf8" and not pa.types.is_string(col.type) \
                    and not pa.types.is_large_string(col.type):
                col = col.view(f.type)  # as Spark's binary -> string cast: the bytes unchanged
            cols.append(col.cast(f.type) if col.type != f.type else col)
        cols.append(pa.repeat(window, batch.num_rows))
        return pa.RecordBatch.from_arrays(cols, schema=schema)


def schema_hex(schema: pa.Schema) -> str:
    return bytes(schema.serialize()).hex()


def run_direct(spark: Any, direct: DirectTask, plan: list[list[RowGroupRun]]) -> list[TaskResult]:
    """One Spark task per entry of ``plan``, tagged and crash-armed as spark/load/outputs/tasks.py's."""
    from airflow_provider_rocketmq.spark.load.outputs.tasks import task_tag

    crash = TaskCrash.armed()

    def task(parts: Iterator[list[RowGroupRun]]) -> Iterator[TaskResult]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        tag = task_tag(ctx)
        for runs in parts:
            result = direct.run(runs, tag)
            crash.after_write(ctx, result.files)
            yield result

    if not plan:
        return []
    return spark.sparkContext.parallelize(plan, len(plan)).mapPartitions(task).collect()  # type: ignore[no-any-return]  # mapPartitions loses the element type


class DirectPlan:
    name = "direct"
    description = "the direct plan (Spark tasks read the staged files and write the new rows in one pass)"

    def applies(self, job: LoadInput) -> bool:
        return (job.staged_read == "auto" and job.writer == "tasks" and job.body_format in ("utf8", "binary")
                and all(not s.offsets_handoff and s.files for s in job.to_read)
                and claims_disjoint([job.new(s) for s in job.to_read]))

    def write(self, spark: SparkSession, job: LoadInput, load: PendingLoad, report: LoadReport) -> list[DataFile]:
        import fsspec.config
        import pyarrow.parquet as pq

        t0 = time.monotonic()
        with _open_staged(job.to_read[0].files[0]) as fh:
            schema = output_schema(pq.read_schema(fh), job.body_format)
        specs = {order: manifest_spec(order, s.manifest.window_id, s.manifest.topic, job.new(s), job.loaded(s))
                 for order, s in enumerate(job.to_read)}
        plan = plan_tasks([(order, f) for order, s in enumerate(job.to_read) for f in s.files],
                          spark.sparkContext.defaultParallelism)
        direct = DirectTask(specs, schema_hex(schema), job.body_format, load.writer(),
                            {k: dict(v) for k, v in fsspec.config.conf.items()})
        results = run_direct(spark, direct, plan)
        files = [f for r in results for f in r.files]
        bad = next((r.outside for r in results if r.outside is not None), None)
        if bad is not None:
            raise LoadError(f"window {bad[0]}: staged row {bad[1]} {bad[2]}:{bad[3]} offset {bad[4]} lies outside "
                            f"its manifest's queue ranges")
        try:
            check_disjoint(results)
        except NeedsDedup as exc:
            raise PlanGaveUp(str(exc), files) from exc
        for r in results:
            for order, n in r.read.items():
                report.add(order, read=n, loaded=r.loaded.get(order, 0))
        report.files_read = sum(len(s.files) for s in job.to_read)
        report.read_seconds = sum(r.read_seconds for r in results)
        report.write_seconds = sum(r.write_seconds for r in results)
        report.job_seconds = time.monotonic() - t0
        return files


PLAN = DirectPlan()
