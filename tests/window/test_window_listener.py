"""The window's listener runs on the consumer's event loop: it waits for the writer's room without
blocking the loop, resolves a queue's start off the loop, and loses, repeats or reorders nothing."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from airflow_provider_rocketmq.client import (
    Admin,
    ClientConfig,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
)
from airflow_provider_rocketmq.client.consumer.config import ConsumerConfig
from airflow_provider_rocketmq.window.manifest import read_manifest
from airflow_provider_rocketmq.window.runner import (
    WINDOW_CONSUMER_DEFAULTS,
    Listener,
    WindowSpec,
    register_window_listener,
    run_window,
)


def _fill(namesrv: str, topic: str, queues: int, n: int) -> None:
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        admin.create_topic(topic, queues=queues)
    with Producer(ClientConfig(namesrv_addr=namesrv)) as producer:
        for start in range(0, n, 50):
            producer.send_batch([Message(topic, b"m%06d" % i + b"x" * 200) for i in range(start, min(n, start + 50))])


def _factory(namesrv: str, group: str, topic: str, made: list[PushConsumer]) -> Any:
    config = ConsumerConfig(namesrv_addr=namesrv, enable_offset_commit=False, **WINDOW_CONSUMER_DEFAULTS,
                            consume_from_where="CONSUME_FROM_FIRST_OFFSET")

    def factory(listener: Listener) -> PushConsumer:
        consumer = PushConsumer(group, config)
        consumer.subscribe(topic, "*")
        register_window_listener(consumer, listener)
        made.append(consumer)
        return consumer
    return factory


def test_a_window_through_a_writer_queue_of_a_few_batches_stages_every_message_once_in_order(
        embedded_cluster: Any, tmp_path: Path) -> None:
    # the listener waits for the writer's room at almost every batch: ~12 KiB of pulled data fit
    namesrv = embedded_cluster.namesrv_addr
    _fill(namesrv, "wl_room", 4, 3000)
    spec = WindowSpec(topic="wl_room", consumer_group="g_room", staging_dir=str(tmp_path / "w"),
                      queue_bytes=12 << 10, row_group_bytes=12 << 10, assignment_timeout=20)
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        result = run_window(spec, admin, _factory(namesrv, "g_room", "wl_room", []))
        marks = admin.high_water_marks("wl_room")
        assert {mq: admin.committed_offset("g_room", mq) for mq in marks} == marks
    manifest = read_manifest(result.manifest)  # sizes, checksums and rows verified
    assert result.messages == 3000 == manifest.messages
    rows = [r for f in manifest.files
            for r in pq.read_table(tmp_path / "w" / f.path, columns=["queue_id", "queue_offset", "body"]).to_pylist()]
    assert sorted(r["body"][:7] for r in rows) == [b"m%06d" % i for i in range(3000)]  # each once
    by_queue: dict[int, list[int]] = {}
    for r in rows:
        by_queue.setdefault(r["queue_id"], []).append(r["queue_offset"])
    assert by_queue == {mq.queue_id: list(range(end)) for mq, end in marks.items()}  # in order per queue


class BlockingAdmin:
    """The admin a window uses, whose committed-offset reads wait until released."""

    def __init__(self, admin: Admin) -> None:
        self.admin = admin
        self.release = threading.Event()
        self.asks = threading.Semaphore(0)

    def committed_offset(self, group: str, mq: MessageQueue) -> int:
        self.asks.release()
        self.release.wait(30)
        return self.admin.committed_offset(group, mq)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.admin, name)


def test_resolving_a_queues_start_never_blocks_the_consumers_loop(embedded_cluster: Any, tmp_path: Path) -> None:
    namesrv = embedded_cluster.namesrv_addr
    _fill(namesrv, "wl_resolve", 1, 100)
    made: list[PushConsumer] = []
    spec = WindowSpec(topic="wl_resolve", consumer_group="g_resolve", staging_dir=str(tmp_path / "w"),
                      assignment_timeout=20)
    with Admin(ClientConfig(namesrv_addr=namesrv)) as real:
        admin = BlockingAdmin(real)
        done: list[Any] = []
        window = threading.Thread(target=lambda: done.append(run_window(spec, admin, _factory(
            namesrv, "g_resolve", "wl_resolve", made))))
        window.start()
        try:
            # both ask for the queue's start: the runner (main thread) and the listener, for the first batch
            assert admin.asks.acquire(timeout=20) and admin.asks.acquire(timeout=20)
            # the loop answers meanwhile
            stats: list[dict[str, Any]] = []
            asker = threading.Thread(target=lambda: stats.append(made[0].stats()), daemon=True)
            asker.start()
            asker.join(5)
            assert stats and stats[0]["state"] == "RUNNING"
        finally:
            admin.release.set()
            window.join(60)
    assert done and done[0].messages == 100


def test_a_stuck_writer_holds_the_listener_but_never_the_consumers_loop(
        embedded_cluster: Any, tmp_path: Path, monkeypatch: Any) -> None:
    from airflow_provider_rocketmq.window import writer as writer_mod

    namesrv = embedded_cluster.namesrv_addr
    _fill(namesrv, "wl_stuck", 4, 3000)
    stuck, release = threading.Event(), threading.Event()
    write_group = writer_mod.StagingWriter._write_group

    def slow_write_group(self: Any, group: Any) -> None:
        stuck.set()
        release.wait(60)
        write_group(self, group)

    monkeypatch.setattr(writer_mod.StagingWriter, "_write_group", slow_write_group)
    made: list[PushConsumer] = []
    spec = WindowSpec(topic="wl_stuck", consumer_group="g_stuck", staging_dir=str(tmp_path / "w"),
                      queue_bytes=12 << 10, row_group_bytes=12 << 10, assignment_timeout=20)
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        done: list[Any] = []
        window = threading.Thread(target=lambda: done.append(run_window(spec, admin, _factory(
            namesrv, "g_stuck", "wl_stuck", made))))
        window.start()
        try:
            assert stuck.wait(20)

            def stats() -> dict[str, Any]:
                got: list[dict[str, Any]] = []
                asker = threading.Thread(target=lambda: got.append(made[0].stats()), daemon=True)
                asker.start()
                asker.join(5)
                assert got, "the consumer's loop did not answer while the writer was stuck"
                return got[0]

            # the writer holds ~24 KiB at most, the consumer's cache the rest: the pulls go on meanwhile
            while stats()["pulled_messages"] < 3000:
                assert window.is_alive()
                release.wait(0.05)  # polling a count the consumer does not signal
            assert not done
        finally:
            release.set()
            window.join(60)
    assert done and done[0].messages == 3000
