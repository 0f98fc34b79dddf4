"""A spark-submit application for tests/spark/source/test_datasource_spark.py: many reads in one JVM.

    spark-submit rocketmq_source_app.py SPEC.json RESULT.json

SPEC names the broker, the topics the test prepared and secrets to pass as options;
each scenario's outcome goes into RESULT (JSON) for the pytest side to compare with
what the embedded broker holds. One application keeps the test to one JVM start.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_provider_rocketmq.client import ClientConfig, Message, Producer
from airflow_provider_rocketmq.spark.source.datasource import RocketMQDataSource

KEY = ["broker", "queue_id", "queue_offset"]


def keys(df: DataFrame) -> list[list[Any]]:
    return [list(r) for r in df.select(*KEY).collect()]


def error_text(fn: Any) -> str | None:
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def main(spec_path: str, result_path: str) -> None:
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    ns, secrets = spec["namesrv"], spec["secrets"]
    spark = (SparkSession.builder.appName("rocketmq-source-test")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("INFO")  # the test checks that no log line carries a secret
    spark.dataSource.register(RocketMQDataSource)
    out: dict[str, Any] = {}

    def source(topic: str, **options: str) -> Any:
        reader = spark.read.format("rocketmq").option("namesrv", ns)
        if topic:
            reader = reader.option("topic", topic)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader

    # 1. the whole topic, every column (one scan; the pytest side counts)
    full = source(spec["all"]).load()
    rows = full.select(*KEY, "topic", "msg_id", "tags", "keys", F.to_json("properties").alias("props"),
                       "born_timestamp", "store_timestamp", "reconsume_times", F.sha2("body", 256).alias("sha"))
    out["full"] = {"rows": [list(r) for r in rows.collect()], "partitions": full.rdd.getNumPartitions()}

    # 2. JSON sub-ranges
    out["subrange"] = keys(source(spec["all"], startingOffsets=json.dumps(spec["starting"]),
                                  endingOffsets=json.dumps(spec["ending"])).load())

    # 3. minPartitions: queues split into offset sub-ranges, each offset read once
    split = source(spec["all"], minPartitions=str(spec["min_partitions"])).load()
    out["split"] = {"partitions": split.rdd.getNumPartitions(),
                    "rows": [list(r) for r in split.select(F.spark_partition_id(), *KEY).collect()]}

    # 4. tag filter (applied in the reader)
    out["tags"] = keys(source(spec["all"], expression=spec["expression"]).load())

    # 5. failOnDataLoss both ways (with ACL options: the signing path, and the secrets must stay hidden)
    lost = json.dumps({spec["lost"]: {spec["lost_queue"]: 0}})
    out["loss_fail"] = error_text(lambda: source(spec["lost"], startingOffsets=lost, **secrets).load().count())
    out["loss_skip"] = keys(source(spec["lost"], startingOffsets=lost, failOnDataLoss="false", **secrets).load())

    # 6. what a user sees for a typo and in plans
    out["typo"] = error_text(lambda: source(spec["all"], startingOffset="earliest").load().count())
    explained = source(spec["lost"], **secrets).load()
    out["explain"] = explained._jdf.queryExecution().toString()

    # 7. streaming: Trigger.AvailableNow twice over one checkpoint, messages added in between
    def run_stream() -> list[int]:
        stream = (spark.readStream.format("rocketmq").option("namesrv", ns).option("topic", spec["stream"])
                  .option("maxOffsetsPerTrigger", str(spec["max_per_trigger"]))
                  .option("commitGroup", spec["commit_group"]))
        for k, v in secrets.items():
            stream = stream.option(k, v)
        query = (stream.load().writeStream.format("parquet").option("path", spec["sink"])
                 .option("checkpointLocation", spec["checkpoint"]).trigger(availableNow=True).start())
        query.awaitTermination()
        return [p["numInputRows"] for p in query.recentProgress]

    out["stream_first"] = run_stream()
    with Producer(ClientConfig(namesrv_addr=ns), group="source_app_producer") as producer:
        queues = producer.publish_queues(spec["stream"])
        for i in range(spec["second_wave"]):
            producer.send(Message(spec["stream"], f"wave2-{i}".encode()), queue=queues[i % len(queues)])
    out["stream_second"] = run_stream()
    sink = spark.read.parquet(spec["sink"])
    out["sink"] = [list(r) for r in sink.select(*KEY, F.col("body").cast("string")).collect()]

    with open(result_path, "w", encoding="utf-8") as fh:
        json.dump(out, fh)
    spark.stop()


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2])
    except Exception:
        traceback.print_exc()
        sys.exit(1)
