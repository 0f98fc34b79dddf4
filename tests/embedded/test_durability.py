"""Broker restart keeps what was acknowledged: in-process restarts and kill -9 of a broker process."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_provider_rocketmq.client.protocol.message import Message, decode_messages, encode_batch
from airflow_provider_rocketmq.embedded import EmbeddedCluster

from .rawclient import RawClient, props, pull_ext, send_ext

REPO = Path(__file__).resolve().parents[2]


async def test_restart_keeps_messages_offsets_topics_and_pending_retries(
        tmp_path: Path, embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = embedded_cluster_factory(data_dir=str(tmp_path), time_scale=0.05, queues=2)
    broker = cluster.brokers[0]
    addr = broker.addr
    c = await RawClient().connect(addr)
    ids = []
    for i in range(5):
        r = await c.call(310, send_ext("DUR", queue_id=i % 2, props=props(TAGS="T", idx=str(i))), f"m{i}".encode())
        ids.append(r.ext["msgId"])
    batch = encode_batch([Message("DUR", f"b{i}", tags="B") for i in range(3)])
    r = await c.call(320, send_ext("DUR", queue_id=1, props=props(WAIT="true"), batch=True), batch)
    assert r.code == 0 and len(r.ext["msgId"].split(",")) == 3
    await c.call(15, {"consumerGroup": "dg", "topic": "DUR", "queueId": 0, "commitOffset": 2})
    await c.call(17, {"topic": "EMPTY", "readQueueNums": 3, "writeQueueNums": 3, "perm": 6})
    # a retry still waiting in the schedule topic when the broker goes down (level 3 = 0.5 s here)
    await c.call(36, {"offset": 0, "group": "dg", "delayLevel": 0, "maxReconsumeTimes": 16})
    before = [(m.queue_id, m.queue_offset, m.commit_log_offset, m.body, m.properties) for m in broker.messages("DUR")]
    await c.close()

    await cluster.restart_broker("broker-a")
    assert broker.addr == addr
    after = [(m.queue_id, m.queue_offset, m.commit_log_offset, m.body, m.properties) for m in broker.messages("DUR")]
    assert after == before and len(after) == 8
    assert broker.committed_offset("dg", "DUR", 0) == 2
    assert broker.topics["EMPTY"].read_queues == 3
    c = await RawClient().connect(addr)
    try:
        # offsets continue where they were, msgIds stay decodable
        r = await c.call(310, send_ext("DUR", queue_id=0), b"after restart")
        assert r.ext["queueOffset"] == "3"
        pulled = await c.call(11, pull_ext("dg", "DUR", 0, 0))
        assert [m.body for m in decode_messages(pulled.body)] == [b"m0", b"m2", b"m4", b"after restart"]
        assert decode_messages(pulled.body)[0].offset_msg_id == ids[0]
        # the pending retry is still delivered
        pulled = await c.call(11, pull_ext("dg", "%RETRY%dg", 0, 0, sys_flag=6, suspend_ms=10000), timeout=15)
        assert [m.body for m in decode_messages(pulled.body)] == [b"m0"]
    finally:
        await c.close()


def test_torn_commit_log_tail_is_truncated(tmp_path: Path) -> None:
    with EmbeddedCluster(data_dir=str(tmp_path)) as cluster:
        async def send() -> None:
            c = await RawClient().connect(cluster.brokers[0].addr)
            for i in range(3):
                await c.call(310, send_ext("TORN", queue_id=0), f"t{i}".encode())
            await c.close()

        asyncio.run(send())
        cluster.stop_broker("broker-a")
        log = tmp_path / "broker-a" / "commitlog"
        size = log.stat().st_size
        with open(log, "ab") as fh:  # half a record, as a crash in the middle of a write leaves it
            fh.write(log.read_bytes()[:50])
        with open(tmp_path / "broker-a" / "offsets.log", "a") as fh:
            fh.write('["g", "TORN", 0')  # a torn offset line
        cluster.start_broker("broker-a")
        assert [m.body for m in cluster.messages("TORN")] == [b"t0", b"t1", b"t2"]
        assert log.stat().st_size == size


def _start_broker_process(data_dir: Path) -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_rocketmq.embedded", "--port", "0", "--data-dir", str(data_dir),
         "--queues", "2", "--json"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once every server listens
    if not line:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"broker process printed nothing: {err}")
    info = json.loads(line)
    return proc, info["namesrv"], info["brokers"][0]["addr"]


@pytest.mark.timeout(60)
async def test_kill_9_loses_nothing_acknowledged(tmp_path: Path) -> None:
    proc, _, addr = _start_broker_process(tmp_path)
    try:
        c = await RawClient().connect(addr)
        acked = []
        for i in range(20):
            r = await c.call(310, send_ext("K9", queue_id=i % 2), f"k{i}".encode())
            acked.append((r.ext["queueId"], r.ext["queueOffset"], r.ext["msgId"]))
        batch = encode_batch([Message("K9", f"kb{i}") for i in range(4)])
        r = await c.call(320, send_ext("K9", queue_id=0, props=props(WAIT="true"), batch=True), batch)
        assert r.code == 0
        assert (await c.call(15, {"consumerGroup": "kg", "topic": "K9", "queueId": 1, "commitOffset": 7})).code == 0
        await c.close()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)  # waits, and closes the pipes
    proc, _, addr = _start_broker_process(tmp_path)
    try:
        c = await RawClient().connect(addr)
        got = {}
        for qid in (0, 1):
            pulled = await c.call(11, pull_ext("kg", "K9", qid, 0, max_nums=32))
            for m in decode_messages(pulled.body):
                got[(str(m.queue_id), str(m.queue_offset))] = (m.offset_msg_id, m.body)
        for qid, qoff, msg_id in acked:
            assert got[(qid, qoff)][0] == msg_id
        assert sorted(b for _, b in got.values()) == sorted(
            [f"k{i}".encode() for i in range(20)] + [f"kb{i}".encode() for i in range(4)])
        q = await c.call(14, {"consumerGroup": "kg", "topic": "K9", "queueId": 1})
        assert q.ext["offset"] == "7"
        await c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err  # SIGTERM stops it cleanly



def test_a_data_dir_serves_one_broker_at_a_time(tmp_path: Path) -> None:
    from airflow_provider_rocketmq.client.protocol.errors import ConfigError

    with EmbeddedCluster(data_dir=str(tmp_path)):
        with pytest.raises(ConfigError) as info:
            EmbeddedCluster(data_dir=str(tmp_path)).start()
        assert info.value.field == "data_dir" and "in use" in str(info.value)
    with EmbeddedCluster(data_dir=str(tmp_path)) as again:  # released on stop
        assert again.brokers[0].running
