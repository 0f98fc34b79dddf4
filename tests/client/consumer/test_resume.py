"""Issue 13 item 2: pulls resume soon after a broker restart or a dropped connection, without
waiting for the periodic heartbeat (a restarted broker has forgotten the member's subscription
and refuses its pulls until it heartbeats) or the 3 s pull back-off."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.push import PushConsumer

from .cluster import TestCluster, wait_until
from .helpers import fill_queues

# a heartbeat period far beyond the waits below: resuming must not depend on it
SLOW_HEARTBEAT = {"consume_from_where": "CONSUME_FROM_FIRST_OFFSET", "heartbeat_broker_interval": 120.0,
                  "pull_threshold_for_queue": 20, "pull_batch_size": 8, "rebalance_interval": 120.0}


def _consumer(cluster: TestCluster, group: str, topic: str,
              **overrides: Any) -> tuple[PushConsumer, list[tuple[float, int, int]]]:
    seen: list[tuple[float, int, int]] = []
    lock = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
        time.sleep(0.005 * len(msgs))  # slow enough that a backlog is left in the broker
        with lock:
            seen.extend((time.monotonic(), m.queue_id, m.queue_offset) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **{**SLOW_HEARTBEAT, **overrides})
    c.subscribe(topic)
    c.register_listener(listener)
    return c, seen


def test_pulls_resume_soon_after_a_broker_restart(tmp_path: Path) -> None:
    cluster = TestCluster(queues=2, data_dir=str(tmp_path))
    try:
        topic, group = "Resume", "g_resume"
        cluster.create_topic(topic, 2)
        fill_queues(cluster, topic, {0: 300, 1: 300})
        c, seen = _consumer(cluster, group, topic)
        c.start()
        try:
            wait_until(lambda: len(seen) >= 50, 20, "consumption under way")
            cluster.embedded.stop_broker("broker-a")  # forgets the group's members, keeps the store
            before = len(seen)
            time.sleep(2.0)  # the outage: pulls fail
            cluster.embedded.start_broker("broker-a")
            back = time.monotonic()
            wait_until(lambda: any(t > back for t, _, _ in seen[before:]), 15, "consumption after the restart")
            wait_until(lambda: len({(q, o) for _, q, o in seen}) == 600, 60, "the whole backlog")
        finally:
            report = c.shutdown()
        assert report.ok
        assert {(q, o) for _, q, o in seen} == {(q, o) for q in range(2) for o in range(300)}
    finally:
        cluster.close()


def test_pulls_resume_soon_after_the_broker_drops_the_connection(cluster: TestCluster) -> None:
    topic, group = "ResumeDrop", "g_resume_drop"
    cluster.create_topic(topic, 2)
    fill_queues(cluster, topic, {0: 300, 1: 300})
    c, seen = _consumer(cluster, group, topic)
    c.start()
    try:
        wait_until(lambda: len(seen) >= 50, 20, "consumption under way")
        assert cluster.embedded.close_client_connections(c.client_id) >= 1  # the member leaves the group
        cut = time.monotonic()
        wait_until(lambda: len({(q, o) for _, q, o in seen}) == 600, 20, "the whole backlog")
    finally:
        c.shutdown()
    assert max(t for t, _, _ in seen) > cut


def test_queues_of_a_briefly_absent_broker_are_kept(tmp_path: Path) -> None:
    # a stopped broker leaves the route; releasing its queues would re-read their offsets from the
    # last persist when it is back (duplicates), though no other member could own them meanwhile
    cluster = TestCluster(queues=1, brokers=2, data_dir=str(tmp_path))
    try:
        topic, group = "ResumeAbsent", "g_resume_absent"
        cluster.create_topic(topic, 1)
        fill_queues(cluster, topic, {0: 400})  # one queue on each broker: 400 on one of them
        c, seen = _consumer(cluster, group, topic, poll_name_server_interval=0.3, rebalance_interval=0.3)
        c.start()
        try:
            wait_until(lambda: len(seen) >= 50, 20, "consumption under way")
            owned = c.assigned_queues()
            name = next(b for (b, _), n in cluster.embedded.max_offsets(topic).items() if n == 400)
            cluster.embedded.stop_broker(name)
            wait_until(lambda: not any(mq.broker_name == name for mq in cluster.queues_of(topic)), 10,
                       "the broker gone from the route")
            time.sleep(2.0)  # a window for something that must not happen: ~6 route polls and rebalances
            assert c.assigned_queues() == owned
            cluster.embedded.start_broker(name)
            wait_until(lambda: len({(q, o) for _, q, o in seen}) == 400, 30, "the whole backlog")
        finally:
            report = c.shutdown()
        assert report.ok
        offsets = [(q, o) for _, q, o in seen]
        assert len(offsets) == len(set(offsets)) == 400  # nothing twice
    finally:
        cluster.close()
