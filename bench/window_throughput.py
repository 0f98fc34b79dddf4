"""End-to-end window throughput: `rocketmq-airflow window` over a large backlog, in its own process.

For each window size (default 1,000,000 and 5,000,000 messages of 100 bytes on 8
queues) an embedded broker is started in a separate process with the backlog
written straight into its store (`airflow_provider_rocketmq.embedded.backlog`).
Each run consumes the whole backlog as one window with a fresh consumer group,
staging Parquet into a temporary directory, in a child process of its own, and
prints:

- msgs/s: messages / wall time of the window (snapshot -> consume -> Parquet ->
  manifest -> commit), measured inside the child;
- CPU-s/M: the child's user+system CPU seconds per million messages for the window
  (process start-up and imports are reported apart, as "startup");
- peak RSS: the child's VmHWM (whole process life, imports included);
- staged: bytes of Parquet written (zstd).

    .venv/bin/python bench/window_throughput.py [--sizes 1000000,5000000] [--runs 3]
        [--profile DIR]   # also record each run with py-spy (pip install py-spy)

The broker's CPU is not counted (it runs in another process). Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench._broker import start_broker

CHILD = r"""
import json, os, resource, sys, threading, time
sys.path.insert(0, %(root)r)
t_start = time.perf_counter()
from airflow_provider_rocketmq import cli
import pyarrow, pyarrow.parquet, numpy  # what the window imports anyway, counted as start-up

TICK = os.sysconf("SC_CLK_TCK")
threads = {}  # tid -> (name, cpu seconds): sampled, since threads end before the process does

def sample_threads():
    names = {str(t.native_id): t.name.split("_")[0] for t in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        try:
            name = names.get(tid) or threads.get(tid, ("other",))[0]
            with open(f"/proc/self/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            threads[tid] = (name, (int(fields[11]) + int(fields[12])) / TICK)
        except OSError:
            pass

def sampler():
    while True:
        sample_threads()
        time.sleep(0.1)

threading.Thread(target=sampler, daemon=True, name="bench-sampler").start()
ru0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
code = cli.main(%(argv)r)
t1 = time.perf_counter()
ru1 = resource.getrusage(resource.RUSAGE_SELF)
sample_threads()
with open("/proc/self/status") as fh:  # not ru_maxrss: that keeps the forking parent's RSS over exec
    hwm_kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
by_name = {}
for name, cpu in threads.values():
    by_name[name] = by_name.get(name, 0.0) + cpu
print("RESULT " + json.dumps({
    "code": code, "wall": t1 - t0, "startup_wall": t0 - t_start,
    "cpu": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
    "startup_cpu": ru0.ru_utime + ru0.ru_stime, "maxrss_kb": hwm_kb, "threads": by_name}), flush=True)
"""


def run_window(namesrv: str, topic: str, group: str, staging: str, profile: str | None) -> dict[str, float]:
    argv = ["window", "--namesrv", namesrv, "--group", group, "--topic", topic, "--staging", staging, "--json"]
    cmd = [sys.executable, "-c", CHILD % {"root": ROOT, "argv": argv}]
    if profile:
        # --gil: samples of the thread holding the GIL, i.e. where Python time goes (pyarrow's
        # Parquet encoding releases the GIL: see the per-thread CPU split for it)
        cmd = ["py-spy", "record", "--format", "raw", "--rate", "250", "--gil", "--nonblocking",
               "--output", profile, "--"] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=ROOT, check=False)
    result = next((json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("RESULT ")), None)
    if out.returncode != 0 or result is None or result["code"] != 0:
        raise RuntimeError(f"window failed ({out.returncode}): {out.stdout[-2000:]} {out.stderr[-3000:]}")
    window = next(json.loads(line) for line in out.stdout.splitlines() if line.startswith("{"))
    with open(window["manifest"], encoding="utf-8") as fh:
        manifest = json.load(fh)
    result["messages"] = window["messages"]
    result["staged"] = sum(f["bytes"] for f in manifest["files"])
    result["files"] = len(manifest["files"])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,5000000", help="window sizes, comma-separated")
    ap.add_argument("--size", type=int, default=100, help="body bytes (default 100)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", default=None, metavar="DIR", help="py-spy raw profiles of every run go here")
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} cores")
    print(f"{'size':>9} {'run':>3} {'msgs/s':>9} {'CPU-s/M':>8} {'peak RSS':>9} {'staged':>10} {'files':>5} "
          f"{'startup':>14}")
    for total in (int(s) for s in args.sizes.split(",")):
        topic = f"BenchWindow{total}"
        t = time.perf_counter()
        broker, namesrv = start_broker(topic, total, args.size)
        print(f"# backlog of {total} x {args.size} B written in {time.perf_counter() - t:.1f}s", flush=True)
        try:
            for run in range(1, args.runs + 1):
                staging = tempfile.mkdtemp(prefix="rmq-bench-window-")
                profile = os.path.join(args.profile, f"window-{total}-{run}.txt") if args.profile else None
                try:
                    r = run_window(namesrv, topic, f"bench_window_{os.getpid()}_{total}_{run}", staging, profile)
                finally:
                    shutil.rmtree(staging, ignore_errors=True)
                assert r["messages"] == total, r
                print(f"{total:>9} {run:>3} {total / r['wall']:>9.0f} {r['cpu'] / total * 1e6:>8.2f} "
                      f"{r['maxrss_kb'] / 1024:>7.0f}MB {r['staged'] / 2**20:>8.1f}MB {r['files']:>5} "
                      f"{r['startup_wall']:>5.1f}s/{r['startup_cpu']:.1f}cpu", flush=True)
                split = sorted(r["threads"].items(), key=lambda kv: -kv[1])
                print("      CPU-s/M by thread: " + ", ".join(
                    f"{name} {cpu / total * 1e6:.2f}" for name, cpu in split if cpu / total * 1e6 >= 0.05),
                    flush=True)
        finally:
            broker.terminate()
            broker.wait(30)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
