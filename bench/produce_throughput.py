"""Produce throughput: the produce operator's pipelined path and a single synchronous `Producer.send`.

Starts the embedded broker in a *separate process* (so client CPU is measured alone) unless
``--namesrv`` is given (any broker, e.g. a real 4.9.7), creates the topic with 8 queues, then for
three runs prints msgs/s, client CPU-microseconds per message (this process's CPU time: the
calling thread and the producer's loop thread), the broker's CPU-microseconds per message (the
embedded broker's process, or the process ``--broker-pid`` names, read from /proc: Linux only;
"-" when unknown) and the 1-minute load average, for 100-byte messages:
  (a) RocketMQProduceOperator.execute, default settings (64 requests in flight, up to 32 messages
      of one queue per request, a result per message counted into its summary),
  (b) the same with max_batch=1 (a SEND_MESSAGE_V2 per message, 64 in flight),
  (c) the same as (a) with 100 ordering keys (one request in flight per queue),
  (d) Producer.send, one message at a time from one thread (the synchronous facade's fast path),
and then, over the runs, the targets: (a) >= 50,000 msgs/s and (d) <= 150 CPU-us per message
(how many runs met each, and the medians).

    .venv/bin/python bench/produce_throughput.py                       # embedded broker
    .venv/bin/python bench/produce_throughput.py --namesrv 127.0.0.1:9876
    .venv/bin/python bench/produce_throughput.py --namesrv 127.0.0.1:9876 --broker-pid 12345  # its CPU too

On a machine of few cores the broker and the client share them: the client's CPU per message
bounds the rate only as far as the broker leaves room (the embedded broker, pure Python, takes
more CPU per message than the client does).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="rmq-bench-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "ERROR")  # execute() outside a task runner warns each run

from airflow_provider_rocketmq.client.admin import Admin
from airflow_provider_rocketmq.client.config import ClientConfig
from airflow_provider_rocketmq.client.producer import Producer
from airflow_provider_rocketmq.client.protocol.message import Message
from bench._broker import start_broker

BODY = b"x" * 100
CONN_ID = "rocketmq_bench"
RATE_TARGET = 50_000.0  # the operator path, msgs/s
CPU_TARGET = 150.0  # a single synchronous Producer.send, client CPU-us per message


def process_cpu(pid: int | None) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used so far, from /proc; None when unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, in clock ticks


def measure(fn: Callable[[], int], broker_pid: int | None = None) -> tuple[float, float, float | None]:
    """(msgs/s, client CPU-us per message, broker CPU-us per message or None) of ``fn``, which
    returns how many messages it sent."""
    broker0 = process_cpu(broker_pid)
    cpu0, t0 = time.process_time(), time.perf_counter()
    n = fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    broker1 = process_cpu(broker_pid)
    broker = (broker1 - broker0) / n * 1e6 if broker0 is not None and broker1 is not None else None
    return n / wall, cpu / n * 1e6, broker


def operator_path(topic: str, n: int, *, max_batch: int = 32, keys: int = 0) -> Callable[[], int]:
    from airflow_provider_rocketmq.operators.produce import RocketMQProduceOperator

    def rows() -> Iterator[object]:
        if keys:
            names = [f"key-{k}" for k in range(keys)]
            for i in range(n):
                yield (BODY, None, None, None, names[i % keys])
        else:
            for _ in range(n):
                yield BODY

    op = RocketMQProduceOperator(task_id="bench", topic=topic, producer_function=rows, rocketmq_conn_id=CONN_ID,
                                 max_batch=max_batch)

    def run() -> int:
        out = op.execute({})
        assert out["messages"] == n, out
        return n
    return run


def single_sends(producer: Producer, topic: str, n: int) -> Callable[[], int]:
    def run() -> int:
        for _ in range(n):
            producer.send(Message(topic, BODY))
        return n
    return run


def verdict(runs: list[dict[str, tuple[float, float]]]) -> list[str]:
    """Issue 23's targets over the runs, as printed lines; ``runs[i][mode] = (msgs/s, CPU-us/msg)``."""
    rates = [r["a"][0] for r in runs]
    cpus = [r["d"][1] for r in runs]
    return [
        (f"target (a) >= {RATE_TARGET:,.0f} msgs/s: met in {sum(x >= RATE_TARGET for x in rates)} of {len(runs)}"
         f" runs (median {statistics.median(rates):,.0f})"),
        (f"target (d) <= {CPU_TARGET:.0f} CPU-us/msg: met in {sum(c <= CPU_TARGET for c in cpus)} of {len(runs)}"
         f" runs (median {statistics.median(cpus):.1f})"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", help="use this name server instead of starting the embedded broker")
    ap.add_argument("--topic", default="BenchProduce100B")
    ap.add_argument("--messages", type=int, default=200_000, help="messages per operator run (a), (c)")
    ap.add_argument("--single-batch-messages", type=int, default=100_000, help="messages per run of (b)")
    ap.add_argument("--sync-messages", type=int, default=20_000, help="messages per run of (d)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--broker-pid", type=int, help="with --namesrv: the broker's process, to report its CPU too")
    args = ap.parse_args()
    proc = None
    namesrv = args.namesrv
    broker_pid = args.broker_pid
    if namesrv is None:
        proc, namesrv = start_broker(args.topic)
        broker_pid = proc.pid
    try:
        cfg = ClientConfig(namesrv_addr=namesrv)
        with Admin(cfg) as admin:
            admin.create_topic(args.topic, 8)
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps({"conn_type": "rocketmq", "host": namesrv})
        modes = {
            "a": ("(a) operator, defaults", operator_path(args.topic, args.messages)),
            "b": ("(b) operator, max_batch=1", operator_path(args.topic, args.single_batch_messages, max_batch=1)),
            "c": ("(c) operator, 100 keys", operator_path(args.topic, args.messages, keys=100)),
        }
        with Producer(cfg, "bench_sync_producer") as producer:
            producer.send(Message(args.topic, BODY))  # route and connection in place: the fast path
            modes["d"] = ("(d) Producer.send, 1 thread", single_sends(producer, args.topic, args.sync_messages))
            print(f"{'run':>3} {'mode':<30} {'msgs/s':>10} {'CPU-us/msg':>11} {'broker-us/msg':>14} {'load':>5}",
                  flush=True)
            runs: list[dict[str, tuple[float, float]]] = []
            for run in range(1, args.runs + 1):
                runs.append({})
                for mode, (label, fn) in modes.items():
                    rate, cpu, broker = measure(fn, broker_pid)
                    runs[-1][mode] = (rate, cpu)
                    shown = f"{broker:.1f}" if broker is not None else "-"
                    print(f"{run:>3} {label:<30} {rate:>10,.0f} {cpu:>11.1f} {shown:>14} {os.getloadavg()[0]:>5.1f}",
                          flush=True)
        for line in verdict(runs):
            print(line)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
