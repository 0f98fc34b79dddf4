"""Output kinds of `load_window.py`: the one place that maps ``--output`` to a kind.

The contract is in `base.py`. Kinds:

- a local or mounted directory (plain path or ``file://``): `local.LocalParquetOutput`,
  committed by a hard link of the next ledger entry, live loads told by their ``flock``;
- a Parquet dataset on an object store (``s3://``, ``s3a://``, ``gs://``, ``abfs://``, ...):
  `objectstore.ObjectStoreParquetOutput`, committed by an atomic create-if-absent of the
  next ledger entry; stores without one are refused;
- an Apache Iceberg table (``iceberg://<catalog>/<namespace>.<table>``): `iceberg.IcebergOutput`,
  one snapshot per load committed by the catalog, the ledger in the snapshots' summaries.

A new kind adds its branch in `open_output` and keeps the `base.Output` contract;
load_window.py needs no other change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import DataFile, Output, OutputState, PendingLoad, TaskWriter

__all__ = ["DataFile", "Output", "OutputState", "PendingLoad", "TaskWriter", "is_url", "open_output"]


def is_url(arg: str) -> bool:
    """A URL other than ``file://`` (local paths and ``file://`` are the local kind)."""
    return "://" in arg and not arg.startswith("file://")


def open_output(arg: str, storage_options: Mapping[str, Any] | None = None, *,
                abandon_after: float | None = None, catalog_properties: Mapping[str, str] | None = None,
                body_format: str = "utf8") -> Output:
    """The `Output` for ``--output`` ``arg``; ``storage_options`` are fsspec options for a URL
    (credentials allowed: they are never printed); ``abandon_after`` (seconds) is how old an
    uncommitted load of an object-store output must be before another load discards it;
    ``catalog_properties`` are added to pyiceberg's configuration of an ``iceberg://`` output's
    catalog, whose table columns follow ``body_format``."""
    if arg.startswith("iceberg://"):
        from .iceberg import IcebergOutput

        return IcebergOutput(arg, catalog_properties or {}, body_format)
    if not is_url(arg):
        from .local import LocalParquetOutput

        return LocalParquetOutput(arg.removeprefix("file://"))
    from .objectstore import ObjectStoreParquetOutput

    return ObjectStoreParquetOutput(arg, dict(storage_options or {}), abandon_after=abandon_after)
