"""spark-submit driver of bench/load_throughput.py: ``_load_throughput_app.py RESULT.json ARGS...``.

Starts the Spark session first, then times ``load_window.main(ARGS, spark)`` alone and writes
{"start", "end" (epoch seconds), "counts" (the job's counts line), "rows_out", "driver_rss_mb",
"jvm_rss_mb"} to RESULT.json.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_provider_rocketmq.spark.load import load_window


def _hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    result, argv = sys.argv[1], sys.argv[2:]
    spark = load_window._session("rocketmq-load-bench")
    out = io.StringIO()
    start = time.time()
    with contextlib.redirect_stdout(out):
        rc = load_window.main(argv, spark)
    end = time.time()
    if rc != 0:
        raise SystemExit(f"load_window exit {rc}: {out.getvalue()}")
    line = next(ln for ln in out.getvalue().splitlines() if ln.startswith("load_window: windows="))
    counts = {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    Path(result).write_text(json.dumps({"start": start, "end": end, "counts": counts, "rows_out": counts["rows_out"],
                                        "driver_rss_mb": _hwm_mb(os.getpid()), "jvm_rss_mb": _hwm_mb(os.getppid())}))
    spark.stop()


if __name__ == "__main__":
    main()
