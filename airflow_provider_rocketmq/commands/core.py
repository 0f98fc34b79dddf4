"""Core ``rocketmq-airflow`` commands: ``produce``, ``lag`` and ``topic create``.

They only use the public client API (Producer, Admin, ClientConfig). ACL
credentials come from the environment through `env_client_options`, like in
every other command (never from the command line, where ``ps`` shows them).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from typing import Any

from ..client.admin import Admin
from ..client.config import ClientConfig, env_client_options
from ..client.errors import ConfigError
from ..client.lag import format_table
from ..client.message import Message
from ..client.producer import Producer, SendResult


def client_config(args: argparse.Namespace) -> ClientConfig:
    """ClientConfig from ``--namesrv`` and the environment (`env_client_options`)."""
    return ClientConfig(**env_client_options(args.namesrv)).validate()


def _emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    print(json.dumps(data, ensure_ascii=False) if args.json else text)


def _positive(name: str, value: int, minimum: int = 1) -> int:
    if value < minimum:
        raise ConfigError(name, f"must be >= {minimum}, got {value}")
    return value


def parse_properties(items: list[str] | None) -> dict[str, str]:
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


# -- produce --------------------------------------------------------------------------------

def run_produce(args: argparse.Namespace) -> int:
    count = _positive("--count", args.count)
    batch = _positive("--batch", args.batch)
    size = _positive("--size", args.size, 0)
    props = parse_properties(args.property)
    cfg = client_config(args)
    started = time.monotonic()
    results: list[SendResult] = []
    sent = 0
    with Producer(cfg, args.group) as producer:
        while sent < count:
            n = min(batch, count - sent)
            msgs = [Message(args.topic, make_body(sent + j, size), tags=args.tag, keys=args.keys,
                            properties=props) for j in range(n)]
            if n == 1 and batch == 1:
                results.append(producer.send(msgs[0], key=args.key))
            else:
                results.append(producer.send_batch(msgs, key=args.key))
            sent += n
    elapsed = time.monotonic() - started
    ids = [i for r in results for i in r.msg_ids]
    per_queue: Counter[str] = Counter()
    for r in results:
        per_queue[f"{r.queue.broker_name}:{r.queue.queue_id}"] += len(r.msg_ids)
    data = {"topic": args.topic, "sent": sent, "requests": len(results),
            "queues": dict(sorted(per_queue.items())), "first_msg_id": ids[0], "last_msg_id": ids[-1],
            "seconds": round(elapsed, 3), "msgs_per_sec": round(sent / elapsed, 1) if elapsed > 0 else None}
    text = (f"sent {sent} message(s) to {args.topic} in {len(results)} request(s), {elapsed:.2f}s\n"
            f"queues: " + ", ".join(f"{q}={n}" for q, n in sorted(per_queue.items())) + "\n"
            f"first msg id: {ids[0]}\nlast msg id:  {ids[-1]}")
    _emit(args, data, text)
    return 0


# -- lag --------------------------------------------------------------------------------------

def run_lag(args: argparse.Namespace) -> int:
    with Admin(client_config(args)) as admin:
        snapshot = admin.lag(args.group, args.topic)
    _emit(args, snapshot.to_dict(), format_table(snapshot))
    return 0


# -- topic ----------------------------------------------------------------------------------

def run_topic_create(args: argparse.Namespace) -> int:
    queues = _positive("--queues", args.queues)
    with Admin(client_config(args)) as admin:
        brokers = admin.create_topic(args.topic, queues, args.cluster)
    data = {"topic": args.topic, "queues": queues, "brokers": brokers}
    _emit(args, data, f"topic {args.topic} created/updated with {queues} queue(s) on {', '.join(brokers)}")
    return 0


def run_topic_route(args: argparse.Namespace) -> int:
    with Admin(client_config(args)) as admin:
        queues = admin.high_water_marks(args.topic)
    data = {"topic": args.topic, "queues": [{"broker": mq.broker_name, "queue_id": mq.queue_id,
                                             "max_offset": off} for mq, off in queues.items()]}
    text = "\n".join(f"{mq.broker_name}:{mq.queue_id} max_offset={off}" for mq, off in queues.items())
    _emit(args, data, text or f"topic {args.topic} has no readable queue")
    return 0


def register(subparsers: Any) -> None:
    """Add ``produce``, ``lag`` and ``topic {create,route}`` to the main parser."""
    p = subparsers.add_parser("produce", help="send N generated messages to a topic")
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, default=1, help="number of messages (default 1)")
    p.add_argument("--size", type=int, default=0, help="body size in bytes (default: 'message <i>')")
    p.add_argument("--tag", default=None, help="TAGS of every message")
    p.add_argument("--keys", default=None, help="KEYS of every message (space-separated)")
    p.add_argument("--property", action="append", metavar="K=V", help="user property (repeatable)")
    p.add_argument("--batch", type=int, default=1, help="messages per SEND_BATCH_MESSAGE (default 1)")
    p.add_argument("--key", default=None, help="choose the queue by hash of this key (ordered sends)")
    p.add_argument("--group", default="rocketmq_airflow_cli", help="producer group")
    p.set_defaults(func=run_produce)

    p = subparsers.add_parser("lag", help="consumer-group lag per queue (like mqadmin consumerProgress)")
    p.add_argument("--group", required=True, help="consumer group")
    p.add_argument("--topic", default=None, help="only this topic (needed for groups without stats)")
    p.set_defaults(func=run_lag)

    topic = subparsers.add_parser("topic", help="topic administration")
    sub = topic.add_subparsers(dest="topic_command", metavar="ACTION", required=True)
    p = sub.add_parser("create", help="create or update a topic on every master of a cluster")
    p.add_argument("--topic", required=True)
    p.add_argument("--queues", type=int, default=8, help="read and write queues per broker (default 8)")
    p.add_argument("--cluster", default=None, help="cluster name (default: the only one / DefaultCluster)")
    p.set_defaults(func=run_topic_create)
    p = sub.add_parser("route", help="queues of a topic with their max offsets")
    p.add_argument("--topic", required=True)
    p.set_defaults(func=run_topic_route)
