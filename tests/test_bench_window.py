"""bench/window_throughput.py: warm-up pairs, which side goes first, and the verdict on the window targets."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.window_throughput import pair_order, verdict

REPO = Path(__file__).resolve().parents[1]


def test_the_side_that_goes_first_alternates_between_runs() -> None:
    assert [pair_order(run, False) for run in (1, 2, 3, 4)] == [
        ("window", "a"), ("a", "window"), ("window", "a"), ("a", "window")]
    assert pair_order(2, True) == ("window",)


def test_verdict_counts_each_target_per_run() -> None:
    runs = [
        {"window": (240_000.0, 3.5, 190.0), "a": (300_000.0, 2.8, 30.0)},  # 80.0 %, +0.7
        {"window": (230_000.0, 4.0, 260.0), "a": (300_000.0, 2.8, 30.0)},  # 76.7 %, +1.2, RSS over
    ]
    assert verdict(runs) == [
        "window/(a) by run: 80.0%, 76.7%",
        "target window >= 80% of (a): met in 1 of 2 runs (median 78.3%, min 76.7%)",
        "window CPU-s/M - (a)'s by run: +0.70, +1.20",
        "target window CPU <= (a)'s + 1.0 CPU-s/M: met in 1 of 2 runs (median +0.95)",
        "target window peak RSS <= 250 MB: met in 1 of 2 runs (max 260 MB)",
    ]


@pytest.mark.timeout(400)
def test_bench_warms_up_then_alternates_on_a_small_backlog() -> None:
    """The script itself (embedded broker in its own process): one warm-up pair is printed and not
    counted, then two measured runs whose first side alternates, each reading the whole backlog."""
    proc = subprocess.run([sys.executable, "bench/window_throughput.py", "--sizes", "20000", "--runs", "2",
                           "--warmup", "1"], check=False, cwd=REPO, capture_output=True, text=True, timeout=380)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert len(re.findall(r"^ +20000 +w1 (window|\(a\)) .*\(warm-up, not counted\)$", out, re.M)) == 2
    assert re.findall(r"window/\(a\) [\d.]+% \((window first|\(a\) first)\)", out) == ["window first", "(a) first"]
    assert "target window >= 80% of (a): met in " in out and " of 2 runs" in out


@pytest.mark.timeout(300)
def test_without_parquet_the_window_reads_everything_and_stages_no_bytes() -> None:
    """The diagnostic mode: every message reaches the writer (the bench checks the manifest's count), no
    column is built and the part file stays empty."""
    proc = subprocess.run([sys.executable, "bench/window_throughput.py", "--sizes", "20000", "--runs", "1",
                           "--warmup", "0", "--no-push", "--without-parquet"],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines() if re.match(r"^ +20000 +1 window ", line)]
    assert len(rows) == 1
    assert float(rows[0][6].removesuffix("MB")) < 0.01  # staged: an empty Parquet file of a few hundred bytes
    assert "warm-up" not in proc.stdout
