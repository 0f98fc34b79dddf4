"""Reading an offsets hand-off (``handoff: "offsets"`` manifest) in a Spark job.

`load_window.py` loads both kinds of manifest into the same output with the same
ledger; for an offsets manifest the rows come from the brokers through the
``rocketmq`` data source instead of staged Parquet files: `read_offsets_window`.

Where the brokers are: ``$NAMESRV_ADDR`` when set (e.g. Spark runs in another
network than Airflow), else the manifest's ``namesrv`` (the Airflow connection's
name servers when the window was snapshotted). Credentials come from the
environment only, as for every tool of this project: ``ROCKETMQ_ACCESS_KEY`` /
``ROCKETMQ_SECRET_KEY`` (both or neither), ``ROCKETMQ_SECURITY_TOKEN``,
``ROCKETMQ_NAMESPACE`` — never from the command line, which logs and ``ps`` show.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from airflow_provider_rocketmq.client.config import env_client_options
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.window.manifest import HANDOFF_OFFSETS, WindowManifest

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def offsets_source_options(location: str, manifest: WindowManifest,
                           environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``rocketmq`` data source options that read exactly ``manifest``'s ranges (at ``location``)."""
    if manifest.handoff != HANDOFF_OFFSETS:
        raise ConfigError("handoff", f"{location} is a {manifest.handoff} manifest, not an offsets one")
    env = os.environ if environ is None else environ
    namesrv = env.get("NAMESRV_ADDR") or manifest.namesrv
    if not namesrv:
        raise ConfigError("NAMESRV_ADDR", f"{location} names no name server: set NAMESRV_ADDR for the Spark job")
    client = env_client_options(namesrv, env)
    options = {"namesrv": client["namesrv_addr"], "manifest": location, "namespace": client["namespace"]}
    for option, key in (("accessKey", "access_key"), ("secretKey", "secret_key"),
                        ("securityToken", "security_token")):
        if client[key]:
            options[option] = client[key]
    return options


def read_offsets_window(spark: SparkSession, location: str, manifest: WindowManifest,
                        environ: Mapping[str, str] | None = None) -> DataFrame:
    """The messages of an offsets manifest's ranges (its tag expression applied), `MESSAGE_SCHEMA` columns."""
    from airflow_provider_rocketmq.spark.source.datasource import SHORT_NAME, RocketMQDataSource

    spark.dataSource.register(RocketMQDataSource)
    reader = spark.read.format(SHORT_NAME)
    for key, value in offsets_source_options(location, manifest, environ).items():
        reader = reader.option(key, value)
    return reader.load()
