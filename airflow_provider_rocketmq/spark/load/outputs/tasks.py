"""Spark tasks write a load's rows (``mapInArrow``; spark/load/direct_plan.py runs its own tasks with the same hooks); only file descriptors reach the driver.

`write_in_tasks(df, writer)` runs ``writer.write`` (a `TaskWriter`) once per partition of
``df`` inside the executors' Python workers, with the partition's Arrow record batches, and
collects the `DataFile` descriptors it returns: a few bytes per file, whatever the number of
rows. The task tag ``<partition>-<task attempt id>`` is unique per attempt in the application,
so a retried or speculative attempt writes other files than the attempt it replaces; only the
attempt Spark keeps sends its descriptors back, and only listed files are ever committed.

Test hooks (``$ROCKETMQ_LOAD_WINDOW_TEST_CRASH``, read on the driver when the job is planned):
``task_write``: the first task to finish its files kills the driver (the Python driver and the
``spark-submit`` JVM, SIGKILL), as a crash of the driver while tasks write would;
``task_fail_once``: the first attempt of partition 0 fails after writing its files, so Spark
retries it (needs a master that allows task retries, e.g. ``local[2,2]``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_rocketmq.spark.load.ledger import CRASH_ENV

from .base import DATA_FILE_FIELDS, DataFile, TaskWriter

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql import DataFrame

DESCRIPTOR_SCHEMA = "path string, rows long, bytes long, window_id string"
assert tuple(c.split()[0] for c in DESCRIPTOR_SCHEMA.split(", ")) == DATA_FILE_FIELDS


def _driver_pids() -> tuple[int, ...]:
    """This Python driver, and the ``spark-submit`` JVM that started it (its parent) if it is one."""
    try:
        with open(f"/proc/{os.getppid()}/comm") as fh:
            parent_is_jvm = fh.read().strip() == "java"
    except OSError:
        parent_is_jvm = False
    return (os.getpid(), os.getppid()) if parent_is_jvm else (os.getpid(),)


@dataclass(frozen=True)
class TaskHooks:
    """The test hooks, read on the driver when the job is planned (see the module docstring)."""

    kill: tuple[int, ...] | None = None
    fail_once: bool = False


def task_hooks() -> TaskHooks:
    hook = os.environ.get(CRASH_ENV)
    return TaskHooks(_driver_pids() if hook == "task_write" else None, hook == "task_fail_once")


def after_task_write(hooks: TaskHooks, ctx: TaskContext | None, files: Sequence[DataFile]) -> None:
    """In a task, once its files are written: apply the test hooks (no-op when none is set)."""
    if hooks.kill is not None and files:
        for pid in hooks.kill:  # tests only: the driver dies while tasks write
            os.kill(pid, signal.SIGKILL)
    if hooks.fail_once and ctx is not None and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
        raise RuntimeError("load_window: test failure of a task attempt after it wrote its files")


def write_in_tasks(df: DataFrame, writer: TaskWriter) -> list[DataFile]:
    """Write ``df``'s rows with ``writer`` in Spark tasks; return every file written."""
    hooks = task_hooks()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        tag = f"{ctx.partitionId():05d}-{ctx.taskAttemptId()}" if ctx is not None else "00000-0"
        files = writer.write(batches, tag)
        after_task_write(hooks, ctx, files)
        yield pa.RecordBatch.from_pydict({
            "path": [f.path for f in files], "rows": [f.rows for f in files],
            "bytes": [f.bytes for f in files], "window_id": [f.window_id for f in files],
        }, schema=pa.schema([("path", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64()),
                             ("window_id", pa.string())]))

    return [DataFile(r["path"], r["rows"], r["bytes"], r["window_id"])
            for r in df.mapInArrow(run, DESCRIPTOR_SCHEMA).collect()]
