"""``rocketmq-airflow lag`` and ``topic {create,route}``: what the admin API answers, as tables or JSON."""

from __future__ import annotations

import argparse
from typing import Any

from ..client.admin import Admin
from ..client.lag import format_table
from .args import client_config, emit, positive


def run_lag(args: argparse.Namespace) -> int:
    with Admin(client_config(args)) as admin:
        snapshot = admin.lag(args.group, args.topic)
    emit(args, snapshot.to_dict(), format_table(snapshot))
    return 0


def run_topic_create(args: argparse.Namespace) -> int:
    queues = positive("--queues", args.queues)
    with Admin(client_config(args)) as admin:
        brokers = admin.create_topic(args.topic, queues, args.cluster)
    data = {"topic": args.topic, "queues": queues, "brokers": brokers}
    emit(args, data, f"topic {args.topic} created/updated with {queues} queue(s) on {', '.join(brokers)}")
    return 0


def run_topic_route(args: argparse.Namespace) -> int:
    with Admin(client_config(args)) as admin:
        queues = admin.high_water_marks(args.topic)
    data = {"topic": args.topic, "queues": [{"broker": mq.broker_name, "queue_id": mq.queue_id,
                                             "max_offset": off} for mq, off in queues.items()]}
    text = "\n".join(f"{mq.broker_name}:{mq.queue_id} max_offset={off}" for mq, off in queues.items())
    emit(args, data, text or f"topic {args.topic} has no readable queue")
    return 0


def register(subparsers: Any) -> None:
    """Add ``lag`` and ``topic {create,route}`` to the main parser."""
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
