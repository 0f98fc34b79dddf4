"""run_window's exits with a scripted consumer and admin (no broker): the consumer is shut down on every
path, nothing is committed unless the window was staged, and the staging directory is made durably."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_rocketmq.client.protocol.errors import MessageDecodeError
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.window import staging as staging_mod
from airflow_provider_rocketmq.window.manifest import read_manifest
from airflow_provider_rocketmq.window.runner import WindowSpec, run_window
from airflow_provider_rocketmq.window.writer import WriterError
from tests.window_batches import batch, batch_with_bad_properties

MQ = MessageQueue("t", "broker-a", 0)


class FakeAdmin:
    def __init__(self, high_water: int) -> None:
        self.high_water = high_water
        self.committed: dict[MessageQueue, int] = {}

    def high_water_marks(self, topic: str) -> dict[MessageQueue, int]:
        return {MQ: self.high_water}

    def committed_offset(self, group: str, mq: MessageQueue) -> int:
        return self.committed.get(mq, -1)

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        self.committed[mq] = offset

    def min_offset(self, mq: MessageQueue) -> int:
        return 0

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return 0

    def consumer_ids(self, group: str) -> list[str]:
        return ["me"]


class FakeConsumer:
    """Owns MQ once started and delivers offsets [0, deliver) from start(), in one batch."""

    def __init__(self, listener: Any, deliver: int = 0, fail_start: BaseException | None = None) -> None:
        self.listener, self.deliver, self.fail_start = listener, deliver, fail_start
        self.state = "CREATED"
        self.stop_offsets: list[dict[MessageQueue, int]] = []

    def set_stop_offsets(self, offsets: dict[MessageQueue, int]) -> None:
        self.stop_offsets.append(dict(offsets))

    def on_assignment(self, callback: Any) -> None:
        self.callback = callback

    def on_failure(self, callback: Any) -> None:
        self.failure_callback = callback

    def suspend(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def start(self) -> None:
        self.state = "RUNNING"
        if self.fail_start is not None:
            raise self.fail_start
        self.callback("t", [MQ], [MQ])
        if self.deliver:
            # the window's listener is a coroutine function (the consumer runs it on its loop)
            asyncio.run(self.listener(batch(("broker-a", 0), range(self.deliver)),
                                      type("Ctx", (), {"message_queue": MQ})()))

    def shutdown(self, timeout: float | None = None) -> None:
        self.state = "SHUTDOWN"


def spec(staging: Path, **kwargs: Any) -> WindowSpec:
    return WindowSpec(topic="t", consumer_group="g", staging_dir=str(staging), assignment_timeout=5,
                      idle_timeout=5, **kwargs)


def test_a_failing_start_still_shuts_the_consumer_down(tmp_path: Path) -> None:
    made: list[FakeConsumer] = []

    def factory(listener: Any) -> FakeConsumer:
        made.append(FakeConsumer(listener, fail_start=ConnectionError("no broker")))
        return made[0]

    admin = FakeAdmin(high_water=3)
    with pytest.raises(ConnectionError):
        run_window(spec(tmp_path / "w"), admin, factory)
    assert made[0].state == "SHUTDOWN"
    # the window directory is made before consuming (parts are streamed into it); nothing is in it
    assert admin.committed == {} and list((tmp_path / "w").iterdir()) == []


def test_an_unusable_staging_location_fails_before_consuming(tmp_path: Path) -> None:
    made: list[FakeConsumer] = []
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    admin = FakeAdmin(high_water=3)
    with pytest.raises(OSError):
        run_window(spec(blocker / "w"), admin, lambda listener: made.append(FakeConsumer(listener)) or made[0])
    assert made == [] and admin.committed == {}


def test_a_failing_stage_shuts_the_consumer_down_and_commits_nothing(tmp_path: Path) -> None:
    made: list[FakeConsumer] = []

    class CorruptConsumer(FakeConsumer):
        def start(self) -> None:
            self.state = "RUNNING"
            self.callback("t", [MQ], [MQ])
            ctx = type("Ctx", (), {"message_queue": MQ})()
            asyncio.run(self.listener(batch(("broker-a", 0), range(2)), ctx))
            asyncio.run(self.listener(batch_with_bad_properties(("broker-a", 0), 2), ctx))

    def factory(listener: Any) -> FakeConsumer:
        made.append(CorruptConsumer(listener))
        return made[0]

    admin = FakeAdmin(high_water=3)
    with pytest.raises(WriterError) as err:
        run_window(spec(tmp_path / "w"), admin, factory)
    assert isinstance(err.value.__cause__, MessageDecodeError)
    assert made[0].state == "SHUTDOWN"
    assert admin.committed == {} and not (tmp_path / "w" / "manifest.json").exists()


def test_staged_window_commits_its_end_and_fsyncs_every_new_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[Path] = []
    real = staging_mod.fsync_dir

    def fsync_dir(directory: Any) -> None:
        synced.append(Path(directory))
        real(directory)

    monkeypatch.setattr(staging_mod, "fsync_dir", fsync_dir)
    made: list[FakeConsumer] = []

    def factory(listener: Any) -> FakeConsumer:
        made.append(FakeConsumer(listener, deliver=3))
        return made[0]

    admin = FakeAdmin(high_water=3)
    staging = tmp_path / "a" / "b" / "w"
    result = run_window(spec(staging), admin, factory)
    assert (result.messages, made[0].state, admin.committed) == (3, "SHUTDOWN", {MQ: 3})
    assert read_manifest(result.manifest).queues[0].end_offset == 3
    # the consumer never pulls past the snapshot, then stops where the window ended
    assert made[0].stop_offsets == [{MQ: 3}, {MQ: 3}]
    # each created directory's entry is made durable in its parent
    assert {tmp_path, tmp_path / "a", tmp_path / "a" / "b", staging} <= set(synced)


def test_leftovers_of_an_attempt_that_died_before_its_manifest_are_removed(tmp_path: Path) -> None:
    staging = tmp_path / "w"
    staging.mkdir()
    for name in ("part-00007.parquet", ".part-00000.parquet.x1.tmp", ".manifest.json.x2.tmp"):
        (staging / name).write_bytes(b"half written")
    result = run_window(spec(staging), FakeAdmin(high_water=2), lambda listener: FakeConsumer(listener, deliver=2))
    assert sorted(p.name for p in staging.iterdir()) == ["manifest.json", "part-00000.parquet"]
    assert read_manifest(result.manifest).messages == 2
