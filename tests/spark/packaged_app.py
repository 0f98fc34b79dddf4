"""spark-submit app for test_spark_package.py, run with Python interpreters that cannot import the
installed package: everything of airflow_provider_rocketmq must come from the --py-files zip.

    spark-submit --py-files rocketmq-spark.zip packaged_app.py NAMESRV TOPIC WORKDIR RESULT.json
"""

from __future__ import annotations

import json
import sys
from typing import Any


def origins() -> dict[str, Any]:
    """Where this interpreter finds the package and tenacity, and whether Airflow is importable."""
    import tenacity

    import airflow_provider_rocketmq.spark.source.datasource as ds
    try:
        import airflow  # noqa: F401
        has_airflow = True
    except ImportError:
        has_airflow = False
    return {"datasource": ds.__file__, "tenacity": tenacity.__file__, "airflow": has_airflow}


def main(namesrv: str, topic: str, work: str, result_path: str) -> None:
    from pyspark.sql import SparkSession

    from airflow_provider_rocketmq.spark.source.datasource import RocketMQDataSource

    spark = SparkSession.builder.appName("rocketmq-packaged").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(RocketMQDataSource)
    out: dict[str, Any] = {"driver": origins(),
                           "worker": spark.sparkContext.parallelize([0], 1).map(lambda _: origins()).collect()[0]}
    df = spark.read.format("rocketmq").option("namesrv", namesrv).option("topic", topic).load()
    out["batch"] = [list(r) for r in df.select("broker", "queue_id", "queue_offset").collect()]
    # the streaming source runs in a long-lived Python process of its own: it must import the zip too
    query = (spark.readStream.format("rocketmq").option("namesrv", namesrv).option("topic", topic).load()
             .writeStream.format("parquet").option("path", f"{work}/sink").option("checkpointLocation",
                                                                                   f"{work}/checkpoint")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    out["stream"] = spark.read.parquet(f"{work}/sink").count()
    with open(result_path, "w", encoding="utf-8") as fh:
        json.dump(out, fh)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
