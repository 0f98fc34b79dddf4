"""Window commits stick on a broker that loses overlapping first commits."""

from __future__ import annotations

import threading

import pytest

from airflow_provider_rocketmq.client import Admin, ClientConfig, MessageQueue
from airflow_provider_rocketmq.embedded import EmbeddedCluster, OffsetFaults
from airflow_provider_rocketmq.window.commit import OffsetCommitError, commit_offsets


def test_concurrent_window_commits_are_read_back_and_rewritten(embedded_cluster: EmbeddedCluster) -> None:
    # two mapped window instances commit their own queues of one group at the same moment: a real
    # broker keeps only one of two overlapping first commits (OffsetFaults.offset_race)
    embedded_cluster.create_topic("WC", 2)
    embedded_cluster.set_offset_faults(OffsetFaults(offset_race=0.05))
    mqs = [MessageQueue("WC", "broker-a", q) for q in range(2)]
    admins = [Admin(ClientConfig(namesrv_addr=embedded_cluster.namesrv_addr)) for _ in mqs]
    moved: list[dict[str, int]] = []
    start = threading.Barrier(2)

    def commit(admin: Admin, mq: MessageQueue) -> None:
        start.wait()
        moved.append(commit_offsets(admin, "g_wc", [(mq, 7 + mq.queue_id)]))

    try:
        threads = [threading.Thread(target=commit, args=pair) for pair in zip(admins, mqs, strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(k for m in moved for k in m) == sorted(str(mq) for mq in mqs)
        assert embedded_cluster.committed_offsets("g_wc", "WC") == {("broker-a", 0): 7, ("broker-a", 1): 8}
    finally:
        for a in admins:
            a.close()


def test_a_commit_that_never_sticks_raises_naming_the_queue(embedded_cluster: EmbeddedCluster) -> None:
    embedded_cluster.create_topic("WN", 2)
    # every UPDATE_CONSUMER_OFFSET answered SUCCESS and not applied
    embedded_cluster.brokers[0].faults.respond(15, 0)
    mq = MessageQueue("WN", "broker-a", 1)
    with Admin(ClientConfig(namesrv_addr=embedded_cluster.namesrv_addr)) as admin, \
            pytest.raises(OffsetCommitError, match=r"offset 9 of .*queueId=1\] for group g_wn was not kept: "
                                                   r"the broker holds 0 after 3 acknowledged writes"):
        commit_offsets(admin, "g_wn", [(mq, 9)])
