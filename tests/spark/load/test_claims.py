"""Which manifest writes each offset of a load (spark/load/claims.py): decided from the claims alone,
where they can decide it."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_rocketmq.spark.load.claims import claims_of, undecided
from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges
from airflow_provider_rocketmq.spark.load.plan import LoadInput
from airflow_provider_rocketmq.spark.load.staged import Staged, claim_of
from airflow_provider_rocketmq.window.manifest import QueueRange, WindowManifest

A = "broker-a"


def staged(window_id: str, *queues: tuple[int, int, int], expression: str = "*") -> Staged:
    m = WindowManifest(window_id=window_id, topic="orders", consumer_group="G", files=[], messages=1, bytes=0,
                       queues=[QueueRange(A, q, s, e, e, e - s) for q, s, e in queues], expression=expression)
    return Staged(str(Path("/w") / window_id), m, (), claim_of(m))


def ranges(*items: tuple[int, int, int]) -> OffsetRanges:
    return OffsetRanges.of((("orders", A, q), s, e) for q, s, e in items)


def job(*manifests: Staged, held: OffsetRanges | None = None) -> LoadInput:
    return LoadInput(manifests, held or OffsetRanges(), "utf8", "auto", "tasks", "out")


def test_each_shared_offset_belongs_to_the_first_manifest_that_lacks_it() -> None:
    a = staged("a", (0, 0, 10), (1, 0, 5))
    b = staged("b", (0, 5, 15))
    c = staged("c", (0, 0, 20), (1, 3, 8))
    held = ranges((0, 0, 2))
    ca, cb, cc = claims_of(job(a, b, c, held=held))
    assert (ca.own, ca.duplicate, ca.loaded) == (ranges((0, 2, 10), (1, 0, 5)), OffsetRanges(), ranges((0, 0, 2)))
    assert (cb.own, cb.duplicate, cb.loaded) == (ranges((0, 10, 15)), ranges((0, 5, 10)), OffsetRanges())
    assert (cc.own, cc.duplicate, cc.loaded) == (ranges((0, 15, 20), (1, 5, 8)), ranges((0, 2, 15), (1, 3, 5)),
                                                 ranges((0, 0, 2)))
    # the own ranges are disjoint and cover every new offset
    assert not (ca.own & cb.own or ca.own & cc.own or cb.own & cc.own)
    assert ca.own | cb.own | cc.own == ranges((0, 2, 20), (1, 0, 8))
    assert undecided([ca, cb, cc]) is None


def test_manifests_sharing_offsets_with_other_tags_are_left_undecided() -> None:
    # "t1 || t2" and "t2||t1" admit the same messages; "t1" does not
    a = staged("a", (0, 0, 10), expression="t1 || t2")
    b = staged("b", (0, 5, 15), expression="t2||t1")
    c = staged("c", (0, 8, 12), expression="t1")
    assert undecided(claims_of(job(a, b))) is None
    assert undecided(claims_of(job(a, b, c))) == ("windows a and c share offsets but not their tag expression "
                                                  "('t1 || t2' vs 't1')")
    # no offset in common, or the shared ones already held: any expressions
    assert undecided(claims_of(job(a, staged("d", (0, 10, 20), expression="t9")))) is None
    assert undecided(claims_of(job(a, c, held=ranges((0, 0, 20))))) is None
