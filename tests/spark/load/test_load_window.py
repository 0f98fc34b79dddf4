"""load_window.py run for real through spark-submit (local mode): the ledger makes every load add
only offsets the output does not hold, across windows, re-runs, lost staging and crashed drivers.

Spark is started three times for the whole module: two loads killed at a crash point (the
off-by-default test hook ends the driver process), then one application (load_steps_app.py)
that runs every other load on one session. Each test below checks its part of that run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, Producer
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.spark import LOAD_WINDOW_APP
from airflow_provider_rocketmq.spark.load.ledger import LOADS_DIR
from airflow_provider_rocketmq.spark.load.outputs.local import LocalStore
from airflow_provider_rocketmq.window.manifest import (
    QueueRange,
    WindowManifest,
    write_manifest,
    write_parquet_file,
)
from airflow_provider_rocketmq.window.snapshot import OffsetsWindow, snapshot_window
from tests.s3_server import MotoS3
from tests.spark.conftest import SparkRun, build_window, make_row

STEPS_APP = str(Path(__file__).with_name("load_steps_app.py"))
A, B = "broker-a", "broker-b"
Key = tuple[str, str, int, int]  # window_id, broker, queue_id, queue_offset


def keys(window: str, broker: str, queue_id: int, offsets: Iterable[int]) -> list[Key]:
    return [(window, broker, queue_id, o) for o in offsets]


def visible(out: Path) -> list[Key]:
    """Every row a plain pyarrow reader of the output sees (duplicates kept), sorted."""
    if not out.exists():
        return []
    dataset = ds.dataset(out, format="parquet", partitioning="hive")
    if not dataset.files:
        return []  # only hidden (_rocketmq_*) entries: no schema to project
    t = dataset.to_table(columns=["window_id", "broker", "queue_id", "queue_offset"])
    return sorted((str(w), b, q, o) for w, b, q, o in zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))


def counts(stdout: str) -> dict[str, int]:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("load_window: windows=")]
    assert len(lines) == 1, stdout
    return {k: int(v) for k, v in (kv.split("=") for kv in lines[0].split()[1:])}


def gapped_window(directory: Path, window_id: str, start: int, end: int, gaps: list[tuple[int, int]]) -> str:
    """A window of broker-a queue 0 over [start, end) that skipped ``gaps`` (offsets another member
    committed while it ran): it staged the rest."""
    directory.mkdir(parents=True)
    offsets = [o for o in range(start, end) if not any(lo <= o < hi for lo, hi in gaps)]
    fe = write_parquet_file([make_row(window_id, 0, o) for o in offsets], directory / "q0.parquet", directory)
    m = WindowManifest(window_id=window_id, topic="orders", consumer_group="G",
                       queues=[QueueRange(A, 0, start, end, end, len(offsets), gaps=tuple(gaps))],
                       files=[fe], messages=len(offsets), bytes=0)
    return str(write_manifest(m, directory))


def outside_window(directory: Path) -> Path:
    """A manifest claiming offsets [10, 15) whose file holds offsets 0..4: corrupt staging."""
    directory.mkdir(parents=True)
    fe = write_parquet_file([make_row("wx", 0, o) for o in range(5)], directory / "q0.parquet", directory)
    m = WindowManifest(window_id="wx", topic="orders", consumer_group="G", queues=[QueueRange(A, 0, 10, 15, 15, 5)],
                       files=[fe], messages=5, bytes=0)
    return write_manifest(m, directory)


def repeating_window(directory: Path) -> str:
    directory.mkdir(parents=True)
    fa = write_parquet_file([make_row("wrep", 0, o) for o in range(5)], directory / "a.parquet", directory)
    fb = write_parquet_file([make_row("wrep", 0, o) for o in range(3, 8)], directory / "b.parquet", directory)
    m = WindowManifest(window_id="wrep", topic="orders", consumer_group="G", queues=[QueueRange(A, 0, 0, 12, 12, 10)],
                       files=[fa, fb], messages=10, bytes=0)
    return str(write_manifest(m, directory))


def tagged_window(directory: Path, window_id: str, tag: str, offsets: range) -> str:
    """A window of broker-a queue 0 over ``offsets`` with the expression ``tag``: the messages of that tag
    (every other offset here; the others carry another tag) are staged."""
    directory.mkdir(parents=True)
    rows = [{**make_row(window_id, 0, o), "tags": tag, "body": f"{tag}/{o}".encode()} for o in offsets
            if (o % 2 == 0) == (tag == "even")]
    fe = write_parquet_file(rows, directory / "q0.parquet", directory)
    m = WindowManifest(window_id=window_id, topic="orders", consumer_group="G", expression=tag,
                       queues=[QueueRange(A, 0, offsets.start, offsets.stop, offsets.stop, len(rows))],
                       files=[fe], messages=len(rows), bytes=0)
    return str(write_manifest(m, directory))


def phases(stderr: str) -> dict[str, dict[str, str]]:
    """The job's phase lines (``load_window: read: k=v ...``) by phase; figures as text."""
    out: dict[str, dict[str, str]] = {}
    for line in stderr.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[0] == "load_window:" and parts[1] in ("read:", "write:", "commit:"):
            assert parts[1][:-1] not in out, stderr  # one line per phase
            out[parts[1][:-1]] = dict(kv.split("=", 1) for kv in parts[2:] if "=" in kv)
    return out


@dataclass
class Step:
    rc: int
    stdout: str
    stderr: str
    keys: list[Key]

    def counts(self) -> dict[str, int]:
        assert self.rc == 0, self.stdout + self.stderr
        return counts(self.stdout)


@dataclass
class Runs:
    root: Path
    steps: dict[str, Step] = field(default_factory=dict)
    reads: dict[str, dict[str, Any]] = field(default_factory=dict)  # spark.read.parquet(output) figures

    def out(self, name: str) -> Path:
        return self.root / "out" / name


def fsspec_env(s3: MotoS3) -> dict[str, str]:
    """How the Spark job's driver reaches the S3 API: fsspec's configuration through the environment
    (no secret on the command line)."""
    opts = {k: v for k, v in s3.storage_options.items() if k != "skip_instance_cache"}
    return {"FSSPEC_S3": json.dumps(opts)}


def upload_window(s3: MotoS3, local: Path, bucket: str, prefix: str) -> str:
    """Copy a staged window directory to ``s3://bucket/prefix``; return its manifest's URL."""
    s3.filesystem().put(str(local), f"{bucket}/{prefix}", recursive=True)
    return f"s3://{bucket}/{prefix}/manifest.json"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, spark_submit: Callable[..., SparkRun], s3: MotoS3) -> Runs:
    root = tmp_path_factory.mktemp("load")
    r = Runs(root)
    def w(name, wid, queues, layout="raw"):
        return str(build_window(root / "stage" / name, wid, queues, layout=layout))
    plan: list[dict[str, Any]] = []

    def step(label: str, out: str, *manifests: str, extra: tuple[str, ...] = ()) -> None:
        argv = [a for m in manifests for a in ("--manifest", m)] + ["--output", str(r.out(out)), *extra]
        plan.append({"label": label, "argv": argv, "output": str(r.out(out))})

    # two windows in one job, w1 staged twice with overlapping offsets (mapped instances); then a re-run
    d_a = w("w1-a", "w1", [(A, 0, range(10)), (B, 0, range(4))])
    d_b = w("w1-b", "w1", [(A, 0, range(5, 15)), (A, 1, range(3, 6))])
    d_c = w("w2", "w2", [(A, 2, range(100, 107))])
    step("dedup", "dedup", d_a, d_b, d_c)
    step("dedup-rerun", "dedup", d_b, d_a)
    # overlapping partial ranges, a strict sub-range, a gap, then a window spanning loaded and new offsets
    step("ov-a", "overlap", w("ov-a", "wa", [(A, 0, range(10)), (A, 1, range(5))]))
    step("ov-b", "overlap", w("ov-b", "wb", [(A, 0, range(5, 15)), (A, 1, range(5, 8)), (A, 2, range(3))]),
         extra=("--result-file", str(root / "results" / "ov-b.json")))
    step("ov-sub", "overlap", w("ov-sub", "wc", [(A, 0, range(2, 8))]))
    step("ov-gap", "overlap", w("ov-gap", "wd", [(A, 0, range(20, 25))]))
    step("ov-span", "overlap", w("ov-span", "we", [(A, 0, range(30))]))
    # the same window id consumed again after its staging was lost
    lost = "dag__run1__consume_window"
    step("lost-1", "lost", w("lost-1", lost, [(A, 0, range(10))]))
    step("lost-2", "lost", w("lost-2", lost, [(A, 0, range(10, 14))]))  # from the committed offsets
    step("lost-3", "lost", w("lost-3", lost, [(A, 0, range(16))]))  # the commit had failed: from 0
    step("lost-4", "lost", w("lost-4", lost, [(A, 0, range(16, 16))]))  # nothing new at all
    # a window that skipped offsets another member staged and committed: loaded first, alone, it
    # must not claim them; then the same two windows in one load, the gapped one first in load order
    gap_a = gapped_window(root / "stage" / "gap-a", "g1", 0, 20, [(5, 12)])
    gap_b = w("gap-b", "g2", [(A, 0, range(5, 12))])
    step("gap-a", "gap", gap_a)
    step("gap-b", "gap", gap_b)
    step("gap-both", "gap-together", gap_a, gap_b)
    # JSON bodies: an invalid one fails the load before anything is committed
    step("json-bad", "json", str(build_window(root / "stage" / "json-bad", "wbad", [(A, 1, range(3))],
                                              body=lambda b, q, o: b"{oops" if o == 1 else b"{}")),
         extra=("--body-format", "json"))
    step("json-good", "json", str(build_window(root / "stage" / "json-good", "wj", [(A, 0, range(3))],
                                               body=lambda b, q, o: json.dumps({"n": o, "q": q}).encode())),
         extra=("--body-format", "json"))
    # the driver reads the staged files with pyarrow (the path for staging Spark cannot read)
    d_wr = w("driver", "wr", [(A, 0, range(6)), (B, 1, range(4))])
    step("driver", "driver", d_wr, extra=("--staged-read", "driver"))
    step("direct", "direct", d_wr)  # the same window through the direct plan: the same files' content
    # a window staged by version 1 (the messages layout, manifest version 1) through each reader
    d_v1 = w("v1", "wv1", [(A, 0, range(6)), (B, 1, range(4))], layout="messages")
    for mode in ("driver", "spark", "tasks"):
        step(f"v1-{mode}", f"v1-{mode}", d_v1, extra=("--staged-read", mode))
    step("v1-direct", "v1-direct", d_v1)
    # windows staged before and after an upgrade, in one load: the direct plan, then Spark's general plan
    d_after = w("after-v1", "wv2", [(A, 0, range(6, 9))])
    step("mixed", "mixed", d_v1, d_after)
    step("mixed-spark", "mixed-spark", d_v1, d_after, extra=("--staged-read", "spark"))
    # the first two windows again, Spark reading the staged files: the general plan keeps rows by the claims
    step("by-spark", "by-spark", d_a, d_b, d_c, extra=("--staged-read", "spark"))
    # two windows over the same offsets with other tag expressions: which window holds an offset's row is
    # not in the claims, so Spark keeps the first row of each offset (the dedup plan)
    step("tags", "tags", tagged_window(root / "stage" / "tags-even", "wt1", "even", range(10)),
         tagged_window(root / "stage" / "tags-odd", "wt2", "odd", range(4, 12)))
    # one window (offsets 0..11, 10 messages) whose two files repeat offsets 3..4 of queue 0 (the window
    # operator never writes that):
    # the direct plan proves nothing, so the load falls back to Spark's dedup
    step("repeat", "repeat", repeating_window(root / "stage" / "repeat"))
    step("outside", "outside", str(outside_window(root / "stage" / "outside")))

    # crashed drivers (kill -9 while tasks write, before the commit, while publishing) and concurrent
    # loads, for every output kind: tests/spark/load/test_load_faults.py

    with EmbeddedCluster() as cluster:
        # an offsets hand-off read from a broker, into an output where a staged window holds 0..5 of queue 0
        cluster.create_topic("orders", 2)
        cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr)
        with Producer(cfg, group="lw_p") as producer:
            for q in (0, 1):
                producer.send_batch([Message("orders", f"live/{q}/{i}".encode(), tags="t") for i in range(10)],
                                    queue=MessageQueue("orders", A, q))
        with Admin(cfg) as admin:
            offsets = snapshot_window(OffsetsWindow("orders", "lw_g", str(root / "stage" / "offsets"),
                                                    window_id="wo"), admin, namesrv=cluster.namesrv_addr)
        off_staged = w("off-staged", "ws", [(A, 0, range(6))])
        step("off-staged", "offsets", off_staged)
        step("off-1", "offsets", offsets.manifest)
        step("off-2", "offsets", offsets.manifest)
        # the offsets hand-off and a staged window of the same offsets in one load: "wo" comes first in load
        # order and writes every offset, the staged rows are duplicates; into S3 as well
        step("off-mixed", "offsets-mixed", off_staged, offsets.manifest)
        plan.append({"label": "off-s3", "argv": ["--manifest", offsets.manifest, "--output",
                                                 f"s3://{s3.new_bucket('lwo')}/out"], "output": "s3://"})
        # JSON bodies read from the brokers: Spark's data source and parse_json, then the claims
        cluster.create_topic("events", 1)
        with Producer(cfg, group="lw_p") as producer:
            producer.send_batch([Message("events", json.dumps({"i": i}).encode()) for i in range(5)],
                                queue=MessageQueue("events", A, 0))
        with Admin(cfg) as admin:
            events = snapshot_window(OffsetsWindow("events", "lw_g", str(root / "stage" / "events"),
                                                   window_id="wev"), admin, namesrv=cluster.namesrv_addr)
        step("off-json", "offsets-json", events.manifest, extra=("--body-format", "json"))

        # a window staged on S3: Spark tasks read it through fsspec (no s3a:// connector here)
        bucket = s3.new_bucket("lw")
        on_s3 = upload_window(s3, build_window(root / "stage" / "s3", "w3", [(A, 0, range(8)), (B, 2, range(5))]).parent,
                              bucket, "windows/w3")
        step("s3-1", "s3", on_s3)
        step("s3-2", "s3", on_s3)

        plan.append({"label": "read-overlap", "read": str(r.out("overlap"))})
        plan_file, results_file = root / "plan.json", root / "results.json"
        plan_file.write_text(json.dumps(plan))
        app = spark_submit(str(plan_file), str(results_file), app=STEPS_APP, env=fsspec_env(s3), timeout=1800)
    assert app.returncode == 0, app.output[-4000:]
    for res in json.loads(results_file.read_text()):
        if "read" in res["label"]:
            r.reads[res["label"]] = res
        else:
            r.steps[res["label"]] = Step(res["rc"], res["stdout"], res["stderr"], [tuple(k) for k in res["keys"]])
    return r


pytestmark = pytest.mark.spark


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_windows_in_one_job_dedup_and_a_rerun_adds_nothing(runs: Runs) -> None:
    expected = sorted(keys("w1", A, 0, range(15)) + keys("w1", B, 0, range(4)) + keys("w1", A, 1, range(3, 6))
                      + keys("w2", A, 2, range(100, 107)))
    first, again = runs.steps["dedup"], runs.steps["dedup-rerun"]
    # offsets 5..9 of broker-a queue 0 were staged by both instances of w1; broker-b's queue 0 is another queue
    assert first.counts() == {"windows": 2, "rows_in": 34, "rows_out": 29, "duplicates": 5, "already_loaded": 0}
    assert first.keys == expected
    assert again.counts() == {"windows": 1, "rows_in": 27, "rows_out": 0, "duplicates": 0, "already_loaded": 27}
    assert again.keys == expected
    # utf8 is the default body format: bodies come back as text
    bodies = ds.dataset(runs.out("dedup"), format="parquet", partitioning="hive").to_table(columns=["body"])
    assert "broker-a/2/100" in bodies.column("body").to_pylist()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_each_phase_logs_one_line_with_its_counts(runs: Runs) -> None:
    s = runs.steps
    # overlapping windows in one load: the claims decide which window writes each offset, tasks read
    # the staged files and write in one pass
    p = phases(s["dedup"].stderr)
    assert {k: v for k, v in p["read"].items() if k != "seconds"} == {
        "plan": "direct", "windows": "3", "files": "5", "rows_read": "34", "already_loaded": "0", "duplicates": "5",
        "new": "29", "skipped_rows": "0"}
    written = LocalStore(runs.out("dedup")).read().entries[0].files
    assert {k: v for k, v in p["write"].items() if k not in ("seconds", "job_seconds")} == {
        "rows": "29", "files": str(len(written)), "bytes": str(sum(f.bytes for f in written))}
    assert {k: v for k, v in p["commit"].items() if k != "seconds"} == {"rows": "29", "files": str(len(written)),
                                                                      "offsets": "29"}
    assert all(float(p[ph]["seconds"]) >= 0 for ph in p)
    # everything held: nothing read, the rows of the skipped windows counted
    p = phases(s["dedup-rerun"].stderr)
    assert p["read"] == {"plan": "none", "windows": "2", "files": "0", "rows_read": "0", "already_loaded": "0",
                         "duplicates": "0", "new": "0", "skipped_rows": "27", "seconds": "0.00"}
    assert (p["write"]["rows"], p["commit"]["rows"], p["commit"]["offsets"]) == ("0", "0", "0")
    # one window over loaded and new offsets: tasks read the staged files and write in one pass
    p = phases(s["ov-b"].stderr)
    assert {k: v for k, v in p["read"].items() if k != "seconds"} == {
        "plan": "direct", "windows": "1", "files": "3", "rows_read": "16", "already_loaded": "5", "duplicates": "0",
        "new": "11", "skipped_rows": "0"}
    entry = LocalStore(runs.out("overlap")).read().entries[1]
    assert (p["write"]["rows"], p["write"]["files"], p["write"]["bytes"]) == (
        "11", str(len(entry.files)), str(sum(f.bytes for f in entry.files)))
    assert float(p["write"]["job_seconds"]) > 0
    assert (p["commit"]["rows"], p["commit"]["offsets"]) == ("11", "11")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_result_file_holds_the_counts_per_window(runs: Runs) -> None:
    result = json.loads((runs.root / "results" / "ov-b.json").read_text())
    assert result["counts"] == runs.steps["ov-b"].counts()
    assert result["windows"] == [{"window_id": "wb", "topic": "orders", "consumer_group": "G", "rows_in": 16,
                                  "rows_out": 11, "already_loaded": 5, "duplicates": 0}]
    assert (result["output"], result["output_kind"]) == (str(runs.out("overlap")), "local")
    read, write, commit = (result["phases"][k] for k in ("read", "write", "commit"))
    assert (read["plan"], read["rows_read"], read["already_loaded"], read["new"]) == ("direct", 16, 5, 11)
    assert (write["rows"], commit["rows"], commit["offsets"]) == (11, 11, 11)
    assert 0 < result["seconds"] < 900


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_direct_plan_writes_what_the_general_plan_writes(runs: Runs) -> None:
    direct = ds.dataset(runs.out("direct"), format="parquet", partitioning="hive")
    general = ds.dataset(runs.out("driver"), format="parquet", partitioning="hive")
    assert phases(runs.steps["direct"].stderr)["read"]["plan"] == "direct"
    assert phases(runs.steps["driver"].stderr)["read"]["plan"] == "spark"
    for d in (direct, general):  # the files' own schema (without the partition column)
        assert len({pq.read_schema(f) for f in d.files}) == 1
    # the same columns and types (every column optional, as Spark's own Parquet reader makes them)
    assert [(f.name, f.type) for f in pq.read_schema(direct.files[0])] == \
        [(f.name, f.type) for f in pq.read_schema(general.files[0])]
    assert all(f.nullable for f in pq.read_schema(direct.files[0]))
    order = [("broker", "ascending"), ("queue_id", "ascending"), ("queue_offset", "ascending")]
    assert direct.to_table().sort_by(order).to_pylist() == general.to_table().sort_by(order).to_pylist()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_repeated_offsets_in_one_window_fall_back_to_sparks_dedup(runs: Runs) -> None:
    s = runs.steps["repeat"]
    assert s.counts() == {"windows": 1, "rows_in": 10, "rows_out": 8, "duplicates": 2, "already_loaded": 0}
    assert s.keys == keys("wrep", A, 0, range(8))
    assert "two staged files or row groups cover the same offsets of a queue: loading with the dedup plan" \
        in s.stderr
    assert phases(s.stderr)["read"]["plan"] == "dedup"
    assert list((runs.out("repeat") / LOADS_DIR).iterdir()) == []  # the direct plan's files went with its load


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_spark_read_windows_keep_rows_by_their_claims(runs: Runs) -> None:
    # the windows of the "dedup" step, read by Spark: the same rows, no shuffle (the general plan)
    s = runs.steps["by-spark"]
    assert s.counts() == runs.steps["dedup"].counts()
    assert s.keys == runs.steps["dedup"].keys
    p = phases(s.stderr)
    assert (p["read"]["plan"], p["read"]["duplicates"], p["read"]["files"]) == ("spark", "5", "5")
    assert float(p["write"]["job_seconds"]) > 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_windows_sharing_offsets_under_other_tags_are_deduplicated_row_by_row(runs: Runs) -> None:
    s = runs.steps["tags"]
    # wt1 staged the even offsets of 0..9, wt2 the odd ones of 4..11: each offset of 0..11 once, from
    # the window that holds its row, though both windows claim 4..9
    assert s.counts() == {"windows": 2, "rows_in": 9, "rows_out": 9, "duplicates": 0, "already_loaded": 0}
    assert s.keys == sorted(keys("wt1", A, 0, range(0, 10, 2)) + keys("wt2", A, 0, range(5, 12, 2)))
    assert "loading with" not in s.stderr  # no plan tried and gave up: only the dedup plan applies
    assert phases(s.stderr)["read"]["plan"] == "dedup"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_overlapping_windows_load_only_offsets_not_loaded_yet(runs: Runs) -> None:
    s = runs.steps
    assert s["ov-a"].counts() == {"windows": 1, "rows_in": 15, "rows_out": 15, "duplicates": 0, "already_loaded": 0}
    # wb overlaps wa on queue 0 (5..9) and queue 1 (none: wa ended at 5), and adds queue 2
    assert s["ov-b"].counts() == {"windows": 1, "rows_in": 16, "rows_out": 11, "duplicates": 0, "already_loaded": 5}
    after_b = sorted(keys("wa", A, 0, range(10)) + keys("wa", A, 1, range(5)) + keys("wb", A, 0, range(10, 15))
                     + keys("wb", A, 1, range(5, 8)) + keys("wb", A, 2, range(3)))
    assert s["ov-b"].keys == after_b
    # a strict sub-range of loaded offsets adds nothing
    assert s["ov-sub"].counts() == {"windows": 1, "rows_in": 6, "rows_out": 0, "duplicates": 0, "already_loaded": 6}
    assert s["ov-sub"].keys == after_b
    assert s["ov-gap"].counts()["rows_out"] == 5
    # 0..29 against held [0, 15) and [20, 25): exactly the two holes are loaded
    assert s["ov-span"].counts() == {"windows": 1, "rows_in": 30, "rows_out": 10, "duplicates": 0,
                                     "already_loaded": 20}
    final = s["ov-span"].keys
    assert sorted(k[3] for k in final if k[2] == 0) == list(range(30))  # queue 0: every offset once
    assert [k for k in final if k[0] == "we"] == keys("we", A, 0, [*range(15, 20), *range(25, 30)])
    # Spark reads the output as plain Parquet: the ledger and load directories are invisible to it
    assert runs.reads["read-overlap"] == {"label": "read-overlap", "rows": len(final), "distinct": len(final),
                                          "windows": ["wa", "wb", "wd", "we"]}
    ledger = LocalStore(runs.out("overlap")).read()
    assert [e.windows for e in ledger.entries] == [("wa",), ("wb",), ("wd",), ("we",)]  # wc committed nothing
    assert [(k[2], s_, e_) for k, s_, e_ in ledger.held().intervals()] == [(0, 0, 30), (1, 0, 8), (2, 0, 3)]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_offsets_another_window_holds_are_not_claimed_by_a_window_that_skipped_them(runs: Runs) -> None:
    s = runs.steps
    assert s["gap-a"].counts() == {"windows": 1, "rows_in": 13, "rows_out": 13, "duplicates": 0, "already_loaded": 0}
    # the other member's window, loaded later: its 7 offsets were not claimed by g1, so they load
    assert s["gap-b"].counts() == {"windows": 1, "rows_in": 7, "rows_out": 7, "duplicates": 0, "already_loaded": 0}
    expected = sorted(keys("g1", A, 0, [*range(5), *range(12, 20)]) + keys("g2", A, 0, range(5, 12)))
    assert s["gap-b"].keys == expected
    assert [(k[2], lo, hi) for k, lo, hi in LocalStore(runs.out("gap")).read().held().intervals()] == [(0, 0, 20)]
    # both in one load: every row once, each from the window that staged it
    assert s["gap-both"].counts() == {"windows": 2, "rows_in": 20, "rows_out": 20, "duplicates": 0,
                                      "already_loaded": 0}
    assert s["gap-both"].keys == expected


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_rerun_of_a_window_id_after_its_staging_was_lost_keeps_the_first_load(runs: Runs) -> None:
    s, w = runs.steps, "dag__run1__consume_window"
    assert s["lost-1"].keys == keys(w, A, 0, range(10))
    # consumed again from the committed offsets under the same id: appended, the first rows stay
    assert s["lost-2"].counts() == {"windows": 1, "rows_in": 4, "rows_out": 4, "duplicates": 0, "already_loaded": 0}
    assert s["lost-2"].keys == keys(w, A, 0, range(14))
    # the offset commit had failed too: consumed again from 0 with two new messages
    assert s["lost-3"].counts() == {"windows": 1, "rows_in": 16, "rows_out": 2, "duplicates": 0,
                                    "already_loaded": 14}
    assert s["lost-4"].counts() == {"windows": 1, "rows_in": 0, "rows_out": 0, "duplicates": 0, "already_loaded": 0}
    assert s["lost-4"].keys == keys(w, A, 0, range(16))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_json_body_format_and_invalid_json_commits_nothing(runs: Runs) -> None:
    bad, good = runs.steps["json-bad"], runs.steps["json-good"]
    assert bad.rc == 2
    assert bad.stderr.strip().splitlines() == [
        "load_window: error: --body-format json: body of orders broker-a:1 offset 1 is not valid JSON"]
    assert bad.keys == []
    assert good.counts()["rows_out"] == 3
    assert good.keys == keys("wj", A, 0, range(3))
    out = runs.out("json")
    assert [e.windows for e in LocalStore(out).read().entries] == [("wj",)]  # wbad never committed
    assert list((out / LOADS_DIR).iterdir()) == []  # and its load directory was removed
    # a Parquet VARIANT column (metadata + value/shredded value), not the raw bytes
    body_type = ds.dataset(out, format="parquet", partitioning="hive").schema.field("body").type
    assert pa.types.is_struct(body_type) and body_type.get_field_index("metadata") >= 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_driver_read_of_staged_files_loads_the_same_rows(runs: Runs) -> None:
    s = runs.steps["driver"]
    assert s.counts() == {"windows": 1, "rows_in": 10, "rows_out": 10, "duplicates": 0, "already_loaded": 0}
    assert s.keys == sorted(keys("wr", A, 0, range(6)) + keys("wr", B, 1, range(4)))
    t = ds.dataset(runs.out("driver"), format="parquet", partitioning="hive").to_table()
    rows = {(r["broker"], r["queue_offset"]): r for r in t.to_pylist()}
    assert rows[(B, 3)]["body"] == "broker-b/1/3" and rows[(B, 3)]["msg_id"] == "broker-b-1-3"
    # derived from the staged properties string: the map holds what the message carried
    assert dict(rows[(A, 0)]["properties"]) == {"TAGS": "t", "KEYS": "k0", "UNIQ_KEY": "broker-a-0-0"}
    assert (rows[(A, 0)]["tags"], rows[(A, 0)]["keys"]) == ("t", "k0")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["driver", "spark", "tasks", "direct"])
def test_a_version_1_window_loads_through_every_reader(runs: Runs, mode: str) -> None:
    s = runs.steps[f"v1-{mode}"]
    assert s.counts() == {"windows": 1, "rows_in": 10, "rows_out": 10, "duplicates": 0, "already_loaded": 0}
    assert s.keys == sorted(keys("wv1", A, 0, range(6)) + keys("wv1", B, 1, range(4)))
    t = ds.dataset(runs.out(f"v1-{mode}"), format="parquet", partitioning="hive").to_table()
    rows = {(r["broker"], r["queue_offset"]): r for r in t.to_pylist()}
    assert (rows[(B, 3)]["msg_id"], rows[(B, 3)]["keys"]) == ("broker-b-1-3", "k3")
    assert dict(rows[(A, 0)]["properties"]) == {"TAGS": "t"}  # as version 1 staged it


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("label", "plan"), [("mixed", "direct"), ("mixed-spark", "spark")])
def test_windows_of_both_layouts_load_together(runs: Runs, label: str, plan: str) -> None:
    s = runs.steps[label]
    assert s.counts() == {"windows": 2, "rows_in": 13, "rows_out": 13, "duplicates": 0, "already_loaded": 0}
    assert phases(s.stderr)["read"]["plan"] == plan
    assert s.keys == sorted(keys("wv1", A, 0, range(6)) + keys("wv1", B, 1, range(4)) + keys("wv2", A, 0, range(6, 9)))
    t = ds.dataset(runs.out(label), format="parquet", partitioning="hive").to_table()
    rows = {(r["broker"], r["queue_offset"]): r for r in t.to_pylist()}
    assert dict(rows[(A, 5)]["properties"]) == {"TAGS": "t"}  # the version-1 window's row
    assert dict(rows[(A, 6)]["properties"]) == {"TAGS": "t", "KEYS": "k6", "UNIQ_KEY": "broker-a-0-6"}
    assert [rows[(A, o)]["msg_id"] for o in (5, 6)] == ["broker-a-0-5", "broker-a-0-6"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_staged_rows_outside_their_manifest_ranges_fail_the_load(runs: Runs) -> None:
    s = runs.steps["outside"]
    assert s.rc == 2 and s.keys == []
    assert s.stderr.strip() == ("load_window: error: window wx: staged row orders broker-a:0 offset 0 lies "
                                "outside its manifest's queue ranges")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_offsets_handoff_is_read_from_the_brokers_into_the_same_ledger(runs: Runs) -> None:
    s = runs.steps
    assert s["off-staged"].counts()["rows_out"] == 6
    # queue 0's offsets 0..5 were loaded from staging: only 6..9 and queue 1 are read from the broker, by
    # the tasks themselves (rows_in counts rows read)
    assert s["off-1"].counts() == {"windows": 1, "rows_in": 14, "rows_out": 14, "duplicates": 0,
                                   "already_loaded": 0}
    assert s["off-1"].keys == sorted(keys("ws", A, 0, range(6)) + keys("wo", A, 0, range(6, 10))
                                     + keys("wo", A, 1, range(10)))
    assert {k: v for k, v in phases(s["off-1"].stderr)["read"].items() if k != "seconds"} == {
        "plan": "direct", "windows": "1", "files": "0", "rows_read": "14", "already_loaded": "0",
        "duplicates": "0", "new": "14", "skipped_rows": "0"}
    t = ds.dataset(runs.out("offsets"), format="parquet", partitioning="hive").to_table()
    bodies = {(r["queue_id"], r["queue_offset"]): r["body"] for r in t.to_pylist() if r["window_id"] == "wo"}
    assert bodies[(0, 6)] == "live/0/6" and bodies[(1, 9)] == "live/1/9"
    # the same columns and types as a staged window's rows
    assert {pq.read_schema(f) for f in ds.dataset(runs.out("offsets"), format="parquet").files} == \
        {pq.read_schema(next(ds.dataset(runs.out("direct"), format="parquet").files.__iter__()))}
    # loaded again: every offset is held, so the brokers are not even read
    assert s["off-2"].counts() == {"windows": 1, "rows_in": 0, "rows_out": 0, "duplicates": 0, "already_loaded": 0}
    assert s["off-2"].keys == s["off-1"].keys


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_offsets_handoff_and_staged_window_of_the_same_offsets_in_one_load(runs: Runs, s3: MotoS3) -> None:
    s = runs.steps["off-mixed"]
    # wo (first in load order) writes all 20 offsets; ws's 6 staged rows are read and counted as duplicates
    assert s.counts() == {"windows": 2, "rows_in": 26, "rows_out": 20, "duplicates": 6, "already_loaded": 0}
    assert s.keys == sorted(keys("wo", A, 0, range(10)) + keys("wo", A, 1, range(10)))
    assert phases(s.stderr)["read"]["plan"] == "direct"
    # the same load into an object store
    on_s3 = runs.steps["off-s3"]
    assert on_s3.counts() == {"windows": 1, "rows_in": 20, "rows_out": 20, "duplicates": 0, "already_loaded": 0}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_offsets_handoff_with_json_bodies_is_read_by_spark(runs: Runs) -> None:
    s = runs.steps["off-json"]
    assert s.counts() == {"windows": 1, "rows_in": 5, "rows_out": 5, "duplicates": 0, "already_loaded": 0}
    assert phases(s.stderr)["read"]["plan"] == "spark"
    body_type = ds.dataset(runs.out("offsets-json"), format="parquet", partitioning="hive").schema.field("body").type
    assert pa.types.is_struct(body_type) and body_type.get_field_index("metadata") >= 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_window_staged_on_s3_is_read_by_spark_tasks_through_fsspec(runs: Runs) -> None:
    first, again = runs.steps["s3-1"], runs.steps["s3-2"]
    assert first.counts() == {"windows": 1, "rows_in": 13, "rows_out": 13, "duplicates": 0, "already_loaded": 0}
    assert first.keys == sorted(keys("w3", A, 0, range(8)) + keys("w3", B, 2, range(5)))
    assert again.counts() == {"windows": 1, "rows_in": 13, "rows_out": 0, "duplicates": 0, "already_loaded": 13}
    assert again.keys == first.keys


# --- without Spark -------------------------------------------------------------------------------

def _run_python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # validation and ledger-only outcomes need no Spark, so plain Python shows them quickly
    return subprocess.run([sys.executable, LOAD_WINDOW_APP, *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, check=False, env={**os.environ, **(env or {})})


def test_checksum_mismatch_fails_before_loading(tmp_path: Path) -> None:
    good = build_window(tmp_path / "w1", "w1", [(A, 0, range(4))])
    tampered = build_window(tmp_path / "w2", "w2", [(A, 1, range(4))])
    f = tmp_path / "w2" / "broker-a-1.parquet"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    out = tmp_path / "out"
    run = _run_python("--manifest", str(good), "--manifest", str(tampered), "--output", str(out))
    assert run.returncode == 2
    errors = run.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("load_window: error:"), run.stderr
    assert "files[0].sha256" in errors[0] and "broker-a-1.parquet checksum mismatch" in errors[0]
    assert str(tampered) in errors[0]
    assert not out.exists()  # nothing of the good window was written either


def test_tampered_file_on_s3_fails_before_loading(tmp_path: Path, s3: MotoS3) -> None:
    bucket = s3.new_bucket("lw")
    url = upload_window(s3, build_window(tmp_path / "w", "w", [(A, 0, range(4))]).parent, bucket, "w")
    fs = s3.filesystem()
    data = bytearray(fs.cat_file(f"{bucket}/w/broker-a-0.parquet"))
    data[len(data) // 2] ^= 0x01
    fs.pipe_file(f"{bucket}/w/broker-a-0.parquet", bytes(data))
    run = _run_python("--manifest", url, "--output", str(tmp_path / "out"), env=fsspec_env(s3))
    assert run.returncode == 2
    errors = run.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"load_window: error: {url}: files[0].sha256: "), run.stderr
    assert "broker-a-0.parquet checksum mismatch" in errors[0]
    assert not (tmp_path / "out").exists()


def test_fully_loaded_windows_add_nothing_without_starting_spark(tmp_path: Path) -> None:
    out = tmp_path / "out"
    store = LocalStore(out)
    load = store.begin()
    from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges

    store.commit(load, store.read(), OffsetRanges.of([(("orders", A, 0), 0, 100)]), ["earlier"], [], 0)
    load.finish()
    m1 = build_window(tmp_path / "w1", "w1", [(A, 0, range(10, 20))])
    m2 = build_window(tmp_path / "w2", "w2", [(A, 0, range(15, 30))])
    run = _run_python("--manifest", str(m1), "--manifest", str(m2), "--output", str(out))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "load_window: windows=2 rows_in=25 rows_out=0 duplicates=0 already_loaded=25"
    assert len(store.read().entries) == 1


def test_empty_window_succeeds_without_spark(tmp_path: Path) -> None:
    m = build_window(tmp_path / "empty", "we", [])
    run = _run_python("--manifest", str(m), "--output", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "load_window: windows=1 rows_in=0 rows_out=0 duplicates=0 already_loaded=0"


def test_bad_outputs_and_ledgers_are_one_line(tmp_path: Path) -> None:
    m = str(build_window(tmp_path / "w", "w", [(A, 0, range(3))]))
    run = _run_python("--manifest", m, "--output", "hdfs://namenode/out")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        ("load_window: error: --output: hdfs://namenode/out: hdfs:// (fsspec.implementations.arrow.HadoopFileSystem) "
         "has no atomic create-if-absent through fsspec, which the ledger's commit needs (no lock files are used); "
         "supported: s3:// (s3fs), gs:// (gcsfs), abfs:// or az:// (adlfs), or a local or mounted directory")]
    run = _run_python("--manifest", m, "--output", "s3://bucket/out",
                      env={"ROCKETMQ_OUTPUT_STORAGE_OPTIONS": '{"key": "k",'})
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "load_window: error: ROCKETMQ_OUTPUT_STORAGE_OPTIONS: not valid JSON (JSONDecodeError at char 12)"]
    legacy = tmp_path / "legacy"
    (legacy / "window_id=w").mkdir(parents=True)
    run = _run_python("--manifest", m, "--output", str(legacy))
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert "holds 'window_id=w' but no _rocketmq_ledger/" in run.stderr
    broken = tmp_path / "broken"
    (broken / "_rocketmq_ledger").mkdir(parents=True)
    (broken / "_rocketmq_ledger" / "0000000001.json").write_text("{not json")
    run = _run_python("--manifest", m, "--output", str(broken))
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert f"{broken / '_rocketmq_ledger' / '0000000001.json'}: not valid JSON" in run.stderr


def test_missing_manifest_is_one_line(tmp_path: Path) -> None:
    run = _run_python("--manifest", str(tmp_path / "nope.json"), "--output", str(tmp_path / "out"))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [(f"load_window: error: {tmp_path / 'nope.json'}: manifest: "
                                               "file not found")]


def test_usage_errors(tmp_path: Path) -> None:
    run = _run_python("--output", str(tmp_path))
    assert run.returncode == 2 and "--manifest" in run.stderr
    run = _run_python("--manifest", "m", "--output", str(tmp_path), "--body-format", "xml")
    assert run.returncode == 2 and "invalid choice: 'xml'" in run.stderr
