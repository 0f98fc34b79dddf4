"""``rocketmq-airflow consume``: print messages as JSON lines, commit offsets on exit.

stdout gets one JSON object per message (topic, queue_id, queue_offset, msg_id,
tags, keys, properties, reconsume_times, body as UTF-8 text or base64 with
``body_encoding``); stderr gets a one-line summary. The command stops after
``--max-messages`` or after ``--idle-timeout`` seconds without a message.

It commits exactly the offsets of what it printed: the consumer is orderly (each queue in
offset order, one message per call; clustering members lock their queues on the broker, as
Java's orderly consumers do), so a queue's offset moves past a message only once it was printed.
Messages pulled past ``--max-messages`` are suspended, never printed, sent back or committed: the
next run of the group starts with them. A terminal consumer failure (an ACL refusal) exits 2
with the broker's reason, after committing what was printed.

When stderr is a terminal, stdout is not (``consume ... > messages.jsonl``) and ``--json`` is not
given, stderr also shows a live bar (count, bytes, rate), redrawn from the waiting loop.
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import json
import sys
import threading
import time
from typing import Any, TextIO

from ..client.config import env_client_options
from ..client.consumer.config import TIMESTAMP_FORMAT, OrderlyStatus, parse_consume_timestamp
from ..client.consumer.offset_store import OffsetPersistReport
from ..client.consumer.push import PushConsumer
from ..client.protocol.errors import ConfigError, RocketMQError
from ..client.protocol.message import MessageExt
from ..window.progress import format_bytes, format_seconds
from . import terminal

UNCOMMITTED = 1  # exit status: consumed, but the final offset commit did not reach the broker
SUSPEND_PAST_LIMIT = 1.0  # seconds a queue waits before a message past --max-messages is offered again

_FROM = {"first": "CONSUME_FROM_FIRST_OFFSET", "last": "CONSUME_FROM_LAST_OFFSET",
         "timestamp": "CONSUME_FROM_TIMESTAMP"}


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``consume`` sub-command to the main parser."""
    p: argparse.ArgumentParser = subparsers.add_parser("consume", help="consume messages as a push-consumer group member (JSON lines)")
    p.add_argument("--namesrv", default=None, help="name servers host:port[;host:port]")
    p.add_argument("--group", required=True, help="consumer group")
    p.add_argument("--topic", required=True)
    p.add_argument("--expression", default="*", help='tag expression, e.g. "TagA || TagB" (default *)')
    p.add_argument("--from", dest="from_where", choices=sorted(_FROM), default="last",
                   help="where a group without committed offsets starts (default last)")
    p.add_argument("--timestamp", default=None, help="yyyyMMddHHmmss for --from timestamp")
    p.add_argument("--model", choices=("clustering", "broadcasting"), default="clustering")
    p.add_argument("--max-messages", type=int, default=0, help="stop after N messages (0: no limit)")
    p.add_argument("--idle-timeout", type=float, default=10.0,
                   help="stop after S seconds without a message (0: never)")
    p.add_argument("--json", action="store_true", help="summary as JSON on stderr")
    p.set_defaults(func=run)
    return p


def message_json(m: MessageExt) -> dict[str, Any]:
    try:
        body: str = m.body.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        body = base64.b64encode(m.body).decode("ascii")
        encoding = "base64"
    return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset, "msg_id": m.msg_id,
            "tags": m.tags, "keys": m.keys, "properties": dict(m.properties),
            "reconsume_times": m.reconsume_times, "broker_name": m.broker_name,
            "store_timestamp": m.store_timestamp, "body": body, "body_encoding": encoding}


def _draw(bar: terminal.LiveBar, printer: _Printer, started: float, limit: int) -> None:
    count, size = printer.count, printer.bytes  # read unlocked: a bar may lag one batch behind
    elapsed = max(time.monotonic() - started, 1e-9)
    last = f"last message {format_seconds(time.monotonic() - printer.last)} ago" if count \
        else "no message yet"
    bar.update(count, limit or None, f"{format_bytes(size)}; {count / elapsed:,.0f} msg/s; {last}")


def consumer_options(args: argparse.Namespace) -> dict[str, Any]:
    """The push consumer's options from the command line and the environment (ConfigError naming the option)."""
    if args.max_messages < 0:
        raise ConfigError("--max-messages", f"must be >= 0, got {args.max_messages}")
    if args.idle_timeout < 0:
        raise ConfigError("--idle-timeout", f"must be >= 0, got {args.idle_timeout}")
    # one message per call and one thread: the listener decides, message by message, what is committed
    options: dict[str, Any] = {"consume_from_where": _FROM[args.from_where],
                               "message_model": args.model.upper(), "consume_thread_min": 1,
                               "consume_thread_max": 1, "consume_message_batch_max_size": 1}
    options.update(env_client_options(args.namesrv))  # namesrv, ACL credentials, namespace
    if args.from_where == "timestamp":
        if not args.timestamp:
            raise ConfigError("--timestamp", "--from timestamp needs --timestamp yyyyMMddHHmmss")
        parse_consume_timestamp(args.timestamp)
        options["consume_timestamp"] = args.timestamp
    elif args.timestamp:
        parse_consume_timestamp(args.timestamp)
    return options


class _Printer:
    """The orderly listener: prints each message as a JSON line, up to ``max_messages`` (0: no limit).

    Past the limit a message is suspended (SUSPEND_CURRENT_QUEUE_A_MOMENT): not printed, not
    committed, not sent back; the group gets it again next time.
    """

    def __init__(self, out: TextIO, max_messages: int) -> None:
        self.out = out
        self.max_messages = max_messages
        self.count = 0
        self.bytes = 0
        self.last = time.monotonic()  # when the last message came
        self.done = threading.Event()  # the limit is reached, or the consumer failed
        self._lock = threading.Lock()

    def listener(self, msgs: list[MessageExt], ctx: Any) -> OrderlyStatus:
        limit = self.max_messages
        with self._lock:
            if limit and self.count + len(msgs) > limit:  # one message per call: only past the limit
                ctx.suspend_current_queue_time = SUSPEND_PAST_LIMIT
                return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            for m in msgs:
                self._print(m)
            self.out.flush()
            self.last = time.monotonic()
            if limit and self.count >= limit:
                self.done.set()
        return OrderlyStatus.SUCCESS

    def _print(self, m: MessageExt) -> None:
        self.out.write(json.dumps(message_json(m), ensure_ascii=False) + "\n")
        self.count += 1
        self.bytes += len(m.body)


def run(args: argparse.Namespace) -> int:
    options = consumer_options(args)
    printer = _Printer(sys.stdout, args.max_messages)
    consumer = PushConsumer(args.group, **options)
    consumer.subscribe(args.topic, args.expression)
    consumer.register_listener(printer.listener, orderly=True)
    started = time.monotonic()
    # the printed messages are the progress when stdout is the terminal too
    bar = terminal.LiveBar(f"consume {args.topic}") \
        if not args.json and terminal.wanted() and not terminal.wanted(printer.out) else None
    try:
        consumer.start()
        _wait(consumer, printer, bar, started, args)
    except KeyboardInterrupt:
        pass
    finally:
        if bar is not None:
            _draw(bar, printer, started, args.max_messages)
            bar.close()
        report = None
        try:
            report = consumer.shutdown(timeout=1.0)
        except RocketMQError as exc:
            print(f"warning: shutdown: {exc}", file=sys.stderr)
    if consumer.failure is not None:  # an ACL refusal: an error (exit 2), never a summary of nothing
        raise consumer.failure
    return _summarize(args, printer, report, started)


def _wait(consumer: PushConsumer, printer: _Printer, bar: terminal.LiveBar | None, started: float,
          args: argparse.Namespace) -> None:
    """Until the limit is reached, the consumer failed or no message came for ``--idle-timeout`` seconds;
    redraws the bar."""
    drawn = 0.0
    consumer.on_failure(lambda exc: printer.done.set())
    while not printer.done.wait(0.2):  # poll: idleness has no event to wait on
        if bar is not None and time.monotonic() - drawn >= 0.5:  # a redraw costs a few ms
            drawn = time.monotonic()
            _draw(bar, printer, started, args.max_messages)
        if args.idle_timeout and time.monotonic() - printer.last > args.idle_timeout:
            return


def _summarize(args: argparse.Namespace, printer: _Printer, report: OffsetPersistReport | None,
               started: float) -> int:
    """The summary line (or JSON) on stderr; the exit status: 0 once the offsets are committed."""
    # "committed" only when the final persist reached the store for every owned queue
    committed = report is not None and report.ok
    summary: dict[str, Any] = {
        "group": args.group, "topic": args.topic, "messages": printer.count, "bytes": printer.bytes,
        "seconds": round(time.monotonic() - started, 3),
        "finished_at": _dt.datetime.now().strftime(TIMESTAMP_FORMAT), "offsets_committed": committed}
    if report is not None and report.failed:
        summary["uncommitted"] = {f"{mq.topic}/{mq.broker_name}/{mq.queue_id}": why
                                  for mq, why in sorted(report.failed.items())}
    if args.json:
        print(json.dumps(summary), file=sys.stderr)
    else:
        outcome = "offsets committed" if committed else "offsets NOT committed"
        print(f"consumed {summary['messages']} message(s) ({summary['bytes']} bytes) from {args.topic} "
              f"as {args.group} in {summary['seconds']}s; {outcome}", file=sys.stderr)
    if committed:
        return 0
    detail = report.describe_failures() if report is not None else "the consumer did not shut down cleanly"
    print(f"warning: the group's offsets were not committed, these messages will be delivered again: "
          f"{detail}", file=sys.stderr)
    return UNCOMMITTED
