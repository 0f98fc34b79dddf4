"""Pulled batches for window tests without a broker: stored-message records through decode_columns."""

from __future__ import annotations

from collections.abc import Sequence

from airflow_provider_rocketmq.client.protocol.batch import PullFilter
from airflow_provider_rocketmq.client.protocol.columnar import ColumnBatch, decode_columns
from airflow_provider_rocketmq.client.protocol.message import encode_stored_message
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

ALL = PullFilter(stop=None, tags=None, restore_retry_topic=False, namespace="")


def batch(key: tuple[str, int], offsets: Sequence[int], *, topic: str = "t", tags: str | None | Sequence[str | None] = "T",
          body: bytes | None = None) -> ColumnBatch:
    """One pulled batch of queue ``key`` holding ``offsets`` (bodies ``b<offset>`` unless given)."""
    records = []
    for i, off in enumerate(offsets):
        tag = tags if isinstance(tags, str) or tags is None else tags[i]
        props = {"UNIQ_KEY": f"U{key[1]}-{off}"}
        if tag is not None:
            props["TAGS"] = tag
        records.append(encode_stored_message(
            topic=topic, body=body if body is not None else b"b%d" % off, properties=props, queue_id=key[1],
            queue_offset=off, commit_log_offset=1000 + off, born_timestamp=1, born_host="10.0.0.1:1",
            store_timestamp=2, store_host="10.0.0.2:10911"))
    out = decode_columns(b"".join(records), MessageQueue(topic, key[0], key[1]), ALL)
    assert out is not None
    return out


def batch_with_bad_properties(key: tuple[str, int], offset: int, *, topic: str = "t") -> ColumnBatch:
    """A batch whose one message has properties that are not UTF-8 (found when columns are built)."""
    raw = bytearray(encode_stored_message(
        topic=topic, body=b"x", properties={"A": "zz"}, queue_id=key[1], queue_offset=offset,
        commit_log_offset=1, born_timestamp=1, born_host="10.0.0.1:1", store_timestamp=2,
        store_host="10.0.0.2:10911"))
    raw[-1] = 0xFF
    out = decode_columns(bytes(raw), MessageQueue(topic, key[0], key[1]), ALL)
    assert out is not None
    return out
