"""Window and commit operators against the embedded broker: what is staged, what the broker holds."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pyarrow.parquet as pq
import pytest

from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, MessageQueue, Producer
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook
from airflow_provider_rocketmq.operators.commit import RocketMQCommitWindowOperator
from airflow_provider_rocketmq.operators.window import RocketMQConsumeWindowOperator
from airflow_provider_rocketmq.window import manifest as mf
from airflow_provider_rocketmq.window.manifest import read_manifest

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def rmq(embedded_cluster: Any, airflow_conn: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A `rocketmq_default` connection to the embedded cluster and a staging base under tmp_path."""
    monkeypatch.setenv("AIRFLOW__ROCKETMQ__STAGING_PATH", str(tmp_path / "staging"))
    with airflow_conn("rocketmq_default", host=embedded_cluster.namesrv_addr,
                      extra={"client_options": {"instance_name": "airflow-tests"}}):
        yield SimpleNamespace(namesrv=embedded_cluster.namesrv_addr, cluster=embedded_cluster)


def produce(namesrv: str, topic: str, n: int, tags: list[str] | None = None, start: int = 0) -> list[bytes]:
    bodies = [f"msg-{i}".encode() for i in range(start, start + n)]
    with Producer(ClientConfig(namesrv_addr=namesrv)) as producer:
        for i, body in enumerate(bodies):
            producer.send(Message(topic, body, tags=(tags[i % len(tags)] if tags else "T")))
    return bodies


def context(run_id: str, task_id: str = "window", map_index: int = -1) -> Any:
    """The part of an Airflow task Context the operators read."""
    return {"ti": SimpleNamespace(dag_id="dag", task_id=task_id, map_index=map_index), "run_id": run_id}


def staged_rows(manifest_path: str) -> list[dict[str, Any]]:
    manifest = read_manifest(manifest_path)  # validates files and checksums
    rows: list[dict[str, Any]] = []
    for f in manifest.files:
        rows += mf.staged_rows(pq.read_table(Path(manifest_path).parent / f.path)).to_pylist()
    return rows


def committed(namesrv: str, group: str, topic: str) -> dict[tuple[str, int], int]:
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        return {(mq.broker_name, mq.queue_id): admin.committed_offset(group, mq)
                for mq in admin.high_water_marks(topic)}


def high_water(namesrv: str, topic: str) -> dict[tuple[str, int], int]:
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        return {(mq.broker_name, mq.queue_id): off for mq, off in admin.high_water_marks(topic).items()}


def window_op(**kwargs: Any) -> RocketMQConsumeWindowOperator:
    kwargs.setdefault("task_id", "window")
    kwargs.setdefault("assignment_timeout", 20)
    return RocketMQConsumeWindowOperator(**kwargs)


def test_window_stages_up_to_high_water_and_commits_after_staging(rmq: Any) -> None:
    bodies = produce(rmq.namesrv, "wt_basic", 40)
    out = window_op(topic="wt_basic", consumer_group="g_basic").execute(context("r1"))
    assert (out["messages"], out["bytes"]) == (40, sum(map(len, bodies)))
    rows = staged_rows(out["manifest"])
    assert sorted(r["body"] for r in rows) == sorted(bodies)
    assert len({(r["broker"], r["queue_id"], r["queue_offset"]) for r in rows}) == 40
    assert committed(rmq.namesrv, "g_basic", "wt_basic") == high_water(rmq.namesrv, "wt_basic")

    # the next run starts where this one ended
    more = produce(rmq.namesrv, "wt_basic", 7, start=40)
    out2 = window_op(topic="wt_basic", consumer_group="g_basic").execute(context("r2"))
    assert sorted(r["body"] for r in staged_rows(out2["manifest"])) == sorted(more)


def test_bounded_windows_take_everything_exactly_once(rmq: Any) -> None:
    bodies = produce(rmq.namesrv, "wt_bound", 30)
    first = window_op(topic="wt_bound", consumer_group="g_bound", max_messages=12).execute(context("r1"))
    assert first["messages"] == 12
    manifest = read_manifest(first["manifest"])
    # the committed offsets are exactly the manifest's end offsets
    ends = {(q.broker, q.queue_id): q.end_offset for q in manifest.queues}
    now = committed(rmq.namesrv, "g_bound", "wt_bound")
    assert {k: v for k, v in now.items() if k in ends} == ends
    assert sum(q.end_offset - q.start_offset for q in manifest.queues) == 12
    second = window_op(topic="wt_bound", consumer_group="g_bound").execute(context("r2"))
    assert second["messages"] == 18
    got = [r["body"] for r in staged_rows(first["manifest"]) + staged_rows(second["manifest"])]
    assert sorted(got) == sorted(bodies)


def test_after_downstream_commits_only_through_the_commit_operator(rmq: Any) -> None:
    produce(rmq.namesrv, "wt_down", 16)
    before = committed(rmq.namesrv, "g_down", "wt_down")
    out = window_op(topic="wt_down", consumer_group="g_down", commit="after_downstream").execute(context("r1"))
    assert out["messages"] == 16
    assert committed(rmq.namesrv, "g_down", "wt_down") == before  # nothing committed yet

    # a re-run of the same task instance (e.g. after a failed load) stages the same window again
    again = window_op(topic="wt_down", consumer_group="g_down", commit="after_downstream").execute(context("r1"))
    assert again == out

    commit = RocketMQCommitWindowOperator(task_id="commit", manifests=[out])
    result = commit.execute(context("r1", "commit"))
    hwm = high_water(rmq.namesrv, "wt_down")
    assert committed(rmq.namesrv, "g_down", "wt_down") == hwm
    assert len(result["committed"]) == sum(1 for v in hwm.values() if v > 0)
    # idempotent: a second commit moves nothing
    assert commit.execute(context("r1", "commit"))["committed"] == {}


def test_commit_never_moves_offsets_backwards(rmq: Any) -> None:
    produce(rmq.namesrv, "wt_back", 8)
    old = window_op(topic="wt_back", consumer_group="g_back", commit="after_downstream").execute(context("r1"))
    produce(rmq.namesrv, "wt_back", 8, start=8)
    RocketMQCommitWindowOperator(task_id="c", manifests=old).execute(context("r1", "c"))
    new = window_op(topic="wt_back", consumer_group="g_back").execute(context("r2"))
    assert new["messages"] == 8
    after_new = committed(rmq.namesrv, "g_back", "wt_back")
    RocketMQCommitWindowOperator(task_id="c", manifests=old).execute(context("r1", "c"))  # stale manifest
    assert committed(rmq.namesrv, "g_back", "wt_back") == after_new


def test_rerun_of_a_finished_window_returns_the_same_manifest(rmq: Any) -> None:
    produce(rmq.namesrv, "wt_rerun", 10)
    out = window_op(topic="wt_rerun", consumer_group="g_rerun").execute(context("r1"))
    produce(rmq.namesrv, "wt_rerun", 5, start=10)
    again = window_op(topic="wt_rerun", consumer_group="g_rerun").execute(context("r1"))
    assert again == out
    assert len(staged_rows(again["manifest"])) == 10


def test_empty_window_is_a_success_with_zero_messages(rmq: Any) -> None:
    with Admin(ClientConfig(namesrv_addr=rmq.namesrv)) as admin:
        admin.create_topic("wt_empty", queues=4)
    out = window_op(topic="wt_empty", consumer_group="g_empty").execute(context("r1"))
    assert (out["messages"], out["bytes"]) == (0, 0)
    manifest = read_manifest(out["manifest"])
    assert manifest.files == [] and all(q.start_offset == q.end_offset for q in manifest.queues)


def test_tag_expression_stages_matching_messages_and_covers_the_rest(rmq: Any) -> None:
    produce(rmq.namesrv, "wt_tags", 30, tags=["A", "B", "C"])
    out = window_op(topic="wt_tags", consumer_group="g_tags", expression="A || B").execute(context("r1"))
    rows = staged_rows(out["manifest"])
    assert len(rows) == 20 and {r["tags"] for r in rows} == {"A", "B"}
    # non-matching messages are covered too: the group has no lag left
    assert committed(rmq.namesrv, "g_tags", "wt_tags") == high_water(rmq.namesrv, "wt_tags")


@pytest.mark.slow
def test_mapped_instances_share_the_queues_and_together_stage_everything(
        rmq: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = produce(rmq.namesrv, "wt_mapped", 64)
    results: dict[int, dict[str, Any]] = {}
    errors: list[BaseException] = []
    # "started together" made exact: each member's start() (its first heartbeat registers it) returns
    # only once both are registered, so a starved thread cannot start more than settle_time late
    both_registered = threading.Barrier(2, timeout=60)
    get_consumer = RocketMQHook.get_consumer

    def get_synchronised_consumer(self: RocketMQHook, *args: Any, **kwargs: Any) -> Any:
        consumer = get_consumer(self, *args, **kwargs)
        start = consumer.start

        def start_then_wait_for_sibling() -> None:
            start()
            both_registered.wait()
        consumer.start = start_then_wait_for_sibling
        return consumer

    monkeypatch.setattr(RocketMQHook, "get_consumer", get_synchronised_consumer)

    def run(i: int) -> None:
        try:
            results[i] = window_op(topic="wt_mapped", consumer_group="g_mapped",
                                   consumer_overrides={"pull_batch_size": 4}).execute(context("r1", map_index=i))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(100)
    assert not errors, errors
    assert results[0]["manifest"] != results[1]["manifest"]
    # they split the queues (mapped instances settle the group membership before taking queues);
    # a queue moved by a late rebalance may be staged twice (at-least-once), never missed
    assert results[0]["messages"] > 0 and results[1]["messages"] > 0, results
    assert results[0]["messages"] + results[1]["messages"] >= 64
    rows = staged_rows(results[0]["manifest"]) + staged_rows(results[1]["manifest"])
    unique = {(r["broker"], r["queue_id"], r["queue_offset"]): r["body"] for r in rows}
    assert sorted(unique.values()) == sorted(bodies)  # at-least-once; Spark de-duplicates
    assert committed(rmq.namesrv, "g_mapped", "wt_mapped") == high_water(rmq.namesrv, "wt_mapped")


def test_window_cli_command(rmq: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from airflow_provider_rocketmq.commands import window as cli

    produce(rmq.namesrv, "wt_cli", 5)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["window", "--namesrv", rmq.namesrv, "--group", "g_cli", "--topic", "wt_cli",
                              "--staging", str(tmp_path / "w"), "--json", "--assignment-timeout", "20"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])  # Airflow 3.0's logging also uses stdout
    assert out["messages"] == 5 and Path(out["manifest"]).is_file()
    bad = parser.parse_args(["window", "--namesrv", rmq.namesrv, "--group", "g_cli", "--topic", "wt_cli",
                             "--staging", str(tmp_path / "w2"), "--max-messages", "0"])
    assert bad.func(bad) == 2
    assert "max_messages" in capsys.readouterr().err


def test_hook_test_connection_round_trips(rmq: Any, airflow_conn: Any) -> None:
    ok, message = RocketMQHook().test_connection()
    assert ok and "broker-a" in message, message
    with airflow_conn("rmq_dead", host="127.0.0.1:1", extra={"request_timeout": 1}):
        ok, message = RocketMQHook("rmq_dead").test_connection()
    assert not ok


def test_hook_consumer_is_configured_but_not_started(rmq: Any) -> None:
    received: list[bytes] = []
    done = threading.Event()

    def listener(msgs: list[Any], ctx: Any) -> Any:
        from airflow_provider_rocketmq.client import ConsumeStatus

        received.extend(m.body for m in msgs)
        if len(received) >= 3:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    bodies = produce(rmq.namesrv, "wt_hook", 3)
    consumer = RocketMQHook().get_consumer("g_hook", "wt_hook", listener=listener,
                                           consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    assert consumer.assigned_queues() == frozenset()
    consumer.start()
    try:
        assert done.wait(30)
    finally:
        consumer.shutdown()
    assert sorted(received) == sorted(bodies)
    assert isinstance(next(iter(high_water(rmq.namesrv, "wt_hook"))), tuple)
    assert MessageQueue  # public name exported


def test_lag_sensor_poke_waits_until_enough_messages(rmq: Any) -> None:
    from airflow_provider_rocketmq.sensors.lag import RocketMQLagSensor

    produce(rmq.namesrv, "wt_poke", 3)
    sensor = RocketMQLagSensor(task_id="s", topic="wt_poke", consumer_group="g_poke", min_lag=5)
    first = sensor.poke(context("r1", "s"))
    assert not first.is_done and first.xcom_value is None
    produce(rmq.namesrv, "wt_poke", 2, start=3)
    second = sensor.poke(context("r1", "s"))
    assert second.is_done and second.xcom_value is not None and second.xcom_value["total_lag"] == 5
    caught_up = RocketMQLagSensor(task_id="s2", topic="wt_poke", consumer_group="g_poke", max_lag=0)
    assert not caught_up.poke(context("r1", "s2")).is_done


async def test_lag_trigger_fires_once_the_condition_holds(rmq: Any) -> None:
    import asyncio

    from airflow_provider_rocketmq.triggers.lag import RocketMQLagTrigger

    with Admin(ClientConfig(namesrv_addr=rmq.namesrv)) as admin:
        admin.create_topic("wt_trig", queues=2)
    trigger = RocketMQLagTrigger(topic="wt_trig", consumer_group="g_trig", min_lag=4, poll_interval=0.2)
    events = cast(AsyncGenerator[Any, None], trigger.run())
    pending = asyncio.ensure_future(events.__anext__())
    done, _ = await asyncio.wait({pending}, timeout=1.0)
    assert not done  # nothing waiting yet: the trigger keeps polling
    await asyncio.to_thread(produce, rmq.namesrv, "wt_trig", 4)
    event = await asyncio.wait_for(pending, 30)
    assert event.payload["status"] == "success" and event.payload["lag"]["total_lag"] == 4
    await events.aclose()


async def test_lag_trigger_reports_a_bad_connection_as_an_error_event(airflow_conn: Any) -> None:
    from airflow_provider_rocketmq.triggers.lag import RocketMQLagTrigger

    with airflow_conn("rmq_trig_bad", host="h", extra={"tls": "perhaps"}):
        trigger = RocketMQLagTrigger(topic="t", consumer_group="g", max_lag=0, rocketmq_conn_id="rmq_trig_bad")
        event = await trigger.run().__anext__()
    assert event.payload["status"] == "error" and "extra.tls" in event.payload["message"]


def test_window_without_progress_stages_what_it_has_instead_of_hanging(rmq: Any) -> None:
    from airflow_provider_rocketmq.client.protocol.codes import RequestCode

    produce(rmq.namesrv, "wt_idle", 8)
    before = committed(rmq.namesrv, "g_idle", "wt_idle")
    rmq.cluster.drop_responses(RequestCode.PULL_MESSAGE)  # the broker never answers a pull
    try:
        out = window_op(topic="wt_idle", consumer_group="g_idle", idle_timeout=2,
                        consumer_overrides={"consumer_timeout_when_suspend": 3.0,
                                            "broker_suspend_max_time": 1.0}).execute(context("r1"))
    finally:
        rmq.cluster.clear_faults()
    assert out["messages"] == 0
    assert committed(rmq.namesrv, "g_idle", "wt_idle") == before  # nothing skipped
    # the next window gets everything
    assert window_op(topic="wt_idle", consumer_group="g_idle").execute(context("r2"))["messages"] == 8


def test_unknown_topic_and_corrupt_manifest_fail_with_a_clear_error(rmq: Any, tmp_path: Path) -> None:
    from airflow_provider_rocketmq.client.protocol.errors import RocketMQError
    from airflow_provider_rocketmq.window.manifest import ManifestError

    with pytest.raises(RocketMQError) as err:
        window_op(topic="wt_never_created", consumer_group="g_x").execute(context("r1"))
    assert "wt_never_created" in str(err.value)

    staging = tmp_path / "corrupt"
    staging.mkdir()
    (staging / "manifest.json").write_text('{"version": 1, "window_id": ')
    with pytest.raises(ManifestError) as merr:
        window_op(topic="wt_basic", consumer_group="g_x", staging_path=str(staging)).execute(context("r1"))
    assert "not valid JSON" in str(merr.value)


def test_a_staging_path_shared_by_runs_is_refused(rmq: Any, tmp_path: Path) -> None:
    from airflow_provider_rocketmq.client.protocol.errors import ConfigError

    produce(rmq.namesrv, "wt_shared", 3)
    fixed = str(tmp_path / "fixed")
    window_op(topic="wt_shared", consumer_group="g_shared", staging_path=fixed).execute(context("r1"))
    with pytest.raises(ConfigError) as err:
        window_op(topic="wt_shared", consumer_group="g_shared", staging_path=fixed).execute(context("r2"))
    assert err.value.field == "staging_path" and "run_id" in str(err.value)


def test_without_a_staging_location_the_task_fails_at_once_naming_the_setting(
        rmq: Any, airflow_conn: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_rocketmq.client.protocol.errors import ConfigError

    monkeypatch.delenv("AIRFLOW__ROCKETMQ__STAGING_PATH")
    # a dead name server: the task must fail on the setting before any broker I/O
    with airflow_conn("rmq_dead_staging", host="127.0.0.1:1", extra={"request_timeout": 30}):
        op = window_op(topic="wt_nostage", consumer_group="g_nostage", rocketmq_conn_id="rmq_dead_staging")
        started = time.monotonic()
        with pytest.raises(ConfigError) as err:
            op.execute(context("r1"))
    assert time.monotonic() - started < 5
    assert err.value.field == "staging_path"
    assert "[rocketmq] staging_path" in str(err.value) and "AIRFLOW__ROCKETMQ__STAGING_PATH" in str(err.value)


def test_on_kill_shuts_the_consumer_down_promptly_and_commits_nothing(rmq: Any, tmp_path: Path) -> None:
    from airflow_provider_rocketmq.client.protocol.codes import RequestCode
    from airflow_provider_rocketmq.window.runner import WindowCancelledError

    produce(rmq.namesrv, "wt_kill", 12)
    before = committed(rmq.namesrv, "g_kill", "wt_kill")
    rmq.cluster.drop_responses(RequestCode.PULL_MESSAGE)  # the window never completes on its own
    op = window_op(topic="wt_kill", consumer_group="g_kill", staging_path=str(tmp_path / "w"))
    outcome: list[BaseException | dict[str, Any]] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append(op.execute(context("r1")))
        except BaseException as exc:
            outcome.append(exc)
        done.set()

    worker = threading.Thread(target=run)
    try:
        worker.start()
        with Admin(ClientConfig(namesrv_addr=rmq.namesrv)) as admin:
            deadline = time.monotonic() + 30
            while not admin.consumer_ids("g_kill") and time.monotonic() < deadline:  # the member joined
                time.sleep(0.05)
            assert admin.consumer_ids("g_kill")
            killed_at = time.monotonic()
            op.on_kill()  # Airflow calls it on "mark failed" / SIGTERM
            assert done.wait(15)
            assert time.monotonic() - killed_at < 10
            assert isinstance(outcome[0], WindowCancelledError), outcome
            assert admin.consumer_ids("g_kill") == []  # shut down: unregistered from the group
    finally:
        rmq.cluster.clear_faults()
        worker.join(30)
    assert committed(rmq.namesrv, "g_kill", "wt_kill") == before  # nothing committed
    assert not (tmp_path / "w" / "manifest.json").exists()
    # the next attempt stages everything
    again = window_op(topic="wt_kill", consumer_group="g_kill", staging_path=str(tmp_path / "w2"))
    assert again.execute(context("r2"))["messages"] == 12


def test_window_operator_fails_when_the_acl_refuses_the_group(embedded_cluster_factory: Any, airflow_conn: Any,
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 5.x user without Sub on the group: the task fails naming the user, group and action; nothing is
    staged or committed (before, the window waited for an assignment and staged 0 messages)."""
    cluster = embedded_cluster_factory(queues=2, acl2={
        "users": [{"username": "etl", "password": "etl_secret"}],
        "acls": {"etl": [{"resource": "Topic:wt_acl", "actions": ["Sub", "Get"]}]}})
    cluster.create_topic("wt_acl", 2)
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr, access_key="rocketmq",
                               secret_key="12345678")) as producer:
        for i in range(10):
            producer.send(Message("wt_acl", b"m%d" % i))
    monkeypatch.setenv("AIRFLOW__ROCKETMQ__STAGING_PATH", str(tmp_path / "staging"))
    from airflow_provider_rocketmq.client import AclDeniedError

    with airflow_conn("rocketmq_default", host=cluster.namesrv_addr, login="etl", password="etl_secret"), \
            pytest.raises(AclDeniedError, match=r"user etl lacks Sub on Group:g_acl \(HEART_BEAT\)"):
        window_op(topic="wt_acl", consumer_group="g_acl").execute(context("r_acl"))
    assert not list((tmp_path / "staging").rglob("manifest.json"))
    assert set(cluster.committed_offsets("g_acl", "wt_acl").values()) <= {-1, 0}
