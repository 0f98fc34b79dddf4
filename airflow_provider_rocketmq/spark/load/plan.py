"""The contract of a load plan: how the rows of the manifests to read become the output's files.

load_window.py works out which manifests bring offsets the output lacks (a `LoadInput`) and tries
its plans in order (``PLANS`` there): the first that `Plan.applies` writes the rows in Spark tasks
through the output's `TaskWriter` and returns the files written; the driver then commits them.
Every plan writes the same rows: each offset of a manifest's new range (its claim minus what the
output holds) once, from the first manifest in load order that has it, its body converted per
``--body-format``; a staged row outside its manifest's claim fails the load (`LoadError`). A plan
records in the `LoadReport` what it read per manifest (`LoadReport.add`) and its phase figures.

A plan that finds, before the commit, that it cannot keep that promise for these windows (say a
repeated offset it would not remove) raises `PlanGaveUp` with the files it wrote: they are never
committed, the report is reset, and the next plan that applies loads the windows. The last plan
(dedup_plan.py) applies always. A new plan is a new module with a `Plan`, listed in ``PLANS``
ahead of the plans it should be tried before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges
    from airflow_provider_rocketmq.spark.load.outputs import DataFile, PendingLoad
    from airflow_provider_rocketmq.spark.load.report import LoadReport
    from airflow_provider_rocketmq.spark.load.staged import Staged


@dataclass(frozen=True)
class LoadInput:
    """What a plan loads: the manifests to read, in load order, against what the output holds."""

    to_read: tuple[Staged, ...]  # a manifest's ``order`` (for `LoadReport.add`) is its index here
    held: OffsetRanges
    body_format: str  # --body-format: utf8, json or binary
    staged_read: str  # --staged-read: auto, spark, tasks or driver
    writer: str  # --writer: tasks or spark
    output: str  # --output, for messages

    def new(self, staged: Staged) -> OffsetRanges:
        """The offsets of ``staged`` the output lacks: the rows a plan writes."""
        return staged.claim - self.held

    def loaded(self, staged: Staged) -> OffsetRanges:
        """The offsets of ``staged`` the output holds already: rows read and counted, not written."""
        return staged.claim & self.held


class PlanGaveUp(Exception):
    """Raised before the commit by a plan that cannot load these windows correctly; ``files``
    (what it wrote) are discarded and the next plan that applies loads them."""

    def __init__(self, reason: str, files: Sequence[DataFile]) -> None:
        super().__init__(reason)
        self.files = list(files)


class Plan(Protocol):
    """One way of reading the manifests and writing their new rows (see the module docstring)."""

    name: str  # the read line's ``plan=``
    description: str  # how a note names it: "the general plan (Spark removes repeated offsets)"

    def applies(self, job: LoadInput) -> bool:
        """Whether this plan can load ``job`` (cheap: the driver's arguments and manifests only)."""
        ...

    def write(self, spark: SparkSession, job: LoadInput, load: PendingLoad, report: LoadReport) -> list[DataFile]:
        """Write ``job``'s new rows with ``load.writer()`` in Spark tasks; return the files written."""
        ...
