"""PySpark application: load staged RocketMQ windows into a Parquet dataset, each message once.

Run by ``SparkSubmitOperator`` (or by hand)::

    spark-submit load_window.py --manifest W/manifest.json [--manifest ...] --output DIR|URL \
        [--body-format utf8|json|binary] [--staged-read auto|spark|driver] [--writer tasks|spark] \
        [--storage-options-file PATH] [--abandon-after SECONDS] [--result-file PATH|URL]

Steps: validate every manifest and its files' sizes/SHA-256/rows *before* starting
Spark (a bad hand-off fails in a second with one line on stderr and exit code 2);
finish or discard what a crashed earlier load left in ``DIR``; read the output's
ledger (spark/load/ledger.py) of the offset ranges it already holds; read only manifests
whose ranges (minus their ``gaps``: offsets another window holds) bring offsets the
output does not hold, and keep their rows at such offsets, once per (topic, broker,
queue_id, queue_offset) — from the first manifest in window id order that has the row;
convert the body; Spark tasks write the rows under the load's hidden staging prefix (the
driver only receives file names, row counts and sizes), the driver commits a ledger entry
claiming the new ranges, then publishes the files into ``<output>/window_id=<id>/``. Where
the output lives and how it commits is its *kind* (spark/load/outputs/: a local or mounted
directory, a Parquet dataset on an object store).

So a window whose offsets were loaded before adds nothing (a re-run, or the same
offsets restaged under a new window id after the offset commit failed), a window
that overlaps loaded ones adds only its new offsets, and nothing is ever deleted
from the output: a re-run of a window id whose staging was lost (consumed again
from the committed offsets) appends its new offsets to the same partition.

How the rows are read: when every window to read is staged Parquet, the body format is utf8
or binary and the windows' new offsets do not overlap, Spark tasks read the staged files
themselves and write the new rows in one pass (spark/load/direct_plan.py: no row enters the JVM,
no shuffle); otherwise (``--staged-read`` other than ``auto``, overlapping windows, offsets
hand-offs, ``--body-format json``, ``--writer spark``) Spark reads the rows, classifies them
and keeps the first row of each offset with a window function. Both write the same rows.

Logs one line per phase on stderr (spark/load/report.py)::

    load_window: read: plan=direct windows=1 files=8 rows_read=N already_loaded=K duplicates=D new=M skipped_rows=S seconds=...
    load_window: write: rows=M files=F bytes=B seconds=...
    load_window: commit: rows=M files=F offsets=O seconds=...

Prints one parseable line:
``load_window: windows=W rows_in=N rows_out=M duplicates=D already_loaded=K``
(rows_in = rows_out + duplicates + already_loaded). Exit 2 with one
``load_window: error: ...`` line on bad input; exit 3 with ``load_window: conflict: ...``
when a concurrent load into the same output committed some of the same offsets (nothing
of this load is visible; running it again loads what is still missing).

An offsets manifest (``handoff: "offsets"``, no staged files) is read from the brokers
through the ``rocketmq`` data source (spark/load/handoff.py: ``$NAMESRV_ADDR`` else the
manifest's name servers, credentials from ``ROCKETMQ_*`` variables) and loaded the same
way; its rows are only counted once read, so a fully loaded one adds 0 to ``rows_in``.

Imports no Airflow. Manifests must be on a filesystem the driver can read (the
checksums are verified there); the output's storage options come from the environment
(``$ROCKETMQ_OUTPUT_STORAGE_OPTIONS``, fsspec's ``$FSSPEC_<PROTOCOL>``) or
``--storage-options-file``, never from argv.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    import airflow_provider_rocketmq  # noqa: F401
except ModuleNotFoundError:  # run by path from a source tree that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.spark.load import ledger as lg
from airflow_provider_rocketmq.spark.load.outputs import DataFile, PendingLoad, is_url, open_output
from airflow_provider_rocketmq.spark.load.outputs.tasks import write_in_tasks
from airflow_provider_rocketmq.spark.load.report import LoadReport
from airflow_provider_rocketmq.window.manifest import (
    HANDOFF_OFFSETS,
    ManifestError,
    WindowManifest,
    manifest_url,
    read_manifest,
    staged_file_urls,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

PROG = "load_window"
BODY_FORMATS = ("utf8", "json", "binary")
STAGED_READS = ("auto", "spark", "tasks", "driver")
WRITERS = ("tasks", "spark")
# fsspec storage options of an object store output (JSON object): the environment, never argv
STORAGE_OPTIONS_ENV = "ROCKETMQ_OUTPUT_STORAGE_OPTIONS"
# broker is part of the key: queue ids restart at 0 on every broker of a topic
DEDUP_KEY = ("topic", "broker", "queue_id", "queue_offset")
EXIT_BAD_INPUT = 2
EXIT_CONFLICT = 3
# temporary columns: new / loaded / outside; the manifest's place in load order; a row's rank among its key's
_CLASS, _ORDER, _RANK = "__rocketmq_class", "__rocketmq_order", "__rocketmq_rank"


class LoadError(Exception):
    """A problem with the job's input that deserves one line, not a stack trace."""


@dataclass(frozen=True)
class Staged:
    """One verified manifest, the locations of its files and the offsets it claims."""

    location: str
    manifest: WindowManifest
    files: tuple[str, ...]
    claim: lg.OffsetRanges


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
                   help="auto: Spark tasks read the staged files and write the new rows in one pass when the "
                        "windows cannot repeat an offset (spark/load/direct_plan.py), else as spark for local "
                        "files and tasks for URLs; spark: Spark's Parquet reader (Hadoop filesystems: s3:// is read as s3a://); "
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


def _is_url(s: str) -> bool:
    return "://" in s and not s.startswith("file://")


def _local(s: str) -> str:
    return s.removeprefix("file://")


def load_manifests(paths: Sequence[str]) -> list[Staged]:
    """Read and fully verify every manifest (`ManifestError` on the first problem), in load order:
    by window id, then location, so the same inputs always load the same way. Paths and URLs are
    resolved by window/manifest.py (files relative to their manifest's directory)."""
    out: dict[str, Staged] = {}
    for raw in paths:
        location = manifest_url(raw)
        if not _is_url(location):
            location = str(Path(_local(location)).resolve())
        if location in out:
            continue  # the same manifest twice would only double rows_in
        manifest = read_manifest(location, verify_files=True)
        # what the window accounts for: its ranges minus the gaps another window holds
        claim = (lg.OffsetRanges.of(((manifest.topic, q.broker, q.queue_id), q.start_offset, q.end_offset)
                                    for q in manifest.queues)
                 - lg.OffsetRanges.of(((manifest.topic, q.broker, q.queue_id), lo, hi)
                                      for q in manifest.queues for lo, hi in q.gaps))
        out[location] = Staged(location, manifest, tuple(staged_file_urls(location, manifest)), claim)
    return sorted(out.values(), key=lambda s: (s.manifest.window_id, s.location))


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
    out = open_output(args.output, storage_options(args), abandon_after=args.abandon_after,
                      catalog_properties=_catalog_properties(args), body_format=args.body_format)
    out.validate()
    for note in out.recover():
        _note(note)
    state = out.state()
    held = state.held
    new = lg.OffsetRanges()
    for s in staged:
        new = new | (s.claim - held)
    # a manifest whose every offset the output holds is not read at all; an offsets manifest's
    # rows are only known once read from the brokers (its counts are 0)
    to_read = [s for s in staged
               if (s.manifest.messages or s.manifest.handoff == HANDOFF_OFFSETS) and s.claim - held]
    unread = sum(s.manifest.messages for s in staged) - sum(s.manifest.messages for s in to_read)
    counts = {"windows": len({s.manifest.window_id for s in staged}), "rows_in": unread, "rows_out": 0,
              "duplicates": 0, "already_loaded": unread}
    report = LoadReport(staged, to_read)
    if not new:
        report.phase("read", plan="none", windows=len(staged), files=0, rows_read=0, already_loaded=0,
                     duplicates=0, new=0, skipped_rows=unread, seconds=0.0)
        report.phase("write", rows=0, files=0, bytes=0, seconds=0.0)
        report.phase("commit", rows=0, files=0, offsets=0, seconds=0.0, note="nothing new: no commit")
        report.finish(args, counts, out.kind, time.monotonic() - started)
        return counts  # nothing new: no Spark, no ledger entry
    windows = [s.manifest.window_id for s in staged if s.claim - held]
    load = out.begin()
    try:
        files: list[DataFile] = []
        if to_read:
            own = spark is None
            if own:
                spark = _session(args.app_name)
            assert spark is not None
            try:
                read, loaded, files = _load_rows(spark, args, to_read, held, load, report)
                counts["rows_in"] += read
                counts["already_loaded"] += loaded
            finally:
                if own:
                    spark.stop()
        counts["rows_out"] = sum(f.rows for f in files)
        counts["duplicates"] = counts["rows_in"] - counts["already_loaded"] - counts["rows_out"]
        report.read_line(counts["duplicates"], unread)
        report.write_line(files)
        t_commit = time.monotonic()
        lg.crash_hook("before_commit")
        load.commit(state, new, windows, files, counts["rows_out"])
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


def _note(text: str) -> None:
    print(f"{PROG}: note: {text}", file=sys.stderr, flush=True)


def _session(app_name: str) -> SparkSession:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName(app_name)
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _in_ranges(ranges: lg.OffsetRanges, F: Any) -> Column:
    """A boolean column: the row's (topic, broker, queue_id, queue_offset) lies in ``ranges``."""
    cond = F.lit(False)
    for (topic, broker, queue_id), intervals in sorted(ranges.by_queue.items()):
        hit = F.lit(False)
        for start, end in intervals:
            hit = hit | ((F.col("queue_offset") >= start) & (F.col("queue_offset") < end))
        cond = cond | ((F.col("topic") == topic) & (F.col("broker") == broker)
                       & (F.col("queue_id") == queue_id) & hit)
    return cond  # type: ignore[no-any-return]  # F is the untyped pyspark functions module


def _read_window(spark: SparkSession, staged: Staged, mode: str) -> DataFrame:
    """The rows of one window: from the brokers for an offsets manifest, else its staged files."""
    if staged.manifest.handoff == HANDOFF_OFFSETS:
        from airflow_provider_rocketmq.spark.load.handoff import read_offsets_window

        return read_offsets_window(spark, staged.location, staged.manifest)
    local = not any(_is_url(f) for f in staged.files)
    if mode == "spark" or (mode == "auto" and local):
        # Hadoop names Amazon S3 "s3a"; the other object-store schemes are the same in fsspec and Hadoop
        return spark.read.parquet(*(("s3a://" + f[5:]) if f.startswith("s3://") else f for f in staged.files))
    if mode in ("tasks", "auto"):
        return _read_in_tasks(spark, list(staged.files))
    # the driver reads the files (any fsspec URL, e.g. s3:// when executors lack an S3 connector);
    # the window's rows then pass through the driver's memory
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for f in staged.files:
        if _is_url(f):
            import fsspec

            with fsspec.open(f, "rb") as fh:
                tables.append(pq.read_table(fh))
        else:
            tables.append(pq.read_table(_local(f)))
    return spark.createDataFrame(pa.concat_tables(tables))


def _read_in_tasks(spark: SparkSession, files: list[str]) -> DataFrame:
    """Staged files read by Spark tasks, one file per task, with pyarrow + fsspec: any fsspec URL,
    no Hadoop connector, and the rows never pass through the driver. The tasks get the driver's
    fsspec configuration (e.g. ``$FSSPEC_S3``) in their closure."""
    import fsspec
    import fsspec.config
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    with fsspec.open(files[0], "rb") as fh:
        schema = pq.read_schema(fh)
    conf = {k: dict(v) for k, v in fsspec.config.conf.items()}

    def read(batches: Any) -> Any:
        import fsspec
        import fsspec.config
        import pyarrow.parquet as pq

        for k, v in conf.items():
            fsspec.config.conf.setdefault(k, v)
        for batch in batches:
            for path in batch.column(0).to_pylist():
                with fsspec.open(path, "rb") as fh:
                    yield from pq.ParquetFile(fh).iter_batches(batch_size=65_536)

    paths = spark.createDataFrame([(f,) for f in files], "path string").repartition(len(files))
    return paths.mapInArrow(read, from_arrow_schema(schema))


def _load_rows(spark: SparkSession, args: argparse.Namespace, to_read: list[Staged],
               held: lg.OffsetRanges, load: PendingLoad, report: LoadReport) -> tuple[int, int, list[DataFile]]:
    """Write for ``load`` every row read whose offset the output does not hold, once per
    (topic, broker, queue_id, queue_offset) — from the first manifest in load order that has it;
    return the rows read, how many of them the output held already, and the files written.
    Spark tasks write the rows (``--writer``); the driver only sees counts and file descriptors.
    The direct plan (spark/load/direct_plan.py) when it applies, else the general plan."""
    if _direct_applies(args, to_read, held):
        from airflow_provider_rocketmq.spark.load import direct_plan as st

        try:
            return _load_direct(spark, args, to_read, held, load, report)
        except st.NeedsDedup as exc:
            _note(f"{exc}: loading with the general plan (Spark removes repeated offsets)")
            discard = getattr(load, "discard", None)
            if discard is not None:
                discard(report.direct_files)
            report.reset()
    return _load_general(spark, args, to_read, held, load, report)


def _direct_applies(args: argparse.Namespace, to_read: list[Staged], held: lg.OffsetRanges) -> bool:
    from airflow_provider_rocketmq.spark.load.direct_plan import claims_disjoint

    return (args.staged_read == "auto" and args.writer == "tasks" and args.body_format in ("utf8", "binary")
            and all(s.manifest.handoff != HANDOFF_OFFSETS and s.files for s in to_read)
            and claims_disjoint([s.claim - held for s in to_read]))


def _load_direct(spark: SparkSession, args: argparse.Namespace, to_read: list[Staged],
                 held: lg.OffsetRanges, load: PendingLoad, report: LoadReport) -> tuple[int, int, list[DataFile]]:
    import fsspec.config
    import pyarrow.parquet as pq

    from airflow_provider_rocketmq.spark.load import direct_plan as st

    t0 = time.monotonic()
    with st._open(to_read[0].files[0]) as fh:
        schema = st.output_schema(pq.read_schema(fh), args.body_format)
    specs = {order: st.window_spec(order, s.manifest.window_id, s.manifest.topic, s.claim - held, s.claim & held)
             for order, s in enumerate(to_read)}
    plan = st.plan_tasks([(order, f) for order, s in enumerate(to_read) for f in s.files],
                         spark.sparkContext.defaultParallelism)
    direct = st.DirectLoad(specs, st.schema_hex(schema), args.body_format, load.writer(),
                           {k: dict(v) for k, v in fsspec.config.conf.items()})
    results = st.run_direct(spark, direct, plan)
    files = [f for r in results for f in r.files]
    report.direct_files = files
    bad = next((r.outside for r in results if r.outside is not None), None)
    if bad is not None:
        raise LoadError(f"window {bad[0]}: staged row {bad[1]} {bad[2]}:{bad[3]} offset {bad[4]} lies outside "
                        f"its manifest's queue ranges")
    st.check_disjoint(results)
    for r in results:
        for order, n in r.read.items():
            report.add(order, read=n, loaded=r.loaded.get(order, 0))
    report.plan = "direct"
    report.files_read = sum(len(s.files) for s in to_read)
    report.read_seconds = sum(r.read_seconds for r in results)
    report.write_seconds = sum(r.write_seconds for r in results)
    report.job_seconds = time.monotonic() - t0
    return report.rows_read(), report.rows_loaded(), files


def _load_general(spark: SparkSession, args: argparse.Namespace, to_read: list[Staged],
                  held: lg.OffsetRanges, load: PendingLoad, report: LoadReport) -> tuple[int, int, list[DataFile]]:
    """Spark reads the windows, classifies rows with column expressions and keeps the first row of
    each offset with a window function (a shuffle and sort of every row read)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    df: DataFrame | None = None
    for order, staged in enumerate(to_read):
        # the manifest, not the staged column, decides the window a row belongs to
        part = (_read_window(spark, staged, args.staged_read)
                .withColumn("window_id", F.lit(staged.manifest.window_id))
                .withColumn(_ORDER, F.lit(order)))
        # rows are kept by what the output holds, not by which manifest claims an offset first:
        # a manifest may claim offsets it did not stage (tag-filtered, or another window's)
        part = part.withColumn(_CLASS, F.when(_in_ranges(staged.claim - held, F), "new")
                               .when(_in_ranges(staged.claim & held, F), "loaded")
                               .otherwise("outside"))
        df = part if df is None else df.unionByName(part)
    assert df is not None
    df = df.cache()
    try:
        by_class: dict[str, int] = {}
        for cls, order, n in df.groupBy(_CLASS, _ORDER).count().collect():
            by_class[cls] = by_class.get(cls, 0) + n
            report.add(order, read=n, loaded=n if cls == "loaded" else 0)
        report.plan = "spark"
        report.files_read = sum(len(s.files) for s in to_read)
        report.read_seconds = time.monotonic() - t0
        if by_class.get("outside"):
            bad = df.where(F.col(_CLASS) == "outside").select("window_id", *DEDUP_KEY).limit(1).collect()[0]
            raise LoadError(f"window {bad.window_id}: staged row {bad.topic} {bad.broker}:{bad.queue_id} offset "
                            f"{bad.queue_offset} lies outside its manifest's queue ranges")
        t1 = time.monotonic()
        first = Window.partitionBy(*DEDUP_KEY).orderBy(_ORDER)
        rows = (df.where(F.col(_CLASS) == "new").withColumn(_RANK, F.row_number().over(first))
                .where(F.col(_RANK) == 1).drop(_CLASS, _ORDER, _RANK))
        rows = _convert_body(rows, args.body_format, F, getattr(load, "json_variant", True))
        if args.writer == "spark":
            target, written = getattr(load, "spark_target", None), getattr(load, "spark_written", None)
            if target is None or written is None:
                raise LoadError(f"--writer spark: the {args.output} output kind is written by Spark tasks only")
            rows.write.mode("errorifexists").partitionBy("window_id").parquet(target())
            files: list[DataFile] = written()
        else:
            files = write_in_tasks(rows, load.writer())
        report.write_seconds = time.monotonic() - t1
    finally:
        df.unpersist()
    return sum(by_class.values()), int(by_class.get("loaded", 0)), files


def _convert_body(df, body_format: str, F, json_variant: bool = True):  # type: ignore[no-untyped-def]  # pyspark types are optional
    if body_format == "binary":
        return df
    text = F.col("body").cast("string")  # Spark's binary->string cast decodes UTF-8
    if body_format == "utf8":
        return df.withColumn("body", text)
    bad = df.where(text.isNotNull() & F.try_parse_json(text).isNull()).select(*DEDUP_KEY).limit(1).collect()
    if bad:
        r = bad[0]
        raise LoadError(f"--body-format json: body of {r.topic} {r.broker}:{r.queue_id} offset "
                        f"{r.queue_offset} is not valid JSON")
    # VARIANT for Parquet outputs; kinds that cannot store it keep the validated text
    return df.withColumn("body", F.parse_json(text) if json_variant else text)


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    args = parse_args(argv)
    try:
        counts = run(args, spark)
    except lg.LedgerConflict as exc:
        print(f"{PROG}: conflict: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFLICT
    except (ManifestError, ConfigError, LoadError, lg.LedgerError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    print(f"{PROG}: " + " ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
