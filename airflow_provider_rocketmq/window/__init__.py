"""Bounded-window hand-off: the window manifest and the staged Parquet format (no Airflow, no Spark)."""

from airflow_provider_rocketmq.window.manifest import (
    MANIFEST_NAME,
    MANIFEST_VERSION,
    READABLE_VERSIONS,
    STAGED_COLUMNS,
    STAGED_FILE_COLUMNS,
    FileEntry,
    ManifestError,
    QueueRange,
    WindowManifest,
    file_sha256,
    new_window_id,
    read_manifest,
    staged_file_schema,
    staged_row,
    staged_rows,
    staged_rows_schema,
    staged_schema,
    validate_manifest,
    write_manifest,
    write_parquet_file,
)

__all__ = [
    "MANIFEST_NAME", "MANIFEST_VERSION", "READABLE_VERSIONS", "STAGED_COLUMNS", "STAGED_FILE_COLUMNS", "FileEntry",
    "ManifestError", "QueueRange", "WindowManifest", "file_sha256", "new_window_id", "read_manifest",
    "staged_file_schema", "staged_row", "staged_rows", "staged_rows_schema", "staged_schema", "validate_manifest",
    "write_manifest", "write_parquet_file",
]
