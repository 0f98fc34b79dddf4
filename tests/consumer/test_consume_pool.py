"""ConsumePool: no lost wake-ups, a woken worker drains the queue, kicks add parallel workers."""

from __future__ import annotations

import threading

from airflow_provider_rocketmq.client.consumer.consume_pool import ConsumePool


def test_every_task_runs_under_a_submit_kick_storm() -> None:
    pool = ConsumePool(4, "t")
    done = threading.Event()
    lock = threading.Lock()
    count = [0]

    def task() -> None:
        with lock:
            count[0] += 1
            if count[0] == 20_000:
                done.set()

    try:
        for _ in range(20_000):
            pool.submit(task)
            pool.kick()
        assert done.wait(20), count[0]
    finally:
        pool.shutdown()


def test_one_kick_drains_everything_queued() -> None:
    pool = ConsumePool(2, "t")
    ran = []
    done = threading.Event()
    try:
        for i in range(100):
            pool.submit(ran.append, i)
        pool.submit(done.set)
        pool.kick()
        assert done.wait(10)
        assert sorted(ran) == list(range(100))
    finally:
        pool.shutdown()


def test_kicks_bring_in_parallel_workers() -> None:
    pool = ConsumePool(4, "t")
    barrier = threading.Barrier(4, timeout=10)  # passes only if 4 tasks run at the same time
    lock = threading.Lock()
    passed: list[int] = []
    all_passed = threading.Event()

    def task() -> None:
        index = barrier.wait()  # BrokenBarrierError (logged by the pool) if fewer than 4 run at once
        with lock:
            passed.append(index)
            if len(passed) == 4:
                all_passed.set()

    try:
        for _ in range(4):
            pool.submit(task)
        for _ in range(4):
            pool.kick()
        assert all_passed.wait(15)
        assert sorted(passed) == [0, 1, 2, 3]
    finally:
        pool.shutdown()
