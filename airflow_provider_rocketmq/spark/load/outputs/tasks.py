"""Spark tasks write a load's rows (``mapInArrow``); only file descriptors reach the driver.

`write_in_tasks(df, writer)` runs ``writer.write`` (a `TaskWriter`) once per partition of
``df`` inside the executors' Python workers, with the partition's Arrow record batches, and
collects the `DataFile` descriptors it returns: a few bytes per file, whatever the number of
rows. The task tag (`task_tag`) is unique per attempt in the application, so a retried or
speculative attempt writes other files than the attempt it replaces; only the attempt Spark
keeps sends its descriptors back, and only listed files are ever committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from airflow_provider_rocketmq.spark.load.crash_points import TaskCrash

from .base import DATA_FILE_FIELDS, DataFile, TaskWriter

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql import DataFrame

DESCRIPTOR_SCHEMA = "path string, rows long, bytes long, window_id string"
assert tuple(c.split()[0] for c in DESCRIPTOR_SCHEMA.split(", ")) == DATA_FILE_FIELDS


def task_tag(ctx: TaskContext | None) -> str:
    """``<partition>-<task attempt id>``: unique per task attempt in the application."""
    return f"{ctx.partitionId():05d}-{ctx.taskAttemptId()}" if ctx is not None else "00000-0"


def write_in_tasks(df: DataFrame, writer: TaskWriter) -> list[DataFile]:
    """Write ``df``'s rows with ``writer`` in Spark tasks; return every file written."""
    crash = TaskCrash.armed()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        files = writer.write(batches, task_tag(ctx))
        crash.after_write(ctx, files)
        yield pa.RecordBatch.from_pydict({
            "path": [f.path for f in files], "rows": [f.rows for f in files],
            "bytes": [f.bytes for f in files], "window_id": [f.window_id for f in files],
        }, schema=pa.schema([("path", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64()),
                             ("window_id", pa.string())]))

    return [DataFile(r["path"], r["rows"], r["bytes"], r["window_id"])
            for r in df.mapInArrow(run, DESCRIPTOR_SCHEMA).collect()]
