"""The raw layout (properties kept as stored) round-trips to MESSAGE_SCHEMA whatever reads it back."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_provider_rocketmq.client.protocol.columnar import (
    decode_columns,
    message_schema,
    raw_message_schema,
    to_raw_record_batch,
    to_record_batch,
)
from airflow_provider_rocketmq.client.protocol.raw_columns import is_raw_schema, messages_from_raw
from tests.client.protocol.test_columnar import ALL, MQ, PULL_BODIES, stored


def _batches() -> list:
    bodies = [b for _, b in PULL_BODIES] + [
        b"".join([stored(0, props="TAGS\x01A"), stored(1, store="[::1]:10911", props="KEYS\x01k"),
                  stored(2, props="UNIQ_KEY\x01U2\x02TAGS\x01B")])]
    return [b for b in (decode_columns(body, MQ, ALL) for body in bodies) if b is not None]


def test_many_batches_in_one_raw_batch_give_the_message_columns_back() -> None:
    batches = _batches()
    raw = to_raw_record_batch(batches)
    assert is_raw_schema(raw.schema) and not is_raw_schema(message_schema())
    assert messages_from_raw(raw).equals(to_record_batch(batches))


def test_parquet_round_trip_keeps_extra_columns_last() -> None:
    batches = _batches()
    raw = to_raw_record_batch(batches)
    n = raw.num_rows
    table = pa.Table.from_batches([raw]).append_column("window_id", pa.array(["w1"] * n))
    sink = io.BytesIO()
    pq.write_table(table, sink, use_dictionary=["topic", "broker", "store_host", "window_id"])
    back = pq.read_table(io.BytesIO(sink.getvalue()), read_dictionary=["topic", "store_host"])
    got = messages_from_raw(back.to_batches()[0])
    assert got.schema.names == [*message_schema().names, "window_id"]
    assert got.drop_columns(["window_id"]).equals(to_record_batch(batches))
    assert got.column(12).to_pylist() == ["w1"] * n


def test_large_types_and_a_slice_are_read_too() -> None:
    batches = _batches()
    raw = to_raw_record_batch(batches)
    large = pa.RecordBatch.from_arrays(
        [c.cast(pa.large_string()) if pa.types.is_string(c.type) else
         c.cast(pa.large_binary()) if pa.types.is_binary(c.type) else c for c in raw.columns],
        names=raw.schema.names)
    expected = to_record_batch(batches)
    assert messages_from_raw(large).equals(expected)
    part = raw.slice(3, 5)
    assert messages_from_raw(part).equals(expected.slice(3, 5))


def test_a_row_without_unique_key_or_store_host_has_no_message_id() -> None:
    batch = decode_columns(b"".join([stored(0, props="TAGS\x01A"), stored(1, props="TAGS\x01B")]), MQ, ALL)
    assert batch is not None
    raw = to_raw_record_batch([batch])
    host = raw.column(raw.schema.get_field_index("store_host"))
    raw = raw.set_column(4, "store_host", pc.if_else(pa.array([True, False]), host, pa.nulls(2, pa.binary())))
    ids = messages_from_raw(raw).column(4).to_pylist()
    assert ids[0] == batch.record_batch.column(4)[0].as_py() and len(ids[0]) == 32
    assert ids[1] is None


def test_a_message_schema_batch_passes_through() -> None:
    rb = to_record_batch(_batches())
    assert messages_from_raw(rb) is rb


def test_empty() -> None:
    raw = to_raw_record_batch([])
    assert raw.num_rows == 0 and raw.schema == raw_message_schema()
    assert messages_from_raw(raw).num_rows == 0


@pytest.mark.parametrize("column", ["properties_raw", "commit_log_offset"])
def test_the_raw_schema_names_its_columns(column: str) -> None:
    assert column in raw_message_schema().names
