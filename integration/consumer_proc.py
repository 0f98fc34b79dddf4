"""A push consumer in its own process, for the kill -9 test.

``python -m integration.consumer_proc --namesrv H:P --group G --topic T --out FILE``
appends one line ``<seq> <queue_id> <queue_offset>`` per consumed message and fsyncs
before acknowledging the batch, so FILE is exactly what the process consumed
(at-least-once). SIGTERM shuts the consumer down cleanly (offsets persisted);
SIGKILL is the crash under test.
"""

from __future__ import annotations

import argparse
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
    PushConsumer,
)

SEQ = "it_seq"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0, help="per-message processing time")
    args = ap.parse_args(argv)

    with open(args.out, "a", encoding="ascii") as out:
        return _run(args, out)


def _run(args: argparse.Namespace, out: IO[str]) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    lock = threading.Lock()

    def on_messages(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        if args.delay_ms:
            time.sleep(args.delay_ms / 1000.0)  # simulated work, so a kill lands mid-stream
        with lock:
            out.writelines(f"{m.properties.get(SEQ, '-1')} {m.queue_id} {m.queue_offset}\n" for m in msgs)
            out.flush()
            os.fsync(out.fileno())
        return ConsumeStatus.CONSUME_SUCCESS

    config = ConsumerConfig(
        namesrv_addr=args.namesrv,
        instance_name=f"it_proc_{os.getpid()}",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        consume_thread_min=2,
        consume_thread_max=2,
        persist_consumer_offset_interval=1.0,
        rebalance_interval=2.0,
        heartbeat_broker_interval=2.0,
    )
    consumer = PushConsumer(args.group, config)
    consumer.subscribe(args.topic, "*")
    consumer.register_listener(on_messages)
    consumer.start()
    print("started", flush=True)
    try:
        stop.wait()
    finally:
        consumer.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
