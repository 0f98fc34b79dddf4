"""spark-submit application for tests: several `load_window` runs on one Spark session.

Each spark-submit costs 15-25 s of JVM start, so the ledger tests run their loads here in
one application: ``load_steps_app.py PLAN.json RESULTS.json``. PLAN is a list of
``{"label", "argv", "output"}``; every step calls ``load_window.main(argv, spark)`` (the
same code path as the command line, on a shared session) and records its exit code, its
stdout/stderr and the keys ``[window_id, broker, queue_id, queue_offset]`` then visible in
``output`` to a plain pyarrow reader (local outputs; an object-store output is read by the test).
A step may carry ``"env"``: environment variables set on the driver for that step only (e.g. a
test hook). A step ``{"label", "read": output}`` records what ``spark.read.parquet(output)`` sees
(rows, distinct keys, window ids).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from airflow_provider_rocketmq.spark.load import load_window


def visible_keys(output: str) -> list[list[Any]]:
    import pyarrow.dataset as ds

    if "://" in output or not Path(output).exists():
        return []
    dataset = ds.dataset(output, format="parquet", partitioning="hive")
    if not dataset.files:
        return []  # only hidden (_rocketmq_*) entries
    table = dataset.to_table(columns=["window_id", "broker", "queue_id", "queue_offset"])
    return sorted([str(w), b, q, o] for w, b, q, o in zip(*(table.column(c).to_pylist()
                                                           for c in table.column_names), strict=True))


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    spark = load_window._session("rocketmq-load-steps")
    results = []
    try:
        for step in plan:
            if "read" in step:  # what a plain Spark reader of the output sees
                df = spark.read.parquet(step["read"])
                results.append({"label": step["label"], "rows": df.count(),
                                "distinct": df.select("broker", "queue_id", "queue_offset").distinct().count(),
                                "windows": sorted(r[0] for r in df.select("window_id").distinct().collect())})
                continue
            out, err = io.StringIO(), io.StringIO()
            saved = {k: os.environ.get(k) for k in step.get("env", {})}
            os.environ.update(step.get("env", {}))
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    rc = load_window.main(step["argv"], spark)
                except Exception as exc:
                    rc, err = -1, io.StringIO(f"{type(exc).__name__}: {exc}")
                finally:
                    for k, v in saved.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v
            results.append({"label": step["label"], "rc": rc, "stdout": out.getvalue(),
                            "stderr": err.getvalue(), "keys": visible_keys(step["output"])})
    finally:
        Path(sys.argv[2]).write_text(json.dumps(results, indent=1))
        spark.stop()


if __name__ == "__main__":
    main()
