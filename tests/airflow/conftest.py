"""Airflow tests run against a throw-away AIRFLOW_HOME with a SQLite metadata DB."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

# must happen before anything imports airflow (it reads AIRFLOW_HOME on import)
_HOME = tempfile.mkdtemp(prefix="rmq-airflow-home-")
os.environ.setdefault("AIRFLOW_HOME", _HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")


@contextmanager
def airflow_connection(conn_id: str, **fields: Any) -> Iterator[str]:
    """Expose a connection through ``AIRFLOW_CONN_<ID>`` (JSON form) for the duration of a block."""
    var = f"AIRFLOW_CONN_{conn_id.upper()}"
    old = os.environ.get(var)
    os.environ[var] = json.dumps({"conn_type": "rocketmq", **fields})
    try:
        yield conn_id
    finally:
        if old is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = old


@pytest.fixture
def airflow_conn() -> Any:
    """The `airflow_connection` context manager, as a fixture (test dirs are not packages)."""
    return airflow_connection
