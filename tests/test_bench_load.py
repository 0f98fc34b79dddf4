"""bench/load_throughput.py --handoff offsets: which hand-off goes first, the verdict per run, the broker's CPU."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.load_throughput import Sampler, handoff_order, handoff_verdict

REPO = Path(__file__).resolve().parents[1]


def test_the_hand_off_that_goes_first_alternates_between_runs() -> None:
    assert [handoff_order(run) for run in (1, 2, 3)] == [
        ("staging", "offsets"), ("offsets", "staging"), ("staging", "offsets")]


def test_verdict_counts_the_target_per_run() -> None:
    runs = [{"staging": 400_000.0, "offsets": 330_000.0},  # 82.5 %
            {"staging": 420_000.0, "offsets": 300_000.0},  # 71.4 %
            {"staging": 380_000.0, "offsets": 304_000.0}]  # 80.0 %
    assert handoff_verdict(runs) == [
        "offsets/staging load phase by run: 82%, 71%, 80%",
        "target offsets load phase >= 80% of staging's: met in 2 of 3 runs (median 80%, min 71%)",
    ]


def test_a_labelled_process_is_counted_under_its_label() -> None:
    """The classifier would count a broker's JVM (``java ... BrokerStartup``) as the driver JVM and the
    embedded broker as "other": the label given for its pid names its CPU. Here a Python child burns
    CPU in its place (unlabelled it would be "other")."""
    burn = ("import sys, time\n"
            "t = time.process_time()\n"
            "while time.process_time() - t < 0.4: pass\n"
            "print('done', flush=True)\n"
            "sys.stdin.read()\n")
    with (subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE) as root,
          subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True) as broker):
        try:
            sampler = Sampler(root.pid, [broker.pid], {broker.pid: "broker"})
            sampler.samples.append((time.time(), sampler.snapshot()))
            assert broker.stdout is not None
            assert broker.stdout.readline().strip() == "done"
            sampler.samples.append((time.time(), sampler.snapshot()))
            cpu = sampler.cpu_total()
            assert cpu.get("broker", 0.0) >= 0.3, cpu
            assert cpu.get("other", 0.0) < 0.3, cpu  # the root: idle
        finally:
            root.kill()
            broker.kill()


@pytest.mark.timeout(500)
def test_bench_warms_up_then_measures_both_hand_offs_with_the_broker_cpu() -> None:
    """The script itself on the embedded broker (own process): a warm-up pair printed and not counted,
    then one measured run of each hand-off with the broker's CPU beside the load's, and the verdict."""
    proc = subprocess.run([sys.executable, "bench/load_throughput.py", "--handoff", "offsets", "--sizes", "20000",
                           "--runs", "1", "--warmup", "1"],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=480)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    out = proc.stdout
    assert re.findall(r"^(staging|offsets) +n=20,000 w1: load phase [\d,]+ rows/s \(warm-up, not counted\)$", out,
                      re.M) == ["staging", "offsets"]
    measured = re.findall(r"^(staging|offsets) +n=20,000 run 1: load phase 20,000 rows .*CPU-s/M: ([^)]*)\)", out, re.M)
    assert [h for h, _ in measured] == ["staging", "offsets"]
    assert all("broker " in cpu for _, cpu in measured), measured
    assert re.search(r"^target offsets load phase >= 80% of staging's: met in [01] of 1 runs", out, re.M)
