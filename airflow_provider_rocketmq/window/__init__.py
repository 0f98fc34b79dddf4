"""Bounded-window hand-off: the window manifest and the staged Parquet format (no Airflow, no Spark)."""

from airflow_provider_rocketmq.window.manifest import (
    MANIFEST_NAME,
    MANIFEST_VERSION,
    STAGED_COLUMNS,
    FileEntry,
    ManifestError,
    QueueRange,
    WindowManifest,
    file_sha256,
    new_window_id,
    read_manifest,
    staged_row,
    staged_schema,
    validate_manifest,
    write_manifest,
    write_parquet_file,
)

__all__ = [
    "MANIFEST_NAME", "MANIFEST_VERSION", "STAGED_COLUMNS", "FileEntry", "ManifestError", "QueueRange",
    "WindowManifest", "file_sha256", "new_window_id", "read_manifest", "staged_row", "staged_schema",
    "validate_manifest", "write_manifest", "write_parquet_file",
]
