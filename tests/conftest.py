"""Shared fixtures for every test directory.

``embedded_cluster`` yields a started `EmbeddedCluster` (one broker, 8 queues,
free ports) running on its own loop thread, so the same fixture serves sync
tests and async tests (clients on the test's loop talk to it over 127.0.0.1).
Its control methods (``restart_broker``, ``close_client_connections``, ...) block
in sync tests and must be awaited in async tests.

``embedded_cluster_factory(**kwargs)`` starts clusters with other settings
(``brokers=2``, ``time_scale=0.01``, ``data_dir=...``) and stops them afterwards.

``s3`` (session) is a real S3 API on 127.0.0.1: moto's server in a subprocess
(`s3_server.MotoS3`: ``endpoint``, ``storage_options`` for fsspec/s3fs,
``new_bucket()``, ``filesystem()``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

# Airflow tests run against a throw-away AIRFLOW_HOME with a SQLite metadata DB; set before anything
# imports airflow (it reads AIRFLOW_HOME on import)
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="rmq-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")

from airflow_provider_rocketmq.embedded import EmbeddedCluster
from tests.s3_server import MotoS3


@pytest.fixture
def embedded_cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster() as cluster:
        yield cluster


@pytest.fixture
def embedded_cluster_factory() -> Iterator[Callable[..., EmbeddedCluster]]:
    started: list[EmbeddedCluster] = []

    def make(**kwargs: object) -> EmbeddedCluster:
        cluster = EmbeddedCluster(**kwargs)  # type: ignore[arg-type]
        cluster.start()
        started.append(cluster)
        return cluster

    yield make
    for cluster in reversed(started):
        cluster.stop()


@pytest.fixture(scope="session")
def s3() -> Iterator[MotoS3]:
    server = MotoS3()  # moto and s3fs are test dependencies: missing ones fail, never skip
    yield server
    server.stop()


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
    """The `airflow_connection` context manager, as a fixture ."""
    return airflow_connection
