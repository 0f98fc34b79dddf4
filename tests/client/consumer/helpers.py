"""Test helpers: real stored-message records decoded by the client's own codec; calls into the
embedded broker's loop (its store, requests it sends to a consumer); per-queue fills."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.message import (
    Message,
    MessageExt,
    decode_messages,
    encode_stored_message,
)

T = TypeVar("T")


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


def on_cluster_loop(embedded: Any, fn: Callable[..., T], *args: Any, timeout: float = 10.0) -> T:
    """Run ``fn(*args)`` on the embedded cluster's loop thread (its store is not thread-safe)."""
    async def call() -> T:
        return fn(*args)
    return asyncio.run_coroutine_threadsafe(call(), embedded.loop).result(timeout)


def request_from_broker(embedded: Any, broker: Any, group: str, client_id: str, code: int,
                        ext: dict[str, str], body: bytes | None = None, timeout: float = 5.0) -> RemotingCommand:
    """Send a broker-initiated request to a consumer over the channel it registered with
    ``broker`` (as a Java broker does for GET_CONSUMER_STATUS_FROM_CLIENT & co.); the raw answer."""
    async def go() -> RemotingCommand:
        conn = broker.client_channel(group, client_id)
        return await conn.request(RemotingCommand(code, ext, body, language="JAVA"), timeout)
    return asyncio.run_coroutine_threadsafe(go(), embedded.loop).result(timeout + 5)


def fill_queues(cluster: Any, topic: str, counts: dict[int, int], per_batch: int = 32) -> dict[int, list[bytes]]:
    """Send ``counts[queue id]`` messages to each queue, one batch per queue in turn (bodies
    ``q<id>-<n>``); returns the bodies sent to each queue, in order."""
    async def go() -> dict[int, list[bytes]]:
        queues = {mq.queue_id: mq for mq in await cluster.producer.publish_queues(topic)}
        sent: dict[int, list[bytes]] = {qid: [] for qid in counts}
        while any(len(sent[q]) < n for q, n in counts.items()):
            for qid, n in sorted(counts.items()):
                start = len(sent[qid])
                batch = [Message(topic, b"q%d-%05d" % (qid, i)) for i in range(start, min(n, start + per_batch))]
                if batch:
                    await cluster.producer.send_batch(batch, queue=queues[qid])
                    sent[qid] += [m.body for m in batch]
        return sent
    return cluster.run(go(), timeout=60)  # type: ignore[no-any-return]
