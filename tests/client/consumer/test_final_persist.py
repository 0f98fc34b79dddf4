"""Issue 14: a clean shutdown leaves exactly the consumed offsets on the broker, against the
behaviour of a real multi-threaded 4.x broker (`OffsetFaults` of the embedded broker), and
`shutdown()` says per queue what it committed.

The first two tests failed deterministically on the consumer before the fix (final offsets
written concurrently: lost first commits {0: 0, 1: 0, 2: 0, 3: 2}; offsets piggy-backed on
pulls: a late pull commit left 4 instead of 8); the third failed too (the final persist wrote
the seed offset back over an offset another writer had advanced).
"""

from __future__ import annotations

import threading
from typing import Any

from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.embedded import OffsetFaults

from .cluster import TestCluster, wait_until
from .helpers import fill_queues

# Long polls stay parked for the whole test (no re-pull that could commit on its own), no periodic
# persist: the final persist is the only writer of the group's offsets.
QUIET = {"consume_from_where": "CONSUME_FROM_FIRST_OFFSET", "persist_consumer_offset_interval": 60.0,
         "broker_suspend_max_time": 15.0, "consumer_timeout_when_suspend": 30.0}


def _recorder() -> tuple[list[tuple[int, int]], Any]:
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
        with lock:
            seen.extend((m.queue_id, m.queue_offset) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS
    return seen, listener


def test_final_offsets_survive_a_broker_that_loses_overlapping_first_commits() -> None:
    # 4.9.7 ConsumerOffsetManager.commitOffset: the first commits of a (group, topic) that run
    # concurrently on the consumer-manage executor each install their own table; all but one are lost
    cluster = TestCluster(queues=4)
    try:
        cluster.embedded.set_offset_faults(OffsetFaults(offset_race=0.05))
        topic, group = "FinalRace", "g_final_race"
        cluster.create_topic(topic, 4)
        fill_queues(cluster, topic, {q: 2 for q in range(4)})
        delivered: list[tuple[int, int]] = []
        lock = threading.Lock()
        release = threading.Event()

        def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
            with lock:
                delivered.extend((m.queue_id, m.queue_offset) for m in msgs)
            release.wait(30)  # nothing settles (and no pull could carry an offset) before shutdown
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
            report = c.shutdown()
        assert sorted(delivered) == [(q, o) for q in range(4) for o in range(2)]
        committed = {mq.queue_id: off for mq, off in cluster.committed(group, topic).items()}
        assert committed == {0: 2, 1: 2, 2: 2, 3: 2}
        assert report.ok and report.drained and not report.failed
        assert {(mq.queue_id, off) for mq, off in report.committed.items() if mq.topic == topic} == \
            {(q, 2) for q in range(4)}
        assert c.final_persist is report
    finally:
        cluster.close()


def test_a_late_pull_commit_does_not_undo_the_final_offset() -> None:
    # PullMessageProcessor applies a pull's commitOffset on the pull executor, after an
    # UPDATE_CONSUMER_OFFSET sent later may already have been applied on another executor
    cluster = TestCluster(queues=1)
    try:
        cluster.embedded.set_offset_faults(OffsetFaults(pull_commit_delay=1.0))
        topic, group = "FinalLatePull", "g_final_late"
        cluster.create_topic(topic, 1)
        seen, listener = _recorder()
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
            report = c.shutdown()
        cluster.embedded.apply_late_commits()
        assert seen == [(0, i) for i in range(8)]
        assert list(cluster.committed(group, topic).values()) == [8]
        assert [off for mq, off in report.committed.items() if mq.topic == topic] == [8]
    finally:
        cluster.close()


def test_a_queue_without_progress_is_not_written_back(cluster: TestCluster) -> None:
    # the offset read at assignment is not written back at shutdown: meanwhile another writer (an
    # admin reset, the window commit operator, a previous owner's final commit) may have moved it
    topic, group = "FinalSeed", "g_final_seed"
    cluster.create_topic(topic, 2)
    fill_queues(cluster, topic, {0: 3})
    _, listener = _recorder()
    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **QUIET)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    mq0, mq1 = cluster.queues_of(topic)
    try:
        wait_until(lambda: 3 in c.stats()["offsets"].values(), 20, "queue 0 consumed")
        cluster.run(cluster.client.update_consumer_offset(mq1, group, 5))  # queue 1: someone else's commit
    finally:
        report = c.shutdown()
    assert cluster.committed(group, topic) == {mq0: 3, mq1: 5}
    assert report.committed.get(mq0) == 3 and report.unchanged.get(mq1) == 0 and mq1 not in report.committed


def test_an_unacknowledged_final_commit_is_reported(cluster: TestCluster) -> None:
    topic, group = "FinalLost", "g_final_lost"
    cluster.create_topic(topic, 1)
    fill_queues(cluster, topic, {0: 2})
    _, listener = _recorder()
    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, request_timeout=0.5, **QUIET)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    try:
        wait_until(lambda: 2 in c.stats()["offsets"].values(), 20, "the queue consumed")
        cluster.embedded.drop_responses(15)  # every UPDATE_CONSUMER_OFFSET goes unanswered
    finally:
        report = c.shutdown()
    (mq,) = cluster.queues_of(topic)
    assert not report.ok
    assert mq in report.failed and "offset 2 not acknowledged" in report.failed[mq]
    assert f"{topic}/broker-a/0: offset 2 not acknowledged" in report.describe_failures()
    cluster.embedded.clear_faults()


def test_shutdown_of_a_consumer_that_never_started_reports_nothing() -> None:
    c = PushConsumer("g_never", namesrv_addr="127.0.0.1:9")
    report = c.shutdown()
    assert report.ok and not (report.committed or report.unchanged or report.failed)
    assert MessageQueue("t", "b", 0) not in report.failed
