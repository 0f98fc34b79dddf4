"""A push-consumer member in its own process, for the reliability checks (SIGKILL-able).

``python -m integration.reliability.member --namesrv H:P --group G --topic T --out FILE [...]``
prints ``started <client id>`` once running. Every listener call appends one line per message
to FILE before it returns (``seq queue_id queue_offset reconsume_times t_start t_end``, wall-clock
seconds), flushed to the kernel, so FILE survives a SIGKILL and holds exactly what was consumed.
With ``--stats FILE`` it appends a JSON line every 0.5 s (RSS, cached messages/bytes, owned queues,
assignment changes, threads). SIGTERM shuts the consumer down cleanly and prints one JSON line
with the final offset commit's outcome; SIGKILL is the crash under test.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from typing import IO, Any

from airflow_provider_rocketmq.client import (
    ConsumeFromWhere,
    ConsumerConfig,
    ConsumeStatus,
    MessageExt,
    OrderlyStatus,
    PushConsumer,
)

SEQ = "rel_seq"


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stats", default=None)
    ap.add_argument("--orderly", action="store_true")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="processing time per message")
    ap.add_argument("--fail", action="store_true", help="every delivery fails (RECONSUME_LATER)")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=JSON",
                    help="a ConsumerConfig knob, e.g. persist_consumer_offset_interval=5")
    args = ap.parse_args(argv)
    with open(args.out, "a", encoding="ascii") as out:
        return _run(args, out)


def _run(args: argparse.Namespace, out: IO[str]) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    lock = threading.Lock()
    delay = args.delay_ms / 1000.0

    def record(msgs: list[MessageExt], started: float) -> None:
        ended = time.time()
        with lock:
            out.writelines(f"{m.properties.get(SEQ, '-1')} {m.queue_id} {m.queue_offset} {m.reconsume_times} "
                           f"{started:.6f} {ended:.6f}\n" for m in msgs)
            out.flush()

    def concurrent(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        started = time.time()
        if delay:
            time.sleep(delay * len(msgs))
        record(msgs, started)
        return ConsumeStatus.RECONSUME_LATER if args.fail else ConsumeStatus.CONSUME_SUCCESS

    def orderly(msgs: list[MessageExt], ctx: Any) -> OrderlyStatus:
        started = time.time()
        if delay:
            time.sleep(delay * len(msgs))
        record(msgs, started)
        return OrderlyStatus.SUCCESS

    options: dict[str, Any] = {
        "namesrv_addr": args.namesrv, "instance_name": f"rel_{os.getpid()}",
        "consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        "consume_message_batch_max_size": 16, "await_termination_when_shutdown": 10.0,
    }
    for item in args.option:
        key, _, value = item.partition("=")
        options[key] = json.loads(value)
    consumer = PushConsumer(args.group, ConsumerConfig(**options))
    consumer.subscribe(args.topic, "*")
    consumer.register_listener(orderly if args.orderly else concurrent, orderly=args.orderly)
    changes = [0]
    consumer.on_assignment(lambda topic, all_, mine: changes.__setitem__(0, changes[0] + 1)
                           if topic == args.topic else None)
    consumer.start()
    print(f"started {consumer.client_id}", flush=True)
    stats_thread = None
    if args.stats:
        stats_thread = threading.Thread(target=_stats, args=(args.stats, consumer, changes, stop), daemon=True)
        stats_thread.start()
    try:
        stop.wait()
    finally:
        report = consumer.shutdown()
        print(json.dumps({"ok": report.ok, "committed": len(report.committed), "failed": len(report.failed),
                          "drained": report.drained}), flush=True)
    return 0


def _stats(path: str, consumer: PushConsumer, changes: list[int], stop: threading.Event) -> None:
    with open(path, "a", encoding="ascii") as fh:
        while not stop.wait(0.5):
            s = consumer.stats()
            fh.write(json.dumps({"t": time.time(), "rss": rss_bytes(), "cached": s["cached_messages"],
                                 "cached_bytes": s["cached_bytes"], "queues": s["assigned_queues"],
                                 "changes": changes[0], "threads": threading.active_count(),
                                 "consumed": s["consumed_ok"]}) + "\n")
            fh.flush()


if __name__ == "__main__":
    raise SystemExit(main())
