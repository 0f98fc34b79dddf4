"""Helpers for the Iceberg output's tests: a SQL catalog on sqlite, loads driven through the
output-kind protocol without Spark, and readers of what a table holds (pyiceberg, DuckDB)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges
from airflow_provider_rocketmq.spark.load.outputs import open_output
from airflow_provider_rocketmq.spark.load.outputs.base import DataFile, OutputState
from airflow_provider_rocketmq.spark.load.outputs.iceberg import IcebergOutput, IcebergPendingLoad

KEY = ("topic", "broker", "queue_id", "queue_offset")


def catalog_conf(directory: Path, warehouse: str | None = None, lock_timeout: float = 60, **extra: str) -> Path:
    """A catalog properties file for a SQL catalog on sqlite (warehouse on local disk by default);
    ``lock_timeout``: how long sqlite waits for another process's write lock (busy shared machines)."""
    directory.mkdir(parents=True, exist_ok=True)
    props = {"type": "sql", "uri": f"sqlite:///{directory}/catalog.db?timeout={lock_timeout}",
             "warehouse": warehouse or f"file://{directory}/warehouse", **extra}
    path = directory / "catalog.json"
    path.write_text(json.dumps(props))
    return path


def conf_properties(path: Path) -> dict[str, str]:
    return dict(json.loads(path.read_text()))


def rows(window_id: str, broker: str, queue_id: int, offsets: Iterable[int], topic: str = "orders") -> pa.RecordBatch:
    """Loader output rows (body already converted to text) for some offsets of one queue."""
    offs = list(offsets)
    return pa.RecordBatch.from_pydict({
        "topic": [topic] * len(offs), "broker": [broker] * len(offs), "queue_id": [queue_id] * len(offs),
        "queue_offset": offs, "msg_id": [f"{broker}-{queue_id}-{o}" for o in offs], "tags": ["t"] * len(offs),
        "keys": [f"k{o}" for o in offs], "properties": [[("TAGS", "t")]] * len(offs),
        "born_timestamp": [1_700_000_000_000 + o for o in offs],
        "store_timestamp": [1_700_000_000_500 + o for o in offs], "reconsume_times": [0] * len(offs),
        "body": [f"{broker}/{queue_id}/{o}" for o in offs], "window_id": [window_id] * len(offs),
    }, schema=pa.schema([("topic", pa.string()), ("broker", pa.string()), ("queue_id", pa.int32()),
                         ("queue_offset", pa.int64()), ("msg_id", pa.string()), ("tags", pa.string()),
                         ("keys", pa.string()), ("properties", pa.map_(pa.string(), pa.string())),
                         ("born_timestamp", pa.int64()), ("store_timestamp", pa.int64()),
                         ("reconsume_times", pa.int32()), ("body", pa.string()), ("window_id", pa.string())]))


def ranges(*items: tuple[str, int, int, int], topic: str = "orders") -> OffsetRanges:
    """OffsetRanges of (broker, queue_id, start, end) items."""
    return OffsetRanges.of(((topic, b, q), s, e) for b, q, s, e in items)


@dataclass
class Planned:
    """A load between `begin` and `commit` (the steps load_window.py runs on the driver)."""

    out: IcebergOutput
    state: OutputState
    load: IcebergPendingLoad
    files: list[DataFile]
    new: OffsetRanges


def plan(url: str, conf: Path, claim: OffsetRanges, batches: Sequence[pa.RecordBatch],
         body_format: str = "utf8") -> Planned:
    """Open the output, read its state, write the rows of ``claim`` not held yet (as tasks would)."""
    out = open_output(url, catalog_properties=conf_properties(conf), body_format=body_format)
    assert isinstance(out, IcebergOutput)
    out.validate()
    state = out.state()
    new = claim - state.held
    keep = []
    for b in batches:
        mask = [((t, br, q), o) for t, br, q, o in zip(*(b.column(k).to_pylist() for k in KEY), strict=True)]
        flags = [bool(OffsetRanges.of([(k, o, o + 1)]) - state.held) for k, o in mask]
        keep.append(b.filter(pa.array(flags)))
    load = out.begin()
    files = load.writer().write(keep, "00000-1") if new else []
    return Planned(out, state, load, files, new)


def commit(p: Planned, windows: Sequence[str] = ("w",)) -> None:
    try:
        p.load.commit(p.state, p.new, list(windows), p.files, sum(f.rows for f in p.files))
    except BaseException:
        p.load.abort()
        raise
    p.load.publish()
    p.load.close()


def load(url: str, conf: Path, claim: OffsetRanges, batches: Sequence[pa.RecordBatch],
         windows: Sequence[str] = ("w",)) -> Planned:
    p = plan(url, conf, claim, batches)
    if p.new:
        commit(p, windows)
    return p


def table_keys(url: str, conf: Path) -> list[tuple[Any, ...]]:
    """Every row's (topic, broker, queue_id, queue_offset) in the table as pyiceberg reads it."""
    out = open_output(url, catalog_properties=conf_properties(conf))
    assert isinstance(out, IcebergOutput)
    out.validate()
    t = out.table.refresh().scan(selected_fields=KEY).to_arrow()
    return sorted(zip(*(t.column(k).to_pylist() for k in KEY), strict=True))


def duckdb_keys(metadata_location: str) -> list[tuple[Any, ...]]:
    """The same, as DuckDB's iceberg extension reads the table (local warehouse)."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    con = duckdb.connect()
    for module, name in ((duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")):
        ext = next(Path(module.__file__).parent.glob(f"extensions/*/{name}.duckdb_extension"))  # type: ignore[arg-type]
        con.execute(f"LOAD '{ext}'")
    got = con.execute(f"SELECT topic, broker, queue_id, queue_offset FROM iceberg_scan('{metadata_location}')")
    return sorted(tuple(r) for r in got.fetchall())
