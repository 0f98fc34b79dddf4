"""OffsetFaults: the consumer-offset behaviour of a real multi-threaded 4.x broker, on demand."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, MessageQueue, Producer
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.embedded import EmbeddedCluster, OffsetFaults, parse_offset_faults

from .rawclient import RawClient, pull_ext, send_ext


def update(group: str, topic: str, qid: int, off: int) -> dict[str, object]:
    return {"consumerGroup": group, "topic": topic, "queueId": qid, "commitOffset": off}


async def test_overlapping_first_commits_lose_all_but_the_last(
        embedded_cluster_factory: Callable[..., EmbeddedCluster], tmp_path: Path) -> None:
    cluster = embedded_cluster_factory(data_dir=str(tmp_path), queues=4)
    broker = cluster.brokers[0]
    cluster.set_offset_faults(OffsetFaults(offset_race=0.2))
    c = await RawClient().connect(broker.addr)
    try:
        # three first commits of one (group, topic) at once: every one is answered SUCCESS ...
        answers = await asyncio.gather(*(c.call(15, update("g", "OR", q, 5 + q)) for q in range(3)))
        assert [a.code for a in answers] == [0, 0, 0]
        # ... but the table the last one installed is the only one left
        assert [broker.committed_offset("g", "OR", q) for q in range(3)] == [-1, -1, 7]
        # commits one after the other (each answered before the next) all stay
        for q in range(3):
            assert (await c.call(15, update("g2", "OR", q, 10 + q))).code == 0
        assert [broker.committed_offset("g2", "OR", q) for q in range(3)] == [10, 11, 12]
        # once a table exists, overlapping commits are plain puts
        await asyncio.gather(*(c.call(15, update("g2", "OR", q, 20 + q)) for q in range(3)))
        assert [broker.committed_offset("g2", "OR", q) for q in range(3)] == [20, 21, 22]
    finally:
        await c.close()
    # the lost offsets stay lost across a restart (the journal records the replaced table)
    await cluster.restart_broker(broker.name)
    assert [broker.committed_offset("g", "OR", q) for q in range(3)] == [-1, -1, 7]
    assert [broker.committed_offset("g2", "OR", q) for q in range(3)] == [20, 21, 22]


async def test_a_pull_commit_lands_after_a_later_update(embedded_cluster: EmbeddedCluster) -> None:
    broker = embedded_cluster.brokers[0]
    embedded_cluster.set_offset_faults(OffsetFaults(pull_commit_delay=0.3))
    c = await RawClient().connect(broker.addr)
    try:
        assert (await c.call(310, send_ext("PC", queue_id=0), b"m")).code == 0
        # a pull with the commit bit (sysFlag 1 | subscription 4) carrying offset 3 ...
        pulled = await c.call(11, pull_ext("g", "PC", 0, 0, sys_flag=5, commit_offset=3))
        assert pulled.code == 0  # answered at once, its commit is still to come
        # ... then the client's later, acknowledged UPDATE of offset 9
        assert (await c.call(15, update("g", "PC", 0, 9))).code == 0
        assert broker.committed_offset("g", "PC", 0) == 9
        assert await embedded_cluster.apply_late_commits() == 1
        assert broker.committed_offset("g", "PC", 0) == 3  # last writer wins, like ConsumerOffsetManager
        embedded_cluster.clear_faults()  # off again: a pull's commit is applied while it is served
        await c.call(11, pull_ext("g", "PC", 0, 0, sys_flag=5, commit_offset=4))
        assert broker.committed_offset("g", "PC", 0) == 4
        assert await embedded_cluster.apply_late_commits() == 0
    finally:
        await c.close()


def test_fault_specs_parse_and_bad_ones_name_the_field() -> None:
    assert parse_offset_faults("") == OffsetFaults()
    assert parse_offset_faults("offset-race, pull-commit-delay") == OffsetFaults(0.05, 0.2)
    assert parse_offset_faults("offset-race=0.5") == OffsetFaults(offset_race=0.5)
    assert parse_offset_faults("first-on-disk") == OffsetFaults(first_on_disk=True)
    assert parse_offset_faults("first-on-disk=false, offset-race=0.5") == OffsetFaults(offset_race=0.5)
    for spec, text in (("offset-rase=1", "unknown fault 'offset-rase'"),
                       ("pull-commit-delay=soon", "'soon' is not a number"),
                       ("first-on-disk=maybe", "'maybe' is not true or false"),
                       ("offset-race=-1", "[0, 60]"), ("offset-race=nan", "[0, 60]")):
        with pytest.raises(ConfigError) as err:
            parse_offset_faults(spec, "ROCKETMQ_EMBEDDED_FAULTS")
        assert err.value.field == "ROCKETMQ_EMBEDDED_FAULTS" and text in str(err.value)
    with pytest.raises(ConfigError, match="first_on_disk: must be true or false"):
        OffsetFaults(first_on_disk=1)  # type: ignore[arg-type]


def test_first_on_disk_answers_no_offset_for_a_never_committed_queue(
        embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = embedded_cluster_factory(queues=1)
    cluster.create_topic("Disk", 1)
    mq = MessageQueue("Disk", "broker-a", 0)
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr)) as producer:
        producer.send(Message("Disk", b"x"), queue=mq)
    with Admin(ClientConfig(namesrv_addr=cluster.namesrv_addr)) as admin:
        assert admin.committed_offset("g_disk", mq) == 0  # the queue's first message is "in memory"
        cluster.set_offset_faults(OffsetFaults(first_on_disk=True))
        assert admin.committed_offset("g_disk", mq) == -1  # QUERY_NOT_FOUND: the client decides
        admin.update_consumer_offset("g_disk", mq, 0)
        assert admin.committed_offset("g_disk", mq) == 0  # a committed 0 is answered as such


def test_broker_command_rejects_a_bad_faults_option() -> None:
    proc = subprocess.run([sys.executable, "-m", "airflow_provider_rocketmq.cli", "broker", "--port", "0",
                           "--faults", "offset-race=x"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == ["error: --faults: offset-race: 'x' is not a number of seconds"]
