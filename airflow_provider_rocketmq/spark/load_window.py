"""PySpark application: load staged RocketMQ windows into a Parquet dataset.

Run by ``SparkSubmitOperator`` (or by hand)::

    spark-submit load_window.py --manifest W/manifest.json [--manifest ...] --output DIR \
        [--body-format utf8|json|binary]

Steps: validate every manifest and its files' sizes/SHA-256/rows *before* starting
Spark (a bad hand-off fails in a second with one line on stderr and exit code 2);
read the staged Parquet files; stamp each row with its manifest's ``window_id``;
de-duplicate by (topic, broker, queue_id, queue_offset) because upstream delivery
is at-least-once; convert the body; write ``DIR/window_id=<id>/`` with dynamic
partition overwrite, so re-running a window replaces it instead of appending.
Prints one parseable line: ``load_window: windows=W rows_in=N rows_out=M duplicates=D``.

Imports no Airflow. Manifests must be on a filesystem the driver can read (the
checksums are verified there).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

try:
    from airflow_provider_rocketmq.window.manifest import ManifestError, WindowManifest, read_manifest
except ModuleNotFoundError:  # run by path from a source tree that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from airflow_provider_rocketmq.window.manifest import ManifestError, WindowManifest, read_manifest

PROG = "load_window"
BODY_FORMATS = ("utf8", "json", "binary")
# broker is part of the key: queue ids restart at 0 on every broker of a topic
DEDUP_KEY = ("topic", "broker", "queue_id", "queue_offset")
EXIT_BAD_INPUT = 2


class LoadError(Exception):
    """A problem with the job's input that deserves one line, not a stack trace."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="Load staged RocketMQ windows into Parquet.")
    p.add_argument("--manifest", action="append", required=True, metavar="PATH",
                   help="window manifest (file or window directory); repeatable")
    p.add_argument("--output", required=True, metavar="DIR", help="output dataset, partitioned by window_id")
    p.add_argument("--body-format", choices=BODY_FORMATS, default="utf8",
                   help="utf8: body as string; json: body parsed to VARIANT; binary: body unchanged")
    p.add_argument("--app-name", default="rocketmq-load-window")
    return p.parse_args(argv)


def load_manifests(paths: Sequence[str]) -> list[tuple[Path, WindowManifest]]:
    """Read and fully verify every manifest; raise `ManifestError` on the first problem."""
    out: list[tuple[Path, WindowManifest]] = []
    seen: set[Path] = set()
    for raw in paths:
        p = Path(raw)
        p = (p / "manifest.json") if p.is_dir() else p
        if p.resolve() in seen:
            continue  # the same manifest twice would only double rows_in
        seen.add(p.resolve())
        out.append((p.parent, read_manifest(p, verify_files=True)))
    return out


def run(args: argparse.Namespace) -> dict[str, int]:
    manifests = load_manifests(args.manifest)
    windows = sorted({m.window_id for _, m in manifests})
    files = [(str((base / f.path).resolve()), m.window_id) for base, m in manifests for f in m.files]
    if not files:
        # an empty window is a success: nothing staged, nothing to write
        return {"windows": len(windows), "rows_in": 0, "rows_out": 0, "duplicates": 0}

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.appName(args.app_name)
             .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    try:
        spark.sparkContext.setLogLevel("WARN")
        by_window: dict[str, list[str]] = {}
        for path, window_id in files:
            by_window.setdefault(window_id, []).append(path)
        df = None
        for window_id, paths in sorted(by_window.items()):
            # the manifest, not the staged column, decides the partition a row lands in
            part = spark.read.parquet(*paths).withColumn("window_id", F.lit(window_id))
            df = part if df is None else df.unionByName(part)
        assert df is not None
        df = df.cache()
        rows_in = df.count()
        deduped = df.dropDuplicates(list(DEDUP_KEY))
        deduped = _convert_body(deduped, args.body_format, F)
        (deduped.write.mode("overwrite").partitionBy("window_id").parquet(args.output))
        # count what landed, from the output itself: the figure the user sees is the stored one
        rows_out = (spark.read.parquet(args.output).where(F.col("window_id").isin(windows)).count())
        df.unpersist()
        return {"windows": len(windows), "rows_in": rows_in, "rows_out": rows_out,
                "duplicates": rows_in - rows_out}
    finally:
        spark.stop()


def _convert_body(df, body_format: str, F):  # type: ignore[no-untyped-def]  # pyspark types are optional
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
    return df.withColumn("body", F.parse_json(text))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        counts = run(args)
    except (ManifestError, LoadError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    print(f"{PROG}: " + " ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
