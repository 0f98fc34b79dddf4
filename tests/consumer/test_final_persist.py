"""Issue 14: a clean shutdown leaves exactly the consumed offsets on the broker, against the
behaviour of a real multi-threaded 4.x broker (`OffsetFaults` of the embedded broker).

Both tests fail deterministically on a consumer that writes its final offsets concurrently
(lost first commits) or piggy-backs offsets on pulls (a late pull commit overwrites the
final one); see docs/embedded.md and docs/consumer.md.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.embedded import OffsetFaults

from .cluster import TestCluster, wait_until
from .helpers import fill_queues

# Long polls stay parked for the whole test (no re-pull that could commit on its own), no periodic
# persist: the final persist is the only writer of the group's offsets.
QUIET = {"consume_from_where": "CONSUME_FROM_FIRST_OFFSET", "persist_consumer_offset_interval": 60.0,
         "broker_suspend_max_time": 15.0, "consumer_timeout_when_suspend": 30.0}


@pytest.mark.xfail(strict=True, reason="issue 14: final offsets are written concurrently")
def test_final_offsets_survive_a_broker_that_loses_overlapping_first_commits() -> None:
    # 4.9.7 ConsumerOffsetManager.commitOffset: the first commits of a (group, topic) that run
    # concurrently on the consumer-manage executor each install their own table; all but one are lost
    cluster = TestCluster(queues=4)
    try:
        cluster.embedded.set_offset_faults(OffsetFaults(offset_race=0.3))
        topic, group = "FinalRace", "g_final_race"
        cluster.create_topic(topic, 4)
        fill_queues(cluster, topic, {q: 2 for q in range(4)})
        delivered: list[tuple[int, int]] = []
        lock = threading.Lock()
        release = threading.Event()

        def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
            with lock:
                delivered.extend((m.queue_id, m.queue_offset) for m in msgs)
            release.wait(30)  # nothing settles (and no pull carries an offset) before shutdown
            return ConsumeStatus.CONSUME_SUCCESS

        c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, consume_thread_min=4, consume_thread_max=4,
                         **QUIET)
        c.subscribe(topic)
        c.register_listener(listener)
        c.start()
        try:
            wait_until(lambda: len(delivered) >= 4, 20, "one delivery per queue")
        finally:
            release.set()
            c.shutdown()
        assert sorted(delivered) == [(q, o) for q in range(4) for o in range(2)]
        committed = {mq.queue_id: off for mq, off in cluster.committed(group, topic).items()}
        assert committed == {0: 2, 1: 2, 2: 2, 3: 2}
    finally:
        cluster.close()


@pytest.mark.xfail(strict=True, reason="issue 14: pulls piggy-back offsets that land late")
def test_a_late_pull_commit_does_not_undo_the_final_offset() -> None:
    # PullMessageProcessor applies a pull's commitOffset on the pull executor, after an
    # UPDATE_CONSUMER_OFFSET sent later may already have been applied on another executor
    cluster = TestCluster(queues=1)
    try:
        cluster.embedded.set_offset_faults(OffsetFaults(pull_commit_delay=1.0))
        topic, group = "FinalLatePull", "g_final_late"
        cluster.create_topic(topic, 1)
        seen: list[int] = []
        lock = threading.Lock()

        def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
            with lock:
                seen.extend(m.queue_offset for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **QUIET)
        c.subscribe(topic)
        c.register_listener(listener)
        c.start()
        try:
            fill_queues(cluster, topic, {0: 4})
            wait_until(lambda: 4 in c.stats()["offsets"].values(), 20, "the first batch settled")
            # the parked pull wakes up with these; the next pull leaves while offset 4 is settled
            fill_queues(cluster, topic, {0: 4})
            wait_until(lambda: 8 in c.stats()["offsets"].values(), 20, "the second batch settled")
        finally:
            c.shutdown()
        cluster.embedded.apply_late_commits()
        assert seen == list(range(8))
        assert list(cluster.committed(group, topic).values()) == [8]
    finally:
        cluster.close()
