"""A window when a broker of its topic does not answer (down, or its network cut): the window takes
the queues of the brokers that answer and leaves the others, uncommitted, to the next window; it
never waits for the missing broker longer than the client's request timeout times its attempts, and
fails only when no broker answers (one silent broker must not stop every window of the topic until
it comes back).

The embedded broker's ``drop_responses`` makes broker-b silent: it is in the route, it accepts
connections, its answers never arrive (as behind a cut link).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, Producer, PushConsumer
from airflow_provider_rocketmq.client.consumer.config import ConsumeFromWhere, ConsumerConfig
from airflow_provider_rocketmq.client.protocol.errors import RequestTimeoutError
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.window.commit import commit_manifest
from airflow_provider_rocketmq.window.manifest import read_manifest
from airflow_provider_rocketmq.window.runner import (
    WINDOW_CONSUMER_DEFAULTS,
    Listener,
    WindowSpec,
    register_window_listener,
    run_window,
)
from airflow_provider_rocketmq.window.snapshot import OffsetsWindow, snapshot_window

TOPIC, GROUP = "ReachT", "reach_g"
TIMEOUT = 0.5  # request timeout of the test's clients: a silent broker costs 3 attempts of this


@pytest.fixture
def cluster(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> EmbeddedCluster:
    c = embedded_cluster_factory(brokers=2, queues=2)
    c.create_topic(TOPIC, 2)
    with Producer(ClientConfig(namesrv_addr=c.namesrv_addr), group="reach_p") as producer:
        for mq in producer.publish_queues(TOPIC):
            producer.send_batch([Message(TOPIC, f"{mq.broker_name}-{mq.queue_id}-{i}".encode()) for i in range(5)],
                                queue=mq)
    return c


def _admin(cluster: EmbeddedCluster) -> Admin:
    return Admin(ClientConfig(namesrv_addr=cluster.namesrv_addr, request_timeout=TIMEOUT))


def _queues(result: Any) -> dict[tuple[str, int], tuple[int, int]]:
    return {(q.broker, q.queue_id): (q.start_offset, q.end_offset) for q in read_manifest(result.manifest).queues}


def test_an_offsets_window_leaves_a_silent_broker_to_the_next_window(cluster: EmbeddedCluster, tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    with _admin(cluster) as admin:
        cluster.drop_responses(None, broker="broker-b")
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING):
            first = snapshot_window(OffsetsWindow(TOPIC, GROUP, str(tmp_path / "w1"), window_id="w1"), admin)
        took = time.monotonic() - t0
        assert _queues(first) == {("broker-a", 0): (0, 5), ("broker-a", 1): (0, 5)}
        assert any("broker-b" in r.getMessage() and "left to the next window" in r.getMessage()
                   for r in caplog.records)
        # one read of broker-b (3 attempts x the timeout, jittered waits between them), and slack
        assert took < 3 * TIMEOUT + 2 * 1.0 + 5, took
        commit_manifest(admin, read_manifest(first.manifest))
        cluster.clear_faults()
        second = snapshot_window(OffsetsWindow(TOPIC, GROUP, str(tmp_path / "w2"), window_id="w2"), admin)
        # broker-b's queues come whole with the next window; broker-a's were committed
        assert _queues(second) == {("broker-a", 0): (5, 5), ("broker-a", 1): (5, 5),
                                   ("broker-b", 0): (0, 5), ("broker-b", 1): (0, 5)}


@pytest.mark.parametrize("handoff", ["offsets", "staging"])
def test_queues_never_committed_wait_while_the_broker_with_the_commits_is_silent(cluster: EmbeddedCluster,
                                                                                  tmp_path: Path, handoff: str) -> None:
    # The group reads from the last offset and has consumed the topic, but all its commits are on
    # broker-b; broker-a's queues were never committed (added to the topic since): they hold messages
    # new to the group (2 left after retention). With broker-b silent nothing shows that the group
    # consumed: starting them at the high-water mark (and committing that) would skip them for good.
    last = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET

    def window(admin: Admin, name: str) -> Any:
        if handoff == "offsets":
            return snapshot_window(OffsetsWindow(TOPIC, GROUP, str(tmp_path / name), window_id=name,
                                                 consume_from_where=last), admin)
        return run_window(WindowSpec(topic=TOPIC, consumer_group=GROUP, staging_dir=str(tmp_path / name),
                                     window_id=name, consume_from_where=last, assignment_timeout=20,
                                     idle_timeout=20, shutdown_timeout=5), admin, _factory(cluster))

    with _admin(cluster) as admin:
        for mq in admin.topic_queues(TOPIC):
            if mq.broker_name == "broker-b":
                admin.update_consumer_offset(GROUP, mq, 5)
            else:  # retention took offsets 0-1: a broker answers "not found" (not 0) for the group's offset
                cluster.broker("broker-a").store.delete_before(TOPIC, mq.queue_id, 2)
        cluster.drop_responses(None, broker="broker-b")
        first = window(admin, "w1")
        assert _queues(first) == {}  # broker-a's starts cannot be decided yet: they wait, uncommitted
        commit_manifest(admin, read_manifest(first.manifest))
        cluster.clear_faults()
        second = window(admin, "w2")
        # the group's commits are visible again: broker-a's queues are new to it and come whole
        assert _queues(second) == {("broker-a", 0): (2, 5), ("broker-a", 1): (2, 5),
                                   ("broker-b", 0): (5, 5), ("broker-b", 1): (5, 5)}


def _factory(cluster: EmbeddedCluster) -> Callable[[Listener], Any]:
    # the consumer asks a random broker of the topic for the group's members: a round that asked the
    # silent one fails, the next comes rebalance_interval later (20 s by default)
    config = ConsumerConfig(namesrv_addr=cluster.namesrv_addr, request_timeout=TIMEOUT, **WINDOW_CONSUMER_DEFAULTS,
                            enable_offset_commit=False, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                            rebalance_interval=1.0)

    def factory(listener: Listener) -> Any:
        consumer = PushConsumer(GROUP, config)
        consumer.subscribe(TOPIC, "*")
        register_window_listener(consumer, listener)
        return consumer

    return factory


def test_a_staging_window_stages_the_brokers_that_answer(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    factory = _factory(cluster)
    with _admin(cluster) as admin:
        cluster.drop_responses(None, broker="broker-b")
        spec = WindowSpec(topic=TOPIC, consumer_group=GROUP, staging_dir=str(tmp_path / "w1"), window_id="w1",
                          assignment_timeout=20, idle_timeout=20, shutdown_timeout=5)
        result = run_window(spec, admin, factory)
        assert result.messages == 10 and result.committed is not None
        assert _queues(result) == {("broker-a", 0): (0, 5), ("broker-a", 1): (0, 5)}
        cluster.clear_faults()
        # nothing of broker-b was committed: the next window stages all of it
        assert cluster.committed_offsets(GROUP, TOPIC).get(("broker-b", 0), -1) in (-1, 0)
        again = run_window(WindowSpec(topic=TOPIC, consumer_group=GROUP, staging_dir=str(tmp_path / "w2"),
                                      window_id="w2", assignment_timeout=20, idle_timeout=20), admin, factory)
        assert _queues(again) == {("broker-a", 0): (5, 5), ("broker-a", 1): (5, 5),
                                  ("broker-b", 0): (0, 5), ("broker-b", 1): (0, 5)}
        assert again.messages == 10


def test_a_broker_silent_after_the_snapshot_leaves_its_queues_to_the_next_window(cluster: EmbeddedCluster,
                                                                                 tmp_path: Path) -> None:
    """broker-b answers the high-water marks, then no query of its committed offsets: the window stages
    broker-a's queues once it made no progress for idle_timeout, instead of failing."""
    with _admin(cluster) as admin:
        cluster.drop_responses(14, broker="broker-b")  # QUERY_CONSUMER_OFFSET
        spec = WindowSpec(topic=TOPIC, consumer_group=GROUP, staging_dir=str(tmp_path / "w1"), window_id="w1",
                          assignment_timeout=20, idle_timeout=3, shutdown_timeout=5)
        result = run_window(spec, admin, _factory(cluster))
        assert _queues(result) == {("broker-a", 0): (0, 5), ("broker-a", 1): (0, 5)} and result.messages == 10
        cluster.clear_faults()
        assert cluster.committed_offsets(GROUP, TOPIC).get(("broker-b", 0), -1) in (-1, 0)


class _SilentLater:
    """The real admin, except that broker-b's committed offsets time out after the first read of each."""

    def __init__(self, admin: Admin) -> None:
        self.admin = admin
        self.read: set[Any] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.admin, name)

    def committed_offset(self, group: str, mq: Any) -> int:
        if mq.broker_name == "broker-b" and mq in self.read:
            raise RequestTimeoutError(f"no response to code 14 from {mq.broker_name} (test)")
        self.read.add(mq)
        return self.admin.committed_offset(group, mq)


def test_a_broker_silent_in_the_middle_of_a_window_keeps_what_it_staged(cluster: EmbeddedCluster,
                                                                      tmp_path: Path) -> None:
    """broker-b's queues started, then its pulls and offset queries go unanswered: the window's
    periodic re-read of their committed offsets fails, and the window still ends after idle_timeout
    with what is contiguous (nothing of broker-b), instead of failing."""
    with _admin(cluster) as admin:
        cluster.drop_responses(11, broker="broker-b")  # PULL_MESSAGE: its queues never progress
        spec = WindowSpec(topic=TOPIC, consumer_group=GROUP, staging_dir=str(tmp_path / "w1"), window_id="w1",
                          assignment_timeout=20, idle_timeout=5, shutdown_timeout=5, commit=False)
        result = run_window(spec, _SilentLater(admin), _factory(cluster))  # type: ignore[arg-type]
        assert result.messages == 10
        assert _queues(result) == {("broker-a", 0): (0, 5), ("broker-a", 1): (0, 5),
                                   ("broker-b", 0): (0, 0), ("broker-b", 1): (0, 0)}


def test_a_window_fails_when_no_broker_answers(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    with _admin(cluster) as admin:
        cluster.drop_responses(None)
        t0 = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            snapshot_window(OffsetsWindow(TOPIC, GROUP, str(tmp_path / "w1"), window_id="w1"), admin)
        assert time.monotonic() - t0 < 4 * 3 * TIMEOUT + 10
        assert not (tmp_path / "w1" / "manifest.json").exists()
