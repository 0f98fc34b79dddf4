"""Which manifest writes each offset of a load, decided on the driver from the claims alone (no Spark).

A manifest's *new* range is its claim minus what the output holds; manifests of one load may share
new offsets (one queue range staged twice, a window and its re-run, a staged window and an offsets
hand-off of the same group). Each shared offset goes to the first manifest in load order whose new
range has it - that manifest's *own* range (`ManifestClaims.own`) - and is a *duplicate* in the later
ones: read there and counted, never written. A plan therefore keeps a row by comparing its offset with
ranges known before any row is read, with no shuffle; the own ranges are pairwise disjoint.

That keeps the row the first manifest holds only if every manifest claiming an offset holds the same
row for it: an offset names one message of a queue, and a window holds it exactly when its tag
expression admits it. So the claims decide where manifests sharing new offsets have the same tag
expression (`undecided` says which do not: a plan that removes repeated offsets row by row loads
those). Within one manifest, an offset is held at most once by a window read from the brokers (the
reader reads each offset of a range once) and by one the window operator staged; the tasks prove
the latter for the rows they write (spark/load/task_rows.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_rocketmq.client.consumer.subscription import build_subscription
from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges
from airflow_provider_rocketmq.spark.load.task_rows import ManifestSpec, manifest_spec

if TYPE_CHECKING:
    from airflow_provider_rocketmq.spark.load.plan import LoadInput
    from airflow_provider_rocketmq.spark.load.staged import Staged


@dataclass(frozen=True)
class ManifestClaims:
    """One manifest of a load, in load order (``order``), and the offsets it writes and counts."""

    order: int
    staged: Staged
    new: OffsetRanges  # claim minus held
    own: OffsetRanges  # new minus what earlier manifests' new ranges hold: the rows it writes
    loaded: OffsetRanges  # claim and held: rows read and counted, not written

    @property
    def duplicate(self) -> OffsetRanges:
        """New offsets an earlier manifest writes: rows read and counted, not written."""
        return self.new - self.own

    def spec(self) -> ManifestSpec:
        m = self.staged.manifest
        return manifest_spec(self.order, m.window_id, m.topic, self.own, self.loaded, self.duplicate)


def claims_of(job: LoadInput) -> list[ManifestClaims]:
    """Every manifest of ``job`` with its own, duplicate and loaded ranges."""
    earlier = OffsetRanges()
    out = []
    for order, staged in enumerate(job.to_read):
        new = job.new(staged)
        out.append(ManifestClaims(order, staged, new, new - earlier, job.loaded(staged)))
        earlier = earlier | new
    return out


def undecided(claims: list[ManifestClaims]) -> str | None:
    """Why the claims cannot decide which row of a shared offset to keep, or None when they can."""
    for i, a in enumerate(claims):
        for b in claims[i + 1:]:
            if a.new & b.new and _tags(a.staged) != _tags(b.staged):
                return (f"windows {a.staged.manifest.window_id} and {b.staged.manifest.window_id} share offsets "
                        f"but not their tag expression ({a.staged.manifest.expression!r} vs "
                        f"{b.staged.manifest.expression!r})")
    return None


def _tags(staged: Staged) -> frozenset[str] | None:
    """The tags a window's expression admits (None: every message)."""
    sub = build_subscription(staged.manifest.topic, staged.manifest.expression)
    return None if sub.match_all else sub.tags_set
