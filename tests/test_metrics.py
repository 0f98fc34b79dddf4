"""Metrics through Airflow's Stats and the window operator's progress lines, on the embedded broker.

The Stats backend is replaced the way Airflow itself chooses one: on Airflow 3.3 through the task
SDK's ``initialize(factory=...)``, on 3.0 through ``Stats.instance``. It records every call; the
figures come from a real window run and real lag checks.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import AsyncGenerator, Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from airflow_provider_rocketmq import metrics
from airflow_provider_rocketmq.airflow_compat import Stats
from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, Producer
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.operators import window as window_module
from airflow_provider_rocketmq.operators.commit import RocketMQCommitWindowOperator
from airflow_provider_rocketmq.operators.window import RocketMQConsumeWindowOperator
from airflow_provider_rocketmq.sensors.lag import RocketMQLagSensor
from airflow_provider_rocketmq.triggers.lag import RocketMQLagTrigger
from airflow_provider_rocketmq.window.progress import WindowProgress

pytestmark = pytest.mark.timeout(120)


class _Timer:
    duration = None

    def __enter__(self) -> _Timer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def start(self) -> _Timer:
        return self

    def stop(self, send: bool = True) -> None:
        return None


class RecordingStats:
    """A Stats backend keeping every call: (kind, name, value, tags)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any, dict[str, Any] | None]] = []
        self.fail = False

    def _record(self, kind: str, stat: str, value: Any, tags: dict[str, Any] | None) -> None:
        if self.fail:
            raise RuntimeError("the metrics backend is down")
        self.calls.append((kind, stat, value, tags))

    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, Any] | None = None) -> None:
        self._record("incr", stat, count, tags)

    def decr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, Any] | None = None) -> None:
        self._record("decr", stat, count, tags)

    def gauge(self, stat: str, value: float, rate: float = 1, delta: bool = False, *,
              tags: dict[str, Any] | None = None) -> None:
        self._record("gauge", stat, value, tags)

    def timing(self, stat: str, dt: Any, *, tags: dict[str, Any] | None = None) -> None:
        self._record("timing", stat, dt, tags)

    def timer(self, *args: Any, **kwargs: Any) -> Any:
        return _Timer()  # Airflow times its own imports with it (3.0's serde); the provider uses timing()

    def ours(self) -> dict[str, tuple[str, Any, dict[str, Any] | None]]:
        """The rocketmq.* calls by name (the last one of each name)."""
        return {name: (kind, value, tags) for kind, name, value, tags in self.calls if name.startswith("rocketmq.")}


@pytest.fixture
def stats(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingStats]:
    backend = RecordingStats()
    if "initialize" in vars(Stats):  # task SDK: a module-level backend made by a factory
        from airflow.sdk.configuration import conf
        from airflow.sdk.observability.metrics import stats_utils

        Stats.initialize(factory=lambda: backend, export_legacy_names=False)
        yield backend
        Stats.initialize(factory=stats_utils.get_stats_factory(),  # what Airflow set up from [metrics]
                         export_legacy_names=conf.getboolean("metrics", "legacy_names_on"))
    else:  # Airflow 3.0: the metaclass builds Stats.instance from its factory once
        monkeypatch.setattr(Stats, "instance", backend)
        yield backend


@pytest.fixture
def rmq(embedded_cluster: Any, airflow_conn: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AIRFLOW__ROCKETMQ__STAGING_PATH", str(tmp_path / "staging"))
    with airflow_conn("rocketmq_default", host=embedded_cluster.namesrv_addr):
        yield SimpleNamespace(namesrv=embedded_cluster.namesrv_addr)


def produce(namesrv: str, topic: str, per_queue: list[int]) -> None:
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        admin.create_topic(topic, queues=len(per_queue))
    with Producer(ClientConfig(namesrv_addr=namesrv)) as producer:
        for mq, n in zip(producer.publish_queues(topic), per_queue, strict=True):
            if n:
                producer.send_batch([Message(topic, b"z" * 10) for _ in range(n)], queue=mq)


def context(run_id: str, task_id: str = "window") -> Any:
    return {"ti": SimpleNamespace(dag_id="dag", task_id=task_id, map_index=-1), "run_id": run_id}


class StepClock:
    """Every read is 31 s after the previous one: each tick of the window's loop is a report."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 31
        return self.now


def task_log(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> str:
    """What the operator logged: Airflow 3.3's task logger prints through structlog, 3.0's uses logging."""
    out = capfd.readouterr()
    return caplog.text + out.out + out.err


def test_window_sends_its_metrics_and_logs_progress(rmq: Any, stats: RecordingStats,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.INFO)
    produce(rmq.namesrv, "mt_win", [30, 20, 0])
    monkeypatch.setattr(window_module, "WindowProgress", functools.partial(WindowProgress, clock=StepClock()))
    op = RocketMQConsumeWindowOperator(task_id="window", topic="mt_win", consumer_group="mt_g",
                                       assignment_timeout=20)
    out = op.execute(context("r1"))
    assert (out["messages"], out["bytes"]) == (50, 500)
    log = task_log(caplog, capfd)
    window_id = "dag__r1__window"
    # every tick of the fake clock is due, and the loop ticks at least once after the queues are assigned
    progress = re.findall(rf"window {window_id}: (\d+) of 50 messages staged \(([\d.]+)%, .*?\) in "
                          r"(?:\d+ min )?\d+ s; (\d) of 3 queues done; last 31 s: ", log)
    assert progress, log
    for staged, percent, done in progress:
        assert float(percent) == round(int(staged) / 50 * 100, 1) and 0 <= int(done) <= 3
    tags = {"topic": "mt_win", "consumer_group": "mt_g"}
    got = stats.ours()
    assert got["rocketmq.window.messages"] == ("incr", 50, tags)
    assert got["rocketmq.window.bytes"] == ("incr", 500, tags)
    assert got["rocketmq.window.queues"] == ("gauge", 3, tags)
    kind, duration, dtags = got["rocketmq.window.duration"]
    assert kind == "timing" and isinstance(duration, timedelta) and duration.total_seconds() > 0 and dtags == tags
    kind, rate, rtags = got["rocketmq.window.rate"]
    # the fake clock moved 31 s per read: the rate is messages over the consuming time it measured
    assert kind == "gauge" and rtags == tags and 0 < rate <= 50 / 31
    assert "rocketmq.window.reused" not in got

    stats.calls.clear()
    again = RocketMQConsumeWindowOperator(task_id="window", topic="mt_win", consumer_group="mt_g").execute(
        context("r1"))
    assert again == out
    assert stats.ours() == {"rocketmq.window.reused": ("incr", 1, tags)}  # nothing consumed, nothing counted


def test_progress_interval_from_the_operator_or_the_config(rmq: Any, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture,
                                                         capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.INFO)
    produce(rmq.namesrv, "mt_quiet", [5])
    monkeypatch.setattr(window_module, "WindowProgress", functools.partial(WindowProgress, clock=StepClock()))
    monkeypatch.setenv("AIRFLOW__ROCKETMQ__PROGRESS_INTERVAL", "0")  # none, even with every tick late
    RocketMQConsumeWindowOperator(task_id="window", topic="mt_quiet", consumer_group="mt_q").execute(context("q1"))
    assert "messages staged (" not in task_log(caplog, capfd)
    monkeypatch.setenv("AIRFLOW__ROCKETMQ__PROGRESS_INTERVAL", "soon")
    with pytest.raises(ConfigError, match=r"\[rocketmq\] progress_interval"):
        RocketMQConsumeWindowOperator(task_id="window", topic="mt_quiet", consumer_group="mt_q").execute(
            context("q2"))
    with pytest.raises(ConfigError, match="progress_interval"):
        RocketMQConsumeWindowOperator(task_id="w", topic="t", consumer_group="g", progress_interval=-1)
    assert RocketMQConsumeWindowOperator(task_id="w", topic="t", consumer_group="g",
                                         progress_interval=5).progress_interval == 5.0


def test_lag_sensor_and_trigger_send_the_lag_per_topic(rmq: Any, stats: RecordingStats) -> None:
    produce(rmq.namesrv, "mt_lag", [4, 7])
    sensor = RocketMQLagSensor(task_id="s", topic="mt_lag", consumer_group="mt_lg", min_lag=100)
    assert not sensor.poke(context("r1", "s")).is_done
    tags = {"topic": "mt_lag", "consumer_group": "mt_lg"}
    assert stats.ours() == {"rocketmq.lag.total": ("gauge", 11, tags), "rocketmq.lag.max_queue": ("gauge", 7, tags)}

    import asyncio

    async def one_poll() -> Any:
        trigger = RocketMQLagTrigger(topic="mt_lag", consumer_group="mt_lg", min_lag=11, poll_interval=0.1)
        events = cast(AsyncGenerator[Any, None], trigger.run())
        try:
            return await asyncio.wait_for(events.__anext__(), 30)
        finally:
            await events.aclose()

    stats.calls.clear()
    event = asyncio.run(one_poll())
    assert event.payload["status"] == "success"
    assert stats.ours() == {"rocketmq.lag.total": ("gauge", 11, tags), "rocketmq.lag.max_queue": ("gauge", 7, tags)}


def test_per_topic_names_for_backends_without_tags(stats: RecordingStats, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__ROCKETMQ__METRICS_PER_TOPIC_NAMES", "True")
    metrics.lag_metrics({"group": "ns%loader.v2", "topic": "ns%orders",
                         "queues": [{"topic": "ns%orders", "lag": 3}, {"topic": "ns%orders", "lag": 5}]})
    tags = {"topic": "ns%orders", "consumer_group": "ns%loader.v2"}
    assert stats.calls == [
        ("gauge", "rocketmq.lag.total", 8, tags), ("gauge", "rocketmq.lag.total.ns_orders.ns_loader_v2", 8, None),
        ("gauge", "rocketmq.lag.max_queue", 5, tags),
        ("gauge", "rocketmq.lag.max_queue.ns_orders.ns_loader_v2", 5, None)]
    stats.calls.clear()
    monkeypatch.delenv("AIRFLOW__ROCKETMQ__METRICS_PER_TOPIC_NAMES")
    metrics.lag_metrics({"group": "g", "topic": "empty", "queues": []})  # a topic without queues: 0
    assert stats.calls == [("gauge", "rocketmq.lag.total", 0, {"topic": "empty", "consumer_group": "g"}),
                           ("gauge", "rocketmq.lag.max_queue", 0, {"topic": "empty", "consumer_group": "g"})]


def test_a_failing_metrics_backend_never_fails_the_task(rmq: Any, stats: RecordingStats,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    produce(rmq.namesrv, "mt_fail", [2])
    stats.fail = True
    sensor = RocketMQLagSensor(task_id="s", topic="mt_fail", consumer_group="mt_fg", min_lag=2)
    with caplog.at_level(logging.WARNING, logger="airflow_provider_rocketmq.metrics"):
        assert sensor.poke(context("r1", "s")).is_done
    assert "could not send metric rocketmq.lag.total: the metrics backend is down" in caplog.text


def test_commit_sends_the_load_metrics_of_the_load_result(rmq: Any, stats: RecordingStats, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    produce(rmq.namesrv, "mt_load", [3, 2])
    out = RocketMQConsumeWindowOperator(task_id="window", topic="mt_load", consumer_group="mt_ld",
                                        commit="after_downstream").execute(context("r1"))
    where = metrics.load_result_location(out)  # what the example DAGs pass to the job and to the commit
    assert where == str(Path(out["manifest"]).parent / "load_result.json")
    # as `load_window.py --result-file` writes it (tests/spark/load/test_load_window.py checks the job's file)
    windows = [{"window_id": "w1", "topic": "mt_load", "consumer_group": "mt_ld", "rows_in": 5, "rows_out": 3,
                "already_loaded": 2, "duplicates": 0},
               {"window_id": "w2", "topic": "mt_load", "consumer_group": "mt_ld", "rows_in": 6, "rows_out": 2,
                "already_loaded": 1, "duplicates": 3},
               {"window_id": "w3", "topic": "other", "consumer_group": "mt_ld", "rows_in": 1, "rows_out": 1,
                "already_loaded": 0, "duplicates": 0}]
    Path(where).write_text(json.dumps({"version": 1, "output": "/out", "output_kind": "local", "seconds": 4.5,
                                       "counts": {"windows": 3, "rows_in": 12, "rows_out": 6, "duplicates": 3,
                                                  "already_loaded": 3}, "phases": {}, "windows": windows}))
    stats.calls.clear()
    RocketMQCommitWindowOperator(task_id="commit", manifests=out, load_result=where).execute(context("r1", "commit"))
    tags, other = {"topic": "mt_load", "consumer_group": "mt_ld"}, {"topic": "other", "consumer_group": "mt_ld"}
    assert [c for c in stats.calls if c[1].startswith("rocketmq.load.")] == [
        ("incr", "rocketmq.load.rows_in", 11, tags), ("incr", "rocketmq.load.rows_out", 5, tags),
        ("incr", "rocketmq.load.already_loaded", 3, tags), ("incr", "rocketmq.load.duplicates", 3, tags),
        ("timing", "rocketmq.load.duration", timedelta(seconds=4.5), tags),
        ("incr", "rocketmq.load.rows_in", 1, other), ("incr", "rocketmq.load.rows_out", 1, other),
        ("incr", "rocketmq.load.already_loaded", 0, other), ("incr", "rocketmq.load.duplicates", 0, other),
        ("timing", "rocketmq.load.duration", timedelta(seconds=4.5), other)]

    # no result file (a job without --result-file): the commit still succeeds, a warning says why
    stats.calls.clear()
    with caplog.at_level(logging.WARNING, logger="airflow_provider_rocketmq.metrics"):
        done = RocketMQCommitWindowOperator(task_id="commit", manifests=out, load_result=str(tmp_path / "none.json")
                                            ).execute(context("r1", "commit"))
    assert done["manifests"] == [out["manifest"]]
    assert not [c for c in stats.calls if c[1].startswith("rocketmq.load.")]
    assert f"no load metrics: could not read the load result {tmp_path / 'none.json'}" in caplog.text
