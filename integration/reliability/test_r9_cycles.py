"""R9: consumers started and stopped many times in one interpreter (Airflow workers reuse their
processes): threads and file descriptors come back to where they were."""

from __future__ import annotations

import os
import threading

from airflow_provider_rocketmq.client import ConsumeStatus, PushConsumer

from .conftest import Mode
from .harness import Broker, Stopwatch, figure, produce, wait_until


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_r9_start_stop_cycles(broker: Broker, mode: Mode) -> None:
    cycles = mode.pick(20, 200)
    clock = Stopwatch()
    topic = broker.new_topic("r9", 4)
    group = broker.new_name("r9g")
    produce(broker, topic, range(cycles))
    got: list[int] = []

    def cycle() -> None:
        c = PushConsumer(group, namesrv_addr=broker.namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        c.subscribe(topic)
        def listener(msgs: list[object], ctx: object) -> ConsumeStatus:
            got.extend(1 for _ in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        c.register_listener(listener)
        c.start()
        before = len(got)
        wait_until(lambda: len(got) > before or len(got) >= cycles, 30, "a delivery")
        c.shutdown()

    cycle()  # warm-up: lazily created process-wide state (loggers, codecs) is not a leak
    base_threads, base_fds = threading.active_count(), fds()
    for _ in range(cycles - 1):
        cycle()
    threads, fd = threading.active_count(), fds()
    figure("R9", "start/stop cycles in one interpreter", cycles=cycles, threads_base=base_threads,
           threads_end=threads, fds_base=base_fds, fds_end=fd, seconds=clock())
    assert abs(threads - base_threads) <= 2, sorted(t.name for t in threading.enumerate())
    assert abs(fd - base_fds) <= 2
