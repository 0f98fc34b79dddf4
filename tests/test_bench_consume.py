"""bench/consume_throughput.py: it runs end to end, and its verdict on the consume targets is right."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.consume_throughput import (
    verdict,  # bench/ is a folder of scripts (the repository root is on the path)
)

REPO = Path(__file__).resolve().parents[1]


def test_verdict_counts_runs_meeting_each_target_and_prints_medians() -> None:
    runs = [
        {"a": (300_000.0, 3.1), "b": (400_000.0, 2.3)},  # 75.0 %
        {"a": (330_000.0, 4.2), "b": (400_000.0, 2.3)},  # 82.5 %, CPU over target
        {"a": (320_000.0, 2.9), "b": (400_000.0, 2.4)},  # 80.0 %: the boundary counts as met
    ]
    assert verdict(runs) == [
        "(a)/(b) by run: 75.0%, 82.5%, 80.0%",
        "target (a) <= 4.0 CPU-s/M: met in 2 of 3 runs (median 3.10)",
        "target (a) >= 80% of (b): met in 2 of 3 runs (median 80.0%)",
    ]


def test_verdict_when_no_run_meets_the_ratio() -> None:
    lines = verdict([{"a": (100.0, 5.0), "b": (200.0, 2.0)}])
    assert lines[1] == "target (a) <= 4.0 CPU-s/M: met in 0 of 1 runs (median 5.00)"
    assert lines[2] == "target (a) >= 80% of (b): met in 0 of 1 runs (median 50.0%)"


@pytest.mark.timeout(300)
def test_bench_runs_end_to_end_on_a_small_backlog() -> None:
    """The script itself (embedded broker in its own process): every mode consumes the backlog."""
    proc = subprocess.run([sys.executable, "bench/consume_throughput.py", "--messages", "20000", "--runs", "1",
                           "--topic", "BenchSmoke"], check=False, cwd=REPO, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("  1 (")]
    assert [r[1] for r in rows] == ["(a)", "(b)", "(c)"]
    for line in proc.stdout.splitlines():
        if line.startswith("  1 ("):
            rate, cpu = (float(x) for x in line[32:].split()[:2])  # after "run" and the 28-wide label
            assert rate > 0 and cpu > 0
    assert "(a)/(b) by run: " in proc.stdout
    assert "target (a) >= 80% of (b): met in " in proc.stdout
