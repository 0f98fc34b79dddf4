"""hooks/storage.py: an Airflow connection -> the fsspec storage options a Spark load's object-store
output gets through ``$ROCKETMQ_OUTPUT_STORAGE_OPTIONS`` (the DAGs render it into env_vars)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.hooks.storage import output_storage_options

SECRET = "0utput-Secret-Key"


def test_s3_connection_gives_key_secret_and_extra_options(airflow_conn: Any) -> None:
    with airflow_conn("lake", login="AKID", password=SECRET,
                      extra={"endpoint_url": "http://127.0.0.1:9000", "client_kwargs": {"region_name": "eu-1"}}) as cid:
        options = json.loads(output_storage_options("s3://bucket/orders", cid))
    assert options == {"key": "AKID", "secret": SECRET, "endpoint_url": "http://127.0.0.1:9000",
                       "client_kwargs": {"region_name": "eu-1"}}


def test_the_secret_is_masked_in_what_airflow_logs(airflow_conn: Any) -> None:
    try:
        from airflow.sdk._shared.secrets_masker import redact
    except ImportError:  # Airflow 3.0.x keeps it in execution_time
        from airflow.sdk.execution_time.secrets_masker import redact
    # Airflow masks a connection's password (and extras with names it knows) by itself; an Azure
    # account key in the extra is not one of those names: output_storage_options masks every value
    account_key = "azure-Account-Key-0123456789"
    with airflow_conn("lake_masked", login="AKID", password=SECRET,
                      extra={"account_name": "lakeacct", "account_key": account_key}) as cid:
        rendered = output_storage_options("abfs://container/orders", cid)
        s3_rendered = output_storage_options("s3://bucket/orders", cid)
    assert json.loads(rendered) == {"account_name": "lakeacct", "account_key": account_key}
    assert account_key in rendered and SECRET in s3_rendered  # the job needs them ...
    assert account_key not in str(redact(rendered))  # ... Airflow's logs and rendered templates show ***
    assert SECRET not in str(redact(s3_rendered))


def test_local_outputs_and_no_connection_give_nothing(airflow_conn: Any) -> None:
    with airflow_conn("lake_local", login="AKID", password=SECRET) as cid:
        assert output_storage_options("/data/orders", cid) == ""
        assert output_storage_options("file:///data/orders", cid) == ""
    assert output_storage_options("s3://bucket/orders", "") == ""
    assert output_storage_options("s3://bucket/orders", None) == ""


def test_missing_connection_names_it() -> None:
    with pytest.raises(ConfigError) as err:
        output_storage_options("s3://bucket/orders", "no_such_output_conn")
    assert err.value.field == "output_conn_id" and "no_such_output_conn" in str(err.value)
