"""ConsumePool: no lost wake-ups, a woken worker drains the queue, one awake worker unless it is stuck."""

from __future__ import annotations

import threading
import time

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


def test_grow_brings_in_parallel_workers_while_the_awake_ones_are_stuck() -> None:
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
        pool.kick()
        # what the consume service's result poll does while batches wait (bounded, not a sleep
        # used as synchronisation: each call looks at progress and returns at once)
        for _ in range(2000):
            if all_passed.wait(0.005):
                break
            pool.grow()
        assert all_passed.is_set()
        assert sorted(passed) == [0, 1, 2, 3]
    finally:
        pool.shutdown()


def test_kick_does_not_wake_a_second_worker_while_one_is_awake() -> None:
    pool = ConsumePool(4, "t")
    started = threading.Event()
    release = threading.Event()
    ran: list[str] = []
    second_done = threading.Event()
    try:
        deadline = time.monotonic() + 10  # the threads go to sleep right after they start
        while len(pool._sleepers) < 4 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(pool._sleepers) == 4
        pool.submit(lambda: (started.set(), release.wait(10), ran.append("first")))
        pool.kick()
        assert started.wait(10)
        pool.submit(lambda: (ran.append("second"), second_done.set()))
        pool.kick()  # the one awake worker will reach it: nobody else is woken
        assert len(pool._sleepers) == 3
        assert ran == []
        pool.grow()  # first call only records progress
        assert len(pool._sleepers) == 3
        release.set()
        assert second_done.wait(10)
        assert ran == ["first", "second"]  # the same worker ran both, in order
    finally:
        pool.shutdown()
