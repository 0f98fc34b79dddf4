"""The dedup plan: Spark reads the windows, classifies the rows and keeps the first of each offset.

Each manifest's rows are read by Spark (spark/load/spark_read.py), tagged with their window id and
load order, and classified with column expressions: *new* (in the manifest's claim, not held by the
output), *loaded* (claimed and held) or *outside* (not claimed: the load fails). Of the new rows, a
window function keeps the first of each (topic, broker, queue_id, queue_offset) in load order - a
shuffle and sort of every row read - before the body is converted and the rows are written
(``--writer``). It applies to every load and is tried last: it is what loads the windows whose
claims cannot decide which row to keep (spark/load/claims.py), a staged window that holds an offset
twice, and ``--writer spark``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from airflow_provider_rocketmq.spark.load.outputs.tasks import write_in_tasks
from airflow_provider_rocketmq.spark.load.spark_read import json_body, read_window
from airflow_provider_rocketmq.spark.load.staged import LoadError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges
    from airflow_provider_rocketmq.spark.load.outputs import DataFile, PendingLoad
    from airflow_provider_rocketmq.spark.load.plan import LoadInput
    from airflow_provider_rocketmq.spark.load.report import LoadReport

# broker is part of the key: queue ids restart at 0 on every broker of a topic
DEDUP_KEY = ("topic", "broker", "queue_id", "queue_offset")
# temporary columns: new / loaded / outside; the manifest's place in load order; a row's rank among its key's
_CLASS, _ORDER, _RANK = "__rocketmq_class", "__rocketmq_order", "__rocketmq_rank"


class DedupPlan:
    name = "dedup"
    description = "the dedup plan (Spark removes repeated offsets with a shuffle)"

    def applies(self, job: LoadInput) -> bool:
        return True

    def write(self, spark: SparkSession, job: LoadInput, load: PendingLoad, report: LoadReport) -> list[DataFile]:
        from pyspark.sql import functions as F

        t0 = time.monotonic()
        df = _classified(spark, job).cache()
        try:
            by_class: dict[str, int] = {}
            for cls, order, n in df.groupBy(_CLASS, _ORDER).count().collect():
                by_class[cls] = by_class.get(cls, 0) + n
                report.add(order, read=n, loaded=n if cls == "loaded" else 0)
            report.files_read = sum(len(s.files) for s in job.to_read)
            report.read_seconds = time.monotonic() - t0
            if by_class.get("outside"):
                bad = df.where(F.col(_CLASS) == "outside").select("window_id", *DEDUP_KEY).limit(1).collect()[0]
                raise LoadError(f"window {bad.window_id}: staged row {bad.topic} {bad.broker}:{bad.queue_id} offset "
                                f"{bad.queue_offset} lies outside its manifest's queue ranges")
            t1 = time.monotonic()
            rows = _convert_body(_first_of_each_offset(df), job.body_format, F, getattr(load, "json_variant", True))
            files = _write(rows, job, load)
            report.write_seconds = time.monotonic() - t1
        finally:
            df.unpersist()
        return files


PLAN = DedupPlan()


def _classified(spark: SparkSession, job: LoadInput) -> DataFrame:
    """Every row read, with its window id (the manifest's, not the staged column's), load order and class."""
    from pyspark.sql import functions as F

    df: DataFrame | None = None
    for order, staged in enumerate(job.to_read):
        part = (read_window(spark, staged, job.staged_read)
                .withColumn("window_id", F.lit(staged.manifest.window_id))
                .withColumn(_ORDER, F.lit(order)))
        # rows are kept by what the output holds, not by which manifest claims an offset first:
        # a manifest may claim offsets it did not stage (tag-filtered, or another window's)
        part = part.withColumn(_CLASS, F.when(_in_ranges(job.new(staged), F), "new")
                               .when(_in_ranges(job.loaded(staged), F), "loaded")
                               .otherwise("outside"))
        df = part if df is None else df.unionByName(part)
    assert df is not None
    return df


def _first_of_each_offset(df: DataFrame) -> DataFrame:
    """The new rows, the first of each offset in load order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    first = Window.partitionBy(*DEDUP_KEY).orderBy(_ORDER)
    return (df.where(F.col(_CLASS) == "new").withColumn(_RANK, F.row_number().over(first))
            .where(F.col(_RANK) == 1).drop(_CLASS, _ORDER, _RANK))


def _write(rows: DataFrame, job: LoadInput, load: PendingLoad) -> list[DataFile]:
    if job.writer != "spark":
        return write_in_tasks(rows, load.writer())
    target, written = getattr(load, "spark_target", None), getattr(load, "spark_written", None)
    if target is None or written is None:
        raise LoadError(f"--writer spark: the {job.output} output kind is written by Spark tasks only")
    rows.write.mode("errorifexists").partitionBy("window_id").parquet(target())
    files: list[DataFile] = written()
    return files


def _in_ranges(ranges: OffsetRanges, F: Any) -> Column:
    """A boolean column: the row's (topic, broker, queue_id, queue_offset) lies in ``ranges``."""
    cond = F.lit(False)
    for (topic, broker, queue_id), intervals in sorted(ranges.by_queue.items()):
        hit = F.lit(False)
        for start, end in intervals:
            hit = hit | ((F.col("queue_offset") >= start) & (F.col("queue_offset") < end))
        cond = cond | ((F.col("topic") == topic) & (F.col("broker") == broker)
                       & (F.col("queue_id") == queue_id) & hit)
    return cond  # type: ignore[no-any-return]  # F is the untyped pyspark functions module


def _convert_body(df, body_format: str, F, json_variant: bool = True):  # type: ignore[no-untyped-def]  # pyspark types are optional
    if body_format == "binary":
        return df
    if body_format == "utf8":
        return df.withColumn("body", F.col("body").cast("string"))  # Spark's binary->string cast decodes UTF-8
    body, invalid = json_body(F, json_variant)
    bad = df.where(invalid).select(*DEDUP_KEY).limit(1).collect()
    if bad:
        r = bad[0]
        raise LoadError(f"--body-format json: body of {r.topic} {r.broker}:{r.queue_id} offset "
                        f"{r.queue_offset} is not valid JSON")
    # VARIANT for Parquet outputs; kinds that cannot store it keep the validated text
    return df.withColumn("body", body)
