"""Load throughput: `spark/load/load_window.py` on a staged window, by output kind, with `local[2]`.

A window of N messages x 100-byte bodies on 8 queues is staged once (Parquet + manifest, as the
window operator writes it; one file per queue). Each run is one real ``spark-submit --master
local[2] --driver-memory 2g`` of a small driver (`_load_throughput_app.py`) that starts the Spark
session, then calls ``load_window.main(...)`` into a fresh output of the kind:

- ``local``: a directory on local disk;
- ``s3``: ``s3://`` on moto's S3 server on 127.0.0.1 (s3fs in the Spark tasks);
- ``iceberg``: an Iceberg table (created by the load) in a pyiceberg SQL catalog on sqlite, its
  warehouse on local disk (pyiceberg's FileIO in the Spark tasks, one snapshot per load);
- more kinds register in `KINDS` (name -> function giving the ``--output`` URL and environment).

Two rates are printed per run, both rows_out divided by a time:

- **load phase**: the time of the ``load_window.main`` call alone — manifest checks, ledger,
  Spark jobs, commit, publish — after the JVM, the Python driver and the Spark session started;
- **whole spark-submit**: wall time from starting ``spark-submit`` to its exit (JVM start-up,
  session start and stop included: ~10 s of fixed cost on an idle machine, so this rate grows
  with the window size).

CPU seconds per million rows, by process, are given for both spans: the driver JVM (which also
hosts the local executors), the Python driver, the Python workers (Spark's pyspark daemon and its
workers: they read the staged files and write the output) and the moto server — sampled from
/proc every 0.2 s. Then the peak RSS (VmHWM, whole life) of the Python driver and of the JVM, the
load average when the run ended, and the job's own phase lines (read / write / commit). Asserts
nothing; other processes on the machine make figures noisy: run it on a quiet machine and report
``uptime`` next to the figures.

    .venv/bin/python bench/load_throughput.py --kinds local --rss-sizes ""     # one kind, no RSS pair
    .venv/bin/python bench/load_throughput.py [--sizes 1000000,5000000] [--runs 3] [--kinds local,s3,iceberg]
        [--rss-sizes 1000000,5000000]   # sizes whose driver RSS is compared (one run each)
        [--rss-kinds local,iceberg]     # kinds whose driver RSS is compared

What is measured is `load_window.py`'s default plan for a staged window (spark/load/direct_plan.py: Spark
tasks read the staged Parquet files themselves and write the new rows in one pass).

**Offsets hand-off** (``--handoff offsets``): a backlog of N x 100 B on 8 queues on a broker - the
embedded broker in a process of its own by default (the backlog written into its store), or
``--namesrv HOST:PORT --topic T`` (``--fill N`` tops the topic up first) - is loaded both ways in
each run, into a fresh local output: ``staging`` (`rocketmq-airflow window` consumes the backlog
into Parquet, then the load reads the staged files) and ``offsets`` (`rocketmq-airflow window
--handoff offsets` writes the queue ranges only, then the load's tasks read them from the broker).
Per hand-off: the window command's wall and CPU seconds, the load phase and the whole spark-submit
as above, and window + whole spark-submit end to end. The broker's CPU during the load phase is counted
(``broker``) for the embedded broker and for the processes named with ``--broker-pid`` (a real broker's
JVM on this machine): on a machine the broker shares, it is CPU the offsets load's tasks do not get.
``--warmup N`` unmeasured pairs (default 1) go first: the first runs after a broker start or a top-up,
and the first spark-submits of an invocation, were slower on both sides (up to ~30 %) and would
otherwise count against whichever hand-off ran first; within a run ``staging`` goes first in odd
runs and ``offsets`` in even ones. The last lines give each run's offsets/staging ratio and in how
many runs the load-phase target (offsets >= 80 % of staging) was met.

**Overlapping windows** (``--overlap K``): K staged windows of N rows each, window k starting N/2
rows half a window after window k-1 (50 % overlap between neighbours), in one load: once as
the load picks its plan (``auto``), once with ``--staged-read spark`` (Spark reads: the general
plan), beside one window of N rows (the direct plan). Rates are rows read (rows_in) per second.

``--master local-cluster[2,1,2048]`` runs the loads on two executor JVMs and prints how many tasks
each ran (from Spark's event log). ``PYTHONPATH`` is this tree for every process, so a copy of
this script in another checkout measures that checkout's code.

    .venv/bin/python bench/load_throughput.py --handoff offsets [--sizes 1000000] [--runs 3] [--warmup 1]
        [--namesrv HOST:PORT --topic T [--fill N] [--broker-pid PID ...]] [--master local-cluster[2,1,2048]]
    .venv/bin/python bench/load_throughput.py --overlap 2 [--sizes 1000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

APP = str(Path(__file__).with_name("_load_throughput_app.py"))
QUEUES = 8
BODY = 100
RATIO_TARGET = 0.80  # issue 29: the offsets load phase at >= 80 % of the staged one's rows/s
TICK = os.sysconf("SC_CLK_TCK")


def stage_window(directory: Path, n: int, first: int = 0, window_id: str = "bench") -> Path:
    """N messages on 8 queues of broker-a from offset ``first`` of each queue, one Parquet file per
    queue in the layout windows write (properties as a producer sends them: UNIQ_KEY, WAIT, TAGS),
    and the manifest."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_provider_rocketmq.window.manifest import (
        FileEntry,
        QueueRange,
        WindowManifest,
        file_sha256,
        staged_file_schema,
        write_manifest,
    )

    directory.mkdir(parents=True)
    schema = staged_file_schema()
    files, ranges = [], []
    per_queue = [n // QUEUES + (1 if q < n % QUEUES else 0) for q in range(QUEUES)]
    body = np.frombuffer(b"x" * BODY, dtype=np.uint8)
    host = bytes([127, 0, 0, 1, 0, 0, 0x2A, 0x9F])
    for q, count in enumerate(per_queue):
        offsets = np.arange(first, first + count, dtype=np.int64)
        bodies = pa.FixedSizeBinaryArray.from_buffers(pa.binary(BODY), count,
                                                      [None, pa.py_buffer(np.tile(body, count).tobytes())])
        table = pa.table({
            "topic": pa.array(["bench"] * count, pa.string()),
            "broker": pa.array(["broker-a"] * count, pa.string()),
            "queue_id": pa.array(np.full(count, q, dtype=np.int32)),
            "queue_offset": pa.array(offsets),
            "store_host": pa.array([host] * count, pa.binary()),
            "commit_log_offset": pa.array(offsets * QUEUES + q),
            "properties_raw": pa.array([f"UNIQ_KEY\x01{q:08X}{o:024X}\x02WAIT\x01true\x02TAGS\x01t"
                                        for o in range(first, first + count)], pa.string()),
            "born_timestamp": pa.array(1_700_000_000_000 + offsets),
            "store_timestamp": pa.array(1_700_000_000_500 + offsets),
            "reconsume_times": pa.array(np.zeros(count, dtype=np.int32)),
            "body": bodies.cast(pa.binary()),
            "window_id": pa.array([window_id] * count, pa.string()),
        }, schema=schema)
        path = directory / f"q{q}.parquet"
        pq.write_table(table, path, compression="zstd")
        files.append(FileEntry(path.name, count, path.stat().st_size, file_sha256(path)))
        ranges.append(QueueRange("broker-a", q, first, first + count, first + count, count))
    m = WindowManifest(window_id=window_id, topic="bench", consumer_group="bench", queues=ranges, files=files,
                       messages=n, bytes=n * BODY)
    return Path(write_manifest(m, directory))


# --- output kinds: name -> (output URL, extra environment) for one run --------------------------

class Context:
    """What kinds need: a scratch directory, a lazily started moto server."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self._s3: Any = None

    @property
    def s3(self) -> Any:
        if self._s3 is None:
            from s3_server import MotoS3

            self._s3 = MotoS3()
        return self._s3

    def close(self) -> None:
        if self._s3 is not None:
            self._s3.stop()


def _local(ctx: Context, run: str) -> tuple[str, dict[str, str], list[int]]:
    return str(ctx.scratch / "out" / run), {}, []


def _s3(ctx: Context, run: str) -> tuple[str, dict[str, str], list[int]]:
    bucket = ctx.s3.new_bucket("bench")
    opts = {k: v for k, v in ctx.s3.storage_options.items() if k != "skip_instance_cache"}
    return f"s3://{bucket}/{run}", {"ROCKETMQ_OUTPUT_STORAGE_OPTIONS": json.dumps(opts)}, [ctx.s3.proc.pid]


def _iceberg(ctx: Context, run: str) -> tuple[str, dict[str, str], list[int]]:
    home = ctx.scratch / f"iceberg-{run}"  # a catalog and warehouse per run, removed after it
    home.mkdir()
    conf = home / "catalog.json"
    conf.write_text(json.dumps({"type": "sql", "uri": f"sqlite:///{home}/catalog.db",
                                "warehouse": f"file://{home}/warehouse"}))
    return "iceberg://bench/db.orders?create=true", {"ROCKETMQ_ICEBERG_CATALOG_CONF": str(conf)}, []


KINDS: dict[str, Callable[[Context, str], tuple[str, dict[str, str], list[int]]]] = {
    "local": _local,
    "s3": _s3,
    "iceberg": _iceberg,
}


# --- per-process CPU sampling -----------------------------------------------------------------

def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(c) for c in fh.read().split())
    except OSError:
        pass
    return out


def _cpu_and_cmd(pid: int) -> tuple[float, str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK, cmd


def _klass(cmd: str) -> str:
    exe = cmd.split(" ", 1)[0]
    if "java" in exe:
        return "executor JVMs" if "CoarseGrainedExecutorBackend" in cmd else "driver JVM"
    if "python" not in exe:
        return "other"  # e.g. the spark-submit shell script before it execs the JVM
    if "_load_throughput_app" in cmd:
        return "python driver"
    if "pyspark" in cmd or "daemon" in cmd or "worker" in cmd:
        return "python workers"
    if "moto" in cmd or "s3_server" in cmd:
        return "moto"
    return "other"


class Sampler(threading.Thread):
    """CPU seconds of every process under ``root`` (and ``extra`` pids), sampled every 0.2 s. ``labels``
    names extra processes whose command line does not say what they are (a broker's JVM)."""

    def __init__(self, root: int, extra: list[int], labels: dict[int, str] | None = None) -> None:
        super().__init__(daemon=True)
        self.root, self.extra = root, extra
        self.labels = labels or {}
        self.samples: list[tuple[float, dict[int, tuple[str, float]]]] = []
        self.klass: dict[int, str] = {}
        self.stop_event = threading.Event()

    def snapshot(self) -> dict[int, tuple[str, float]]:
        seen: dict[int, tuple[str, float]] = {}
        todo = [self.root, *self.extra]
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            got = _cpu_and_cmd(pid)
            if got is None:
                continue
            klass = self.labels.get(pid) or _klass(got[1])
            if klass == "other" and pid in self.klass:
                klass = self.klass[pid]  # an exiting process has an empty cmdline: keep what it was
            self.klass[pid] = klass  # a shell script that execs the JVM keeps its pid: the last name counts
            seen[pid] = (klass, got[0])
            if pid not in self.extra:
                todo.extend(_children(pid))
        return seen

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.samples.append((time.time(), self.snapshot()))
            self.stop_event.wait(0.2)

    def cpu_total(self) -> dict[str, float]:
        """CPU seconds of the whole spark-submit (every process under it, from its start), and of the
        ``extra`` processes (moto) from the first sample on."""
        if not self.samples:
            return {}
        first = self.samples[0][1]
        last_seen: dict[int, tuple[str, float]] = {}
        for _, snap in self.samples:
            last_seen.update(snap)
        out: dict[str, float] = {}
        for pid, (klass, cpu) in last_seen.items():
            base = first.get(pid, (klass, 0.0))[1] if pid in self.extra else 0.0
            out[klass] = out.get(klass, 0.0) + cpu - base
        return out

    def cpu_between(self, start: float, end: float) -> dict[str, float]:
        before = max((s for s in self.samples if s[0] <= start), key=lambda s: s[0], default=None)
        after = min((s for s in self.samples if s[0] >= end), key=lambda s: s[0], default=None)
        if before is None or after is None:
            return {}
        # a process seen only at the end started during the load: all its CPU counts
        out: dict[str, float] = {}
        last_seen: dict[int, tuple[str, float]] = {}
        for t, snap in self.samples:
            if before[0] <= t <= after[0]:
                last_seen.update(snap)
        for pid, (klass, cpu) in last_seen.items():
            out[klass] = out.get(klass, 0.0) + cpu - before[1].get(pid, (klass, 0.0))[1]
        return out


def one_run(ctx: Context, kind: str, manifests: list[Path], label: str, *job_args: str,
            master: str = "local[2]", broker_pids: tuple[int, ...] = ()) -> dict[str, Any]:
    url, env_extra, extra_pids = KINDS[kind](ctx, label)
    extra_pids = [*extra_pids, *broker_pids]
    result = ctx.scratch / f"{label}.json"
    events = ctx.scratch / f"events-{label}"
    events.mkdir()
    exe = Path(sys.prefix) / "bin" / "spark-submit"
    cmd = [str(exe), "--master", master, "--driver-memory", "2g", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.eventLog.enabled=true",
           "--conf", f"spark.eventLog.dir=file://{events}", "--conf", "spark.eventLog.compress=false", APP, str(result),
           *(a for m in manifests for a in ("--manifest", str(m))), "--output", url, *job_args]
    # this tree's code in the driver, the executors and their Python workers alike
    env = {**os.environ, **env_extra, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = Sampler(proc.pid, extra_pids, dict.fromkeys(broker_pids, "broker"))
    sampler.start()
    out, err = proc.communicate()
    wall = time.time() - t0
    time.sleep(0.3)  # one more sample after the exit (children's CPU as last seen)
    sampler.stop_event.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{label}: spark-submit exit {proc.returncode}\n{(out + err)[-4000:]}")
    r = json.loads(result.read_text())
    r["cpu"] = sampler.cpu_between(r["start"], r["end"])
    r["cpu_total"] = sampler.cpu_total()
    r["wall"] = wall
    r["tasks_per_executor"] = _tasks_per_executor(events)
    # spark-submit relays the Python driver's stderr on its stdout
    r["phases"] = [ln for ln in (out + err).splitlines() if ln.startswith(("load_window: read:", "load_window: write:",
                                                                    "load_window: commit:", "load_window: note:"))]
    if kind == "local":
        shutil.rmtree(url, ignore_errors=True)
    elif kind == "iceberg":
        shutil.rmtree(ctx.scratch / f"iceberg-{label}", ignore_errors=True)
    shutil.rmtree(events, ignore_errors=True)
    return r


def _tasks_per_executor(events: Path) -> dict[str, int]:
    """Tasks that ended, by executor id, from the application's Spark event log."""
    out: dict[str, int] = {}
    for f in (p for p in events.rglob("*") if p.is_file()):
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                if '"SparkListenerTaskEnd"' in line:
                    executor = json.loads(line)["Task Info"]["Executor ID"]
                    out[executor] = out.get(executor, 0) + 1
    return dict(sorted(out.items()))


def _loadavg() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def _phase(r: dict[str, Any], name: str, key: str) -> str:
    line = next((ln for ln in r["phases"] if ln.startswith(f"load_window: {name}:")), "")
    return next((kv.split("=", 1)[1] for kv in line.split() if kv.startswith(f"{key}=")), "?")


def print_run(label: str, r: dict[str, Any], rows: int | None = None) -> tuple[float, float]:
    """One run's line; returns (load phase rows/s, whole spark-submit rows/s) of ``rows`` (default rows_out)."""
    n = r["rows_out"] if rows is None else rows
    secs = r["end"] - r["start"]
    per_m = n / 1e6
    cpu = ", ".join(f"{k} {v / per_m:.1f}" for k, v in sorted(r["cpu"].items()))
    cpu_all = ", ".join(f"{k} {v / per_m:.1f}" for k, v in sorted(r["cpu_total"].items()))
    tasks = f"; tasks per executor {r['tasks_per_executor']}" if r["tasks_per_executor"] else ""
    print(f"{label}: load phase {n:,} rows in {secs:.1f} s = {n / secs:,.0f} rows/s (plan {_phase(r, 'read', 'plan')}, "
          f"task read {_phase(r, 'read', 'seconds')} s / write {_phase(r, 'write', 'seconds')} s, job "
          f"{_phase(r, 'write', 'job_seconds')} s; CPU-s/M: {cpu}); whole spark-submit {r['wall']:.1f} s = "
          f"{n / r['wall']:,.0f} rows/s (CPU-s/M: {cpu_all}); peak RSS python driver {r['driver_rss_mb']:.0f} MB, "
          f"JVM {r['jvm_rss_mb']:.0f} MB{tasks}; load avg {_loadavg()}", flush=True)
    for line in r["phases"]:
        print(f"        {line}", flush=True)
    return n / secs, n / r["wall"]


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


# --- the offsets hand-off beside staging -------------------------------------------------------------

def window_command(argv: list[str]) -> dict[str, Any]:
    """`rocketmq-airflow window ...` of this tree in a child process: its JSON result, wall and CPU seconds."""
    import resource

    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from airflow_provider_rocketmq import cli; "
            f"sys.exit(cli.main({[*argv, '--json']!r}))")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the only child reaped meanwhile
    if proc.returncode != 0:
        raise SystemExit(f"window command exit {proc.returncode}: {proc.stderr[-3000:]}")
    result: dict[str, Any] = next(json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))
    result["wall"] = wall
    result["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def _backlog(namesrv: str, topic: str, fill_to: int | None) -> int:
    from bench._broker import top_up

    return top_up(namesrv, topic, fill_to, QUEUES, BODY)


def handoff_order(run: int) -> tuple[str, str]:
    """Which hand-off goes first in run ``run`` (1-based): ``staging`` in odd runs, ``offsets`` in even ones,
    so that what drifts between the two loads of a run (page cache, the broker's JIT) favours neither."""
    return ("staging", "offsets") if run % 2 else ("offsets", "staging")


def handoff_verdict(runs: list[dict[str, float]]) -> list[str]:
    """The load-phase target over the runs, as printed lines; ``runs[i][handoff]`` = load phase rows/s."""
    ratios = [r["offsets"] / r["staging"] for r in runs]
    return ["offsets/staging load phase by run: " + ", ".join(f"{x:.0%}" for x in ratios),
            (f"target offsets load phase >= {RATIO_TARGET:.0%} of staging's: met in "
             f"{sum(x >= RATIO_TARGET for x in ratios)} of {len(runs)} runs (median {statistics.median(ratios):.0%}, "
             f"min {min(ratios):.0%})")]


def _handoff_run(ctx: Context, args: argparse.Namespace, namesrv: str, topic: str, n: int, handoff: str, tag: str,
                 broker_pids: tuple[int, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One window command and its load: (window result, load result)."""
    group = f"bench_load_{handoff}_{os.getpid()}_{int(time.time())}_{tag}"
    staging = ctx.scratch / f"window-{handoff}-{n}-{tag}"
    try:
        w = window_command(["window", "--namesrv", namesrv, "--group", group, "--topic", topic,
                            "--staging", str(staging), "--handoff", handoff])
        r = one_run(ctx, "local", [Path(w["manifest"])], f"{handoff}-{n}-{tag}", master=args.master,
                    broker_pids=broker_pids)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return w, r


def handoff_runs(ctx: Context, args: argparse.Namespace) -> None:
    from bench._broker import start_broker

    for n in (int(s) for s in args.sizes.split(",") if s):
        broker = None
        if args.namesrv is None:
            t = time.perf_counter()
            topic = f"BenchLoad{n}"
            broker, namesrv = start_broker(topic, n, BODY, QUEUES)
            print(f"# embedded broker (own process): {n:,} x {BODY} B written in {time.perf_counter() - t:.1f} s",
                  flush=True)
        else:
            namesrv, topic = args.namesrv, args.topic
            n = _backlog(namesrv, topic, args.fill)
            print(f"# {namesrv} {topic}: {n:,} messages", flush=True)
        broker_pids = tuple(args.broker_pid) if broker is None else (broker.pid,)
        try:
            for warm in range(1, args.warmup + 1):
                for handoff in handoff_order(warm):
                    _, r = _handoff_run(ctx, args, namesrv, topic, n, handoff, f"w{warm}", broker_pids)
                    secs = r["end"] - r["start"]
                    print(f"{handoff:8} n={n:,} w{warm}: load phase {r['rows_out'] / secs:,.0f} rows/s "
                          f"(warm-up, not counted)", flush=True)
            figures: dict[str, list[tuple[float, float, float, float]]] = {"staging": [], "offsets": []}
            by_run: list[dict[str, float]] = []
            for i in range(args.runs):
                loads: dict[str, float] = {}
                for handoff in handoff_order(i + 1):
                    w, r = _handoff_run(ctx, args, namesrv, topic, n, handoff, str(i), broker_pids)
                    print(f"{handoff:8} n={n:,} run {i + 1}: window {w['wall']:.1f} s ({w['cpu']:.1f} CPU-s, "
                          f"{w['messages']:,} messages staged)", flush=True)
                    load, whole = print_run(f"{handoff:8} n={n:,} run {i + 1}", r)
                    total = w["wall"] + r["wall"]
                    print(f"{handoff:8} n={n:,} run {i + 1}: window + whole spark-submit {total:.1f} s", flush=True)
                    figures[handoff].append((load, whole, total, w["wall"]))
                    loads[handoff] = load
                by_run.append(loads)
            for handoff, f in figures.items():
                print(f"{handoff:8} n={n:,}: median load phase {_median([x[0] for x in f]):,.0f} rows/s, whole "
                      f"spark-submit {_median([x[1] for x in f]):,.0f} rows/s, window {_median([x[3] for x in f]):.1f} s, "
                      f"window + whole {_median([x[2] for x in f]):.1f} s", flush=True)
            ratio = _median([x[0] for x in figures["offsets"]]) / _median([x[0] for x in figures["staging"]])
            print(f"offsets/staging load phase rows/s (medians): {ratio:.0%}; end to end (window + whole "
                  f"spark-submit, medians): staging {_median([x[2] for x in figures['staging']]):.1f} s, offsets "
                  f"{_median([x[2] for x in figures['offsets']]):.1f} s", flush=True)
            for line in handoff_verdict(by_run):
                print(line, flush=True)
        finally:
            if broker is not None:
                broker.terminate()
                broker.wait(30)


# --- overlapping windows -----------------------------------------------------------------------------

def overlap_runs(ctx: Context, args: argparse.Namespace) -> None:
    k = args.overlap
    for n in (int(s) for s in args.sizes.split(",") if s):
        per_queue = n // QUEUES
        t0 = time.perf_counter()
        windows = [stage_window(ctx.scratch / f"ov{n}-{j}", n, first=j * per_queue // 2, window_id=f"bench-{j}")
                   for j in range(k)]
        print(f"staged {k} windows of {n:,} x {BODY} B (50 % overlap) in {time.perf_counter() - t0:.1f} s", flush=True)
        rates: dict[str, list[float]] = {"one window": [], f"{k} windows, auto": [], f"{k} windows, spark read": []}
        for i in range(args.runs):
            for label, manifests, extra in (("one window", windows[:1], ()),
                                            (f"{k} windows, auto", windows, ()),
                                            (f"{k} windows, spark read", windows, ("--staged-read", "spark"))):
                r = one_run(ctx, "local", manifests, f"ov-{n}-{i}-{len(rates[label])}-{len(manifests)}{extra and 's'}",
                            *extra, master=args.master)
                load, _ = print_run(f"{label:22} n={n:,} run {i + 1} (rows_in {r['counts']['rows_in']:,}, rows_out "
                                    f"{r['rows_out']:,})", r, rows=r["counts"]["rows_in"])
                rates[label].append(load)
        base = _median(rates["one window"])
        for label, xs in rates.items():
            print(f"{label:22} n={n:,}: median {_median(xs):,.0f} rows read/s = {_median(xs) / base:.0%} of one window's",
                  flush=True)


def staged_runs(ctx: Context, args: argparse.Namespace) -> None:
    windows: dict[int, Path] = {}

    def window(n: int) -> Path:
        if n not in windows:
            t0 = time.perf_counter()
            windows[n] = stage_window(ctx.scratch / f"w{n}", n)
            print(f"staged {n:,} x {BODY} B in {time.perf_counter() - t0:.1f} s", flush=True)
        return windows[n]

    for n in (int(s) for s in args.sizes.split(",") if s):
        for kind in args.kinds.split(","):
            rates, whole = [], []
            for i in range(args.runs):
                r = one_run(ctx, kind, [window(n)], f"{kind}-{n}-{i}", master=args.master)
                load, w = print_run(f"{kind:7} n={n:,} run {i + 1}", r)
                rates.append(load)
                whole.append(w)
            print(f"{kind:7} n={n:,}: median load phase {_median(rates):,.0f} rows/s, "
                  f"whole spark-submit {_median(whole):,.0f} rows/s", flush=True)
    rss_sizes = [int(s) for s in args.rss_sizes.split(",") if s]
    for kind in (k for k in args.rss_kinds.split(",") if k and rss_sizes):
        rss = {}
        for n in rss_sizes:
            r = one_run(ctx, kind, [window(n)], f"rss-{kind}-{n}", master=args.master)
            rss[n] = r
            print(f"rss {kind:7} n={n:,}: {r['rows_out'] / (r['end'] - r['start']):,.0f} rows/s; peak RSS "
                  f"python driver {r['driver_rss_mb']:.0f} MB, JVM {r['jvm_rss_mb']:.0f} MB", flush=True)
        lo, hi = min(rss_sizes), max(rss_sizes)
        print(f"{kind}: driver peak RSS {hi:,} vs {lo:,}: python driver "
              f"{rss[hi]['driver_rss_mb'] - rss[lo]['driver_rss_mb']:+.0f} MB, JVM "
              f"{rss[hi]['jvm_rss_mb'] - rss[lo]['jvm_rss_mb']:+.0f} MB", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000000")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--kinds", default="local,s3")
    p.add_argument("--rss-sizes", default="1000000,5000000")
    p.add_argument("--rss-kinds", default="local")
    p.add_argument("--handoff", choices=("staging", "offsets"), default="staging",
                   help="offsets: a broker's backlog loaded by both hand-offs (local output)")
    p.add_argument("--namesrv", default=None, help="--handoff offsets: this broker instead of the embedded one")
    p.add_argument("--topic", default=None, help="with --namesrv: the topic whose whole backlog is the window")
    p.add_argument("--fill", type=int, default=None, help="with --namesrv: top the topic up to this many messages")
    p.add_argument("--overlap", type=int, default=0, metavar="K", help="K overlapping staged windows in one load")
    p.add_argument("--master", default="local[2]", help="spark-submit --master (e.g. local-cluster[2,1,2048])")
    p.add_argument("--warmup", type=int, default=1, metavar="N",
                   help="--handoff offsets: unmeasured pairs of loads before the runs (default 1)")
    p.add_argument("--broker-pid", type=int, action="append", default=[], metavar="PID",
                   help="with --namesrv: a broker process on this machine whose CPU is counted (repeatable)")
    args = p.parse_args()
    if (args.namesrv is None) != (args.topic is None):
        p.error("--namesrv and --topic go together")
    if args.namesrv is not None and args.handoff != "offsets":
        p.error("--namesrv is for --handoff offsets")
    if args.broker_pid and args.namesrv is None:
        p.error("--broker-pid goes with --namesrv (the embedded broker's CPU is counted anyway)")
    if args.warmup < 0:
        p.error("--warmup must be >= 0")
    print(f"load average before: {_loadavg()}; {os.cpu_count()} cores; master {args.master}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="load-bench-"))
    ctx = Context(scratch)
    try:
        if args.handoff == "offsets":
            handoff_runs(ctx, args)
        elif args.overlap:
            overlap_runs(ctx, args)
        else:
            staged_runs(ctx, args)
    finally:
        ctx.close()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"load average after: {_loadavg()}", flush=True)


if __name__ == "__main__":
    main()
