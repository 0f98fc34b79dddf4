"""Consume throughput: push consumer vs a raw pull-and-decode loop (the ceiling).

Starts the embedded broker in a *separate process* (so client CPU is measured
alone) unless ``--namesrv`` is given, fills (or reuses) a backlog of 100-byte
messages on 8 queues, then prints for three runs: msgs/s and client CPU-seconds
per million messages for
  (a) PushConsumer with a no-op listener (consume_message_batch_max_size 1),
  (b) a raw pull-and-decode loop using the client's own codec,
  (c) PushConsumer with consume_message_batch_max_size 32.
and then, over the runs, the targets for (a): CPU-s/M <= 4.0 and >= 80 % of (b)'s rate
(how many runs met each, and the medians).
Push runs also print how that CPU splits between the consumer's event-loop thread and its consume
threads (per-thread clocks from /proc; blank where /proc is not there).

    .venv/bin/python bench/consume_throughput.py            # 1,000,000 messages by default
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airflow_provider_rocketmq.client.config import ClientConfig
from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.loop_thread import LoopThread
from airflow_provider_rocketmq.client.mqclient import MQClient
from airflow_provider_rocketmq.client.protocol.codes import RequestCode
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.message import decode_messages
from bench._broker import backlog, fill, start_broker


def _thread_cpu(prefix: str) -> float:
    """CPU seconds used so far by this process's live threads whose name starts with ``prefix``
    (Linux /proc; NaN elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    for t in threading.enumerate():
        if not t.name.startswith(prefix) or t.native_id is None:
            continue
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return total


def run_push(namesrv: str, topic: str, group: str, total: int,
             batch: int) -> tuple[float, float, float, float]:
    # The listener only records how many messages it saw (list.append is atomic under the GIL,
    # no lock): the bench measures the consumer, not a counter. The main thread adds them up in C
    # (sum of a slice) every 10 ms, so neither a lock nor a busy poller competes for the GIL.
    seen: list[int] = []
    record = seen.append

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        record(len(msgs))
        return ConsumeStatus.CONSUME_SUCCESS

    # Java defaults otherwise (20 consume threads, pull batch 32, thresholds 1000 / 100 MiB)
    c = PushConsumer(group, namesrv_addr=namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     consume_message_batch_max_size=batch)
    c.subscribe(topic)
    c.register_listener(listener)
    cpu0, t0 = time.process_time(), time.perf_counter()
    c.start()
    count = 0
    deadline = t0 + 600
    while count < total and time.perf_counter() < deadline:
        time.sleep(0.01)
        n = len(seen)
        count += sum(seen[:n])
        del seen[:n]  # appends made meanwhile stay
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    loop_cpu = _thread_cpu(f"rocketmq-consumer-{group}")  # the names push.py and consume_concurrent.py give
    workers_cpu = _thread_cpu(f"ConsumeMessageThread_{group}")
    c.shutdown()
    return wall, cpu, loop_cpu, workers_cpu


def run_raw(namesrv: str, topic: str, total: int) -> tuple[float, float, float, float]:
    async def go() -> None:
        client = MQClient(ClientConfig(namesrv_addr=namesrv))
        route = await client.get_route(topic)
        mqs = route.subscribe_queues(topic)
        got = [0]

        ends = {mq: await client.max_offset(mq) for mq in mqs}

        async def one(mq) -> None:  # type: ignore[no-untyped-def]
            # the same request path as the consumer's pulls (no timer per request, writes of one
            # loop iteration coalesced), so (a)/(b) measures the consumer's own overhead
            conn = await client.pool.get(client.broker_addr(mq.broker_name))
            offset = 0
            while offset < ends[mq]:
                cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                    "consumerGroup": "bench_raw", "topic": topic, "queueId": mq.queue_id, "queueOffset": offset,
                    "maxMsgNums": 32, "sysFlag": 6, "commitOffset": 0, "suspendTimeoutMillis": 1000,
                    "subscription": "*", "subVersion": 0, "expressionType": "TAG"})
                try:
                    resp = await conn.start_request(cmd)
                finally:
                    conn.forget(cmd.opaque)
                if resp.code == 0:
                    got[0] += len(decode_messages(resp.body or b""))
                    offset = int(resp.ext["nextBeginOffset"])
        await asyncio.gather(*(one(mq) for mq in mqs))
        await client.close()
    lt = LoopThread()
    cpu0, t0 = time.process_time(), time.perf_counter()
    lt.run(go(), timeout=600)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    lt.stop()
    return wall, cpu, float("nan"), float("nan")


CPU_TARGET = 4.0  # (a) <= 4.0 client CPU-seconds per million messages
RATIO_TARGET = 0.80  # ... and (a) >= 80 % of (b)'s rate


def verdict(runs: list[dict[str, tuple[float, float]]]) -> list[str]:
    """Issue 13's two targets over the runs, as printed lines; ``runs[i]["a"|"b"] = (msgs/s, CPU-s/M)``.

    Each run pairs (a) with the (b) measured right after it, so a host that gets busier between
    runs moves both; the medians and the met-in-k-of-n counts are what the docs quote.
    """
    cpus = [r["a"][1] for r in runs]
    ratios = [r["a"][0] / r["b"][0] for r in runs]
    return [
        "(a)/(b) by run: " + ", ".join(f"{x:.1%}" for x in ratios),
        (f"target (a) <= {CPU_TARGET} CPU-s/M: met in {sum(c <= CPU_TARGET for c in cpus)} of {len(runs)} runs"
         f" (median {statistics.median(cpus):.2f})"),
        (f"target (a) >= {RATIO_TARGET:.0%} of (b): met in {sum(x >= RATIO_TARGET for x in ratios)} of {len(runs)}"
         f" runs (median {statistics.median(ratios):.1%})"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", help="use this name server instead of starting the embedded broker")
    ap.add_argument("--topic", default="BenchConsume100B")
    ap.add_argument("--messages", type=int, default=1_000_000,
                    help="backlog size; large enough that consumer start-up does not weigh on the rates")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    proc = None
    namesrv = args.namesrv
    if namesrv is None:
        proc, namesrv = start_broker(args.topic)
    lt = LoopThread()
    try:
        have = backlog(lt, namesrv, args.topic)
        if have < args.messages:
            t = time.perf_counter()
            fill(lt, namesrv, args.topic, args.messages - have)
            print(f"filled {args.messages - have} messages in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        total = args.messages
        print(f"{'run':>3} {'mode':<28} {'msgs/s':>10} {'CPU-s/M':>8} {'loop thread':>12} {'consume thr.':>12}")
        runs: list[dict[str, tuple[float, float]]] = []
        for run in range(1, args.runs + 1):
            tag = f"{os.getpid()}_{run}_{int(time.time())}"
            runs.append({})
            for mode, label, fn in (("a", "(a) push, no-op, batch 1",
                                     lambda tag=tag: run_push(namesrv, args.topic, f"bench_a_{tag}", total, 1)),
                                    ("b", "(b) raw pull+decode", lambda: run_raw(namesrv, args.topic, total)),
                                    ("c", "(c) push, batch 32",
                                     lambda tag=tag: run_push(namesrv, args.topic, f"bench_c_{tag}", total, 32))):
                wall, cpu, loop_cpu, workers_cpu = fn()
                split = "".join(f" {'' if math.isnan(x) else f'{x / total * 1e6:.2f}':>12}"
                                for x in (loop_cpu, workers_cpu))
                print(f"{run:>3} {label:<28} {total / wall:>10.0f} {cpu / total * 1e6:>8.2f}{split}", flush=True)
                runs[-1][mode] = (total / wall, cpu / total * 1e6)
        for line in verdict(runs):
            print(line)
    finally:
        lt.stop()
        if proc is not None:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
