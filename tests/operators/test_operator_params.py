"""What a DAG author sees at parse time: parameter validation, serialisation (no broker needed)."""

from __future__ import annotations

import pytest

from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.operators.commit import RocketMQCommitWindowOperator, manifest_paths
from airflow_provider_rocketmq.operators.window import RocketMQConsumeWindowOperator, _coerce_overrides
from airflow_provider_rocketmq.sensors.lag import RocketMQLagSensor
from airflow_provider_rocketmq.triggers.lag import RocketMQLagTrigger


def test_trigger_serialize_round_trips_exactly() -> None:
    trigger = RocketMQLagTrigger(topic="T", consumer_group="G", max_lag=0, per_queue=True, poll_interval=2,
                                 rocketmq_conn_id="rmq")
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_rocketmq.triggers.lag.RocketMQLagTrigger"
    assert kwargs == {"topic": "T", "consumer_group": "G", "min_lag": None, "max_lag": 0, "per_queue": True,
                      "poll_interval": 2.0, "rocketmq_conn_id": "rmq"}
    assert RocketMQLagTrigger(**kwargs).serialize() == (classpath, kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "min_lag/max_lag"),
        ({"min_lag": 1, "max_lag": 2}, "min_lag/max_lag"),
        ({"min_lag": 0}, "min_lag"),
        ({"max_lag": -1}, "max_lag"),
        ({"max_lag": True}, "max_lag"),
        ({"max_lag": 0, "per_queue": "yes"}, "per_queue"),
    ],
)
def test_lag_sensor_rejects_bad_bounds(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        RocketMQLagSensor(task_id="s", topic="T", consumer_group="G", **kwargs)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"commit": "later"}, "commit"),
        ({"max_messages": 0}, "max_messages"),
        ({"max_bytes": -5}, "max_bytes"),
        ({"max_duration": 0}, "max_duration"),
        ({"expression": "||"}, "expression"),
        ({"expression": None}, "expression"),
        ({"settle_time": -1}, "settle_time"),
        ({"idle_timeout": 0}, "idle_timeout"),
        ({"consumer_overrides": {"pull_batch_sise": 1}}, "consumer_overrides.pull_batch_sise"),
        ({"consumer_overrides": {"enable_offset_commit": True}}, "consumer_overrides.enable_offset_commit"),
    ],
)
def test_window_operator_rejects_bad_parameters(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        RocketMQConsumeWindowOperator(task_id="w", topic="T", consumer_group="G", **kwargs)
    assert err.value.field == field


def test_window_operator_templates_its_paths_limits_connection_and_overrides() -> None:
    op = RocketMQConsumeWindowOperator(task_id="w", topic="T", consumer_group="G",
                                       staging_path="/s/{{ run_id }}", expression="{{ params.tags }}",
                                       max_messages="{{ params.n }}", max_bytes="{{ params.b }}",
                                       max_duration="{{ params.d }}", rocketmq_conn_id="{{ params.conn }}",
                                       consumer_overrides={"pull_batch_size": "{{ params.batch }}"})
    assert set(op.template_fields) >= {"topic", "consumer_group", "expression", "staging_path", "rocketmq_conn_id",
                                       "max_messages", "max_bytes", "max_duration", "consumer_overrides"}
    # what rendering gives (text) becomes numbers; bad text names the field
    op.max_messages, op.max_bytes, op.max_duration = "1000", "4096", "2.5"
    assert op._spec_kwargs(mapped=False)["max_messages"] == 1000
    assert op._spec_kwargs(mapped=False)["max_duration"] == 2.5
    op.max_messages = "lots"
    with pytest.raises(ConfigError) as err:
        op._spec_kwargs(mapped=False)
    assert err.value.field == "max_messages"
    assert _coerce_overrides({"pull_batch_size": "64", "consume_from_where": "CONSUME_FROM_LAST_OFFSET",
                              "post_subscription_when_pull": "True"}) == {
        "pull_batch_size": 64, "consume_from_where": "CONSUME_FROM_LAST_OFFSET", "post_subscription_when_pull": True}
    with pytest.raises(ConfigError) as err:
        _coerce_overrides({"pull_batch_size": "many"})
    assert err.value.field == "consumer_overrides.pull_batch_size"


def test_commit_operator_accepts_paths_and_window_results() -> None:
    assert manifest_paths("/a/manifest.json") == ["/a/manifest.json"]
    assert manifest_paths([{"manifest": "/a", "messages": 1, "bytes": 2}, "/b"]) == ["/a", "/b"]
    with pytest.raises(ConfigError) as err:
        manifest_paths([{"messages": 1}])
    assert err.value.field == "manifests[0]"
    with pytest.raises(ConfigError):
        RocketMQCommitWindowOperator(task_id="c", manifests="")


@pytest.mark.parametrize(
    ("kwargs", "field", "text"),
    [
        ({"handoff": "s3"}, "handoff", "must be one of staging, offsets"),
        ({"handoff": "offsets"}, "commit", "commit='after_downstream'"),
        ({"handoff": "offsets", "commit": "after_downstream", "max_bytes": 10}, "max_bytes", "use max_messages"),
        ({"handoff": "offsets", "commit": "after_downstream", "max_duration": 5}, "max_duration", "use max_messages"),
    ],
)
def test_window_operator_offsets_handoff_parameters(kwargs: dict, field: str, text: str) -> None:
    with pytest.raises(ConfigError) as err:
        RocketMQConsumeWindowOperator(task_id="w", topic="T", consumer_group="G", **kwargs)
    assert err.value.field == field and text in str(err.value)
    ok = RocketMQConsumeWindowOperator(task_id="w", topic="T", consumer_group="G", handoff="offsets",
                                       commit="after_downstream", max_messages=100)
    assert ok.handoff == "offsets"


def test_sensors_follow_operators_default_deferrable(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_rocketmq.sensors.await_message import RocketMQAwaitMessageSensor

    def sensors() -> list:
        return [RocketMQLagSensor(task_id="l", topic="T", consumer_group="G", min_lag=1),
                RocketMQAwaitMessageSensor(task_id="a", topic="T", consumer_group="G", apply_function="m.f")]

    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "true")
    assert [s.deferrable for s in sensors()] == [True, True]
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "false")
    assert [s.deferrable for s in sensors()] == [False, False]
    explicit = RocketMQLagSensor(task_id="l", topic="T", consumer_group="G", min_lag=1, deferrable=True)
    assert explicit.deferrable  # an explicit value wins


def test_default_connection_id_comes_from_the_rocketmq_section(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook
    from airflow_provider_rocketmq.triggers.watch import RocketMQWatchTrigger

    assert RocketMQHook().rocketmq_conn_id == "rocketmq_default"
    monkeypatch.setenv("AIRFLOW__ROCKETMQ__DEFAULT_CONN_ID", "rmq_configured")
    assert RocketMQHook().rocketmq_conn_id == "rmq_configured"
    assert RocketMQHook("explicit").rocketmq_conn_id == "explicit"
    assert RocketMQWatchTrigger(topic="T", consumer_group="G").serialize()[1]["rocketmq_conn_id"] == "rmq_configured"
    assert RocketMQLagTrigger(topic="T", consumer_group="G", min_lag=1).rocketmq_conn_id == "rmq_configured"


def test_templated_lag_bounds_are_checked_once_rendered() -> None:
    sensor = RocketMQLagSensor(task_id="s", topic="T", consumer_group="G", min_lag="{{ params.n }}")
    assert {"topic", "consumer_group", "min_lag", "max_lag", "rocketmq_conn_id"} <= set(sensor.template_fields)
    sensor.min_lag = "25"  # what Jinja renders
    assert sensor.condition.min_lag == 25
    sensor.min_lag = "many"
    with pytest.raises(ConfigError) as err:
        _ = sensor.condition
    assert err.value.field == "min_lag"
