"""Example: RocketMQ lag sensor -> offsets window -> Spark reads the brokers -> offset commit.

The offsets hand-off, for windows too big to pass through one Airflow worker:

1. ``wait_for_messages`` (deferrable) waits until the group has at least one message to read;
2. ``snapshot_window`` consumes nothing: it writes a manifest holding, per queue, the group's
   committed offset and the high-water mark (``handoff="offsets"``);
3. ``load_window`` runs ``spark/load/load_window.py`` with ``spark-submit``: the executors read exactly
   those ranges from the brokers through the ``rocketmq`` data source, in parallel, and the rows go
   into the output with the same exactly-once ledger as staged windows;
4. ``commit_window`` commits the manifest's end offsets once the load succeeded.

Choose this DAG when the Spark executors can reach the brokers and windows are big; choose
``rocketmq_window_to_spark`` (staging) when Spark cannot reach the brokers. If the load fails,
nothing is committed and the next run reads the same offsets again (the ledger keeps the output
free of duplicates).

Spark finds the brokers through the manifest (the connection's name servers), or through
``NAMESRV_ADDR`` in the job's environment; ACL credentials go the same way, as
``ROCKETMQ_ACCESS_KEY`` / ``ROCKETMQ_SECRET_KEY`` in ``env_vars`` (never in ``application_args``).
Executors that do not have this package installed get it with ``py_files`` (a zip built by
``rocketmq-airflow spark-package``).

Connections and knobs as in ``rocketmq_window_to_spark``: AIRFLOW_CONN_ROCKETMQ_DEFAULT,
AIRFLOW_CONN_SPARK_DEFAULT, ROCKETMQ_DEMO_TOPIC, ROCKETMQ_DEMO_GROUP, ROCKETMQ_DEMO_OUTPUT,
ROCKETMQ_DEMO_OUTPUT_CONN_ID (the ``output`` / ``output_conn_id`` params: an object store output
and the connection holding its storage options),
``[rocketmq] staging_path`` (AIRFLOW__ROCKETMQ__STAGING_PATH: where the manifest goes).
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param

from airflow_provider_rocketmq.hooks.storage import output_storage_options
from airflow_provider_rocketmq.metrics import load_result_location
from airflow_provider_rocketmq.operators.commit import RocketMQCommitWindowOperator
from airflow_provider_rocketmq.operators.window import RocketMQConsumeWindowOperator
from airflow_provider_rocketmq.sensors.lag import RocketMQLagSensor
from airflow_provider_rocketmq.spark import LOAD_WINDOW_APP

TOPIC = os.environ.get("ROCKETMQ_DEMO_TOPIC", "demo_orders")
GROUP = os.environ.get("ROCKETMQ_DEMO_GROUP", "demo_offsets_loader")
OUTPUT = os.environ.get("ROCKETMQ_DEMO_OUTPUT", os.path.join(tempfile.gettempdir(), "rocketmq-demo-output"))
# the output's storage options (object stores): an Airflow connection, rendered into the job's environment
OUTPUT_CONN_ID = os.environ.get("ROCKETMQ_DEMO_OUTPUT_CONN_ID", "")

with DAG(
    dag_id="rocketmq_offsets_to_spark",
    description="RocketMQ offsets window -> Spark reads the brokers -> offsets committed after the load",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    params={
        "output": Param(OUTPUT, type="string", description="Spark output: a directory, an s3://, gs://, abfs:// URL "
                        "or an Iceberg table iceberg://<catalog>/<namespace>.<table>[?create=true]"),
        "output_conn_id": Param(OUTPUT_CONN_ID, type="string", description="connection with the output's "
                                "storage options (object stores) or catalog properties (Iceberg); empty: the "
                                "job's own configuration"),
    },
    user_defined_macros={"rocketmq_output_storage_options": output_storage_options,
                         "rocketmq_load_result": load_result_location},
    tags=["rocketmq", "spark", "example"],
) as dag:
    wait_for_messages = RocketMQLagSensor(
        task_id="wait_for_messages",
        topic=TOPIC,
        consumer_group=GROUP,
        min_lag=1,
        deferrable=True,
        poke_interval=2,
        timeout=600,
    )

    snapshot_window = RocketMQConsumeWindowOperator(
        task_id="snapshot_window",
        topic=TOPIC,
        consumer_group=GROUP,
        handoff="offsets",
        commit="after_downstream",
        max_messages=50_000_000,  # offsets per window, shared out over the queues by backlog
    )

    load_window = SparkSubmitOperator(
        task_id="load_window",
        conn_id="spark_default",
        application=LOAD_WINDOW_APP,
        name="rocketmq-load-offsets",
        application_args=[
            "--manifest", "{{ ti.xcom_pull(task_ids='snapshot_window')['manifest'] }}",
            "--output", "{{ params.output }}",
            # counts and duration for the rocketmq.load.* metrics commit_window sends
            "--result-file", "{{ rocketmq_load_result(ti.xcom_pull(task_ids='snapshot_window')) }}",
            "--body-format", "utf8",
        ],
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        # credentials reach the job through its environment, never its command line (see docs/airflow.md)
        env_vars={"ROCKETMQ_OUTPUT_STORAGE_OPTIONS":
                  "{{ rocketmq_output_storage_options(params.output, params.output_conn_id) }}"},
        driver_memory="512m",
        # py_files="/opt/rocketmq-spark.zip",  # executors without this package installed
        # ACL credentials for the executors' pulls: add ROCKETMQ_ACCESS_KEY / ROCKETMQ_SECRET_KEY to env_vars
    )

    commit_window = RocketMQCommitWindowOperator(
        task_id="commit_window", manifests=snapshot_window.output,
        load_result="{{ rocketmq_load_result(ti.xcom_pull(task_ids='snapshot_window')) }}")

    wait_for_messages >> snapshot_window >> load_window >> commit_window
