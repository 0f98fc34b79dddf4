"""Allocation strategies reproduce Java's assignments for the same sorted inputs."""

from __future__ import annotations

import functools
import hashlib
import operator

import pytest

from airflow_provider_rocketmq.client.consumer.allocate import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    strategy_by_name,
)
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue


def queues(n: int, topic: str = "T", broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def cids(n: int) -> list[str]:
    return [f"10.0.0.{i}@inst" for i in range(1, n + 1)]


def ids(mqs: list[MessageQueue]) -> list[int]:
    return [mq.queue_id for mq in mqs]


def assign_all(strategy, mqs, clients):
    return [ids(strategy.allocate("g", c, mqs, clients)) for c in clients]


def test_averagely_16_queues_3_consumers():
    got = assign_all(AllocateMessageQueueAveragely(), queues(16), cids(3))
    assert got == [list(range(6)), list(range(6, 11)), list(range(11, 16))]


def test_averagely_7_queues_3_consumers():
    assert assign_all(AllocateMessageQueueAveragely(), queues(7), cids(3)) == [[0, 1, 2], [3, 4], [5, 6]]


def test_averagely_one_queue_two_consumers_leaves_one_idle():
    assert assign_all(AllocateMessageQueueAveragely(), queues(1), cids(2)) == [[0], []]


def test_averagely_two_queues_three_consumers_third_idle():
    assert assign_all(AllocateMessageQueueAveragely(), queues(2), cids(3)) == [[0], [1], []]


def test_client_not_in_list_owns_nothing():
    assert AllocateMessageQueueAveragely().allocate("g", "other@x", queues(4), cids(2)) == []


@pytest.mark.parametrize("n_mq,n_cid", [(16, 3), (7, 3), (5, 5), (3, 4), (10, 1)])
def test_by_circle_matches_round_robin_text(n_mq, n_cid):
    mqs, clients = queues(n_mq), cids(n_cid)
    # REFERENCE 1.4: queue k goes to client k % |cid|
    expected = [[k for k in range(n_mq) if k % n_cid == i] for i in range(n_cid)]
    assert assign_all(AllocateMessageQueueAveragelyByCircle(), mqs, clients) == expected


@pytest.mark.parametrize("n_mq,n_cid", [(16, 3), (8, 2), (4, 5)])
def test_every_queue_owned_exactly_once(n_mq, n_cid):
    for strategy in (AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle(),
                     AllocateMessageQueueConsistentHash()):
        owned = functools.reduce(operator.iadd, assign_all(strategy, queues(n_mq), cids(n_cid)), [])
        assert sorted(owned) == list(range(n_mq)), strategy.name


def _reference_consistent_hash(mqs, clients, vnodes=10):
    """Ring from the reference text: MD5 of "<cid>-<i>", first 4 bytes big-endian unsigned."""
    def h(key: str) -> int:
        d = hashlib.md5(key.encode()).digest()
        return (d[0] << 24) | (d[1] << 16) | (d[2] << 8) | d[3]
    ring = {}
    for c in clients:
        for i in range(vnodes):
            ring[h(f"{c}-{i}")] = c
    points = sorted(ring)
    table = {}
    for mq in mqs:
        key = h(f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]")
        owner = next((ring[p] for p in points if p >= key), ring[points[0]])
        table.setdefault(owner, []).append(mq.queue_id)
    return [table.get(c, []) for c in clients]


@pytest.mark.parametrize("n_mq,n_cid", [(16, 3), (8, 2), (32, 5)])
def test_consistent_hash_matches_ring_from_reference(n_mq, n_cid):
    mqs, clients = queues(n_mq), cids(n_cid)
    assert assign_all(AllocateMessageQueueConsistentHash(), mqs, clients) == \
        _reference_consistent_hash(mqs, clients)


def test_consistent_hash_is_stable_when_a_member_leaves():
    mqs, clients = queues(32), cids(4)
    before = dict(zip(clients, assign_all(AllocateMessageQueueConsistentHash(), mqs, clients), strict=True))
    after = dict(zip(clients[:3], assign_all(AllocateMessageQueueConsistentHash(), mqs, clients[:3]), strict=True))
    for c in clients[:3]:  # survivors keep what they had, only gain the leaver's queues
        assert set(before[c]) <= set(after[c])


def test_by_config_returns_the_configured_queues():
    fixed = [MessageQueue("T", "b", 3), MessageQueue("T", "b", 5)]
    assert AllocateMessageQueueByConfig(fixed).allocate("g", "c1", queues(8), ["c1", "c2"]) == fixed


def test_by_machine_room_blocks_then_remainder():
    mqs = sorted([MessageQueue("T", f"{room}@b", i) for room in ("hz", "sh", "bj") for i in range(4)])
    strategy = AllocateMessageQueueByMachineRoom({"hz", "sh"})
    got = [strategy.allocate("g", c, mqs, ["c1", "c2", "c3"]) for c in ("c1", "c2", "c3")]
    rooms = [[mq.broker_name.split("@")[0] for mq in part] for part in got]
    assert all(r in ("hz", "sh") for part in rooms for r in part)
    # 8 queues in the two rooms over 3 clients: mod 2, rem 2 -> 3, 3, 2
    assert [len(p) for p in got] == [3, 3, 2]
    assert sorted(functools.reduce(operator.iadd, got, [])) == [mq for mq in mqs if mq.broker_name[:2] in ("hz", "sh")]


def test_machine_room_nearby_prefers_local_room_and_shares_orphans():
    mqs = sorted([MessageQueue("T", f"{room}@broker", i) for room in ("hz", "sh") for i in range(4)])
    clients = sorted(["hz@10.0.0.1@a", "hz@10.0.0.2@a"])
    strategy = AllocateMachineRoomNearby(AllocateMessageQueueAveragely())
    got = [strategy.allocate("g", c, mqs, clients) for c in clients]
    # hz queues only to hz clients; sh has no consumer so its queues are shared by all
    assert [mq.queue_id for mq in got[0] if mq.broker_name.startswith("hz")] == [0, 1]
    assert [mq.queue_id for mq in got[1] if mq.broker_name.startswith("hz")] == [2, 3]
    assert sorted(functools.reduce(operator.iadd, got, [])) == mqs
    assert strategy.name == "MACHINE_ROOM_NEARBY-AVG"


def test_unknown_strategy_name_is_a_config_error():
    with pytest.raises(ConfigError, match="allocate_strategy"):
        strategy_by_name("random")
    assert strategy_by_name("by_circle").name == "AVG_BY_CIRCLE"
