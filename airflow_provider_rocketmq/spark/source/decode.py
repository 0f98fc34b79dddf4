"""Pull bodies -> one Arrow record batch with the data source's schema (`client/protocol/columnar.py`).

The bodies of a flush are one queue's stored records, each body whole records, so
they are walked as one buffer by `decode_columns` (offset stop and exact tag filter
applied there, namespace stripped from topics) and become one record batch in one
pass (`to_record_batch`): the fixed costs of a walk and of the Arrow calls are paid
once per flush of thousands of rows rather than once per pull of 32 (~15 % of the
decoding's CPU for 100-byte messages).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_rocketmq.client.protocol.batch import PullFilter
from airflow_provider_rocketmq.client.protocol.columnar import (
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
    batch = decode_columns(b"".join(bodies), mq, flt)  # one body: join returns it, no copy
    return None if batch is None else to_record_batch([batch])
