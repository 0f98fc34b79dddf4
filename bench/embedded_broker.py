"""Embedded broker hot paths: CPU time per message to store sends and to serve 32-message pulls.

    .venv/bin/python bench/embedded_broker.py [--messages 20000] [--size 100]

Prints figures; asserts nothing. "handler" figures call the request handlers in-process
(decode done, frame encode included for pulls) to isolate the broker's own cost; "socket"
figures go through 127.0.0.1 with the client and the broker in one process.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from airflow_provider_rocketmq.client.connection import open_connection
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.message import Message, encode_batch
from airflow_provider_rocketmq.embedded import EmbeddedCluster


class _Peer:
    peer = "127.0.0.1:5555"


def _send_cmd(topic: str, body: bytes) -> RemotingCommand:
    ext = {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1795244528602", "h": "0",
           "i": "TAGS\x01TagA\x02UNIQ_KEY\x01C00002025F565FFD2B276881ABC90000\x02WAIT\x01true", "j": "0",
           "k": "false", "m": "false", "n": "broker-a"}
    return RemotingCommand(310, ext, body)


def _pull_cmd(topic: str, offset: int) -> RemotingCommand:
    return RemotingCommand(11, {"consumerGroup": "g", "topic": topic, "queueId": "0", "queueOffset": str(offset),
                                "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                                "suspendTimeoutMillis": "15000", "subscription": "*", "subVersion": "0",
                                "expressionType": "TAG"})


async def handler_bench(n: int, size: int) -> None:
    async with EmbeddedCluster(queues=1) as cluster:
        broker = cluster.brokers[0]
        body = b"x" * size
        conn = _Peer()
        t0 = time.process_time()
        for _ in range(n):
            await broker.send_handlers.send_message(conn, _send_cmd("B1", body))  # type: ignore[arg-type]
        t_send = time.process_time() - t0
        batch = encode_batch([Message("B2", body, tags="TagA") for _ in range(32)])
        bcmd = RemotingCommand(320, {**_send_cmd("B2", b"").ext_fields, "m": "true", "i": "WAIT\x01true"}, batch)
        t0 = time.process_time()
        for _ in range(n // 32):
            await broker.send_handlers.send_batch(conn, bcmd)  # type: ignore[arg-type]
        t_batch = time.process_time() - t0
        t0 = time.process_time()
        served = 0
        for off in range(0, n, 32):
            resp = await broker.pull.answer(conn, _pull_cmd("B1", off), allow_suspend=False)  # type: ignore[arg-type]
            resp.encode()
            served += 32
        t_pull = time.process_time() - t0
        print(f"handler  send (single)          : {t_send / n * 1e6:7.2f} CPU-us/message  ({n} x {size} B)")
        print(f"handler  send (batch of 32)     : {t_batch / (n // 32 * 32) * 1e6:7.2f} CPU-us/message")
        print(f"handler  pull 32 + frame encode : {t_pull / served * 1e6:7.2f} CPU-us/message")


async def socket_bench(n: int, size: int) -> None:
    with EmbeddedCluster(queues=1) as cluster:  # broker on its own loop thread, client here
        conn = await open_connection(cluster.brokers[0].addr)
        body = b"x" * size
        batch = encode_batch([Message("S1", body, tags="TagA") for _ in range(32)])
        bext = {**_send_cmd("S1", b"").ext_fields, "m": "true", "i": "WAIT\x01true"}
        for _ in range(n // 32):
            await conn.request(RemotingCommand(320, dict(bext), batch), 10)
        t0, c0 = time.perf_counter(), time.process_time()
        got = 0
        for off in range(0, n // 32 * 32, 32):
            resp = await conn.request(_pull_cmd("S1", off), 10)
            got += int(resp.ext["nextBeginOffset"]) - off
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"socket   pull 32 (client+broker): {got / wall:9.0f} messages/s, {cpu / got * 1e6:6.2f} CPU-us/message "
              "(both sides, one process)")
        await conn.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    asyncio.run(handler_bench(args.messages, args.size))
    asyncio.run(socket_bench(args.messages, args.size))


if __name__ == "__main__":
    main()
