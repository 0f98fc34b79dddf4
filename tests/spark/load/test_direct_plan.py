"""The direct plan's task and driver logic (spark/load/direct_plan.py, spark/load/task_rows.py) without
Spark: a task run in this process with the local kind's writer, on staged files written by the window's
own Parquet writer, and on queue ranges read from the embedded broker (an offsets hand-off).

What it must never do is write an offset twice or a row it should not: every test here checks
the rows a task wrote (read back from its files) and what it reports to the driver. The same code
inside real Spark tasks, and its fallback to the other plans, run in test_load_window.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_rocketmq.client import ClientConfig, Message, MessageQueue, Producer
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.spark.load import direct_plan, task_rows
from airflow_provider_rocketmq.spark.load.handoff import check_on_brokers, reader_options
from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges
from airflow_provider_rocketmq.spark.load.outputs.local import LocalTaskWriter
from airflow_provider_rocketmq.spark.load.staged import LoadError
from airflow_provider_rocketmq.spark.source.ranges import QueueSpan
from airflow_provider_rocketmq.window.manifest import (
    HANDOFF_OFFSETS,
    QueueRange,
    WindowManifest,
    staged_schema,
    write_parquet_file,
)
from tests.spark.conftest import make_row

A, B = "broker-a", "broker-b"


def ranges(*items: tuple[str, int, int, int]) -> OffsetRanges:
    return OffsetRanges.of((("orders", b, q), s, e) for b, q, s, e in items)


def stage(path: Path, rows: list[tuple[str, int, int]], window: str = "w1", **kw: object) -> str:
    write_parquet_file([make_row(window, q, o, broker=b) for b, q, o in rows], path, path.parent, **kw)
    return str(path)


def run_task(tmp_path: Path, files: list[str], claim: OffsetRanges, held: OffsetRanges | None = None,
             *, body_format: str = "utf8", tasks: int = 1) -> tuple[list[task_rows.TaskResult], list[tuple[str, int, int]]]:
    """Run the plan's tasks one after the other here; return their results and the (broker, queue, offset)
    of every row written, in file order."""
    held = held or OffsetRanges()
    spec = task_rows.manifest_spec(0, "w1", "orders", claim - held, claim & held)
    return run_plan(tmp_path, {0: spec}, direct_plan.plan_tasks([(0, f) for f in files], tasks),
                    pq.read_schema(files[0]), body_format)


def run_plan(tmp_path: Path, specs: dict[int, task_rows.ManifestSpec], plan: list[list[direct_plan.Run]],
             source: pa.Schema, body_format: str = "utf8", sources: dict | None = None,
             ) -> tuple[list[task_rows.TaskResult], list[tuple[str, int, int]]]:
    schema = task_rows.output_schema(source, body_format)
    out = tmp_path / "data"
    load = direct_plan.DirectTask(specs, direct_plan.schema_hex(schema), body_format, LocalTaskWriter(str(out)), {},
                                  sources)
    results = [load.run(runs, f"{i:05d}-{i}") for i, runs in enumerate(plan)]
    windows = {s.window_id for s in specs.values()}
    written = []
    for r in results:
        for f in r.files:
            t = pq.read_table(out / f.path)
            assert t.num_rows == f.rows and f.window_id in windows
            assert t.schema == schema.remove(schema.get_field_index("window_id"))  # the partition is the directory
            written += list(zip(t.column("broker").to_pylist(), t.column("queue_id").to_pylist(),
                                t.column("queue_offset").to_pylist(), strict=True))
    return results, written


def test_a_task_writes_new_rows_and_counts_the_loaded_ones(tmp_path: Path) -> None:
    f = stage(tmp_path / "s" / "a.parquet", [(A, 0, o) for o in range(10)] + [(B, 3, o) for o in range(5, 9)])
    claim = ranges((A, 0, 0, 10), (B, 3, 5, 9))
    results, written = run_task(tmp_path, [f], claim, held=ranges((A, 0, 0, 4), (B, 3, 7, 20)))
    assert sorted(written) == [(A, 0, o) for o in range(4, 10)] + [(B, 3, 5), (B, 3, 6)]
    (r,) = results
    assert (r.read, r.loaded, r.new, r.outside, r.unordered) == ({0: 14}, {0: 6}, {0: 8}, None, False)
    task_rows.check_disjoint(results)


def test_bodies_as_text_or_bytes_unchanged(tmp_path: Path) -> None:
    raw = b"\xffnot utf-8"  # Spark's binary -> string cast keeps the bytes; so does the direct plan
    path = tmp_path / "s" / "a.parquet"
    path.parent.mkdir()
    write_parquet_file([make_row("w1", 0, 0, broker=A, body=raw), make_row("w1", 0, 1, broker=A, body=b"ok")],
                       path, path.parent)
    for fmt in ("binary", "utf8"):
        run_task(tmp_path / fmt, [str(path)], ranges((A, 0, 0, 2)), body_format=fmt)
        col = pq.read_table(next((tmp_path / fmt / "data").rglob("*.parquet"))).column("body").chunk(0)
        assert col.type == (pa.binary() if fmt == "binary" else pa.string())
        assert [v.as_buffer().to_pybytes() for v in col] == [raw, b"ok"]


def test_a_row_outside_its_manifest_stops_the_task(tmp_path: Path) -> None:
    f = stage(tmp_path / "s" / "a.parquet", [(A, 0, 0), (A, 0, 1), (A, 0, 7), (A, 0, 2)])
    results, _ = run_task(tmp_path, [f], ranges((A, 0, 0, 5)))
    assert results[0].outside == ("w1", "orders", A, 0, 7)
    g = stage(tmp_path / "s" / "b.parquet", [(A, 0, 0), (B, 0, 1)])  # a queue the manifest does not claim
    results, _ = run_task(tmp_path / "b", [g], ranges((A, 0, 0, 5)))
    assert results[0].outside == ("w1", "orders", B, 0, 1)


def test_repeated_offsets_are_detected_never_trusted(tmp_path: Path) -> None:
    # the same offset twice in one batch, or in two files (one task or two): the driver's check
    # refuses the plan (load_window.py then loads with the dedup plan)
    same_batch = stage(tmp_path / "s" / "a.parquet", [(A, 0, 0), (A, 0, 1), (A, 0, 1)])
    results, _ = run_task(tmp_path / "a", [same_batch], ranges((A, 0, 0, 2)))
    with pytest.raises(task_rows.NeedsDedup):
        task_rows.check_disjoint(results)
    one = stage(tmp_path / "s" / "b1.parquet", [(A, 0, o) for o in range(5)])
    two = stage(tmp_path / "s" / "b2.parquet", [(A, 0, o) for o in range(3, 6)])
    for tasks in (1, 2):  # in one task, or in two tasks whose intervals the driver compares
        results, _ = run_task(tmp_path / f"b{tasks}", [one, two], ranges((A, 0, 0, 6)), tasks=tasks)
        assert len(results) == tasks
        with pytest.raises(task_rows.NeedsDedup):
            task_rows.check_disjoint(results)
    # files in consumption order (each queue's offsets increasing from file to file) pass, and so do
    # files of distinct offsets in any order (as Spark packs files into a partition): each run of
    # increasing offsets is an interval of its own
    three = stage(tmp_path / "s" / "c.parquet", [(A, 0, o) for o in range(5, 9)] + [(B, 0, 0)])
    for tasks in (1, 2):
        for files in ([one, three], [three, one]):
            results, written = run_task(tmp_path / f"c{tasks}{files[0][-9:-8]}", files,
                                        ranges((A, 0, 0, 9), (B, 0, 0, 1)), tasks=tasks)
            task_rows.check_disjoint(results)
            assert sorted(written) == [(A, 0, o) for o in range(9)] + [(B, 0, 0)]
    # a batch whose offsets jump back and forth: too many runs to prove cheaply
    shuffled = stage(tmp_path / "s" / "d.parquet", [(A, 0, o) for o in range(0, 200, 2)] +
                     [(A, 0, o) for o in range(199, 0, -2)])
    results, _ = run_task(tmp_path / "d", [shuffled], ranges((A, 0, 0, 200)))
    assert results[0].unordered
    with pytest.raises(task_rows.NeedsDedup):
        task_rows.check_disjoint(results)


def test_plan_splits_row_groups_into_tasks(tmp_path: Path) -> None:
    rows = [(A, 0, o) for o in range(100)]
    path = tmp_path / "s" / "a.parquet"
    path.parent.mkdir()
    pq.write_table(pa.Table.from_pylist([make_row("w1", q, o, broker=b) for b, q, o in rows], schema=staged_schema()),
                   path, row_group_size=10)
    plan = direct_plan.plan_tasks([(0, str(path)), (1, str(path))], 4, rows_per_task=1_000)
    assert len(plan) == 4 and [sum(u.rows for u in t) for t in plan] == [50, 50, 50, 50]
    assert [u.row_groups for u in plan[0]] == [tuple(range(5))]
    assert sorted((u.order, g) for t in plan for u in t for g in u.row_groups) == \
        [(o, g) for o in (0, 1) for g in range(10)]  # every row group of every file once
    assert len(direct_plan.plan_tasks([(0, str(path))], 1, rows_per_task=30)) == 4  # at most ~30 rows per task


def test_plan_cuts_spans_to_fill_tasks(tmp_path: Path) -> None:
    spans = [direct_plan.SpanRun(0, QueueSpan("orders", A, q, 100, 100 + n)) for q, n in enumerate((50, 30, 20))]
    plan = direct_plan.plan_tasks([], 2, spans=spans)
    assert [[(u.span.queue_id, u.span.start, u.span.end) for u in t] for t in plan] == [
        [(0, 100, 150)], [(1, 100, 130), (2, 100, 120)]]
    plan = direct_plan.plan_tasks([], 4, spans=spans[:1])
    assert [(u.span.start, u.span.end) for t in plan for u in t] == [
        (100, 113), (113, 126), (126, 139), (139, 150)]


def test_a_task_writes_each_shared_offset_once_from_its_owner(tmp_path: Path) -> None:
    # two windows sharing offsets 5..9 of queue 0: the first in load order owns them, the second
    # reads and counts them as duplicates; the output held 0..1 already
    first = stage(tmp_path / "s" / "a.parquet", [(A, 0, o) for o in range(10)], window="w1")
    second = stage(tmp_path / "s" / "b.parquet", [(A, 0, o) for o in range(5, 15)], window="w2")
    held = ranges((A, 0, 0, 2))
    new1, new2 = ranges((A, 0, 0, 10)) - held, ranges((A, 0, 5, 15)) - held
    specs = {0: task_rows.manifest_spec(0, "w1", "orders", new1, ranges((A, 0, 0, 10)) & held),
             1: task_rows.manifest_spec(1, "w2", "orders", new2 - new1, OffsetRanges(), new2 & new1)}
    results, written = run_plan(tmp_path, specs, direct_plan.plan_tasks([(0, first), (1, second)], 2),
                                pq.read_schema(first))
    task_rows.check_disjoint(results)
    assert sorted(written) == [(A, 0, o) for o in range(2, 15)]
    total = {k: sum(getattr(r, k).get(o, 0) for r in results for o in (0, 1)) for k in ("read", "loaded",
                                                                                      "duplicates", "new")}
    assert total == {"read": 20, "loaded": 2, "duplicates": 5, "new": 13}


# --- an offsets hand-off: tasks read their spans from the brokers ------------------------------------

@pytest.fixture
def broker(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> EmbeddedCluster:
    cluster = embedded_cluster_factory(queues=2)
    cluster.create_topic("orders", 2)
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), group="dp_p") as producer:
        for q in (0, 1):
            producer.send_batch([Message("orders", f"{q}/{i}".encode(), tags="even" if i % 2 == 0 else "odd")
                                 for i in range(40)], queue=MessageQueue("orders", A, q))
    return cluster


def offsets_manifest(cluster: EmbeddedCluster, expression: str = "*") -> WindowManifest:
    return WindowManifest(window_id="wo", topic="orders", consumer_group="G", namesrv=cluster.namesrv_addr,
                          queues=[QueueRange(A, q, 0, 40, 40, 0) for q in (0, 1)], files=[], messages=0, bytes=0,
                          expression=expression, handoff=HANDOFF_OFFSETS)


def test_tasks_read_their_spans_from_the_brokers(tmp_path: Path, broker: EmbeddedCluster) -> None:
    manifest = offsets_manifest(broker, "even")
    opts = reader_options("mem://wo/manifest.json", manifest, environ={})
    claim = ranges((A, 0, 0, 40), (A, 1, 0, 40))
    held = ranges((A, 0, 0, 10))  # loaded before: never read again
    own = claim - held
    spans = [direct_plan.SpanRun(0, QueueSpan("orders", b, q, s, e)) for (_, b, q), s, e in own.intervals()]
    check_on_brokers(opts, "wo", [r.span for r in spans])
    plan = direct_plan.plan_tasks([], 3, spans=spans)
    assert len(plan) == 3
    results, written = run_plan(tmp_path, {0: task_rows.manifest_spec(0, "wo", "orders", own, OffsetRanges())},
                                plan, staged_schema(), sources={0: opts})
    task_rows.check_disjoint(results)
    # the tag expression applies: the even offsets of the new ranges, each once
    assert sorted(written) == [(A, 0, o) for o in range(10, 40, 2)] + [(A, 1, o) for o in range(0, 40, 2)]
    assert sum(r.read.get(0, 0) for r in results) == len(written) and all(r.failure is None for r in results)
    body = pq.read_table(tmp_path / "data").column("body").to_pylist()
    assert "0/10" in body and "1/38" in body


def test_a_range_the_brokers_no_longer_hold_fails_the_load(tmp_path: Path, broker: EmbeddedCluster) -> None:
    manifest = offsets_manifest(broker)
    opts = reader_options("mem://wo/manifest.json", manifest, environ={})
    spans = [QueueSpan("orders", A, 0, 0, 40), QueueSpan("orders", A, 1, 0, 40)]
    broker.broker(A).store.delete_before("orders", 1, 12)  # retention
    with pytest.raises(LoadError, match=r"^window wo: orders broker-a:1 \[0, 40\): offsets \[0, 12\) are no "
                                        r"longer on the broker \(its min offset is 12; retention deleted them\); "
                                        r"nothing was loaded$"):
        check_on_brokers(opts, "wo", spans)
    with pytest.raises(LoadError, match=r"holds offsets only up to 40"):
        check_on_brokers(opts, "wo", [QueueSpan("orders", A, 0, 0, 41)])
    # deleted after the driver's check, while the task reads: the task stops and says why
    spec = task_rows.manifest_spec(0, "wo", "orders", ranges((A, 0, 0, 40), (A, 1, 0, 40)), OffsetRanges())
    plan: list[list[direct_plan.Run]] = [[direct_plan.SpanRun(0, s) for s in spans]]
    results, written = run_plan(tmp_path, {0: spec}, plan, staged_schema(), sources={0: opts})
    assert results[0].failure == ("window wo: orders broker-a:1 [0, 40) could not be read from the brokers: orders "
                                  "broker-a:1: offsets [0, 12) of the range [0, 40) are no longer on the broker (its "
                                  "min offset is 12; retention deleted them); nothing was loaded")
    assert results[0].stopped
    with pytest.raises(LoadError, match="could not be read from the brokers"):
        direct_plan.finish(results, None, None)  # type: ignore[arg-type]  # it fails before it needs them
    # the broker stops answering: the task fails after the reader's retries, saying why
    broker.stop_broker(A)
    results, _ = run_plan(tmp_path / "down", {0: spec}, [[direct_plan.SpanRun(0, spans[0])]], staged_schema(),
                          sources={0: opts})
    assert (results[0].failure or "").startswith("window wo: orders broker-a:0 [0, 40) could not be read from the "
                                                 "brokers: "), results[0].failure
    broker.stop()  # no name server either
    with pytest.raises(LoadError, match="^window wo: the brokers could not tell which offsets of orders they hold: "):
        check_on_brokers(opts, "wo", spans)
