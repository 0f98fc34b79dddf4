"""load_window.py run for real through spark-submit (local mode): dedup, idempotent re-runs, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from airflow_provider_rocketmq.spark import LOAD_WINDOW_APP
from tests.spark.conftest import build_window

pytestmark = pytest.mark.spark


def _output_keys(out: Path) -> dict[str, list[tuple[str, int, int]]]:
    """window_id -> sorted (broker, queue_id, queue_offset) of every stored row (duplicates kept)."""
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table(
        columns=["window_id", "broker", "queue_id", "queue_offset"])
    result: dict[str, list[tuple[str, int, int]]] = {}
    for w, b, q, o in zip(*(table.column(c).to_pylist() for c in table.column_names)):
        result.setdefault(str(w), []).append((b, q, o))
    return {w: sorted(v) for w, v in result.items()}


@pytest.mark.slow
def test_dedup_partitioning_and_rerun_overwrites(tmp_path: Path, spark_submit) -> None:
    # two mapped instances of window w1 overlapped on broker-a queue 0 (offsets 5..9 staged twice);
    # broker-b queue 0 has the same queue id and offsets as broker-a's: distinct messages, not duplicates
    a = build_window(tmp_path / "w1-a", "w1", [("broker-a", 0, range(10)), ("broker-b", 0, range(4))])
    b = build_window(tmp_path / "w1-b", "w1", [("broker-a", 0, range(5, 15)), ("broker-a", 1, range(3, 6))])
    c = build_window(tmp_path / "w2", "w2", [("broker-a", 2, range(100, 107))])
    out = tmp_path / "out"

    first = spark_submit("--manifest", str(a), "--manifest", str(b), "--manifest", str(c), "--output", str(out))
    assert first.returncode == 0, first.stderr[-4000:]
    assert first.counts() == {"windows": 2, "rows_in": 10 + 4 + 10 + 3 + 7, "rows_out": 15 + 4 + 3 + 7,
                              "duplicates": 5}
    expected_w1 = sorted([("broker-a", 0, o) for o in range(15)] + [("broker-b", 0, o) for o in range(4)]
                         + [("broker-a", 1, o) for o in range(3, 6)])
    expected_w2 = [("broker-a", 2, o) for o in range(100, 107)]
    assert _output_keys(out) == {"w1": expected_w1, "w2": expected_w2}
    # utf8 is the default body format: bodies come back as text
    bodies = ds.dataset(out, format="parquet", partitioning="hive").to_table(columns=["body"])
    assert "broker-a/2/100" in bodies.column("body").to_pylist()

    # re-running window w1 replaces its partition (no duplicates) and leaves w2 alone
    again = spark_submit("--manifest", str(b), "--manifest", str(a), "--output", str(out))
    assert again.returncode == 0, again.stderr[-4000:]
    assert again.counts() == {"windows": 1, "rows_in": 27, "rows_out": 22, "duplicates": 5}
    assert _output_keys(out) == {"w1": expected_w1, "w2": expected_w2}


@pytest.mark.slow
def test_json_body_format_and_invalid_json(tmp_path: Path, spark_submit) -> None:
    good = build_window(tmp_path / "good", "wj", [("broker-a", 0, range(3))],
                        body=lambda b, q, o: json.dumps({"n": o, "q": q}).encode())
    bad = build_window(tmp_path / "bad", "wbad", [("broker-a", 1, range(3))],
                       body=lambda b, q, o: b"{oops" if o == 1 else b"{}")
    out = tmp_path / "out"
    run = spark_submit("--manifest", str(bad), "--output", str(out), "--body-format", "json")
    assert run.returncode == 2
    assert "load_window: error: --body-format json: body of orders broker-a:1 offset 1 is not valid JSON" \
        in run.output
    assert not (out / "window_id=wbad").exists()

    run = spark_submit("--manifest", str(good), "--output", str(out), "--body-format", "json")
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.counts()["rows_out"] == 3
    assert _output_keys(out) == {"wj": [("broker-a", 0, o) for o in range(3)]}
    # a Parquet VARIANT column (metadata + value/shredded value), not the raw bytes
    body_type = ds.dataset(out, format="parquet", partitioning="hive").schema.field("body").type
    assert pa.types.is_struct(body_type) and body_type.get_field_index("metadata") >= 0


def test_checksum_mismatch_fails_before_loading(tmp_path: Path, spark_submit) -> None:
    good = build_window(tmp_path / "w1", "w1", [("broker-a", 0, range(4))])
    tampered = build_window(tmp_path / "w2", "w2", [("broker-a", 1, range(4))])
    f = tmp_path / "w2" / "broker-a-1.parquet"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    out = tmp_path / "out"
    run = spark_submit("--manifest", str(good), "--manifest", str(tampered), "--output", str(out))
    assert run.returncode == 2
    # spark-submit merges the Python driver's stderr into its stdout
    errors = [ln for ln in run.output.splitlines() if ln.startswith("load_window: error:")]
    assert len(errors) == 1, run.output[-3000:]
    assert "files[0].sha256" in errors[0] and "broker-a-1.parquet checksum mismatch" in errors[0]
    assert str(tampered) in errors[0]
    assert not out.exists()  # nothing of the good window was written either


def _run_python(*args: str) -> subprocess.CompletedProcess[str]:
    # the job's validation runs before Spark starts, so plain Python shows the same behaviour quickly
    return subprocess.run([sys.executable, LOAD_WINDOW_APP, *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, check=False)


def test_missing_manifest_is_one_line(tmp_path: Path) -> None:
    run = _run_python("--manifest", str(tmp_path / "nope.json"), "--output", str(tmp_path / "out"))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [(f"load_window: error: {tmp_path / 'nope.json'}: manifest: "
                                               "file not found")]


def test_empty_window_succeeds_without_spark(tmp_path: Path) -> None:
    m = build_window(tmp_path / "empty", "we", [])
    run = _run_python("--manifest", str(m), "--output", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "load_window: windows=1 rows_in=0 rows_out=0 duplicates=0"


def test_usage_errors(tmp_path: Path) -> None:
    run = _run_python("--output", str(tmp_path))
    assert run.returncode == 2 and "--manifest" in run.stderr
    run = _run_python("--manifest", "m", "--output", str(tmp_path), "--body-format", "xml")
    assert run.returncode == 2 and "invalid choice: 'xml'" in run.stderr
