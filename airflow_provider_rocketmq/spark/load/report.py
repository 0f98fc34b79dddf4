"""What a load reports: a line per phase on stderr, and the result file (no Airflow).

Phase lines (one each, ``key=value``)::

    load_window: read: plan=direct windows=1 files=8 rows_read=1000000 already_loaded=0 duplicates=0 new=1000000 skipped_rows=0 seconds=2.41
    load_window: write: rows=1000000 files=2 bytes=61234567 seconds=1.92 job_seconds=3.10
    load_window: commit: rows=1000000 files=2 offsets=1000000 seconds=0.08

``read``: the plan that wrote the rows (``direct``, ``spark``, ``dedup``; ``none`` when nothing was
read), the windows read, their files, the rows read and how they split (already in the output /
repeated within the load / new), and ``skipped_rows``: rows of windows the output held entirely,
not read at all. ``seconds`` is wall time for the dedup plan; for the direct and general plans,
where each task reads and writes in one pass, read and write seconds are task time summed over
tasks and ``job_seconds`` the Spark job's wall time.

With ``--result-file PATH|URL``, once the load succeeded, the driver writes a JSON object with the
counts per window (`LoadReport.windows`) and the phases, which the Airflow side reads
(`airflow_provider_rocketmq.metrics.load_metrics_from_file`); failing to write it is a note, not a
failed load (the load is committed by then).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

    from airflow_provider_rocketmq.spark.load.outputs import DataFile
    from airflow_provider_rocketmq.spark.load.staged import Staged

RESULT_VERSION = 1


class LoadReport:
    """Counts of one load by manifest, phase figures, and their output."""

    def __init__(self, staged: Sequence[Staged], to_read: Sequence[Staged]) -> None:
        self.staged = list(staged)
        self.to_read = list(to_read)
        self.phases: dict[str, dict[str, Any]] = {}
        self.reset()

    def reset(self) -> None:
        """Forget what a plan that was given up counted."""
        self.read: dict[int, int] = {}  # per order in to_read
        self.loaded: dict[int, int] = {}
        self.plan = "none"
        self.files_read = 0
        self.read_seconds = 0.0
        self.write_seconds = 0.0
        self.job_seconds: float | None = None

    def add(self, order: int, *, read: int, loaded: int) -> None:
        self.read[order] = self.read.get(order, 0) + read
        self.loaded[order] = self.loaded.get(order, 0) + loaded

    def rows_read(self) -> int:
        return sum(self.read.values())

    def rows_loaded(self) -> int:
        return sum(self.loaded.values())

    def phase(self, name: str, **figures: Any) -> None:
        self.phases[name] = figures
        text = " ".join(f"{k}={_fmt(v)}" for k, v in figures.items() if k != "note")
        note = f" ({figures['note']})" if "note" in figures else ""
        print(f"load_window: {name}: {text}{note}", file=sys.stderr, flush=True)

    def read_line(self, duplicates: int, skipped: int) -> None:
        read, loaded = self.rows_read(), self.rows_loaded()
        self.phase("read", plan=self.plan, windows=len(self.to_read), files=self.files_read, rows_read=read,
                   already_loaded=loaded, duplicates=duplicates, new=read - loaded - duplicates,
                   skipped_rows=skipped, seconds=self.read_seconds)

    def write_line(self, files: Sequence[DataFile]) -> None:
        figures: dict[str, Any] = {"rows": sum(f.rows for f in files), "files": len(files),
                                   "bytes": sum(f.bytes for f in files), "seconds": self.write_seconds}
        if self.job_seconds is not None:
            figures["job_seconds"] = self.job_seconds
        self.phase("write", **figures)

    def windows(self, files: Sequence[DataFile]) -> list[dict[str, Any]]:
        """Counts per window id (manifests of one window id are summed), in load order."""
        out: dict[str, dict[str, Any]] = {}
        read_orders = {id(s): i for i, s in enumerate(self.to_read)}
        for s in self.staged:
            m = s.manifest
            w = out.setdefault(m.window_id, {"window_id": m.window_id, "topic": m.topic,
                                             "consumer_group": m.consumer_group, "rows_in": 0, "rows_out": 0,
                                             "already_loaded": 0, "duplicates": 0})
            order = read_orders.get(id(s))
            if order is None:  # not read: the output held all of it
                w["rows_in"] += m.messages
                w["already_loaded"] += m.messages
            else:
                w["rows_in"] += self.read.get(order, 0)
                w["already_loaded"] += self.loaded.get(order, 0)
        for f in files:
            if f.window_id in out:
                out[f.window_id]["rows_out"] += f.rows
        for w in out.values():
            w["duplicates"] = w["rows_in"] - w["already_loaded"] - w["rows_out"]
        return list(out.values())

    def finish(self, args: argparse.Namespace, counts: dict[str, int], kind: str, seconds: float,
               files: Sequence[DataFile] = ()) -> None:
        """With ``--result-file``, write ``{"version": 1, "output", "output_kind", "seconds", "counts",
        "phases": {"read", "write", "commit"}, "windows": [{"window_id", "topic", "consumer_group",
        "rows_in", "rows_out", "already_loaded", "duplicates"}, ...]}`` there (URL user info removed)."""
        if not getattr(args, "result_file", None):
            return
        result = {"version": RESULT_VERSION, "output": _redacted(args.output), "output_kind": kind,
                  "seconds": round(seconds, 3), "counts": counts, "phases": self.phases,
                  "windows": self.windows(files)}
        try:
            write_result(args.result_file, json.dumps(result, indent=1) + "\n")
        except Exception as exc:
            print(f"load_window: note: could not write the result file {args.result_file}: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def _fmt(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def _redacted(url: str) -> str:
    """An output URL without user info (``s3://key:secret@bucket`` is never written out)."""
    if "://" in url and "@" in url.split("://", 1)[1].split("/", 1)[0]:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://{rest.split('@', 1)[1]}"
    return url


def write_result(where: str, text: str) -> None:
    """Write the result whole or not at all: a local file by rename, a URL by one object write."""
    if "://" in where and not where.startswith("file://"):
        import fsspec

        with fsspec.open(where, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    path = Path(where.removeprefix("file://"))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
