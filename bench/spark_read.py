"""Spark reads RocketMQ: rows/s of the ``rocketmq`` data source, ``count()`` and a Parquet write.

Starts the embedded broker in a *separate process* (unless ``--namesrv`` is given), fills (or
reuses) a backlog of 100-byte messages on 8 queues, starts a ``local[2]`` SparkSession, warms
the Python workers up with one untimed count, then times per run:
  count    ``spark.read.format("rocketmq")...load().count()``
  parquet  the same read written with ``df.write.parquet(...)``
Each figure covers planning on the driver, the tasks' pulls and decoding, and Spark's own
work; the JVM start and the first Python worker start are excluded. CPU seconds per million
rows are split between the Python workers (the data source's reads, decoding, Arrow hand-off;
the planner included), the JVM (Spark) and the embedded broker (serving the pulls).

    .venv/bin/python bench/spark_read.py                 # 1,000,000 messages by default
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airflow_provider_rocketmq.client.loop_thread import LoopThread
from bench._broker import backlog, fill, start_broker


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_split(broker_pid: int | None) -> dict[str, float]:
    """CPU seconds used so far by the broker, the JVM and the Python workers (this process's descendants)."""
    import psutil

    out = {"broker": 0.0, "jvm": 0.0, "python": 0.0}
    for p in psutil.Process().children(recursive=True):
        try:
            t = p.cpu_times()
            used = t.user + t.system + t.children_user + t.children_system
            name = "broker" if p.pid == broker_pid else "jvm" if "java" in p.name() else "python"
        except psutil.NoSuchProcess:
            continue
        out[name] += used
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", help="use this name server instead of starting the embedded broker")
    ap.add_argument("--topic", default="BenchSpark100B")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    # Python workers need this interpreter (the package's dependencies), not whatever python3 is on PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    proc, namesrv = (None, args.namesrv) if args.namesrv else start_broker(args.topic)
    lt = LoopThread()
    out_dir = tempfile.mkdtemp(prefix="bench-spark-read-")
    try:
        have = backlog(lt, namesrv, args.topic)
        if have < args.messages:
            t = time.perf_counter()
            fill(lt, namesrv, args.topic, args.messages - have)
            print(f"filled {args.messages - have} messages in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        total = backlog(lt, namesrv, args.topic)

        from pyspark.sql import SparkSession

        from airflow_provider_rocketmq.spark.source.datasource import RocketMQDataSource

        spark = (SparkSession.builder.master(args.master).appName("bench-spark-read")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "1g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(RocketMQDataSource)

        def source(**extra: str):  # type: ignore[no-untyped-def]
            reader = spark.read.format("rocketmq").option("namesrv", namesrv).option("topic", args.topic)
            for k, v in extra.items():
                reader = reader.option(k, v)
            return reader.load()

        # warm-up: one untimed count starts the Python workers and loads the modules once
        source().count()

        print(f"backlog {total} messages x 100 B on 8 queues, master {args.master}; load average before: "
              f"{load_avg()}")
        broker_pid = proc.pid if proc is not None else None
        print(f"{'run':>3} {'mode':<8} {'rows':>9} {'seconds':>8} {'rows/s':>10}  CPU-s per million rows: "
              f"{'workers':>7} {'JVM':>5} {'broker':>6}  load average (1/5/15 min)")

        def report(run: int, mode: str, rows: int, dt: float, before: dict[str, float]) -> None:
            used = {k: (v - before[k]) / rows * 1e6 for k, v in cpu_split(broker_pid).items()}
            print(f"{run:>3} {mode:<8} {rows:>9} {dt:>8.2f} {rows / dt:>10.0f}  {'':23}{used['python']:>7.2f} "
                  f"{used['jvm']:>5.2f} {used['broker']:>6.2f}  {load_avg()}", flush=True)

        for run in range(1, args.runs + 1):
            before, t = cpu_split(broker_pid), time.perf_counter()
            rows = source().count()
            report(run, "count", rows, time.perf_counter() - t, before)
            target = os.path.join(out_dir, f"run{run}")
            before, t = cpu_split(broker_pid), time.perf_counter()
            source().write.parquet(target)
            dt = time.perf_counter() - t
            report(run, "parquet", spark.read.parquet(target).count(), dt, before)
            shutil.rmtree(target, ignore_errors=True)
        spark.stop()
    finally:
        lt.stop()
        shutil.rmtree(out_dir, ignore_errors=True)
        if proc is not None:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
