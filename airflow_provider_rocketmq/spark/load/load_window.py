"""PySpark application: load staged RocketMQ windows into an output, each queue offset once.

Run by ``SparkSubmitOperator`` (or by hand)::

    spark-submit load_window.py --manifest W/manifest.json [--manifest ...] --output DIR|URL \
        [--body-format utf8|json|binary] [--staged-read auto|spark|tasks|driver] [--writer tasks|spark] \
        [--storage-options-file PATH] [--catalog-conf PATH] [--abandon-after SECONDS] [--result-file PATH|URL]

The driver verifies every manifest before Spark starts (spark/load/staged.py), opens the output
and finishes what a crashed load left (spark/load/outputs/), reads which offsets the output holds,
lets the first applicable plan of `PLANS` write the rows the output lacks in Spark tasks
(spark/load/plan.py), commits them and publishes. A window whose offsets were loaded before adds
nothing; nothing is ever deleted from the output. One line per phase on stderr and, with
``--result-file``, the counts as JSON (spark/load/report.py); then on stdout
``load_window: windows=W rows_in=N rows_out=M duplicates=D already_loaded=K``.
Exit 2 with one ``load_window: error: ...`` line on bad input; exit 3 with
``load_window: conflict: ...`` when a concurrent load committed some of the same offsets
(nothing of this load is visible; running it again loads what is still missing). Storage options
come from the environment or ``--storage-options-file``, never from argv. Imports no Airflow.
See docs/airflow.md for the whole hand-off.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    import airflow_provider_rocketmq  # noqa: F401
except ModuleNotFoundError:  # run by path from a source tree that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.spark.load import crash_points, dedup_plan, direct_plan, general_plan
from airflow_provider_rocketmq.spark.load.ledger import LedgerConflict, LedgerError, OffsetRanges
from airflow_provider_rocketmq.spark.load.outputs import DataFile, Output, PendingLoad, is_url, open_output
from airflow_provider_rocketmq.spark.load.plan import LoadInput, Plan, PlanGaveUp
from airflow_provider_rocketmq.spark.load.report import LoadReport
from airflow_provider_rocketmq.spark.load.staged import LoadError, Staged, load_manifests
from airflow_provider_rocketmq.window.manifest import ManifestError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PROG = "load_window"
BODY_FORMATS = ("utf8", "json", "binary")
STAGED_READS = ("auto", "spark", "tasks", "driver")
WRITERS = ("tasks", "spark")
# fsspec storage options of an object store output (JSON object): the environment, never argv
STORAGE_OPTIONS_ENV = "ROCKETMQ_OUTPUT_STORAGE_OPTIONS"
EXIT_BAD_INPUT = 2
EXIT_CONFLICT = 3
# tried in this order; the first that applies writes the rows (the dedup plan applies always)
PLANS: tuple[Plan, ...] = (direct_plan.PLAN, general_plan.PLAN, dedup_plan.PLAN)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="Load staged RocketMQ windows into Parquet.")
    p.add_argument("--manifest", action="append", required=True, metavar="PATH",
                   help="window manifest (file or window directory); repeatable")
    p.add_argument("--output", required=True, metavar="DIR|URL",
                   help="output Parquet dataset, partitioned by window_id: a local or mounted directory, or "
                        "an object store URL (s3://, gs://, abfs://); or an Iceberg table: "
                        "iceberg://<catalog>/<namespace>.<table>[?create=true]; see spark/load/outputs/")
    p.add_argument("--body-format", choices=BODY_FORMATS, default="utf8",
                   help="utf8: body as string; json: body parsed to VARIANT; binary: body unchanged")
    p.add_argument("--staged-read", choices=STAGED_READS, default="auto",
                   help="auto: Spark tasks read the staged files (and offsets hand-offs from the brokers) and "
                        "write the new rows in one pass (spark/load/direct_plan.py) unless the body format "
                        "or the writer needs Spark, else as spark for local files and tasks for URLs; spark: "
                        "Spark's Parquet reader (Hadoop filesystems: s3:// is read as s3a://); "
                        "tasks: Spark tasks read the files with pyarrow + fsspec (no Hadoop connector "
                        "needed); driver: the driver reads them and hands Spark the rows (small windows)")
    p.add_argument("--writer", choices=WRITERS, default="tasks",
                   help="tasks: Spark tasks write the files with pyarrow + fsspec (no Hadoop connector "
                        "needed); spark: DataFrame.write through the cluster's Hadoop connector "
                        "(s3:// is written as s3a://)")
    p.add_argument("--storage-options-file", metavar="PATH",
                   help="JSON object of fsspec storage options for an object store output (merged over "
                        f"${STORAGE_OPTIONS_ENV} and fsspec's own configuration)")
    p.add_argument("--catalog-conf", metavar="PATH",
                   help="iceberg:// output: a file of catalog properties (JSON object or key=value lines) added "
                        "to pyiceberg's own configuration; default: the file $ROCKETMQ_ICEBERG_CATALOG_CONF names")
    p.add_argument("--abandon-after", type=float, default=None, metavar="SECONDS",
                   help="object store outputs: an uncommitted load older than this is discarded by the next "
                        "load (default 21600); a live load that old fails with a conflict instead of committing")
    p.add_argument("--result-file", metavar="PATH|URL",
                   help="once the load succeeded, write its counts (per window, with topic and consumer group), "
                        "phase figures and duration there as JSON, for the Airflow side "
                        "(RocketMQCommitWindowOperator(load_result=...) sends them as rocketmq.load.* metrics)")
    p.add_argument("--app-name", default="rocketmq-load-window")
    return p.parse_args(argv)


def storage_options(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The output's fsspec storage options: fsspec's configuration for the URL's protocol
    (e.g. ``$FSSPEC_S3``), then ``$ROCKETMQ_OUTPUT_STORAGE_OPTIONS``, then
    ``--storage-options-file``. They travel to the executors inside the tasks, never on argv."""
    if not is_url(args.output) or args.output.startswith("iceberg://"):
        return {}  # an Iceberg table's storage is configured in its catalog's properties
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    try:
        import fsspec.config

        out.update(fsspec.config.conf.get(args.output.split("://", 1)[0], {}))
    except ImportError:
        pass
    for where, text in ((STORAGE_OPTIONS_ENV, env.get(STORAGE_OPTIONS_ENV)),
                        ("--storage-options-file", _read_text(args.storage_options_file))):
        if not text:
            continue
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ConfigError(where, f"not valid JSON ({exc.__class__.__name__} at char "
                              f"{getattr(exc, 'pos', '?')})") from None
        if not isinstance(value, dict):
            raise ConfigError(where, "must be a JSON object of fsspec storage options")
        out.update(value)
    return out


def _catalog_properties(args: argparse.Namespace) -> dict[str, str]:
    """An ``iceberg://`` output's catalog properties from ``--catalog-conf`` or its environment variable."""
    if not args.output.startswith("iceberg://"):
        return {}
    from airflow_provider_rocketmq.spark.load.outputs.iceberg_table import catalog_properties

    return catalog_properties(args.catalog_conf)


def _read_text(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("--storage-options-file", f"{path}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace, spark: SparkSession | None = None) -> dict[str, int]:
    """Load the manifests into ``args.output``; returns the counts. Uses ``spark`` when given
    (and leaves it running), else starts a session only if there is something to read.
    Logs one line per phase (read, write, commit) and, with ``--result-file``, writes the result."""
    started = time.monotonic()
    staged = load_manifests(args.manifest)
    out = _open_output(args)
    state = out.state()
    held = state.held
    new = OffsetRanges()
    for s in staged:
        new = new | (s.claim - held)
    # a manifest whose every offset the output holds is not read at all; an offsets manifest's
    # rows are only known once read from the brokers (its counts are 0)
    to_read = [s for s in staged if (s.manifest.messages or s.offsets_handoff) and s.claim - held]
    unread = sum(s.manifest.messages for s in staged) - sum(s.manifest.messages for s in to_read)
    counts = {"windows": len({s.manifest.window_id for s in staged}), "rows_in": unread, "rows_out": 0,
              "duplicates": 0, "already_loaded": unread}
    report = LoadReport(staged, to_read)
    if not new:
        _report_nothing_new(report, staged, unread)
        report.finish(args, counts, out.kind, time.monotonic() - started)
        return counts  # nothing new: no Spark, no ledger entry
    job = LoadInput(tuple(to_read), held, args.body_format, args.staged_read, args.writer, args.output)
    load = out.begin()
    try:
        files = _write_rows(spark, args.app_name, job, load, report) if to_read else []
        counts["rows_in"] += report.rows_read()
        counts["already_loaded"] += report.rows_loaded()
        counts["rows_out"] = sum(f.rows for f in files)
        counts["duplicates"] = counts["rows_in"] - counts["already_loaded"] - counts["rows_out"]
        report.read_line(counts["duplicates"], unread)
        report.write_line(files)
        t_commit = time.monotonic()
        crash_points.reached(crash_points.BEFORE_COMMIT)
        load.commit(state, new, [s.manifest.window_id for s in staged if s.claim - held], files, counts["rows_out"])
    except BaseException:
        load.abort()  # nothing committed: what the load wrote goes
        raise
    try:
        load.publish()  # a failed publish stays for `recover` (the load is committed)
    finally:
        load.close()
    report.phase("commit", rows=counts["rows_out"], files=len(files), offsets=new.offsets(),
                 seconds=time.monotonic() - t_commit)
    report.finish(args, counts, out.kind, time.monotonic() - started, files)
    return counts


def _open_output(args: argparse.Namespace) -> Output:
    """The output, validated, with what crashed loads left finished (a note per load)."""
    out = open_output(args.output, storage_options(args), abandon_after=args.abandon_after,
                      catalog_properties=_catalog_properties(args), body_format=args.body_format)
    out.validate()
    for note in out.recover():
        _note(note)
    return out


def _report_nothing_new(report: LoadReport, staged: Sequence[Staged], unread: int) -> None:
    report.phase("read", plan="none", windows=len(staged), files=0, rows_read=0, already_loaded=0,
                 duplicates=0, new=0, skipped_rows=unread, seconds=0.0)
    report.phase("write", rows=0, files=0, bytes=0, seconds=0.0)
    report.phase("commit", rows=0, files=0, offsets=0, seconds=0.0, note="nothing new: no commit")


def _write_rows(spark: SparkSession | None, app_name: str, job: LoadInput, load: PendingLoad,
                report: LoadReport) -> list[DataFile]:
    """The rows of ``job`` written for ``load`` by the first plan that applies (and does not give up)."""
    own = spark is None
    session = _session(app_name) if spark is None else spark
    try:
        plans = [p for p in PLANS if p.applies(job)]
        for plan, successor in zip(plans, [*plans[1:], None], strict=True):
            report.plan = plan.name
            try:
                return plan.write(session, job, load, report)
            except PlanGaveUp as exc:
                if successor is None:
                    raise LoadError(f"{exc}: no other plan applies") from exc
                _note(f"{exc}: loading with {successor.description}")
                discard = getattr(load, "discard", None)  # kinds whose unlisted files would stay (Iceberg)
                if discard is not None:
                    discard(exc.files)
                report.reset()
        raise AssertionError("no plan applies")  # the general plan applies always
    finally:
        if own:
            session.stop()


def _note(text: str) -> None:
    print(f"{PROG}: note: {text}", file=sys.stderr, flush=True)


def _session(app_name: str) -> SparkSession:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName(app_name)
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    return spark


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    args = parse_args(argv)
    try:
        counts = run(args, spark)
    except LedgerConflict as exc:
        print(f"{PROG}: conflict: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFLICT
    except (ManifestError, ConfigError, LoadError, LedgerError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    print(f"{PROG}: " + " ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
