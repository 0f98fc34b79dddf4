"""The direct plan's task and driver logic (spark/load/direct_plan.py) without Spark: a task run in this
process with the local kind's writer, on staged files written by the window's own Parquet writer.

What it must never do is write an offset twice or a row it should not: every test here checks
the rows a task wrote (read back from its files) and what it reports to the driver. The same code
inside real Spark tasks, and its fallback to the general plan, run in test_load_window.py."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_rocketmq.spark.load import direct_plan
from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges
from airflow_provider_rocketmq.spark.load.outputs.local import LocalTaskWriter
from airflow_provider_rocketmq.window.manifest import staged_schema, write_parquet_file
from tests.spark.conftest import make_row

A, B = "broker-a", "broker-b"


def ranges(*items: tuple[str, int, int, int]) -> OffsetRanges:
    return OffsetRanges.of((("orders", b, q), s, e) for b, q, s, e in items)


def stage(path: Path, rows: list[tuple[str, int, int]], window: str = "w1", **kw: object) -> str:
    write_parquet_file([make_row(window, q, o, broker=b) for b, q, o in rows], path, path.parent, **kw)
    return str(path)


def run_task(tmp_path: Path, files: list[str], claim: OffsetRanges, held: OffsetRanges | None = None,
             *, body_format: str = "utf8", tasks: int = 1) -> tuple[list[direct_plan.TaskResult], list[tuple[str, int, int]]]:
    """Run the plan's tasks one after the other here; return their results and the (broker, queue, offset)
    of every row written, in file order."""
    held = held or OffsetRanges()
    spec = direct_plan.manifest_spec(0, "w1", "orders", claim - held, claim & held)
    schema = direct_plan.output_schema(pq.read_schema(files[0]), body_format)
    out = tmp_path / "data"
    load = direct_plan.DirectTask({0: spec}, direct_plan.schema_hex(schema), body_format, LocalTaskWriter(str(out)), {})
    results = [load.run(runs, f"{i:05d}-{i}") for i, runs in enumerate(direct_plan.plan_tasks([(0, f) for f in files], tasks))]
    written = []
    for r in results:
        for f in r.files:
            t = pq.read_table(out / f.path)
            assert t.num_rows == f.rows and f.window_id == "w1"
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
    direct_plan.check_disjoint(results)


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
    # the same offset twice in one batch, in two files, or out of order across files: the driver's
    # check refuses the direct plan (load_window.py then loads with the general plan)
    same_batch = stage(tmp_path / "s" / "a.parquet", [(A, 0, 0), (A, 0, 1), (A, 0, 1)])
    results, _ = run_task(tmp_path / "a", [same_batch], ranges((A, 0, 0, 2)))
    assert results[0].unordered
    with pytest.raises(direct_plan.NeedsDedup):
        direct_plan.check_disjoint(results)
    one = stage(tmp_path / "s" / "b1.parquet", [(A, 0, o) for o in range(5)])
    two = stage(tmp_path / "s" / "b2.parquet", [(A, 0, o) for o in range(3, 6)])
    for tasks in (1, 2):  # in one task, or in two tasks whose intervals the driver compares
        results, _ = run_task(tmp_path / f"b{tasks}", [one, two], ranges((A, 0, 0, 6)), tasks=tasks)
        assert len(results) == tasks
        with pytest.raises(direct_plan.NeedsDedup):
            direct_plan.check_disjoint(results)
    # files in consumption order (each queue's offsets increasing from file to file) pass
    three = stage(tmp_path / "s" / "c.parquet", [(A, 0, o) for o in range(5, 9)] + [(B, 0, 0)])
    results, written = run_task(tmp_path / "c", [one, three], ranges((A, 0, 0, 9), (B, 0, 0, 1)), tasks=2)
    direct_plan.check_disjoint(results)
    assert sorted(written) == [(A, 0, o) for o in range(9)] + [(B, 0, 0)]


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


def test_claims_disjoint() -> None:
    assert direct_plan.claims_disjoint([ranges((A, 0, 0, 5)), ranges((A, 0, 5, 9)), ranges((A, 1, 0, 9))])
    assert not direct_plan.claims_disjoint([ranges((A, 0, 0, 5)), ranges((A, 1, 0, 9)), ranges((A, 0, 4, 6))])
