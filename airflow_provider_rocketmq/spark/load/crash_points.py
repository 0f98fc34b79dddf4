"""Where the fault tests may crash a load, and how a test arms a crash point (nothing else of tests here).

A test arms one point by naming it in ``$ROCKETMQ_LOAD_WINDOW_TEST_CRASH``; unset (production), every
call below reads the environment and returns. Driver points (`reached`) end the process with exit
code 70 and no clean-up, as a killed driver would:

- ``before_commit``: the rows are written, the commit not attempted (load_window.py);
- ``mid_commit``: Iceberg only, the snapshot's manifests written, the catalog not asked yet;
- ``before_publish``: the commit landed, nothing published (every output kind);
- ``mid_publish``: after the first file published (local and object-store kinds).

Task points, read on the driver when a Spark job is planned (`TaskCrash`): ``task_write`` (the first
task to finish its files SIGKILLs the driver and its ``spark-submit`` JVM) and ``task_fail_once``
(partition 0's first attempt fails after writing its files, so Spark retries it).

``$ROCKETMQ_LOAD_WINDOW_TEST_BARRIER=DIR:N`` holds every load at ``before_commit`` until N loads
(processes) reached it, so that concurrent loads commit against the same ledger state.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_provider_rocketmq.spark.load.ledger import LedgerError

if TYPE_CHECKING:
    from pyspark import TaskContext

CRASH_ENV = "ROCKETMQ_LOAD_WINDOW_TEST_CRASH"
CRASH_EXIT = 70
BARRIER_ENV = "ROCKETMQ_LOAD_WINDOW_TEST_BARRIER"  # "<directory>:<parties>"
BARRIER_TIMEOUT = 1200.0

BEFORE_COMMIT = "before_commit"
MID_COMMIT = "mid_commit"
BEFORE_PUBLISH = "before_publish"
MID_PUBLISH = "mid_publish"
DRIVER_POINTS = (BEFORE_COMMIT, MID_COMMIT, BEFORE_PUBLISH, MID_PUBLISH)
TASK_WRITE = "task_write"
TASK_FAIL_ONCE = "task_fail_once"
TASK_POINTS = (TASK_WRITE, TASK_FAIL_ONCE)


def reached(point: str) -> None:
    """The driver is at ``point`` (one of `DRIVER_POINTS`): end the process here if a test armed it."""
    assert point in DRIVER_POINTS, point
    barrier = os.environ.get(BARRIER_ENV)
    if barrier and point == BEFORE_COMMIT:
        _wait_for_others(barrier)
    if os.environ.get(CRASH_ENV) == point:
        os.write(2, f"load_window: test crash at {point}\n".encode())
        os._exit(CRASH_EXIT)


def _wait_for_others(spec: str) -> None:
    directory, _, parties = spec.rpartition(":")
    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / f"{os.getpid()}-{uuid.uuid4().hex[:8]}").touch()
    deadline = time.monotonic() + BARRIER_TIMEOUT
    while len(list(Path(directory).iterdir())) < int(parties):
        if time.monotonic() > deadline:
            raise LedgerError(BARRIER_ENV, f"only {len(list(Path(directory).iterdir()))} of {parties} loads "
                              "arrived")
        time.sleep(0.05)  # other processes: no event to await across them


def _driver_pids() -> tuple[int, ...]:
    """This Python driver, and the ``spark-submit`` JVM that started it (its parent) if it is one."""
    try:
        with open(f"/proc/{os.getppid()}/comm") as fh:
            parent_is_jvm = fh.read().strip() == "java"
    except OSError:
        parent_is_jvm = False
    return (os.getpid(), os.getppid()) if parent_is_jvm else (os.getpid(),)


@dataclass(frozen=True)
class TaskCrash:
    """The task point a test armed, read on the driver (`armed`) and pickled into the tasks."""

    kill: tuple[int, ...] | None = None  # task_write: the driver's processes
    fail_once: bool = False  # task_fail_once

    @classmethod
    def armed(cls) -> TaskCrash:
        point = os.environ.get(CRASH_ENV)
        return cls(_driver_pids() if point == TASK_WRITE else None, point == TASK_FAIL_ONCE)

    def after_write(self, ctx: TaskContext | None, files: Sequence[object]) -> None:
        """In a task, once its ``files`` are written: crash as armed (nothing when none is)."""
        if self.kill is not None and files:
            for pid in self.kill:
                os.kill(pid, signal.SIGKILL)
        if self.fail_once and ctx is not None and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            raise RuntimeError("load_window: test failure of a task attempt after it wrote its files")
