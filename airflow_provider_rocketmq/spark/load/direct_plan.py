"""The direct plan: Spark tasks read the windows' rows themselves and write the new ones in one pass.

It applies when the body format is utf8 or binary, the writer is ``tasks``, ``--staged-read`` is
``auto`` and the claims decide which manifest writes each offset (spark/load/claims.py: always,
unless manifests sharing offsets differ in their tag expression). The driver cuts the work into
tasks (`plan_tasks`) - a staged window's files into runs of whole row groups, an offsets hand-off's
own ranges into queue spans, as Spark's Kafka source fixes each partition's offsets on the driver -
and runs one Spark task per piece (``RDD.mapPartitions``: no row enters the JVM or the driver, no
cache, no shuffle). Each task reads its row groups with pyarrow (+ fsspec for URLs) and its spans
from the brokers with the data source's range reader (spark/source/range_reader.py: pipelined pulls
of exactly the span, the window's tag expression applied), classifies and converts the rows
(spark/load/task_rows.py) and hands the new ones to the output's `TaskWriter`; it returns its files,
counts and, per queue, the offset intervals its new rows cover.

Why no offset is written twice: across manifests, a row is written only in its manifest's own range,
and those are disjoint. Within one manifest, the driver checks that the intervals every task reported
per queue are pairwise disjoint (`check_disjoint`), and within an interval the offsets strictly
increase. A span is read once per task attempt, and only the attempt Spark keeps returns its files. If
the proof fails (a staged window with a repeated offset), the plan gives up before the commit
(`PlanGaveUp`) and a plan that removes repeated offsets loads the windows. An offsets range that
cannot be read whole fails the load (spark/load/handoff.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_rocketmq.spark.load.claims import claims_of, undecided
from airflow_provider_rocketmq.spark.load.crash_points import TaskCrash
from airflow_provider_rocketmq.spark.load.plan import LoadInput, PlanGaveUp
from airflow_provider_rocketmq.spark.load.staged import LoadError, is_url, local_path
from airflow_provider_rocketmq.spark.load.task_rows import (
    ManifestSpec,
    NeedsDedup,
    TaskResult,
    TaskRows,
    check_disjoint,
    output_schema,
)
from airflow_provider_rocketmq.spark.source.ranges import QueueSpan

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from airflow_provider_rocketmq.spark.load.outputs import DataFile, PendingLoad, TaskWriter
    from airflow_provider_rocketmq.spark.load.report import LoadReport
    from airflow_provider_rocketmq.spark.source.options import SourceOptions

ROWS_PER_TASK = 1_000_000  # at least one task per this many rows, and at least one per core
BATCH_ROWS = 65_536
FOOTER_READERS = 8
BODY_FORMATS = ("utf8", "binary")  # what a task converts itself (json needs Spark's VARIANT)


@dataclass(frozen=True)
class RowGroupRun:
    """Consecutive row groups of one staged file: part of a task's work."""

    order: int  # the manifest's place in load order
    path: str
    row_groups: tuple[int, ...]
    rows: int


@dataclass(frozen=True)
class SpanRun:
    """Offsets ``[span.start, span.end)`` of one queue of an offsets hand-off: part of a task's work."""

    order: int
    span: QueueSpan

    @property
    def rows(self) -> int:
        return self.span.size  # at most: a tag expression keeps fewer


Run = RowGroupRun | SpanRun


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


def plan_tasks(files: Sequence[tuple[int, str]], parallelism: int, rows_per_task: int = ROWS_PER_TASK,
               spans: Sequence[SpanRun] = ()) -> list[list[Run]]:
    """Split ``(order, path)`` staged files into runs of whole row groups and ``spans`` into pieces, in
    that order: at least ``parallelism`` tasks (when there is enough to split) and at most
    ``rows_per_task`` rows per task where row groups allow. Reads each file's footer."""
    with ThreadPoolExecutor(max_workers=max(1, min(FOOTER_READERS, len(files)))) as pool:
        groups = list(pool.map(lambda f: _row_groups(f[1]), files))
    total = sum(sum(g) for g in groups) + sum(s.rows for s in spans)
    if total == 0:
        return []
    target = math.ceil(total / max(parallelism, math.ceil(total / rows_per_task)))
    out: list[list[Run]] = []
    current: list[Run] = []
    current_rows = 0

    def add(run: Run) -> None:
        nonlocal current, current_rows
        current.append(run)
        current_rows += run.rows
        if current_rows >= target:
            out.append(current)
            current, current_rows = [], 0

    for (order, path), sizes in zip(files, groups, strict=True):
        picked: list[int] = []
        picked_rows = 0
        for i, rows in enumerate(sizes):
            if rows == 0:
                continue
            picked.append(i)
            picked_rows += rows
            if current_rows + picked_rows >= target:
                add(RowGroupRun(order, path, tuple(picked), picked_rows))
                picked, picked_rows = [], 0
        if picked:
            add(RowGroupRun(order, path, tuple(picked), picked_rows))
    for run in spans:
        s = run.span
        start = s.start
        while start < s.end:
            end = min(s.end, start + max(1, target - current_rows))
            add(SpanRun(run.order, QueueSpan(s.topic, s.broker, s.queue_id, start, end)))
            start = end
    if current:
        out.append(current)
    return out


@dataclass(frozen=True)
class DirectTask:
    """One task's work but its runs: what every task of the load shares (pickled once into the closure)."""

    specs: dict[int, ManifestSpec]
    schema_json: str  # the output Arrow schema, serialized
    body_format: str
    writer: TaskWriter
    fsspec_conf: dict[str, dict[str, Any]]
    sources: dict[int, SourceOptions] | None = None  # per manifest order: how to read an offsets hand-off

    def run(self, runs: list[Run], task_tag: str) -> TaskResult:
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

    def _batches(self, runs: list[Run], schema: pa.Schema, result: TaskResult) -> Iterator[pa.RecordBatch]:
        rows = TaskRows(self.specs, self.body_format, result)
        for run in runs:
            t = time.perf_counter()
            for batch in self._read(run, result):
                out = rows.take(run.order, batch, schema)
                result.read_seconds += time.perf_counter() - t
                if result.stopped:
                    return  # the load fails: nothing more to write
                if out is not None:
                    yield out
                t = time.perf_counter()
            result.read_seconds += time.perf_counter() - t
            if result.stopped:
                return

    def _read(self, run: Run, result: TaskResult) -> Iterator[pa.RecordBatch]:
        if isinstance(run, RowGroupRun):
            import pyarrow.parquet as pq

            from airflow_provider_rocketmq.window.manifest import staged_rows

            with _open_staged(run.path) as fh:
                for batch in pq.ParquetFile(fh).iter_batches(batch_size=BATCH_ROWS, row_groups=list(run.row_groups),
                                                             use_threads=False):
                    yield staged_rows(batch)
            return
        from airflow_provider_rocketmq.client.protocol.errors import RocketMQError
        from airflow_provider_rocketmq.spark.source.range_reader import read_span
        from airflow_provider_rocketmq.spark.source.ranges import DATA_LOSS_HINT

        assert self.sources is not None
        try:
            yield from read_span(self.sources[run.order], run.span)
        except RocketMQError as exc:  # after the reader's own retries: the range cannot be read whole
            result.failure = (f"window {self.specs[run.order].window_id}: {run.span} could not be read from the "
                              f"brokers: {str(exc).removesuffix(DATA_LOSS_HINT)}; nothing was loaded")


def schema_hex(schema: pa.Schema) -> str:
    return bytes(schema.serialize()).hex()


def run_direct(spark: Any, direct: DirectTask, plan: list[list[Run]]) -> list[TaskResult]:
    """One Spark task per entry of ``plan``, tagged and crash-armed as spark/load/outputs/tasks.py's."""
    from airflow_provider_rocketmq.spark.load.outputs.tasks import task_tag

    crash = TaskCrash.armed()

    def task(parts: Iterator[list[Run]]) -> Iterator[TaskResult]:
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


def tasks_read(job: LoadInput) -> bool:
    """Whether the direct plan's tasks read and convert ``job``'s rows themselves (its arguments allow it)."""
    return job.staged_read == "auto" and job.writer == "tasks" and job.body_format in BODY_FORMATS


def finish(results: Sequence[TaskResult], job: LoadInput, report: LoadReport) -> list[DataFile]:
    """The files the tasks wrote, once their results pass the driver's checks (the direct and the
    general plan): `LoadError` for a failed read or a row outside its claim, `PlanGaveUp` when the
    rows may hold an offset twice; counts into ``report``."""
    files = [f for r in results for f in r.files]
    failure = next((r.failure for r in results if r.failure is not None), None)
    if failure is not None:
        raise LoadError(failure)
    bad = next((r.outside for r in results if r.outside is not None), None)
    if bad is not None:
        raise LoadError(f"window {bad[0]}: staged row {bad[1]} {bad[2]}:{bad[3]} offset {bad[4]} lies outside "
                        f"its manifest's queue ranges")
    try:
        check_disjoint(list(results))
    except NeedsDedup as exc:
        raise PlanGaveUp(str(exc), files) from exc
    for r in results:
        for order, n in r.read.items():
            report.add(order, read=n, loaded=r.loaded.get(order, 0))
    report.files_read = sum(len(s.files) for s in job.to_read)
    report.read_seconds = sum(r.read_seconds for r in results)
    report.write_seconds = sum(r.write_seconds for r in results)
    return files


class DirectPlan:
    name = "direct"
    description = "the direct plan (Spark tasks read the windows and write the new rows in one pass)"

    def applies(self, job: LoadInput) -> bool:
        return (tasks_read(job) and all(s.offsets_handoff or s.files for s in job.to_read)
                and undecided(claims_of(job)) is None)

    def write(self, spark: SparkSession, job: LoadInput, load: PendingLoad, report: LoadReport) -> list[DataFile]:
        import fsspec.config
        import pyarrow.parquet as pq

        from airflow_provider_rocketmq.spark.load.handoff import check_on_brokers, reader_options
        from airflow_provider_rocketmq.window.manifest import staged_rows_schema, staged_schema

        t0 = time.monotonic()
        claims = claims_of(job)
        staged = [(c.order, f) for c in claims for f in c.staged.files]
        if staged:
            with _open_staged(staged[0][1]) as fh:
                source = staged_rows_schema(pq.read_schema(fh))  # as the tasks' batches will have it
        else:
            source = staged_schema()  # the columns the range reader decodes, and window_id
        sources: dict[int, SourceOptions] = {}
        spans: list[SpanRun] = []
        for c in claims:
            if not c.staged.offsets_handoff:
                continue
            m = c.staged.manifest
            sources[c.order] = reader_options(c.staged.location, m)
            own = [QueueSpan(t, b, q, s, e) for (t, b, q), s, e in c.own.intervals()]
            check_on_brokers(sources[c.order], m.window_id, own)
            spans += [SpanRun(c.order, s) for s in own]
        plan = plan_tasks(staged, spark.sparkContext.defaultParallelism, spans=spans)
        direct = DirectTask({c.order: c.spec() for c in claims}, schema_hex(output_schema(source, job.body_format)),
                            job.body_format, load.writer(), {k: dict(v) for k, v in fsspec.config.conf.items()},
                            sources or None)
        files = finish(run_direct(spark, direct, plan), job, report)
        report.job_seconds = time.monotonic() - t0
        return files


PLAN = DirectPlan()
