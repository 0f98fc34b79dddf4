"""The local kind's store (spark/load/outputs/local.py) without Spark: the exclusive commit with conflict
detection, publication, and recovery of loads whose driver died (a closed lock = a dead process)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_rocketmq.spark.load.ledger import (
    LEDGER_DIR,
    LOADS_DIR,
    LedgerConflict,
    LedgerError,
    OffsetRanges,
    PublishedFile,
)
from airflow_provider_rocketmq.spark.load.outputs.local import LocalStore

Q0, Q1 = ("orders", "broker-a", 0), ("orders", "broker-a", 1)


def _commit(store: LocalStore, ranges: list, *, base=None) -> object:
    load = store.begin()
    entry = store.commit(load, base if base is not None else store.read(), OffsetRanges.of(ranges), ["w"], [], 0)
    load.finish()
    return entry


def test_concurrent_loads_commit_disjoint_ranges_and_conflict_on_overlap(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "out")
    store.begin().finish()  # creates the layout
    snapshot = store.read()  # both loads planned against the empty ledger
    first = _commit(store, [(Q0, 0, 10)], base=snapshot)
    late = store.begin()
    with pytest.raises(LedgerConflict) as err:
        store.commit(late, snapshot, OffsetRanges.of([(Q0, 5, 15)]), ["w2"], [], 0)
    assert "committed orders broker-a:0 offsets [5, 10) while this load ran" in str(err.value)
    assert str(store.entry_path(1)) in str(err.value)
    late.finish()
    # a load whose ranges do not meet the newer entry commits after it
    other = _commit(store, [(Q1, 0, 10)], base=snapshot)
    ledger = store.read()
    assert [e.seq for e in ledger.entries] == [1, 2] and (first.seq, other.seq) == (1, 2)
    assert list(ledger.held().intervals()) == [(Q0, 0, 10), (Q1, 0, 10)]
    assert sorted(p.name for p in (tmp_path / "out" / LEDGER_DIR).iterdir()) == ["0000000001.json",
                                                                                "0000000002.json"]


def _staged_load(store: LocalStore, rel: str = "window_id=w/part-0.parquet") -> tuple:
    load = store.begin()
    src = load.data_dir / rel
    src.parent.mkdir(parents=True)
    src.write_bytes(b"rows")
    f = PublishedFile(rel, f"window_id=w/part-{load.load_id}-00000.parquet", 1, 4)
    return load, f


def test_recover_publishes_committed_discards_abandoned_and_leaves_live_loads(tmp_path: Path) -> None:
    out = tmp_path / "out"
    store = LocalStore(out)
    # a driver died after its commit, before moving its file into place
    committed, f = _staged_load(store)
    store.commit(committed, store.read(), OffsetRanges.of([(Q0, 0, 1)]), ["w"], [f], 1)
    committed.close()
    # a driver died before its commit
    abandoned, _ = _staged_load(store)
    abandoned.close()
    # a driver that is still running (holds its lock)
    live, _ = _staged_load(store)
    assert not (out / f.path).exists()

    rec = LocalStore(out).recover()
    assert rec.published == [committed.load_id] and rec.discarded == [abandoned.load_id]
    assert rec.busy == [live.load_id]
    assert (out / f.path).read_bytes() == b"rows"
    assert not (out / LOADS_DIR / committed.load_id).exists()
    assert not (out / LOADS_DIR / abandoned.load_id).exists()
    assert (live.data_dir / "window_id=w" / "part-0.parquet").exists()
    # publishing again changes nothing (the file is in place)
    store.publish(store.read().entries[0])
    live.finish()
    assert sorted(p.name for p in (out / LOADS_DIR).iterdir()) == []


def test_a_recovery_between_reserving_and_locking_a_load_cannot_orphan_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interleaving that made four racing loaders fail in CI: a recovery in another process
    locks a just-created lock file before its creator does, discards it and unlinks it; the
    creator's flock then succeeds on the unlinked file. The load must not go on under a lock
    nobody else sees (a later recovery would delete its files while it runs)."""
    from airflow_provider_rocketmq.spark.load.outputs import local

    out = tmp_path / "out"
    LocalStore(out).begin().finish()
    real_flock = local.fcntl.flock
    rivals: list[Any] = []

    def flock_after_a_rival_recovery(fd: int, op: int) -> None:
        if not rivals:
            monkeypatch.setattr(local.fcntl, "flock", real_flock)
            rivals.append(LocalStore(out).recover())  # runs entirely between O_EXCL and flock
        real_flock(fd, op)

    monkeypatch.setattr(local.fcntl, "flock", flock_after_a_rival_recovery)
    load = LocalStore(out).begin()
    monkeypatch.setattr(local.fcntl, "flock", real_flock)
    assert len(rivals[0].discarded) == 1 and rivals[0].discarded[0] != load.load_id
    (load.data_dir / "window_id=w").mkdir(parents=True)
    (load.data_dir / "window_id=w" / "part-0.parquet").write_bytes(b"rows")
    rec = LocalStore(out).recover()
    assert rec.busy == [load.load_id] and rec.discarded == []
    assert (load.data_dir / "window_id=w" / "part-0.parquet").read_bytes() == b"rows"
    entry = LocalStore(out).commit(load, LocalStore(out).read(), OffsetRanges.of([(Q0, 0, 1)]), ["w"], [], 0)
    assert entry.load_id == load.load_id
    load.finish()


def test_publish_refuses_a_committed_file_that_vanished(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "out")
    load, f = _staged_load(store)
    entry = store.commit(load, store.read(), OffsetRanges.of([(Q0, 0, 1)]), ["w"], [f], 1)
    (load.data_dir / f.source).unlink()
    with pytest.raises(LedgerError, match=r"window_id=w/part-.* is neither published nor in load"):
        store.publish(entry)


def test_layout_and_entry_checks(tmp_path: Path) -> None:
    (tmp_path / "plain" / "data.csv").parent.mkdir()
    (tmp_path / "plain" / "data.csv").write_text("x")
    with pytest.raises(LedgerError, match=r"holds 'data.csv' but no _rocketmq_ledger/"):
        LocalStore(tmp_path / "plain").check_layout()
    LocalStore(tmp_path / "absent").check_layout()  # a new output is fine

    store = LocalStore(tmp_path / "out")
    _commit(store, [(Q0, 0, 5)])
    _commit(store, [(Q0, 5, 9)])
    (tmp_path / "out" / LEDGER_DIR / "0000000001.json").unlink()
    with pytest.raises(LedgerError, match=r"entry 0000000001.json is missing \(next is 2\)"):
        store.read()
    p = tmp_path / "out" / LEDGER_DIR / "0000000002.json"
    entry = json.loads(p.read_text())
    (tmp_path / "out" / LEDGER_DIR / "0000000001.json").write_text(json.dumps({**entry, "seq": 1, "version": 9}))
    with pytest.raises(LedgerError, match="unsupported ledger version 9"):
        store.read()
    bad_range = {**entry, "seq": 1, "ranges": [{**entry["ranges"][0], "start_offset": 7, "end_offset": 3}]}
    (tmp_path / "out" / LEDGER_DIR / "0000000001.json").write_text(json.dumps(bad_range))
    with pytest.raises(LedgerError, match=r"ranges\[0\]: needs 0 <= start_offset < end_offset, got \[7, 3\)"):
        store.read()
    escape = {**entry, "seq": 1, "files": [{"source": "a", "path": "../x", "rows": 1, "bytes": 1}]}
    (tmp_path / "out" / LEDGER_DIR / "0000000001.json").write_text(json.dumps(escape))
    with pytest.raises(LedgerError, match=r"files\[0\]: expected relative source/path inside the output"):
        store.read()


def _racing_loader(output: str, claims: list[tuple[int, int]], start: Any, results: Any) -> None:
    """One process loading its claims one by one as load_window does (plan against a snapshot,
    commit, retry on conflict); reports how many conflicts it met."""
    start.wait()
    store, conflicts = LocalStore(output), 0
    for lo, hi in claims:
        while True:
            store.recover()
            snapshot = store.read()
            new = OffsetRanges.of([(Q0, lo, hi)]) - snapshot.held()
            if not new:
                break
            load = store.begin()
            try:
                store.commit(load, snapshot, new, ["w"], [], 0)
                break
            except LedgerConflict:
                conflicts += 1
            finally:
                load.finish()
    results.put(conflicts)


def test_processes_loading_overlapping_ranges_at_once_never_commit_an_offset_twice(tmp_path: Path) -> None:
    import multiprocessing as mp

    out = tmp_path / "out"
    LocalStore(out).begin().finish()
    ctx = mp.get_context("fork")
    start, results = ctx.Event(), ctx.Queue()
    claims = [[(i * 7 + j * 3, i * 7 + j * 3 + 10) for j in range(15)] for i in range(4)]
    procs = [ctx.Process(target=_racing_loader, args=(str(out), c, start, results)) for c in claims]
    for p in procs:
        p.start()
    start.set()
    conflicts = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=10)
        assert p.exitcode == 0
    entries = LocalStore(out).read().entries
    covered = [o for e in entries for _, s, e_ in e.ranges.intervals() for o in range(s, e_)]
    assert len(covered) == len(set(covered))  # no offset in two entries
    assert set(covered) == {o for c in claims for lo, hi in c for o in range(lo, hi)}
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    print(f"conflicts per process: {conflicts}")  # depends on scheduling; correctness does not
