"""Test helpers: real stored-message records decoded by the client's own codec."""

from __future__ import annotations

from airflow_provider_rocketmq.client.message import MessageExt, decode_messages, encode_stored_message


def stored_messages(topic: str, offsets: range | list[int], *, queue_id: int = 0, body_size: int = 10,
                    tags: str | None = None, reconsume_times: int = 0,
                    properties: dict[str, str] | None = None) -> list[MessageExt]:
    chunks = []
    for off in offsets:
        props = dict(properties or {})
        if tags:
            props["TAGS"] = tags
        props.setdefault("UNIQ_KEY", f"ID{off:08d}")
        chunks.append(encode_stored_message(
            topic=topic, body=(b"x" * body_size), properties=props, queue_id=queue_id, queue_offset=off,
            commit_log_offset=1000 + off, born_timestamp=1, born_host="127.0.0.1:1", store_timestamp=2,
            store_host="127.0.0.1:10911", reconsume_times=reconsume_times))
    return decode_messages(b"".join(chunks))
