"""spark/load/ledger.py: offset-range arithmetic against sets of offsets, and the entry format's checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_rocketmq.spark.load.ledger import LedgerEntry, LedgerError, OffsetRanges

Q0, Q1 = ("orders", "broker-a", 0), ("orders", "broker-a", 1)

intervals = st.lists(st.tuples(st.sampled_from([Q0, Q1]), st.integers(0, 40), st.integers(0, 40)), max_size=6)


def as_set(items: list[tuple[tuple[str, str, int], int, int]]) -> set[tuple[tuple[str, str, int], int]]:
    return {(k, o) for k, s, e in items for o in range(s, e)}


def ranges_set(r: OffsetRanges) -> set[tuple[tuple[str, str, int], int]]:
    return as_set(list(r.intervals()))


@given(intervals, intervals)
def test_range_algebra_matches_sets_of_offsets(a: list, b: list) -> None:
    ra, rb = OffsetRanges.of(a), OffsetRanges.of(b)
    sa, sb = as_set(a), as_set(b)
    assert ranges_set(ra) == sa and ra.offsets() == len(sa)
    assert ranges_set(ra | rb) == sa | sb
    assert ranges_set(ra - rb) == sa - sb
    assert ranges_set(ra & rb) == sa & sb
    assert bool(ra & rb) == bool(sa & sb)
    # normalised: sorted, disjoint, non-adjacent, non-empty intervals
    for iv in (ra | rb).by_queue.values():
        assert all(s < e for s, e in iv) and all(iv[i][1] < iv[i + 1][0] for i in range(len(iv) - 1))
    assert OffsetRanges.from_json(ra.to_json(), "x") == ra


def test_an_entry_round_trips_and_bad_ones_name_the_problem() -> None:
    entry = LedgerEntry.from_dict({"version": 1, "seq": 3, "load_id": "20240101T000000Z-0123456789ab",
                                   "committed_at": "t", "windows": ["w"], "rows": 1,
                                   "ranges": [{"topic": "orders", "broker": "broker-a", "queue_id": 0,
                                               "start_offset": 0, "end_offset": 5}],
                                   "files": [{"source": "a", "path": "window_id=w/p.parquet", "rows": 1,
                                              "bytes": 9}]}, "e")
    assert LedgerEntry.from_dict(entry.to_dict(), "e") == entry
    assert list(entry.ranges.intervals()) == [(Q0, 0, 5)]
    with pytest.raises(LedgerError, match=r"^e: seq, load_id and rows are required"):
        LedgerEntry.from_dict({**entry.to_dict(), "load_id": "x"}, "e")
    with pytest.raises(LedgerError, match=r"^e: aborted: expected a list of load ids"):
        LedgerEntry.from_dict({**entry.to_dict(), "aborted": ["x"]}, "e")
