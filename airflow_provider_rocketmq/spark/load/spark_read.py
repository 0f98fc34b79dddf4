"""How Spark reads a window's rows for the plans that hand Spark the reading (general and dedup plans).

`read_window` gives one manifest's rows as a DataFrame: an offsets hand-off's ranges through the
``rocketmq`` data source (spark/load/handoff.py), a staged window's files per ``--staged-read``:
``spark`` (Spark's Parquet reader; ``s3://`` as ``s3a://``), ``tasks`` (Spark tasks read the files
with pyarrow + fsspec, one file per task), ``driver`` (the driver reads them; its memory holds the
rows), ``auto`` (``spark`` for local files, ``tasks`` for URLs). `json_body` converts the body for
``--body-format json`` with Spark's ``parse_json``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_rocketmq.spark.load.staged import Staged, is_url, local_path

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


def read_window(spark: SparkSession, staged: Staged, mode: str) -> DataFrame:
    """The rows of one window: from the brokers for an offsets manifest, else its staged files."""
    if staged.offsets_handoff:
        from airflow_provider_rocketmq.spark.load.handoff import read_offsets_window

        return read_offsets_window(spark, staged.location, staged.manifest)
    local = not any(is_url(f) for f in staged.files)
    if mode == "spark" or (mode == "auto" and local):
        # Hadoop names Amazon S3 "s3a"; the other object-store schemes are the same in fsspec and Hadoop
        df = spark.read.parquet(*(("s3a://" + f[5:]) if f.startswith("s3://") else f for f in staged.files))
        return _messages_layout(df)
    if mode in ("tasks", "auto"):
        return _read_in_tasks(spark, list(staged.files))
    return _read_on_driver(spark, staged.files)


def _read_on_driver(spark: SparkSession, files: tuple[str, ...]) -> DataFrame:
    """The driver reads the files (any fsspec URL, e.g. s3:// when executors lack an S3 connector);
    the window's rows then pass through the driver's memory."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_provider_rocketmq.window.manifest import staged_rows

    tables = []
    for f in files:
        if is_url(f):
            import fsspec

            with fsspec.open(f, "rb") as fh:
                tables.append(staged_rows(pq.read_table(fh)))
        else:
            tables.append(staged_rows(pq.read_table(local_path(f))))
    return spark.createDataFrame(pa.concat_tables(tables))


def _read_in_tasks(spark: SparkSession, files: list[str]) -> DataFrame:
    """Staged files read by Spark tasks, one file per task, with pyarrow + fsspec: any fsspec URL,
    no Hadoop connector, and the rows never pass through the driver. The tasks get the driver's
    fsspec configuration (e.g. ``$FSSPEC_S3``) in their closure."""
    import fsspec
    import fsspec.config
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    from airflow_provider_rocketmq.window.manifest import staged_rows_schema

    with fsspec.open(files[0], "rb") as fh:
        schema = staged_rows_schema(pq.read_schema(fh))
    conf = {k: dict(v) for k, v in fsspec.config.conf.items()}

    def read(batches: Any) -> Any:
        import fsspec
        import fsspec.config
        import pyarrow.parquet as pq

        from airflow_provider_rocketmq.window.manifest import staged_rows

        for k, v in conf.items():
            fsspec.config.conf.setdefault(k, v)
        for batch in batches:
            for path in batch.column(0).to_pylist():
                with fsspec.open(path, "rb") as fh:
                    for staged in pq.ParquetFile(fh).iter_batches(batch_size=65_536):
                        yield staged_rows(staged)

    paths = spark.createDataFrame([(f,) for f in files], "path string").repartition(len(files))
    return paths.mapInArrow(read, from_arrow_schema(schema))


def _messages_layout(df: DataFrame) -> DataFrame:
    """Staged files of the ``raw`` layout (window/manifest.py) as the ``messages`` layout: Spark tasks
    derive the message ids, tags, keys and properties map from the properties string."""
    if "properties_raw" not in df.columns:
        return df
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    from airflow_provider_rocketmq.window.manifest import staged_rows_schema

    # every column nullable, as Spark's Parquet reader gives them
    target = pa.schema([f.with_nullable(True) for f in staged_rows_schema(to_arrow_schema(df.schema))])

    def convert(batches: Any) -> Any:
        from airflow_provider_rocketmq.window.manifest import staged_rows

        for batch in batches:
            rows = staged_rows(batch)
            yield rows if rows.schema == target else rows.cast(target)

    return df.mapInArrow(convert, from_arrow_schema(target))


def json_body(F: Any, json_variant: bool) -> tuple[Column, Column]:
    """``--body-format json``: (the converted body, a flag set where the body is not valid JSON).
    VARIANT for kinds that store it, else the text (validated)."""
    text = F.col("body").cast("string")  # Spark's binary->string cast decodes UTF-8
    parsed = F.try_parse_json(text)
    return (parsed if json_variant else text), (text.isNotNull() & parsed.isNull())
