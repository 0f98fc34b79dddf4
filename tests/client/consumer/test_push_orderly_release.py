"""An orderly queue released while its listener still runs, then owned again by the same member.

The release must not unlock the queue while the listener runs (another member would consume it
concurrently); the delayed unlock must not fire once the member owns the queue again (it would
free the broker lock the new process queue relies on); and the re-owned queue must get a worker
once the old one ends, even when no new message arrives.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_provider_rocketmq.client.consumer.config import OrderlyStatus
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.protocol import fastjson

from .cluster import FAST, TestCluster, wait_until
from .test_push_orderly_locks import lock_batch


class Blocking:
    """An orderly listener whose first call blocks until `release()`."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.gate = threading.Event()
        self.first_returned = threading.Event()
        self.info_while_released: dict = {}  # type: ignore[type-arg]  # GET_CONSUMER_RUNNING_INFO then

    def __call__(self, msgs, ctx):  # type: ignore[no-untyped-def]
        self.calls.append([m.queue_offset for m in msgs])
        if len(self.calls) == 1:
            self.gate.wait(30)
            self.first_returned.set()
        return OrderlyStatus.SUCCESS


@contextmanager
def released_and_reowned(cluster: TestCluster, topic: str, group: str) -> Iterator[tuple[PushConsumer, Blocking]]:
    """A member whose only queue was released mid-listener and owned again; yields before the
    blocked listener call returns."""
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 1)  # an idle topic afterwards: no pull brings anything new
    listener = Blocking()
    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, lock_interval=0.5,
                     **{**FAST, "rebalance_interval": 600.0})  # rebalances only when the test asks
    c.subscribe(topic)
    c.register_listener(listener, orderly=True)
    c.start()
    try:
        wait_until(lambda: len(listener.calls) == 1, 10, "the first listener call")
        c.unsubscribe(topic)
        c.rebalance_now()  # releases the queue; its listener call is still running
        assert c.assigned_queues() == frozenset()
        resp = _running_info(cluster.embedded.brokers[0], group, c.client_id)
        listener.info_while_released = fastjson.loads(resp.body)
        c.subscribe(topic)
        # each poll rebalances (its answer is False when the subscription's own wake-up was first)
        wait_until(lambda: c.rebalance_now() in (True, False) and len(c.assigned_queues()) == 1, 10,
                   "owning the queue again")
        yield c, listener
    finally:
        listener.gate.set()
        c.shutdown()


def test_reowned_orderly_queue_gets_a_worker_when_the_old_one_ends(cluster: TestCluster) -> None:
    with released_and_reowned(cluster, "OrderlyReownTopic", "g_orderly_reown") as (c, listener):
        wait_until(lambda: c.stats()["cached_messages"] == 1, 10, "the re-owned queue's pull")
        assert len(listener.calls) == 1  # the old call still runs: nothing starts beside it
        listener.gate.set()
        # offset 0 was never committed (its queue was dropped mid-call): the new owner consumes it
        wait_until(lambda: len(listener.calls) == 2, 10, "a worker for the re-owned queue")
    assert listener.calls == [[0], [0]]


def test_late_unlock_spares_a_reowned_queue(cluster: TestCluster) -> None:
    topic, group = "OrderlyLateUnlockTopic", "g_orderly_late_unlock"
    with released_and_reowned(cluster, topic, group) as (c, listener):
        mq = cluster.queues_of(topic)[0]
        broker = cluster.embedded.brokers[0]
        # while the released queue's listener runs, the broker lock stays with this member
        assert broker.lock_owner(group, mq) == c.client_id
        listener.gate.set()
        assert listener.first_returned.wait(10)
        # the delayed unlock of the old process queue would fire now: the lock must stay ours
        deadline = time.monotonic() + 1.0  # a negative check needs a window (an unlock is one RPC)
        while time.monotonic() < deadline:
            assert broker.lock_owner(group, mq) == c.client_id
            time.sleep(0.05)
        assert lock_batch(cluster, group, [mq], "127.0.0.1@intruder") == set()
    # the released queue stays in the running info, dropped, with the release that had to wait
    # for the listener counted in tryUnlockTimes (as Java's table shows it)
    (entry,) = [v for k, v in listener.info_while_released["mqTable"].items() if topic in str(k)]
    assert entry["droped"] is True and entry["tryUnlockTimes"] == 1


def _running_info(broker, group: str, client_id: str):  # type: ignore[no-untyped-def]
    resp = broker.get_consumer_running_info(group, client_id)
    return resp.result(10) if hasattr(resp, "result") else resp
