"""The general plan: Spark reads the windows; its tasks keep each row by the claims and write it, no shuffle.

It loads what the direct plan's tasks cannot read or convert themselves - ``--body-format json``
(Spark's VARIANT) and ``--staged-read spark|tasks|driver`` - with ``--writer tasks``, whenever the
claims decide which manifest writes each offset (spark/load/claims.py). Spark reads each manifest's
rows (spark/load/spark_read.py: the staged files, or an offsets hand-off's ranges through the
``rocketmq`` data source), adds the window id and the manifest's load order (and for json the
converted body with a flag for invalid JSON), and one ``mapInArrow`` pass hands each partition to a
Python task that classifies the rows by their offsets against the manifests' own, duplicate and
loaded ranges (spark/load/task_rows.py: the direct plan's code), writes the new ones with the
output's `TaskWriter` and returns its files, counts and offset intervals - no cache, no count job,
no shuffle of the rows. Before the commit the driver checks the intervals as the direct plan does;
a staged window holding an offset twice makes it give up (`PlanGaveUp`) and the dedup plan loads
the windows.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_rocketmq.spark.load.claims import claims_of, undecided
from airflow_provider_rocketmq.spark.load.crash_points import TaskCrash
from airflow_provider_rocketmq.spark.load.direct_plan import finish, tasks_read
from airflow_provider_rocketmq.spark.load.spark_read import json_body, read_window
from airflow_provider_rocketmq.spark.load.task_rows import ManifestSpec, TaskResult, TaskRows, output_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_rocketmq.spark.load.outputs import DataFile, PendingLoad, TaskWriter
    from airflow_provider_rocketmq.spark.load.plan import LoadInput
    from airflow_provider_rocketmq.spark.load.report import LoadReport

# columns the tasks read and drop: the manifest's place in load order; for json, an invalid body
ORDER, BAD_JSON = "__rocketmq_order", "__rocketmq_bad_json"
RESULT_SCHEMA = "result binary"  # one pickled `TaskResult` per task


@dataclass(frozen=True)
class GeneralTask:
    """What every task of the load shares (pickled once into the closure)."""

    specs: dict[int, ManifestSpec]
    body_format: str
    writer: TaskWriter

    def run(self, batches: Iterator[pa.RecordBatch], task_tag: str) -> TaskResult:
        result = TaskResult()
        t0 = time.perf_counter()
        result.files = self.writer.write(self._rows(batches, result), task_tag)
        result.write_seconds = max(0.0, time.perf_counter() - t0 - result.read_seconds)
        return result

    def _rows(self, batches: Iterator[pa.RecordBatch], result: TaskResult) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        rows = TaskRows(self.specs, self.body_format, result)
        schema: pa.Schema | None = None
        t = time.perf_counter()
        for batch in batches:
            if schema is None:
                schema = output_schema(batch.schema, self.body_format, drop=(ORDER, BAD_JSON))
            orders = batch.column(ORDER)
            # a partition holds one manifest's rows (Spark's union keeps its inputs' partitions)
            parts = [(int(o), batch if len(pc.unique(orders)) == 1 else batch.filter(pc.equal(orders, o)))
                     for o in pc.unique(orders).to_pylist()]
            for order, part in parts:
                bad = part.column(BAD_JSON) if BAD_JSON in part.schema.names else None
                out = rows.take(order, part, schema, with_window=False, bad_json=bad)
                result.read_seconds += time.perf_counter() - t
                if result.stopped:
                    return
                if out is not None:
                    yield out
                t = time.perf_counter()
        result.read_seconds += time.perf_counter() - t


def run_general(df: DataFrame, task: GeneralTask) -> list[TaskResult]:
    """``task`` over every partition of ``df`` (``mapInArrow``), tagged and crash-armed as
    spark/load/outputs/tasks.py's; the tasks' results."""
    from airflow_provider_rocketmq.spark.load.outputs.tasks import task_tag

    crash = TaskCrash.armed()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        result = task.run(batches, task_tag(ctx))
        crash.after_write(ctx, result.files)
        yield pa.RecordBatch.from_pydict({"result": [pickle.dumps(result)]})

    return [pickle.loads(r["result"]) for r in df.mapInArrow(run, RESULT_SCHEMA).collect()]


class GeneralPlan:
    name = "spark"
    description = "the general plan (Spark reads the windows, its tasks keep rows by the claims)"

    def applies(self, job: LoadInput) -> bool:
        return job.writer == "tasks" and not tasks_read(job) and undecided(claims_of(job)) is None

    def write(self, spark: SparkSession, job: LoadInput, load: PendingLoad, report: LoadReport) -> list[DataFile]:
        from pyspark.sql import functions as F

        t0 = time.monotonic()
        claims = claims_of(job)
        df: DataFrame | None = None
        for c in claims:
            part = (read_window(spark, c.staged, job.staged_read)
                    .withColumn("window_id", F.lit(c.staged.manifest.window_id))
                    .withColumn(ORDER, F.lit(c.order)))
            if job.body_format == "json":
                body, invalid = json_body(F, getattr(load, "json_variant", True))
                part = part.withColumn(BAD_JSON, invalid).withColumn("body", body)
            df = part if df is None else df.unionByName(part)
        assert df is not None
        task = GeneralTask({c.order: c.spec() for c in claims}, job.body_format, load.writer())
        files = finish(run_general(df, task), job, report)
        report.job_seconds = time.monotonic() - t0
        return files


PLAN = GeneralPlan()
