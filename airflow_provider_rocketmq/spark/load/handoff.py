"""Reading an offsets hand-off (``handoff: "offsets"`` manifest) in a Spark job.

`load_window.py` loads both kinds of manifest into the same output with the same
ledger; for an offsets manifest the rows come from the brokers instead of staged
Parquet files: read by the direct plan's tasks themselves with the data source's range
reader (`reader_options`, `check_on_brokers`), or through the ``rocketmq`` data source
by the general plans (`read_offsets_window`).

A range is read whole or the load fails (`LoadError`, nothing committed): the driver
checks every range against its queue's min and max offset before any task starts
(`check_on_brokers`: retention deleted offsets, a truncated queue, a queue missing from
the route, no broker answering), and a task that cannot read its range to the end
(retention deleting offsets meanwhile, a broker down beyond the reader's retries)
fails the load with the reason; a partial range is never loaded.

Where the brokers are: ``$NAMESRV_ADDR`` when set (e.g. Spark runs in another
network than Airflow), else the manifest's ``namesrv`` (the Airflow connection's
name servers when the window was snapshotted). Credentials come from the
environment only, as for every tool of this project: ``ROCKETMQ_ACCESS_KEY`` /
``ROCKETMQ_SECRET_KEY`` (both or neither), ``ROCKETMQ_SECURITY_TOKEN``,
``ROCKETMQ_NAMESPACE`` — never from the command line, which logs and ``ps`` show.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from airflow_provider_rocketmq.client.config import env_client_options
from airflow_provider_rocketmq.client.mqclient import MQClient
from airflow_provider_rocketmq.client.protocol.errors import ConfigError, RocketMQError
from airflow_provider_rocketmq.spark.load.staged import LoadError
from airflow_provider_rocketmq.spark.source.options import SourceOptions, parse_options, redacting
from airflow_provider_rocketmq.spark.source.ranges import QueueSpan, queue_bounds
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


def reader_options(location: str, manifest: WindowManifest, environ: Mapping[str, str] | None = None) -> SourceOptions:
    """What a task needs to read ``manifest``'s ranges with the data source's range reader: the
    brokers, credentials and the window's tag expression (offsets lost to retention fail the read)."""
    opts = parse_options(offsets_source_options(location, manifest, environ))
    return dataclasses.replace(opts, manifest=None, topics=(manifest.topic,), expression=manifest.expression,
                               fail_on_data_loss=True)


def check_on_brokers(opts: SourceOptions, window_id: str, spans: Sequence[QueueSpan]) -> None:
    """Raise `LoadError` unless every offset of ``spans`` (one topic) is on its broker now."""
    if not spans:
        return

    async def bounds() -> dict[tuple[str, int], tuple[int, int]]:
        client = MQClient(opts.client_config())
        try:
            return {(b.broker, b.queue_id): (b.min_offset, b.max_offset)
                    for b in await queue_bounds(client, [spans[0].topic])}
        finally:
            await client.close()

    try:
        with redacting(opts):
            held = asyncio.run(bounds())
    except RocketMQError as exc:
        raise LoadError(f"window {window_id}: the brokers could not tell which offsets of {spans[0].topic} they "
                        f"hold: {exc}") from None
    for s in spans:
        low, high = held.get((s.broker, s.queue_id), (None, None))
        if low is None or high is None:
            why = "the queue is not in the topic's route"
        elif s.end > high:
            why = f"the broker holds offsets only up to {high} (was the queue truncated or the broker replaced?)"
        elif s.start < low:
            why = (f"offsets [{s.start}, {min(low, s.end)}) are no longer on the broker (its min offset is {low}; "
                   "retention deleted them)")
        else:
            continue
        raise LoadError(f"window {window_id}: {s}: {why}; nothing was loaded")
