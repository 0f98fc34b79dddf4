"""The output kinds a chaos run loads into, and how the checker reads each back.

- ``local``: a directory (``--output DIR``);
- ``s3``: a Parquet dataset on the moto server (``--output s3://bucket/out``), through the fault proxy;
- ``iceberg``: a table of a SQL catalog on sqlite (``--output iceberg://chaos/chaos.t?create=true``),
  its warehouse on local disk or on S3 through the proxy.

The checker reads what a reader of each kind sees: the published ``window_id=*/part-*.parquet``
files (``_``-prefixed paths skipped, as Spark and pyarrow do), or the table's current snapshot
through pyiceberg; object stores are read on the server itself, past the proxy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .checker import Row
from .objstore import ObjectStore

COLUMNS = ["topic", "broker", "queue_id", "queue_offset", "body", "window_id"]
ICEBERG_TABLE = "chaos.t"


class Output:
    kind = "abstract"
    url = ""

    def spark_env(self) -> dict[str, str]:
        return {}

    def load_args(self) -> list[str]:
        return []

    def read_rows(self) -> list[Row]:
        raise NotImplementedError


def _rows(table: Any) -> list[Row]:
    cols = {c: table.column(c).to_pylist() for c in COLUMNS}
    return [Row(*(cols[c][i] for c in COLUMNS)) for i in range(table.num_rows)]


def _parquet_rows(path: str, filesystem: Any = None) -> list[Row]:
    import pyarrow as pa
    import pyarrow.dataset as ds

    d = ds.dataset(path, filesystem=filesystem, format="parquet",
                   partitioning=ds.partitioning(pa.schema([("window_id", pa.string())]), flavor="hive"))
    if not d.files:
        return []
    return _rows(d.to_table(columns=COLUMNS))


class LocalOutput(Output):
    kind = "local"

    def __init__(self, workdir: Path) -> None:
        self.url = str(workdir / "out")

    def read_rows(self) -> list[Row]:
        return _parquet_rows(self.url) if Path(self.url).exists() else []


class S3Output(Output):
    kind = "s3"

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.url = store.url("out")

    def spark_env(self) -> dict[str, str]:
        return {"ROCKETMQ_OUTPUT_STORAGE_OPTIONS": self.store.options_json()}

    def read_rows(self) -> list[Row]:
        fs = self.store.direct_fs()
        path = self.url.removeprefix("s3://")
        fs.invalidate_cache()
        return _parquet_rows(path, fs) if fs.exists(path) else []


class IcebergOutput(Output):
    kind = "iceberg"

    def __init__(self, workdir: Path, store: ObjectStore | None) -> None:
        self.workdir = workdir
        self.store = store
        self.url = f"iceberg://chaos/{ICEBERG_TABLE}?create=true"
        props: dict[str, str] = {"type": "sql", "uri": f"sqlite:///{workdir}/catalog.db?timeout=60"}
        if store is None:
            props["warehouse"] = f"file://{workdir}/warehouse"
        else:
            props["warehouse"] = store.url("warehouse")
            props.update(store.iceberg_properties())
        self.properties = props
        self.conf = workdir / "catalog.json"
        self.conf.write_text(json.dumps(props))
        # a SQL catalog creates its own tables on first use, and two processes doing that at once on a
        # fresh database race (pyiceberg's SqlCatalog; the loser cannot load the catalog): like any
        # catalog in use, this one exists before the first load (the table does not: the loads create it)
        from pyiceberg.catalog import load_catalog

        load_catalog("chaos", **{**props, **({"s3.endpoint": store.direct} if store is not None else {})})

    def load_args(self) -> list[str]:
        return ["--catalog-conf", str(self.conf)]

    def read_rows(self) -> list[Row]:
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchTableError

        props = dict(self.properties)
        if self.store is not None:  # read the server itself, not through the proxy
            props["s3.endpoint"] = self.store.direct
        catalog = load_catalog("chaos", **props)
        try:
            table = catalog.load_table(ICEBERG_TABLE)
        except NoSuchTableError:
            return []
        return _rows(table.scan(selected_fields=tuple(COLUMNS)).to_arrow())


def make_output(kind: str, workdir: Path, store: ObjectStore | None, warehouse: str) -> Output:
    if kind == "local":
        return LocalOutput(workdir)
    if kind == "s3":
        assert store is not None
        return S3Output(store)
    if kind == "iceberg":
        return IcebergOutput(workdir, store if warehouse == "s3" else None)
    raise ValueError(f"unknown output kind {kind!r}")
