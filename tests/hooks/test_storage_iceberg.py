"""The example DAGs' output connection for an ``iceberg://`` output: its extra becomes the catalog
properties the Spark job reads from ``$ROCKETMQ_OUTPUT_STORAGE_OPTIONS``, secrets masked."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("airflow")

from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.hooks.storage import output_storage_options

pytestmark = pytest.mark.airflow

CATALOG = {"type": "sql", "uri": "postgresql+psycopg2://loader:pg-pass-123@db:5432/iceberg",
           "warehouse": "s3://lake/wh", "s3.endpoint": "https://s3.example", "s3.access-key-id": "AKIA-ice-777",
           "s3.secret-access-key": "s3-secret-456", "s3.path-style-access": True}


def _redact(text: str) -> Any:
    import importlib

    for module in ("airflow.sdk._shared.secrets_masker", "airflow.sdk.execution_time.secrets_masker",
                   "airflow.utils.log.secrets_masker"):  # where Airflow 3.x releases keep it
        try:
            return importlib.import_module(module).redact(text)
        except (ImportError, AttributeError):
            continue
    raise AssertionError("no secrets masker in this Airflow")


def test_iceberg_connection_extra_is_the_catalog_properties(airflow_conn: Any) -> None:
    with airflow_conn("lake_catalog", login="ignored", password="ignored-pw", extra=json.dumps(CATALOG)):
        got = json.loads(output_storage_options("iceberg://lake/db.events?create=true", "lake_catalog"))
    assert got == CATALOG  # login/password are not catalog properties
    masked = _redact("uri=postgresql+psycopg2://loader:pg-pass-123@db:5432/iceberg s3-secret-456 AKIA-ice-777")
    assert "pg-pass-123" not in masked and "s3-secret-456" not in masked and "AKIA-ice-777" not in masked
    assert _redact("sql https://s3.example s3://lake/wh") == "sql https://s3.example s3://lake/wh"


def test_iceberg_connection_without_a_json_object_extra_is_refused(airflow_conn: Any) -> None:
    with airflow_conn("lake_bad", extra=json.dumps({"nested": {"a": 1}})), pytest.raises(ConfigError) as exc:
        output_storage_options("iceberg://lake/db.events", "lake_bad")
    assert exc.value.field == "lake_bad.extra.nested"
    assert output_storage_options("iceberg://lake/db.events", "") == ""  # no connection: the job's own config
