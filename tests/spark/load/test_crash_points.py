"""The crash points of a load (spark/load/crash_points.py): unarmed they do nothing; armed, the driver
ends at exactly the named point, as a killed process would (the fault matrices rely on both)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from airflow_provider_rocketmq.spark.load import crash_points
from airflow_provider_rocketmq.spark.load.crash_points import CRASH_ENV, CRASH_EXIT, TaskCrash


def driver_at(point: str, armed: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if armed is not None:
        env[CRASH_ENV] = armed
    code = ("from airflow_provider_rocketmq.spark.load import crash_points as c\n"
            f"c.reached({point!r})\nprint('went on')\n")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("point", crash_points.DRIVER_POINTS)
def test_an_armed_point_ends_the_driver_there_and_only_there(point: str) -> None:
    run = driver_at(point, point)
    assert (run.returncode, run.stdout) == (CRASH_EXIT, "")
    assert f"load_window: test crash at {point}" in run.stderr
    other = next(p for p in crash_points.DRIVER_POINTS if p != point)
    assert driver_at(point, other).stdout == "went on\n"
    assert driver_at(point, None).stdout == "went on\n"


def test_task_points_are_read_on_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CRASH_ENV, raising=False)
    assert TaskCrash.armed() == TaskCrash(None, False)
    monkeypatch.setenv(CRASH_ENV, crash_points.TASK_FAIL_ONCE)
    assert TaskCrash.armed() == TaskCrash(None, True)
    monkeypatch.setenv(CRASH_ENV, crash_points.TASK_WRITE)
    assert os.getpid() in (TaskCrash.armed().kill or ())
    TaskCrash().after_write(None, ["a file"])  # unarmed: nothing happens
