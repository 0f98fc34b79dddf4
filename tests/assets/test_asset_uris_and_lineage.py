"""rocketmq:// asset URIs (registered in the provider info) and the window operator's OpenLineage
datasets (topic in, staging location out), as the OpenLineage provider's listener asks for them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_rocketmq.assets.rocketmq import asset_uri, convert_asset_to_openlineage, create_asset
from airflow_provider_rocketmq.operators.window import RocketMQConsumeWindowOperator


def test_asset_uris_are_sanitized_by_airflow_through_the_provider_info() -> None:
    from airflow.sdk import Asset

    # the same cluster whatever the order and separator of its name servers; trailing slash dropped
    assert Asset("rocketmq://ns2:9876,ns1:9876/orders/").uri == "rocketmq://ns1:9876;ns2:9876/orders"
    assert Asset("rocketmq://rocketmq_default/orders").uri == "rocketmq://rocketmq_default/orders"
    for bad in ("rocketmq:///orders", "rocketmq://ns1:9876/a/b", "rocketmq://ns1:9876/bad topic",
                "rocketmq://ns1:99999/orders", "rocketmq://ns1:9876"):
        with pytest.raises(ValueError, match="rocketmq://"):
            Asset(bad)
    asset = create_asset(namesrv="ns1:9876", topic="orders", extra={"team": "etl"})
    assert (asset.uri, asset.extra) == ("rocketmq://ns1:9876/orders", {"team": "etl"})
    dataset = convert_asset_to_openlineage(asset)
    assert (dataset.namespace, dataset.name) == ("rocketmq://ns1:9876", "orders")


def test_window_operator_reports_topic_in_and_staging_out(airflow_conn: Any) -> None:
    from airflow.sdk import Asset

    task_instance = SimpleNamespace(task_id="w", map_index=-1)  # not consulted
    with airflow_conn("rmq_lineage", host="ns2:9876;ns1:9876"):
        op = RocketMQConsumeWindowOperator(task_id="w", topic="orders", consumer_group="g",
                                           rocketmq_conn_id="rmq_lineage")
        xcom = {"manifest": "/data/w/run1/manifest.json", "messages": 3}
        assert op.staged(xcom) is xcom  # what execute() returns passes through unchanged
    # the name servers were read while the task ran: the listener's forked process needs no connection
    lineage = op.get_openlineage_facets_on_complete(task_instance)
    (topic,) = lineage.inputs
    assert (topic.namespace, topic.name) == ("rocketmq://ns1:9876;ns2:9876", "orders")
    # the input is the dataset the topic's asset maps to: lineage and assets name it alike
    as_asset = convert_asset_to_openlineage(Asset(asset_uri("ns1:9876;ns2:9876", "orders")))
    assert (as_asset.namespace, as_asset.name) == (topic.namespace, topic.name)
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("file", "/data/w/run1")]

    op.staged({"manifest": "s3://bucket/windows/r1/3/manifest.json"})
    lineage = op.get_openlineage_facets_on_complete(task_instance)
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("s3://bucket", "windows/r1/3")]

    # nothing staged (the task failed before): the configured staging path, else no output
    fresh = RocketMQConsumeWindowOperator(task_id="w", topic="orders", consumer_group="g", rocketmq_conn_id="rmq_gone",
                                          staging_path="/data/fixed")
    lineage = fresh.get_openlineage_facets_on_complete(task_instance)
    assert [d.name for d in lineage.outputs] == ["/data/fixed"]
    # a connection that cannot be read never fails the task: the input is named after the connection id
    assert lineage.inputs[0].namespace == "rocketmq://rmq_gone"
    fresh.staging_path = None
    assert fresh.get_openlineage_facets_on_complete(task_instance).outputs == []


def test_the_openlineage_extractor_picks_the_datasets_up(airflow_conn: Any) -> None:
    """The OpenLineage provider's own extraction path (what its listener runs on task success)."""
    import inspect

    from airflow.providers.openlineage.extractors.manager import ExtractorManager

    try:
        from airflow.utils.state import TaskInstanceState
    except ImportError:  # pragma: no cover - newer Airflow
        from airflow.sdk.api.datamodels._generated import TaskInstanceState  # type: ignore[no-redef]

    with airflow_conn("rmq_lineage", host="ns1:9876"):
        op = RocketMQConsumeWindowOperator(task_id="w", topic="orders", consumer_group="g",
                                           rocketmq_conn_id="rmq_lineage")
        op.staged({"manifest": "/data/w/run1/manifest.json"})
    manager = ExtractorManager()
    task_instance = SimpleNamespace(task_id="w", map_index=-1, task=op, dag_id="d", run_id="r", try_number=1)
    state = ({"task_instance_state": TaskInstanceState.SUCCESS}
             if "task_instance_state" in inspect.signature(manager.extract_metadata).parameters else {"complete": True})
    lineage = manager.extract_metadata(dagrun=SimpleNamespace(dag_id="d", run_id="r"), task=op,
                                       task_instance=task_instance, **state)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("rocketmq://ns1:9876", "orders")]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("file", "/data/w/run1")]
