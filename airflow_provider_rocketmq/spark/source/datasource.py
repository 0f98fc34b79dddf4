"""``rocketmq``: a PySpark (4.x) data source reading RocketMQ offset ranges on the executors.

    from airflow_provider_rocketmq.spark.source.datasource import RocketMQDataSource
    spark.dataSource.register(RocketMQDataSource)
    df = (spark.read.format("rocketmq").option("namesrv", "ns1:9876").option("topic", "orders")
          .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())

Batch reads resolve their offsets once, on the driver (`ranges.plan_batch`): from
``startingOffsets``/``endingOffsets`` or from a window ``manifest``. Each Spark
partition is one (broker, queue, offset sub-range), read by its task with pipelined
pulls (`range_reader`) that stop at the range's end. Streaming reads
(``spark.readStream``) plan each micro-batch from the high-water marks, honour
``maxOffsetsPerTrigger`` and ``Trigger.AvailableNow``, and with ``commitGroup``
write each committed micro-batch's end offsets to that consumer group so that lag
sensors and ``mqadmin`` see the progress. Options: docs/spark-datasource.md.

Exactly-once: every offset of a batch read's ranges is read once (tags filtered in
the reader); a streaming query with a checkpoint reads every offset once into a
sink that is itself exactly-once (Spark's file sink), because the micro-batch
offsets are recorded in the checkpoint before they are read.

Imports nothing from Airflow: executors need only this package's ``client``,
``spark`` and ``window.manifest`` modules (``rocketmq-airflow spark-package``
builds a ``--py-files`` zip of exactly those), pyarrow and tenacity.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from airflow_provider_rocketmq.client.mqclient import MQClient
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

from .options import EARLIEST, LATEST, SourceOptions, parse_options, redacting
from .range_reader import read_span
from .ranges import (
    QueueSpan,
    StreamOffset,
    initial_offset,
    limit_offsets,
    offsets_of,
    parse_queue_key,
    plan_batch,
    queue_bounds,
    spans_between,
    split_spans,
)

try:  # Spark >= 4.2: read limits and Trigger.AvailableNow for Python streaming sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older Spark: batch reads only
    SupportsTriggerAvailableNow = None  # type: ignore[assignment,misc]  # a class name bound to None on old Spark

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)
T = TypeVar("T")

SHORT_NAME = "rocketmq"
# the columns of MESSAGE_SCHEMA (client/protocol/columnar.py), as Spark DDL
SCHEMA_DDL = ("topic STRING NOT NULL, broker STRING NOT NULL, queue_id INT NOT NULL, queue_offset BIGINT NOT NULL, "
              "msg_id STRING, tags STRING, keys STRING, properties MAP<STRING, STRING>, born_timestamp BIGINT, "
              "store_timestamp BIGINT, reconsume_times INT, body BINARY")


def _run(opts: SourceOptions, work: Callable[[MQClient], Awaitable[T]]) -> T:
    """Run ``work(client)`` on a fresh loop with a fresh client (driver side), credentials redacted
    from any error."""
    async def main() -> T:
        client = MQClient(opts.client_config())
        try:
            return await work(client)
        finally:
            await client.close()
    with redacting(opts):
        return asyncio.run(main())


class RocketMQPartition(InputPartition):
    """One Spark partition: offsets ``[start, end)`` of one queue (no secrets: shown in plans and logs)."""

    def __init__(self, span: QueueSpan) -> None:
        super().__init__(span)
        self.span = span

    def __repr__(self) -> str:
        return f"RocketMQPartition({self.span})"


def spark_schema() -> StructType:
    """`SCHEMA_DDL` as a StructType (built without a session: DDL parsing needs one)."""
    return StructType([
        StructField("topic", StringType(), False),
        StructField("broker", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("msg_id", StringType()),
        StructField("tags", StringType()),
        StructField("keys", StringType()),
        StructField("properties", MapType(StringType(), StringType(), True)),
        StructField("born_timestamp", LongType()),
        StructField("store_timestamp", LongType()),
        StructField("reconsume_times", IntegerType()),
        StructField("body", BinaryType()),
    ])


def _check_schema(schema: StructType) -> None:
    if schema != spark_schema():
        raise ConfigError("schema", f"the rocketmq source has a fixed schema ({SCHEMA_DDL}); "
                          "select or cast columns after load() instead")


def _read(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    span = getattr(partition, "span", None)
    if span is None:  # Spark plans one empty partition when a read has no range at all
        return iter(())
    return read_span(opts, span)


class RocketMQDataSource(DataSource):
    """The ``rocketmq`` format; options in docs/spark-datasource.md. Secrets never reach logs or plans."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return RocketMQBatchReader(parse_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        if SupportsTriggerAvailableNow is None:  # pragma: no cover - Spark < 4.2
            raise ConfigError("readStream", "streaming reads need Spark 4.2 or later")
        return RocketMQStreamReader(parse_options(self.options, streaming=True))

    def __repr__(self) -> str:
        return f"RocketMQDataSource({parse_options(self.options)!r})"


class RocketMQBatchReader(DataSourceReader):
    """Batch read: offsets resolved once in `partitions()` (driver), one task per queue sub-range."""

    def __init__(self, opts: SourceOptions) -> None:
        if opts.manifest is not None and opts.expression is None:
            # the window's tag expression is part of the window; the tasks get this reader pickled
            # before partitions() runs, so it is resolved here
            from airflow_provider_rocketmq.window.manifest import read_manifest

            with redacting(opts):
                opts = dataclasses.replace(opts, expression=read_manifest(opts.manifest, verify_files=False).expression)
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        spans = _run(self.opts, lambda client: plan_batch(client, self.opts))
        spans = split_spans(spans, self.opts.min_partitions)
        log.info("rocketmq batch read: %d partition(s), %d offsets", len(spans), sum(s.size for s in spans))
        return [RocketMQPartition(s) for s in spans]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def __repr__(self) -> str:
        return f"RocketMQBatchReader({self.opts!r})"


if SupportsTriggerAvailableNow is not None:

    class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        """Micro-batches over the high-water marks; offsets ``{topic: {"broker:queue": next offset}}``.

        Created on the driver (in Spark's streaming source process) and pickled to
        the tasks for `read`, so it holds no connection: each driver-side call opens
        a client and closes it.
        """

        def __init__(self, opts: SourceOptions) -> None:
            self.opts = opts
            self._target: StreamOffset | None = None  # Trigger.AvailableNow: never read past this
            self._committed: StreamOffset | None = None  # last offsets written to commitGroup

        def __repr__(self) -> str:
            return f"RocketMQStreamReader({self.opts!r})"

        def _latest(self) -> StreamOffset:
            if self._target is not None:
                return self._target
            return _run(self.opts, lambda client: self._bounds(client, LATEST))

        async def _bounds(self, client: MQClient, pick: str) -> StreamOffset:
            return offsets_of(await queue_bounds(client, self.opts.topics), pick)

        def initialOffset(self) -> dict[str, Any]:
            async def work(client: MQClient) -> StreamOffset:
                return initial_offset(self.opts, await queue_bounds(client, self.opts.topics))
            offset = _run(self.opts, work)
            log.info("rocketmq stream: initial offset %s", offset)
            return offset

        def getDefaultReadLimit(self) -> ReadLimit:
            n = self.opts.max_offsets_per_trigger
            return ReadAllAvailable() if n is None else ReadMaxRows(n)

        def prepareForTriggerAvailableNow(self) -> None:
            self._target = _run(self.opts, lambda client: self._bounds(client, LATEST))
            log.info("rocketmq stream: Trigger.AvailableNow reads up to %s", self._target)

        def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
            # Spark plans the next batch only once the previous one is in the sink and its commit
            # log, so ``start`` is complete: mirror it now (the last batch of an AvailableNow run
            # never gets a commit() call, only this final planning round)
            self._commit_group(start)
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            return limit_offsets(start, self._latest(), max_rows)

        def reportLatestOffset(self) -> dict[str, Any] | None:
            return self._latest()

        def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
            spans = split_spans(spans_between(start, end), self.opts.min_partitions)
            return [RocketMQPartition(s) for s in spans]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            return _read(self.opts, partition)

        def commit(self, end: dict[str, Any]) -> None:
            """Spark finished every offset below ``end``: mirror it to ``commitGroup`` (when set)."""
            self._commit_group(end)

        def _commit_group(self, end: StreamOffset) -> None:
            group = self.opts.commit_group
            if group is None or end == self._committed:
                return

            async def work(client: MQClient) -> None:
                await asyncio.gather(*(
                    client.update_consumer_offset(MessageQueue(topic, *parse_queue_key(key)), group, offset)
                    for topic, queues in end.items() for key, offset in queues.items()))
            _run(self.opts, work)
            self._committed = end
            log.info("rocketmq stream: committed %s for group %s", end, group)

else:  # pragma: no cover - Spark < 4.2
    RocketMQStreamReader = None  # type: ignore[assignment,misc]  # a class name bound to None on old Spark


__all__ = ["EARLIEST", "LATEST", "SCHEMA_DDL", "SHORT_NAME", "RocketMQDataSource", "RocketMQPartition"]
