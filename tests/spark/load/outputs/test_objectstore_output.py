"""spark/load/outputs/objectstore.py without Spark, against moto's S3 server on 127.0.0.1 (s3fs): the
create-if-absent commit, conflicts between concurrent loads, abandoned loads discarded through an
abort entry, recovery of a committed load that was not published, and the stores it refuses."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.spark.load.ledger import (
    LEDGER_DIR,
    LOADS_DIR,
    CommitOutcomeUnknown,
    LedgerConflict,
    LedgerError,
    OffsetRanges,
)
from airflow_provider_rocketmq.spark.load.outputs import open_output
from airflow_provider_rocketmq.spark.load.outputs.objectstore import ObjectStoreParquetOutput
from tests.s3_server import MotoS3

Q0, Q1 = ("orders", "broker-a", 0), ("orders", "broker-a", 1)


def rows(window: str, queue_id: int, offsets: range) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "topic": ["orders"] * len(offsets), "broker": ["broker-a"] * len(offsets),
        "queue_id": [queue_id] * len(offsets), "queue_offset": list(offsets),
        "body": [f"{queue_id}/{o}" for o in offsets], "window_id": [window] * len(offsets)})


def output(s3: MotoS3, bucket: str, name: str = "out", **kw: Any) -> ObjectStoreParquetOutput:
    out = open_output(f"s3://{bucket}/{name}", s3.storage_options, **kw)
    assert isinstance(out, ObjectStoreParquetOutput)
    out.validate()
    return out


def visible(s3: MotoS3, bucket: str, name: str = "out") -> list[tuple[int, int]]:
    """(queue_id, offset) of every row a plain pyarrow reader of the published dataset sees."""
    fs = s3.filesystem()
    if not fs.exists(f"{bucket}/{name}"):
        return []
    d = ds.dataset(f"{bucket}/{name}", filesystem=fs, format="parquet", partitioning="hive")
    if not d.files:
        return []
    t = d.to_table(columns=["queue_id", "queue_offset"])
    return sorted(zip(t.column("queue_id").to_pylist(), t.column("queue_offset").to_pylist(), strict=True))


def load(out: ObjectStoreParquetOutput, batch: pa.RecordBatch, ranges: list, *, base: Any = None,
         publish: bool = True) -> Any:
    state = base if base is not None else out.state()
    pending = out.begin()
    files = pending.writer().write([batch], "00000-1")
    pending.commit(state, OffsetRanges.of(ranges), [str(batch.column(5)[0])], files, batch.num_rows)
    if publish:
        pending.publish()
        pending.close()
    return pending


def test_concurrent_commits_one_wins_overlap_conflicts_disjoint_retries(s3: MotoS3) -> None:
    bucket = s3.new_bucket("os")
    a, b, c = (output(s3, bucket) for _ in range(3))  # three drivers, one output
    base = a.state()  # all three planned against the empty ledger
    load(a, rows("w1", 0, range(10)), [(Q0, 0, 10)], base=base)
    late = b.begin()
    files = late.writer().write([rows("w2", 0, range(5, 15))], "00000-2")
    with pytest.raises(LedgerConflict) as err:
        late.commit(base, OffsetRanges.of([(Q0, 5, 15)]), ["w2"], files, 10)
    assert "committed orders broker-a:0 offsets [5, 10) while this load ran" in str(err.value)
    late.abort()
    # a load whose ranges do not meet the newer entry commits after it, on the new ledger state
    load(c, rows("w3", 1, range(4)), [(Q1, 0, 4)], base=base)
    ledger = a.read()
    assert [(e.seq, e.windows) for e in ledger.entries] == [(1, ("w1",)), (2, ("w3",))]
    assert list(ledger.held().intervals()) == [(Q0, 0, 10), (Q1, 0, 4)]
    assert visible(s3, bucket) == [(0, o) for o in range(10)] + [(1, o) for o in range(4)]
    fs = s3.filesystem()
    assert fs.ls(f"{bucket}/out/{LOADS_DIR}") == [] if fs.exists(f"{bucket}/out/{LOADS_DIR}") else True
    entry = json.loads(fs.cat_file(f"{bucket}/out/{LEDGER_DIR}/0000000001.json"))
    assert entry["rows"] == 10 and entry["files"][0]["path"].startswith("window_id=w1/part-")


def test_a_load_whose_ledger_listing_is_stale_still_sees_the_entry_that_beat_it(s3: MotoS3) -> None:
    # b lists the ledger while another load's probe object is there (s3fs caches that listing),
    # then a commits entry 1: b's create of entry 1 fails and b must read a's entry from the
    # store, not from its listing, to answer with a conflict (it once raised FileNotFoundError)
    bucket = s3.new_bucket("os")
    a, b, c = (output(s3, bucket) for _ in range(3))
    fs = s3.filesystem()
    probe = f"{bucket}/out/{LEDGER_DIR}/.probe-of-another-load"
    fs.pipe_file(probe, b"probe\n")
    base_b, base_c = b.state(), c.state()
    fs.rm(probe)
    load(a, rows("w1", 0, range(10)), [(Q0, 0, 10)])
    late = b.begin()
    files = late.writer().write([rows("w1-twin", 0, range(10))], "00000-2")
    with pytest.raises(LedgerConflict, match=r"offsets \[0, 10\) while this load ran"):
        late.commit(base_b, OffsetRanges.of([(Q0, 0, 10)]), ["w1-twin"], files, 10)
    late.abort()
    # a disjoint load with the same stale listing reads entry 1 and commits entry 2
    load(c, rows("w2", 1, range(3)), [(Q1, 0, 3)], base=base_c)
    assert [(e.seq, e.windows) for e in a.read().entries] == [(1, ("w1",)), (2, ("w2",))]
    assert visible(s3, bucket) == [(0, o) for o in range(10)] + [(1, o) for o in range(3)]


def test_every_entry_is_read_and_a_damaged_ledger_is_named(s3: MotoS3) -> None:
    bucket = s3.new_bucket("os")
    out = output(s3, bucket)
    for i in range(4):
        load(out, rows(f"w{i}", 0, range(10 * i, 10 * i + 10)), [(Q0, 10 * i, 10 * i + 10)])
    ledger = output(s3, bucket).read()  # a new driver: all four entries fetched at once
    assert [(e.seq, e.windows, e.rows) for e in ledger.entries] == [(i + 1, (f"w{i}",), 10) for i in range(4)]
    assert list(ledger.held().intervals()) == [(Q0, 0, 40)]
    fs = s3.filesystem()
    entry = f"{bucket}/out/{LEDGER_DIR}/{{:010d}}.json".format
    where = f"s3://{bucket}/out/{LEDGER_DIR}"
    good = fs.cat_file(entry(2))
    fs.pipe_file(entry(2), b"{not json")
    with pytest.raises(LedgerError, match=f"{where}/0000000002.json: not valid JSON"):
        output(s3, bucket).read()
    fs.pipe_file(entry(2), good.replace(b'"seq": 2', b'"seq": 5'))
    with pytest.raises(LedgerError, match=f"{where}/0000000002.json: seq 5 does not match the name"):
        output(s3, bucket).read()
    fs.rm(entry(2))
    with pytest.raises(LedgerError, match=f"{where}: entry 0000000002.json is missing \\(next is 3\\)"):
        output(s3, bucket).read()


def test_committed_unpublished_load_is_rolled_forward_by_recover(s3: MotoS3) -> None:
    bucket = s3.new_bucket("os")
    out = output(s3, bucket)
    crashed = load(out, rows("w1", 0, range(6)), [(Q0, 0, 6)], publish=False)  # died after the commit
    assert visible(s3, bucket) == []  # committed, not yet published: nothing shows
    again = output(s3, bucket)
    assert again.recover() == [f"finished publishing load {crashed.load_id} (its driver stopped after the commit)"]
    assert visible(s3, bucket) == [(0, o) for o in range(6)]
    assert again.recover() == []  # idempotent: nothing left to do
    assert not s3.filesystem().exists(f"{bucket}/out/{LOADS_DIR}/{crashed.load_id}")


def test_abandoned_load_is_discarded_through_an_abort_entry_and_can_never_commit(s3: MotoS3) -> None:
    bucket = s3.new_bucket("os")
    out = output(s3, bucket)
    state = out.state()
    slow = out.begin()  # a load whose driver is gone (or still running, slowly)
    files = slow.writer().write([rows("w1", 0, range(5))], "00000-1")
    fs = s3.filesystem()
    # younger than abandon_after: left alone, invisible
    assert output(s3, bucket, abandon_after=3600).recover() == []
    assert fs.exists(f"{bucket}/out/{LOADS_DIR}/{slow.load_id}")
    notes = output(s3, bucket, abandon_after=0).recover()
    assert notes == [(f"removed load {slow.load_id} (uncommitted and older than 0 s: abandoned; none of its "
                      "rows were visible)")]
    assert not fs.exists(f"{bucket}/out/{LOADS_DIR}/{slow.load_id}")
    entry = out.read().entries[0]
    assert entry.aborted == (slow.load_id,) and not entry.ranges and entry.rows == 0
    # the slow load wakes up and tries to commit: the abort entry is in its way
    with pytest.raises(LedgerConflict) as err:
        slow.commit(state, OffsetRanges.of([(Q0, 0, 5)]), ["w1"], files, 5)
    assert "found this load abandoned" in str(err.value)
    assert visible(s3, bucket) == [] and out.state().held == OffsetRanges()


def test_refused_outputs_name_the_field_and_the_reason(s3: MotoS3) -> None:
    for url, reason in (("memory://bucket/out", "has no atomic create-if-absent"),
                        ("hdfs://namenode/out", "has no atomic create-if-absent"),
                        ("nosuchfs://x/out", "no filesystem for nosuchfs://")):
        with pytest.raises(ConfigError) as err:
            open_output(url).validate()
        assert err.value.field == "--output" and reason in str(err.value), str(err.value)
    # an existing prefix holding other data is not taken over
    bucket = s3.new_bucket("os")
    s3.filesystem().pipe_file(f"{bucket}/out/data.csv", b"a,b\n")
    with pytest.raises(LedgerError) as lerr:
        output(s3, bucket)
    assert "holds 'data.csv' but no _rocketmq_ledger/" in str(lerr.value)
    # a missing bucket: one line, no secret in it
    with pytest.raises(ConfigError) as cerr:
        output(s3, "no-such-bucket-here")
    assert "no-such-bucket-here" in str(cerr.value) and "testing" not in str(cerr.value)


def test_a_store_that_ignores_if_none_match_is_refused() -> None:
    store = MotoS3(ignore_if_none_match=True)  # overwrites despite If-None-Match: *
    try:
        bucket = store.new_bucket("os")
        with pytest.raises(ConfigError) as err:
            open_output(f"s3://{bucket}/out", store.storage_options).validate()
        assert "overwrote an existing object despite the create-if-absent condition" in str(err.value)
        assert store.filesystem().find(f"{bucket}/out") == []  # the probe object was removed
    finally:
        store.stop()


class _AnswerLost:
    """Wrap an output's create-if-absent of ledger entries: the request takes effect (``lands``) or not,
    and the client always sees a connection error, as when every answer of it is lost."""

    def __init__(self, out: ObjectStoreParquetOutput, *, lands: bool) -> None:
        self.out, self.lands, self.calls = out, lands, 0
        self.create = out._create

    def __call__(self, path: str, data: bytes) -> None:
        if f"/{LEDGER_DIR}/" in path and path.endswith(".json") and "/." not in path:
            self.calls += 1
            if self.lands:
                self.create(path, data)
            raise ConnectionResetError(104, "Connection reset by peer (test: the answer was lost)")
        self.create(path, data)


def test_a_commit_whose_answer_is_lost_is_read_back_and_completes(s3: MotoS3,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry is created but the client sees only errors: the load must find its entry and go on.
    (Aborting would delete the files the entry names: offsets held by the ledger, rows gone for good.)"""
    bucket = s3.new_bucket("os")
    out = output(s3, bucket)
    lost = _AnswerLost(out, lands=True)
    monkeypatch.setattr(out, "_create", lost)
    pending = load(out, rows("w1", 0, range(6)), [(Q0, 0, 6)])
    assert lost.calls == 1 and pending._unknown is False
    assert visible(s3, bucket) == [(0, o) for o in range(6)]
    assert [e.load_id for e in output(s3, bucket).read().entries] == [pending.load_id]


def test_a_commit_whose_outcome_stays_unknown_keeps_the_files_for_the_next_load(
        s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = s3.new_bucket("os")
    out = output(s3, bucket, abandon_after=0)
    monkeypatch.setattr(out, "_create", _AnswerLost(out, lands=False))
    state = out.state()
    pending = out.begin()
    files = pending.writer().write([rows("w1", 0, range(6))], "00000-1")
    with pytest.raises(CommitOutcomeUnknown, match="files are kept"):
        pending.commit(state, OffsetRanges.of([(Q0, 0, 6)]), ["w1"], files, 6)
    pending.abort()  # what load_window does after a failed commit: must keep them (the entry may land)
    fs = s3.filesystem()
    fs.invalidate_cache()
    assert fs.find(f"{bucket}/out/{LOADS_DIR}/{pending.load_id}")
    # the next load finds the load uncommitted (and older than abandon_after): discarded, never visible
    nxt = output(s3, bucket, abandon_after=0)
    notes = nxt.recover()
    assert any(pending.load_id in n and "abandoned" in n for n in notes), notes
    assert visible(s3, bucket) == [] and nxt.state().held == OffsetRanges()
    load(nxt, rows("w1", 0, range(6)), [(Q0, 0, 6)])
    assert visible(s3, bucket) == [(0, o) for o in range(6)]
