"""Pull bodies -> one Arrow record batch with the data source's schema.

TEMPORARY: decodes through `decode_messages` and builds the columns row by row,
until `client/columnar.py` (`decode_columns`, issue 10) lands; then this module
becomes a thin call of it. The schema is the staged Parquet schema without
``window_id`` (docs/CONTRACTS.md, "Wave 2": ``MESSAGE_SCHEMA``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_rocketmq.client.config import ClientConfig
from airflow_provider_rocketmq.client.message import decode_messages
from airflow_provider_rocketmq.client.queue import MessageQueue

if TYPE_CHECKING:
    import pyarrow as pa

_SCHEMA: pa.Schema | None = None


def message_schema() -> pa.Schema:
    """The Arrow schema of the rows the data source yields."""
    global _SCHEMA
    if _SCHEMA is None:
        from airflow_provider_rocketmq.window.manifest import staged_schema

        staged = staged_schema()
        _SCHEMA = staged.remove(staged.get_field_index("window_id"))
    return _SCHEMA


def decode_bodies(bodies: list[bytes], mq: MessageQueue, stop: int, tags: frozenset[str] | None,
                  namespace: str) -> pa.RecordBatch | None:
    """Decode pull bodies of ``mq``; keep offsets < ``stop`` whose tag is in ``tags`` (None: all)."""
    import pyarrow as pa

    msgs = decode_messages(b"".join(bodies), broker_name=mq.broker_name)
    msgs = [m for m in msgs if m.queue_offset < stop and (tags is None or m.tags in tags)]
    if not msgs:
        return None
    strip = ClientConfig(namespace=namespace, client_ip="127.0.0.1").without_namespace if namespace else None
    schema = message_schema()
    cols = {
        "topic": [strip(m.topic) if strip else m.topic for m in msgs],
        "broker": [mq.broker_name] * len(msgs),
        "queue_id": [m.queue_id for m in msgs],
        "queue_offset": [m.queue_offset for m in msgs],
        "msg_id": [m.msg_id for m in msgs],
        "tags": [m.tags for m in msgs],
        "keys": [m.keys for m in msgs],
        "properties": [list(m.properties.items()) for m in msgs],
        "born_timestamp": [m.born_timestamp for m in msgs],
        "store_timestamp": [m.store_timestamp for m in msgs],
        "reconsume_times": [m.reconsume_times for m in msgs],
        "body": [bytes(m.body) for m in msgs],
    }
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], type=f.type) for f in schema], schema=schema)
