"""Pull bodies -> one Arrow record batch with the data source's schema (`client/protocol/columnar.py`).

Each pull body is walked by `decode_columns` (offset stop and exact tag filter
applied there, namespace stripped from topics); the kept records of all bodies of
a flush become one record batch in one pass (`to_record_batch`), so the fixed cost
of the Arrow calls is spread over thousands of rows rather than one pull's 32.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_rocketmq.client.protocol.batch import PullFilter
from airflow_provider_rocketmq.client.protocol.columnar import (
    ColumnBatch,
    decode_columns,
    message_schema,
    to_record_batch,
)
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["decode_bodies", "message_schema"]


def decode_bodies(bodies: list[bytes], mq: MessageQueue, stop: int, tags: frozenset[str] | None,
                  namespace: str) -> pa.RecordBatch | None:
    """Decode pull bodies of ``mq``; keep offsets < ``stop`` whose tag is in ``tags`` (None: all)."""
    flt = PullFilter(stop=stop, tags=tags, restore_retry_topic=False, namespace=namespace)
    kept: list[ColumnBatch] = []
    for body in bodies:
        batch = decode_columns(body, mq, flt)
        if batch is not None:
            kept.append(batch)
    return to_record_batch(kept) if kept else None
