"""How load_window.py applies the plan contract (spark/load/plan.py), with stand-in plans and no Spark:
the first plan that applies writes; one that gives up has its files discarded, its counts forgotten,
and the next plan that applies loads the windows."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_rocketmq.spark.load import load_window
from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges
from airflow_provider_rocketmq.spark.load.outputs import DataFile
from airflow_provider_rocketmq.spark.load.plan import LoadInput, PlanGaveUp
from airflow_provider_rocketmq.spark.load.report import LoadReport

FILE = DataFile("window_id=w/part-0.parquet", 3, 100, "w")


class StandIn:
    def __init__(self, name: str, applies: bool = True, gives_up: bool = False) -> None:
        self.name = name
        self.description = f"the {name} plan"
        self.does_apply = applies
        self.gives_up = gives_up
        self.wrote = 0

    def applies(self, job: LoadInput) -> bool:
        return self.does_apply

    def write(self, spark: Any, job: LoadInput, load: Any, report: LoadReport) -> list[DataFile]:
        self.wrote += 1
        report.add(0, read=5, loaded=2)
        if self.gives_up:
            raise PlanGaveUp("a repeated offset", [FILE])
        return [FILE]


class Load:
    def __init__(self) -> None:
        self.discarded: list[DataFile] = []

    def discard(self, files: list[DataFile]) -> None:
        self.discarded += files


JOB = LoadInput((), OffsetRanges(), "utf8", "auto", "tasks", "out")


def write(monkeypatch: pytest.MonkeyPatch, *plans: StandIn) -> tuple[list[DataFile], Load, LoadReport]:
    monkeypatch.setattr(load_window, "PLANS", plans)
    load, report = Load(), LoadReport([], [])
    return load_window._write_rows(object(), "app", JOB, load, report), load, report  # type: ignore[arg-type]


def test_the_first_plan_that_applies_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    skipped, first, second = StandIn("skipped", applies=False), StandIn("first"), StandIn("second")
    files, load, report = write(monkeypatch, skipped, first, second)
    assert files == [FILE] and (skipped.wrote, first.wrote, second.wrote) == (0, 1, 0)
    assert report.plan == "first" and report.rows_read() == 5 and load.discarded == []


def test_a_plan_that_gives_up_leaves_nothing_and_the_next_one_loads(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    quitter, general = StandIn("quitter", gives_up=True), StandIn("general")
    files, load, report = write(monkeypatch, quitter, general)
    assert files == [FILE] and load.discarded == [FILE]  # the given-up plan's files, never committed
    assert report.plan == "general" and report.rows_read() == 5  # counted once: the first count was forgotten
    assert "load_window: note: a repeated offset: loading with the general plan" in capsys.readouterr().err
