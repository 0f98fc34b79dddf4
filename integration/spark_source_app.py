"""spark-submit app of integration/test_spark_datasource.py: reads through the public `rocketmq` data
source only and prints one JSON line ``RESULT {...}`` for the test.

    spark-submit spark_source_app.py NAMESRV TOPIC GROUP WORKDIR
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_provider_rocketmq.spark.source.datasource import RocketMQDataSource

SEQ = "it_seq"


def main(namesrv: str, topic: str, group: str, work: str) -> None:
    spark = SparkSession.builder.appName("rocketmq-integration-source").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(RocketMQDataSource)
    seq = F.col("properties").getItem(SEQ).cast("int")

    def read(**options: str):  # type: ignore[no-untyped-def]
        reader = spark.read.format("rocketmq").option("namesrv", namesrv).option("topic", topic)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    batch = read(minPartitions="6").select(seq.alias("seq"), "broker", "queue_id", "queue_offset",
                                           F.col("body").cast("string").alias("body"), "tags")
    rows = [r.asDict() for r in batch.collect()]
    tagged = [r[0] for r in read(expression="odd").select(seq).collect()]
    query = (spark.readStream.format("rocketmq").option("namesrv", namesrv).option("topic", topic)
             .option("commitGroup", group).option("maxOffsetsPerTrigger", "20").load()
             .writeStream.format("parquet").option("path", f"{work}/sink")
             .option("checkpointLocation", f"{work}/checkpoint").trigger(availableNow=True).start())
    query.awaitTermination()
    streamed = [r[0] for r in spark.read.parquet(f"{work}/sink").select(seq).collect()]
    print("RESULT " + json.dumps({"batch": rows, "tagged": tagged, "streamed": streamed,
                                  "micro_batches": len(query.recentProgress)}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
