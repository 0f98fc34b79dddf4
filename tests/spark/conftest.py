"""Fixtures for tests that run the Spark job: the environment scripts/_env.sh exports, window builders."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_provider_rocketmq.spark import LOAD_WINDOW_APP
from airflow_provider_rocketmq.window.manifest import (
    STAGED_FILE_COLUMNS,
    FileEntry,
    QueueRange,
    WindowManifest,
    file_sha256,
    staged_file_schema,
    write_manifest,
    write_parquet_file,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def env_sh_env() -> dict[str, str]:
    """The environment after ``source scripts/_env.sh`` (install step disabled: the venv exists)."""
    out = subprocess.run(
        ["bash", "-c", "source scripts/_env.sh >/dev/null && env -0"],
        cwd=REPO, env={**os.environ, "ROCKETMQ_ENV_NO_INSTALL": "1"},
        capture_output=True, check=False, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr.decode()
    env = dict(item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)
    return env


@dataclass
class SparkRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def counts(self) -> dict[str, int]:
        """The job's `load_window: windows=... k=v ...` line as a dict."""
        lines = [ln for ln in self.stdout.splitlines() if ln.startswith("load_window: windows=")]
        assert len(lines) == 1, self.stdout + self.stderr[-3000:]
        return {k: int(v) for k, v in (kv.split("=") for kv in lines[0].split()[1:])}


@pytest.fixture(scope="session")
def spark_submit(env_sh_env: dict[str, str]) -> Callable[..., SparkRun]:
    """Run load_window.py (or another application) through the venv's real `spark-submit`, local mode."""
    exe = Path(env_sh_env["VIRTUAL_ENV"]) / "bin" / "spark-submit"

    def run(*args: str, app: str = LOAD_WINDOW_APP, env: dict[str, str] | None = None,
            timeout: float = 240) -> SparkRun:
        cmd = [str(exe), "--master", "local[2]", "--driver-memory", "512m",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
               "--conf", "spark.driver.extraJavaOptions=-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
               app, *args]
        p = subprocess.run(cmd, env={**env_sh_env, **(env or {})}, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL, check=False)
        return SparkRun(p.returncode, p.stdout, p.stderr)

    return run


@pytest.fixture(scope="session")
def spark_app(env_sh_env: dict[str, str]) -> Callable[..., SparkRun]:
    """Run any PySpark application through the venv's real `spark-submit` (local[2], separate Python workers)."""
    exe = Path(env_sh_env["VIRTUAL_ENV"]) / "bin" / "spark-submit"

    def run(app: str | Path, *args: str, options: Iterable[str] = (), env: dict[str, str] | None = None,
            cwd: str | Path | None = None, timeout: float = 400) -> SparkRun:
        cmd = [str(exe), "--master", "local[2]", "--driver-memory", "768m",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
               "--conf", "spark.driver.extraJavaOptions=-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
               *options, str(app), *args]
        p = subprocess.run(cmd, env={**env_sh_env, **(env or {})}, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL, check=False, cwd=cwd)
        return SparkRun(p.returncode, p.stdout, p.stderr)

    return run


def make_row(window_id: str, queue_id: int, offset: int, *, broker: str = "broker-a",
             body: bytes | None = None) -> dict:
    return {"topic": "orders", "broker": broker, "queue_id": queue_id, "queue_offset": offset,
            "msg_id": f"{broker}-{queue_id}-{offset}", "tags": "t", "keys": f"k{offset}",
            "properties": {"TAGS": "t"}, "born_timestamp": 1_700_000_000_000 + offset,
            "store_timestamp": 1_700_000_000_500 + offset, "reconsume_times": 0,
            "body": body if body is not None else f"{broker}/{queue_id}/{offset}".encode(),
            "window_id": window_id}


# the store host of every raw staged row (127.0.0.1:10911) and the commit-log offset's stride
STORE_HOST = bytes([127, 0, 0, 1, 0, 0, 0x2A, 0x9F])


def raw_row(row: dict) -> dict:
    """`make_row`'s row in the ``raw`` layout windows write: TAGS, KEYS and UNIQ_KEY (the row's
    msg_id) in the properties string, which the load splits back into the same columns (its
    properties map then holds those three too, as a real message's does)."""
    props = {"TAGS": row["tags"], "KEYS": row["keys"], "UNIQ_KEY": row["msg_id"], **(row["properties"] or {})}
    return {**{k: row[k] for k in STAGED_FILE_COLUMNS if k in row},
            "store_host": STORE_HOST, "commit_log_offset": 1_000_000 + 1000 * row["queue_id"] + row["queue_offset"],
            "properties_raw": "\x02".join(f"{k}\x01{v}" for k, v in props.items() if v)}


def write_raw_file(rows: list[dict], path: Path, base_dir: Path) -> FileEntry:
    """A staged file of the ``raw`` layout (as windows write it) from `make_row` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([raw_row(r) for r in rows], schema=staged_file_schema()), path,
                   compression="zstd")
    return FileEntry(path.relative_to(base_dir).as_posix(), len(rows), path.stat().st_size, file_sha256(path))


def build_window(directory: Path, window_id: str,
                 queues: Iterable[tuple[str, int, range]], *,
                 body: Callable[[str, int, int], bytes] | None = None, layout: str = "raw") -> Path:
    """Stage one Parquet file per queue and write a valid manifest; return its path. ``layout``:
    ``raw`` (what windows write) or ``messages`` (what version-1 windows wrote, in a version-1 manifest)."""
    directory.mkdir(parents=True, exist_ok=True)
    files, ranges, total_bytes = [], [], 0
    for broker, qid, offsets in queues:
        rows = [make_row(window_id, qid, o, broker=broker,
                         body=None if body is None else body(broker, qid, o)) for o in offsets]
        total_bytes += sum(len(r["body"]) for r in rows)
        path = directory / f"{broker}-{qid}.parquet"
        files.append(write_raw_file(rows, path, directory) if layout == "raw" else
                     write_parquet_file(rows, path, directory))
        ranges.append(QueueRange(broker, qid, offsets.start, offsets.stop, offsets.stop + 10, len(rows)))
    m = WindowManifest(window_id=window_id, topic="orders", consumer_group="G", namesrv="127.0.0.1:9876",
                       queues=ranges, files=files, messages=sum(f.rows for f in files), bytes=total_bytes,
                       version=2 if layout == "raw" else 1)
    return write_manifest(m, directory)


# the fault matrices' window (tests/spark/load/test_load_faults.py, test_iceberg_faults.py)
FAULT_QUEUES = [("broker-a", 0), ("broker-a", 1), ("broker-b", 0)]
Key = tuple[str, int, int]  # broker, queue_id, queue_offset
# two write tasks (shuffle partitions) even for the quick size: AQE would coalesce them into one
TWO_TASKS = ["--conf", "spark.sql.adaptive.coalescePartitions.enabled=false"]


def expected(offsets: range) -> list[Key]:
    """Every key of the fault matrices' queues over ``offsets``, sorted."""
    return sorted((b, q, o) for b, q in FAULT_QUEUES for o in offsets)
