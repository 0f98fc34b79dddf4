"""The embedded broker the benches run in a process of their own (so client CPU is measured alone),
and the backlog they read.

`start_broker` runs `airflow_provider_rocketmq.embedded.backlog`: a name server and a broker with
``topic`` on ``queues`` queues, optionally holding a backlog written straight into its store.
`fill` sends messages through the project's producer instead (batches of 128); `backlog` counts what a topic holds.
"""

from __future__ import annotations

import os
import subprocess
import sys

from airflow_provider_rocketmq.client.config import ClientConfig
from airflow_provider_rocketmq.client.loop_thread import LoopThread
from airflow_provider_rocketmq.client.mqclient import MQClient
from airflow_provider_rocketmq.client.producer import AsyncProducer
from airflow_provider_rocketmq.client.protocol.message import Message

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_broker(topic: str, messages: int = 0, size: int = 100,
                 queues: int = 8) -> tuple[subprocess.Popen[str], str]:
    """Start it; returns the process and the name server address once it serves."""
    proc = subprocess.Popen([sys.executable, "-m", "airflow_provider_rocketmq.embedded.backlog", "--topic", topic,
                             "--messages", str(messages), "--size", str(size), "--queues", str(queues)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("namesrv="):
        proc.kill()
        raise RuntimeError(f"embedded broker did not start: {line!r}")
    return proc, line.split("=", 1)[1]


def fill(lt: LoopThread, namesrv: str, topic: str, count: int, size: int = 100) -> None:
    """Send ``count`` messages of ``size`` bytes, 128 per batch, round-robin over the topic's queues."""
    async def go() -> None:
        producer = AsyncProducer(ClientConfig(namesrv_addr=namesrv), group="bench_producer")
        await producer.start()
        qs = await producer.publish_queues(topic)
        body = b"x" * size
        sent, q = 0, 0
        while sent < count:
            n = min(128, count - sent)
            await producer.send_batch([Message(topic, body) for _ in range(n)], queue=qs[q % len(qs)])
            sent += n
            q += 1
        await producer.close()
    lt.run(go(), timeout=3600)


def backlog(lt: LoopThread, namesrv: str, topic: str) -> int:
    """Messages ``topic`` holds (sum of its queues' max offsets)."""
    async def go() -> int:
        client = MQClient(ClientConfig(namesrv_addr=namesrv))
        route = await client.get_route(topic)
        total = sum([await client.max_offset(mq) for mq in route.subscribe_queues(topic)])
        await client.close()
        return total
    return lt.run(go())


def top_up(namesrv: str, topic: str, fill_to: int | None, queues: int = 8, size: int = 100) -> int:
    """Messages ``topic`` holds on ``namesrv``, after topping it up to ``fill_to`` (if given; an absent
    topic is created with ``queues`` queues first)."""
    import time

    from airflow_provider_rocketmq.client import Admin
    from airflow_provider_rocketmq.client.protocol.errors import RocketMQError

    lt = LoopThread()
    try:
        try:
            have = backlog(lt, namesrv, topic)
        except RocketMQError:  # no route: the topic does not exist yet
            have = 0
        if fill_to is not None and have < fill_to:
            if have == 0:
                with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
                    admin.create_topic(topic, queues)
            t = time.perf_counter()
            fill(lt, namesrv, topic, fill_to - have, size)
            print(f"# {topic}: filled {fill_to - have} x {size} B in {time.perf_counter() - t:.1f}s", flush=True)
            have = backlog(lt, namesrv, topic)
        return have
    finally:
        lt.stop()
