"""``rocketmq-airflow produce``: send generated messages to a topic, pipelined, one result per message."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from ..client.producer import (
    BULK_MAX_BATCH,
    BULK_MAX_IN_FLIGHT,
    MAX_BATCH,
    MAX_IN_FLIGHT,
    Producer,
    SendAbortedError,
    SendResult,
)
from ..client.protocol.errors import ConfigError, RocketMQError
from ..client.protocol.message import Message
from .args import client_config, emit, positive


def parse_properties(items: list[str] | None) -> dict[str, str]:
    """``--property K=V`` options as a dict (ConfigError naming ``--property`` for a bad one)."""
    props: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--property", f"{item!r} is not key=value")
        props[key.strip()] = value
    return props


def make_body(i: int, size: int) -> bytes:
    """``message <i>``, padded with a repeating pattern to ``size`` bytes when size is given."""
    head = f"message {i}".encode()
    if size <= 0:
        return head
    if size <= len(head):
        return head[:size]
    pad = b" abcdefghijklmnopqrstuvwxyz0123456789"
    need = size - len(head)
    return head + (pad * (need // len(pad) + 1))[:need]


def run_produce(args: argparse.Namespace) -> int:
    """Send ``--count`` messages pipelined (``--max-in-flight`` requests, up to ``--batch`` messages each).

    Every message has its own result; the summary counts them per queue. A failure stops the run:
    one ``error:`` line on stderr with the counts sent / failed / not sent, nothing on stdout, exit 2.
    """
    count = positive("--count", args.count)
    batch = positive("--batch", args.batch)
    in_flight = positive("--max-in-flight", args.max_in_flight)
    for name, value, top in (("--batch", batch, MAX_BATCH), ("--max-in-flight", in_flight, MAX_IN_FLIGHT)):
        if value > top:
            raise ConfigError(name, f"must be <= {top}, got {value}")
    size = positive("--size", args.size, 0)
    props = parse_properties(args.property)
    cfg = client_config(args)
    topic, tag, keys = args.topic, args.tag, args.keys

    def messages() -> Iterator[Message]:
        for i in range(count):
            yield Message(topic, make_body(i, size), tags=tag, keys=keys, properties=props)

    started = time.monotonic()
    per_queue: Counter[str] = Counter()
    requests: set[int] = set()
    first: SendResult | None = None
    last: SendResult | None = None
    sent = failed = not_sent = 0
    error: RocketMQError | None = None
    with Producer(cfg, args.group) as producer:
        for outcome in producer.send_many(messages(), key=args.key, max_in_flight=in_flight, max_batch=batch):
            r = outcome.result
            if r is None:
                if isinstance(outcome.error, SendAbortedError):
                    not_sent += 1
                else:
                    failed += 1
                    error = error or outcome.error
                continue
            sent += 1
            first = first or r
            last = r
            per_queue[f"{r.queue.broker_name}:{r.queue.queue_id}"] += 1
            if outcome.request is not None:
                requests.add(outcome.request)
    elapsed = time.monotonic() - started
    data: dict[str, Any] = {
        "topic": topic, "sent": sent, "requests": len(requests),
        "queues": dict(sorted(per_queue.items())), "first_msg_id": first.msg_id if first else None,
        "last_msg_id": last.msg_id if last else None, "seconds": round(elapsed, 3),
        "msgs_per_sec": round(sent / elapsed, 1) if elapsed > 0 else None}
    text = (f"sent {sent} message(s) to {topic} in {len(requests)} request(s), {elapsed:.2f}s\n"
            f"queues: " + ", ".join(f"{q}={n}" for q, n in sorted(per_queue.items())) + "\n"
            f"first msg id: {data['first_msg_id']}\nlast msg id:  {data['last_msg_id']}")
    if error is not None:  # like every command's error: one line on stderr, nothing on stdout
        reason = " ".join(str(error).split())
        sys.stderr.write(f"error: {reason} ({sent} message(s) sent before it, {failed} failed, "
                         f"{not_sent} not sent)\n")
        return 2
    emit(args, data, text)
    return 0


def register(subparsers: Any) -> None:
    """Add ``produce`` to the main parser."""
    p = subparsers.add_parser("produce", help="send N generated messages to a topic")
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, default=1, help="number of messages (default 1)")
    p.add_argument("--size", type=int, default=0, help="body size in bytes (default: 'message <i>')")
    p.add_argument("--tag", default=None, help="TAGS of every message")
    p.add_argument("--keys", default=None, help="KEYS of every message (space-separated)")
    p.add_argument("--property", action="append", metavar="K=V", help="user property (repeatable)")
    p.add_argument("--batch", type=int, default=BULK_MAX_BATCH,
                   help="up to this many messages of one queue per request (SEND_BATCH_MESSAGE), each with its "
                        f"own result (default {BULK_MAX_BATCH}, as RocketMQProduceOperator; 1: a SEND_MESSAGE each)")
    p.add_argument("--max-in-flight", type=int, default=BULK_MAX_IN_FLIGHT,
                   help=f"requests awaiting their answer at once (default {BULK_MAX_IN_FLIGHT})")
    p.add_argument("--key", default=None,
                   help="choose the queue by hash of this key: stored in order, one request in flight")
    p.add_argument("--group", default="rocketmq_airflow_cli", help="producer group")
    p.set_defaults(func=run_produce)
