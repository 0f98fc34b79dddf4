"""spark/load/outputs/parquet_files.py: what the Parquet kinds' files hold and how their columns are encoded."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_rocketmq.client.protocol.columnar import message_schema
from airflow_provider_rocketmq.spark.load.outputs.parquet_files import dictionary_columns, write_partition


def _messages(n: int) -> pa.RecordBatch:
    schema = message_schema().append(pa.field("window_id", pa.string()))
    return pa.RecordBatch.from_pylist([{
        "topic": "orders", "broker": "broker-a", "queue_id": i % 2, "queue_offset": i, "msg_id": f"{i:032X}",
        "tags": "A", "keys": None, "properties": [("UNIQ_KEY", f"{i:032X}"), ("CLUSTER", "c")],
        "born_timestamp": 1_700_000_000_000 + i, "store_timestamp": 1_700_000_000_001 + i, "reconsume_times": 0,
        "body": b"x%d" % i, "window_id": "w1"} for i in range(n)], schema=schema)


def _dictionary_encoded(path: Path) -> dict[str, bool]:
    rg = pq.read_metadata(path).row_group(0)
    return {rg.column(i).path_in_schema: rg.column(i).has_dictionary_page for i in range(rg.num_columns)}


def test_distinct_valued_columns_are_written_plain_and_the_rows_kept(tmp_path: Path) -> None:
    batch = _messages(5000)

    def open_file(rel: str) -> BinaryIO:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        return open(tmp_path / rel, "wb")

    files = write_partition([batch], "t0", open_file)
    assert [(f.path, f.rows) for f in files] == [("window_id=w1/part-t0-00000.parquet", 5000)]
    path = tmp_path / files[0].path
    assert pq.read_table(path).to_pylist() == batch.drop_columns(["window_id"]).to_pylist()
    encoded = _dictionary_encoded(path)
    assert {c for c, d in encoded.items() if not d} == {"queue_offset", "msg_id", "born_timestamp",
                                                         "store_timestamp", "properties.key_value.value"}
    assert encoded["topic"] and encoded["broker"] and encoded["properties.key_value.key"] and encoded["body"]


def test_dictionary_columns_name_nested_leaves_as_parquet_does(tmp_path: Path) -> None:
    schema = pa.schema([("queue_offset", pa.int64()), ("s", pa.struct([("a", pa.string()), ("b", pa.int32())])),
                        ("l", pa.list_(pa.string())), ("m", pa.map_(pa.string(), pa.list_(pa.int64())))])
    cols = dictionary_columns(schema)
    assert cols == ["s.a", "s.b", "l.list.element", "m.key_value.key", "m.key_value.value.list.element"]
    table = pa.Table.from_pylist([{"queue_offset": 1, "s": {"a": "x", "b": 2}, "l": ["y"], "m": [("k", [3])]}],
                                 schema=schema)
    pq.write_table(table, tmp_path / "f.parquet", use_dictionary=cols)
    encoded = _dictionary_encoded(tmp_path / "f.parquet")
    assert encoded == {"queue_offset": False, **{c: True for c in cols}}  # every path named exists in the file
