"""End-to-end window throughput: `rocketmq-airflow window` over a backlog, next to the push consumer.

Each run consumes a whole backlog of 100-byte messages on 8 queues twice, each time
with a fresh consumer group and in a child process of its own:

- the window: `rocketmq-airflow window` (snapshot -> consume -> Parquet -> manifest ->
  commit), staging into a temporary directory;
- (a): the push consumer with a no-op listener, as `bench/consume_throughput.py`'s mode (a),

and prints for each:

- msgs/s: messages / wall time, measured inside the child (the window: its whole run;
  (a): from start() until every message reached the listener);
- CPU-s/M: the child's user+system CPU seconds per million messages over that time
  (process start-up and imports apart, the command modules' included, shown as
  "startup" for the window), and how it splits by thread (per-thread /proc clocks);
- peak RSS: the child's VmHWM (whole process life, imports included);
- staged: bytes of Parquet written (zstd) and the number of files;
- window/(a): the window's rate against (a)'s in the same run.

Each topic's runs are preceded by --warmup unmeasured pairs (default 1): a broker just started, or
just topped up, serves the first full read at several times its usual CPU per message, and that
read would otherwise count against whichever side ran first. Within a run the window goes first in
odd runs and (a) in even ones, so what drifts between the two reads favours neither.

It ends with the targets over the runs (window >= 80 % of (a)'s rate, window CPU <= (a)'s CPU
+ 1.0 CPU-s/M in the same run, peak RSS <= 250 MB): in how many runs each was met, with the
medians. The targets hold when they are met in every run (5 by default).

Two ways to get a backlog:

    # embedded broker in its own process, backlog written into its store (default sizes 1M and 5M)
    .venv/bin/python bench/window_throughput.py [--sizes 1000000,5000000] [--runs 3]
    # any broker: each topic's whole backlog is one window; --fill tops each topic up to N messages
    # first (the project's producer, batches of 128 x 100 B, round-robin; an empty topic is created
    # with 8 queues)
    .venv/bin/python bench/window_throughput.py --namesrv HOST:PORT --topic T1M,T5M [--fill 1000000,5000000]

    [--profile DIR]   # also record each window run with py-spy (pip install py-spy)
    [--profile-mode threads]  # ... every thread with native frames: shares running / waiting for the GIL / idle
    [--no-push]       # the window runs only
    [--warmup N]      # unmeasured pairs before the runs (default 1)
    [--without-parquet]  # diagnostic: the window without building columns or writing Parquet
    [--broker-pid PID]  # a real broker's JVM: its CPU per million beside each run (repeatable)

The broker's CPU is not in the client's figures (it runs in another process); it is shown beside
them for the embedded broker and for the processes named with --broker-pid (a real broker's JVM).
Per thread, the seconds it was runnable but waited for a core (/proc/<tid>/schedstat) show how much
the client and the broker contended for the cores. Asserts nothing.
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
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._broker import ROOT, start_broker

# what both children share: per-thread CPU clocks sampled from /proc (threads end before the process
# does), grouped by the thread name up to its first "_" (the consumer's names end in the group)
_SAMPLER = r"""
import json, os, resource, sys, threading, time
sys.path.insert(0, %(root)r)
TICK = os.sysconf("SC_CLK_TCK")
threads = {}  # tid -> (name, cpu seconds, seconds runnable but waiting for a core)

def sample_threads():
    names = {str(t.native_id): t.name.split("_")[0] for t in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        try:
            name = names.get(tid) or threads.get(tid, ("other",))[0]
            with open(f"/proc/self/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/schedstat") as fh:  # on-CPU ns, run-queue wait ns, slices
                wait = int(fh.read().split()[1]) / 1e9
            threads[tid] = (name, (int(fields[11]) + int(fields[12])) / TICK, wait)
        except (OSError, IndexError, ValueError):
            pass

def sampler():
    while True:
        sample_threads()
        time.sleep(0.1)

def baseline():
    # what threads spent before the measured part (imports, on the main thread) is left out
    sample_threads()
    return {tid: (cpu, wait) for tid, (_, cpu, wait) in threads.items()}

def report(base, **fields):
    sample_threads()
    with open("/proc/self/status") as fh:  # not ru_maxrss: that keeps the forking parent's RSS over exec
        hwm_kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    by_name, waits = {}, {}
    for tid, (name, cpu, wait) in threads.items():
        cpu0, wait0 = base.get(tid, (0.0, 0.0))
        by_name[name] = by_name.get(name, 0.0) + cpu - cpu0
        waits[name] = waits.get(name, 0.0) + wait - wait0
    print("RESULT " + json.dumps({**fields, "maxrss_kb": hwm_kb, "threads": by_name, "waits": waits}), flush=True)
"""

WINDOW_CHILD = _SAMPLER + r"""
t_start = time.perf_counter()
import importlib
from airflow_provider_rocketmq import cli
import pyarrow, pyarrow.parquet, numpy  # what the window imports anyway, counted as start-up
for name in cli.COMMAND_MODULES:  # and what building the command line imports (~0.3 CPU-s)
    try:
        importlib.import_module(name)
    except ImportError:
        pass
%(patch)s
threading.Thread(target=sampler, daemon=True, name="bench-sampler").start()
base = baseline()
ru0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
code = cli.main(%(argv)r)
t1 = time.perf_counter()
ru1 = resource.getrusage(resource.RUSAGE_SELF)
report(base, code=code, wall=t1 - t0, startup_wall=t0 - t_start,
       cpu=(ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime), startup_cpu=ru0.ru_utime + ru0.ru_stime)
"""

PUSH_CHILD = _SAMPLER + r"""
from bench.consume_throughput import run_push
threading.Thread(target=sampler, daemon=True, name="bench-sampler").start()
base = baseline()
wall, cpu, loop_cpu, workers_cpu = run_push(%(namesrv)r, %(topic)r, %(group)r, %(total)d, 1)
report(base, code=0, wall=wall, cpu=cpu, loop=loop_cpu, workers=workers_cpu)
"""

RATIO_TARGET = 0.80  # the window >= 80 % of (a)'s rate in the same invocation
CPU_MARGIN = 1.0  # ... <= (a)'s client CPU-s per million + this, in the same run
RSS_TARGET_MB = 250  # ... peak RSS <= 250 MB


def _proc_cpu(pids: list[int]) -> float:
    """User+system CPU seconds of these processes (all their threads) so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return total


BROKER_PIDS: list[int] = []  # --broker-pid: whose CPU each child's run is charged with, beside it


PROFILE_MODE = "gil"  # --profile-mode


def _child(code: str, profile: str | None = None) -> dict[str, Any]:
    broker0 = _proc_cpu(BROKER_PIDS)
    cmd = [sys.executable, "-c", code]
    if profile and PROFILE_MODE == "gil":
        # --gil: samples of the thread holding the GIL, i.e. where Python time goes (pyarrow's
        # Parquet encoding releases the GIL: see the per-thread CPU split for it)
        cmd = ["py-spy", "record", "--format", "raw", "--rate", "250", "--gil", "--nonblocking",
               "--output", profile, "--"] + cmd
    elif profile:
        # every thread, idle or not, with native frames: a thread blocked in the interpreter's GIL
        # wait shows as pthread_cond_timedwait right under its Python (or extension) frame
        cmd = ["py-spy", "record", "--format", "raw", "--rate", "100", "--native", "--idle", "--threads",
               "--output", profile, "--"] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=ROOT, check=False)
    result = next((json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("RESULT ")), None)
    if out.returncode != 0 or result is None or result["code"] != 0:
        raise RuntimeError(f"child failed ({out.returncode}): {out.stdout[-2000:]} {out.stderr[-3000:]}")
    result["stdout"] = out.stdout
    result["broker_cpu"] = _proc_cpu(BROKER_PIDS) - broker0  # the child's whole life, start-up included
    return result


# --without-parquet: the writer thread counts the rows it is handed and builds no column and writes no
# Parquet (the manifest lists one empty part file): what the window costs without its staging work
WITHOUT_PARQUET = r"""
from airflow_provider_rocketmq.window import writer as _writer
def _count_only(self, group):
    if self._parquet is None:
        self._open_file()
    n = sum(b.count for b in group)
    self._file_rows += n
    self.rows += n
_writer.StagingWriter._write_group = _count_only
"""
STAGE_PARQUET = True  # --without-parquet sets it False


def run_window(namesrv: str, topic: str, group: str, staging: str, profile: str | None) -> dict[str, Any]:
    argv = ["window", "--namesrv", namesrv, "--group", group, "--topic", topic, "--staging", staging, "--json"]
    patch = "" if STAGE_PARQUET else WITHOUT_PARQUET
    result = _child(WINDOW_CHILD % {"root": ROOT, "argv": argv, "patch": patch}, profile)
    window = next(json.loads(line) for line in result["stdout"].splitlines() if line.startswith("{"))
    with open(window["manifest"], encoding="utf-8") as fh:
        manifest = json.load(fh)
    result["messages"] = window["messages"]
    result["staged"] = sum(f["bytes"] for f in manifest["files"])
    result["files"] = len(manifest["files"])
    return result


def run_push(namesrv: str, topic: str, group: str, total: int) -> dict[str, Any]:
    return _child(PUSH_CHILD % {"root": ROOT, "namesrv": namesrv, "topic": topic, "group": group, "total": total})


def _split(threads: dict[str, float], total: int) -> str:
    by = sorted(threads.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {cpu / total * 1e6:.2f}" for name, cpu in by if cpu / total * 1e6 >= 0.05)


_IDLE = ("epoll_wait", "select (", "poll (", "acquire_lock", "sem_", "Condition.wait", "Event.wait", "accept",
         "recv (", "nanosleep", "time.sleep")


def thread_states(raw_profile: str) -> dict[str, dict[str, float]]:
    """Shares of a `--profile-mode threads` profile's samples per thread name: ``gil`` (waiting for the
    GIL: pthread_cond_timedwait with no lock, poll or sleep under the last Python frame - the
    interpreter's take_gil, whose own symbol the build may not export), ``idle`` (waiting for I/O, a
    lock, a condition or a timer) and ``run`` (the rest: running or runnable)."""
    counts: dict[str, dict[str, int]] = {}
    with open(raw_profile, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    names = {}  # "thread (tid)" -> its Python name (py-spy gives it on some samples only)
    for line in lines:
        tid, _, name = line.split(";", 1)[0].partition(": ")
        if name:
            names[tid] = name.split("_")[0]
    for line in lines:
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")  # "thread (tid)[: name]", then the frames, outermost first
        name = names.get(frames[0].partition(": ")[0], frames[0])
        py = [i for i, f in enumerate(frames) if ".py:" in f]
        tail = ";".join(frames[(py[-1] + 1) if py else 1:])
        if any(k in tail for k in _IDLE) or (py and any(k in frames[py[-1]] for k in _IDLE)):
            state = "idle"
        elif "pthread_cond_timedwait" in tail:
            state = "gil"
        else:
            state = "run"
        c = counts.setdefault(name, {"run": 0, "gil": 0, "idle": 0})
        c[state] += int(n)
    return {name: {k: v / max(1, sum(c.values())) for k, v in c.items()} | {"samples": float(sum(c.values()))}
            for name, c in counts.items()}


def _details(r: dict[str, Any], total: int) -> str:
    """Per thread: CPU-s/M, then the seconds it was runnable but waited for a core (run queue, from
    /proc/<tid>/schedstat), and the broker's CPU-s/M over the child's life when --broker-pid is given."""
    line = f"CPU-s/M by thread: {_split(r['threads'], total)}"
    waits = sorted(((n, w) for n, w in r.get("waits", {}).items() if w >= 0.01), key=lambda kv: -kv[1])
    if waits:
        line += "; waited for a core (s): " + ", ".join(f"{n} {w:.2f}" for n, w in waits)
    if BROKER_PIDS:
        line += f"; broker {r['broker_cpu'] / total * 1e6:.2f} CPU-s/M"
    return line


LABELS = {"window": "window", "a": "(a)"}


def pair_order(run: int, no_push: bool) -> tuple[str, ...]:
    """Which side of run ``run`` (1-based) goes first: the window in odd runs, (a) in even ones, so that
    whatever drifts between the two reads of a pair (the broker's caches, its JIT) favours neither."""
    if no_push:
        return ("window",)
    return ("window", "a") if run % 2 else ("a", "window")


def _run_side(side: str, namesrv: str, topic: str, total: int, tag: str, profile: str | None) -> dict[str, Any]:
    """One child: the window (staging into a temporary directory, removed after) or (a)."""
    if side == "a":
        return run_push(namesrv, topic, f"bench_a_{tag}", total)
    staging = tempfile.mkdtemp(prefix="rmq-bench-window-")
    try:
        return run_window(namesrv, topic, f"bench_window_{tag}", staging, profile)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def verdict(runs: list[dict[str, tuple[float, float, float]]]) -> list[str]:
    """The targets over the runs, as printed lines; ``runs[i]["window"|"a"] = (msgs/s, CPU-s/M, peak RSS
    MB)``. A run without an (a) counts for the RSS target only."""
    lines = []
    paired = [r for r in runs if "a" in r]
    if paired:
        ratios = [r["window"][0] / r["a"][0] for r in paired]
        extra = [r["window"][1] - r["a"][1] for r in paired]
        lines += ["window/(a) by run: " + ", ".join(f"{x:.1%}" for x in ratios),
                  (f"target window >= {RATIO_TARGET:.0%} of (a): met in {sum(x >= RATIO_TARGET for x in ratios)} "
                   f"of {len(paired)} runs (median {statistics.median(ratios):.1%}, min {min(ratios):.1%})"),
                  "window CPU-s/M - (a)'s by run: " + ", ".join(f"{x:+.2f}" for x in extra),
                  (f"target window CPU <= (a)'s + {CPU_MARGIN} CPU-s/M: met in "
                   f"{sum(x <= CPU_MARGIN for x in extra)} of {len(paired)} runs (median {statistics.median(extra):+.2f})")]
    rss = [r["window"][2] for r in runs]
    lines += [(f"target window peak RSS <= {RSS_TARGET_MB} MB: met in {sum(m <= RSS_TARGET_MB for m in rss)} of "
               f"{len(runs)} runs (max {max(rss):.0f} MB)")]
    return lines


def _backlog(namesrv: str, topic: str, fill_to: int | None, queues: int, size: int) -> int:
    """Messages ``topic`` holds on ``namesrv``, after topping it up to ``fill_to`` (if given)."""
    from bench._broker import top_up

    return top_up(namesrv, topic, fill_to, queues, size)


def _targets(args: argparse.Namespace, ap: argparse.ArgumentParser) -> list[tuple[str, Any]]:
    """(topic, prepare) per window: ``prepare()`` gives (broker process or None, name server, messages)."""
    if args.namesrv is not None:
        topics = args.topic.split(",")
        fills = [int(x) for x in args.fill.split(",")] if args.fill else [None] * len(topics)
        if len(fills) != len(topics):
            ap.error("--fill takes one count per topic")
        return [(t, lambda t=t, n=n: (None, args.namesrv, _backlog(args.namesrv, t, n, 8, args.size)))
                for t, n in zip(topics, fills, strict=True)]

    def embedded(total: int) -> tuple[Any, str, int]:
        t = time.perf_counter()
        broker, namesrv = start_broker(f"BenchWindow{total}", total, args.size)
        print(f"# backlog of {total} x {args.size} B written in {time.perf_counter() - t:.1f}s", flush=True)
        return broker, namesrv, total
    return [(f"BenchWindow{n}", lambda n=n: embedded(n)) for n in (int(s) for s in args.sizes.split(","))]


def _bench_topic(args: argparse.Namespace, namesrv: str, topic: str, total: int,
                 runs: list[dict[str, tuple[float, float, float]]]) -> None:
    """The warm-up pairs, then the measured runs of one backlog; appends each run's figures to ``runs``."""
    for warm in range(1, args.warmup + 1):
        for side in pair_order(warm, args.no_push):
            r = _run_side(side, namesrv, topic, total, f"{os.getpid()}_{total}_w{warm}_{int(time.time())}", None)
            assert side == "a" or r["messages"] == total, (r["messages"], total)
            print(f"{total:>9} {'w' + str(warm):>3} {LABELS[side]:<7} {total / r['wall']:>9.0f} "
                  f"{r['cpu'] / total * 1e6:>8.2f}   (warm-up, not counted)", flush=True)
    for run in range(1, args.runs + 1):
        tag = f"{os.getpid()}_{total}_{run}_{int(time.time())}"
        profile = os.path.join(args.profile, f"window-{total}-{run}.txt") if args.profile else None
        result = {side: _run_side(side, namesrv, topic, total, tag, profile if side == "window" else None)
                  for side in pair_order(run, args.no_push)}
        w = result["window"]
        assert w["messages"] == total, (w["messages"], total)
        w_rate, w_cpu, w_rss = total / w["wall"], w["cpu"] / total * 1e6, w["maxrss_kb"] / 1024
        runs.append({"window": (w_rate, w_cpu, w_rss)})
        print(f"{total:>9} {run:>3} {'window':<7} {w_rate:>9.0f} {w_cpu:>8.2f} {w_rss:>7.0f}MB "
              f"{w['staged'] / 2**20:>8.1f}MB {w['files']:>5} "
              f"{w['startup_wall']:>5.1f}s/{w['startup_cpu']:.1f}cpu", flush=True)
        print(f"{'':>22}{_details(w, total)}", flush=True)
        if profile and PROFILE_MODE == "threads":
            states = thread_states(profile)
            print(f"{'':>22}py-spy samples by thread (run / GIL wait / idle): " + ", ".join(
                f"{n} {s['run']:.0%}/{s['gil']:.0%}/{s['idle']:.0%}" for n, s in
                sorted(states.items(), key=lambda kv: -kv[1]["samples"]) if s["samples"] >= 20), flush=True)
        if "a" not in result:
            continue
        a = result["a"]
        a_rate, a_cpu, a_rss = total / a["wall"], a["cpu"] / total * 1e6, a["maxrss_kb"] / 1024
        runs[-1]["a"] = (a_rate, a_cpu, a_rss)
        first = "window first" if next(iter(result)) == "window" else "(a) first"
        print(f"{total:>9} {run:>3} {'(a)':<7} {a_rate:>9.0f} {a_cpu:>8.2f} {a_rss:>7.0f}MB "
              f"{'':>10} {'':>5} {'':>14} window/(a) {w_rate / a_rate:.1%} ({first})", flush=True)
        print(f"{'':>22}{_details(a, total)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", default=None, help="use this broker's name server instead of the embedded broker")
    ap.add_argument("--topic", default=None, help="with --namesrv: comma-separated topics, each one window")
    ap.add_argument("--fill", default=None, help="with --namesrv: top each topic up to this many messages first "
                    "(comma-separated, one per topic)")
    ap.add_argument("--sizes", default="1000000,5000000", help="embedded broker: window sizes, comma-separated")
    ap.add_argument("--size", type=int, default=100, help="body bytes of generated messages (default 100)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--without-parquet", action="store_true",
                    help="diagnostic: the window's writer builds no column and writes no Parquet (it counts rows)")
    ap.add_argument("--warmup", type=int, default=1, metavar="N",
                    help="unmeasured pairs before the runs of each topic (default 1): a broker just started or "
                         "just topped up serves the first read at several times its usual CPU per message")
    ap.add_argument("--no-push", action="store_true", help="skip the push consumer (a) runs")
    ap.add_argument("--profile", default=None, metavar="DIR", help="py-spy raw profiles of every window run go here")
    ap.add_argument("--profile-mode", choices=("gil", "threads"), default="gil",
                    help="gil: where the GIL holder spends its time; threads: every thread's samples, native "
                         "frames included, and per thread the shares running, waiting for the GIL and idle")
    ap.add_argument("--broker-pid", type=int, action="append", default=[],
                    help="a broker process (e.g. the JVM's pid) whose CPU is shown beside each run (repeatable)")
    args = ap.parse_args()
    BROKER_PIDS[:] = args.broker_pid
    global STAGE_PARQUET
    STAGE_PARQUET = not args.without_parquet
    if args.without_parquet:
        print("# --without-parquet: a diagnostic (nothing staged); the targets printed at the end do not apply")
    global PROFILE_MODE
    PROFILE_MODE = args.profile_mode
    if (args.namesrv is None) != (args.topic is None):
        ap.error("--namesrv and --topic go together")
    if args.fill is not None and args.namesrv is None:
        ap.error("--fill needs --namesrv (the embedded broker writes its backlog itself)")
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} cores")
    targets = _targets(args, ap)
    print(f"{'size':>9} {'run':>3} {'':<7} {'msgs/s':>9} {'CPU-s/M':>8} {'peak RSS':>9} {'staged':>10} "
          f"{'files':>5} {'startup':>14}")
    runs: list[dict[str, tuple[float, float, float]]] = []
    for topic, prepare in targets:
        broker, namesrv, total = prepare()
        if broker is not None and not args.broker_pid:
            BROKER_PIDS[:] = [broker.pid]  # the embedded broker's own process
        if not total:
            print(f"# {topic} holds no message: skipped")
            continue
        try:
            _bench_topic(args, namesrv, topic, total, runs)
        finally:
            if broker is not None:
                broker.terminate()
                broker.wait(30)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if runs:
        for line in verdict(runs):
            print(line)


if __name__ == "__main__":
    main()
