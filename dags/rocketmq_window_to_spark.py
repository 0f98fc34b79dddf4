"""Example: RocketMQ lag sensor -> bounded window -> Spark load -> offset commit.

1. ``wait_for_messages`` (deferrable) waits until the group has at least one
   message to read, with admin calls only (it never joins the group);
2. ``consume_window`` consumes up to the high-water marks snapshotted at its start
   and stages Parquet + manifest (offsets NOT committed yet: ``after_downstream``);
3. ``load_window`` runs ``spark/load/load_window.py`` with ``spark-submit`` (local[*]),
   which validates the manifest and appends the offsets the output does not hold yet
   (the output's ledger: a re-run or a restaged window never duplicates);
4. ``commit_window`` commits the manifest's end offsets once the load succeeded.

If the load fails, nothing is committed and the next run reads the same messages.

Connections come from the environment, e.g.::

    AIRFLOW_CONN_ROCKETMQ_DEFAULT='{"conn_type": "rocketmq", "host": "127.0.0.1:9876"}'
    AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'

Windows are staged under ``[rocketmq] staging_path`` (e.g. ``AIRFLOW__ROCKETMQ__STAGING_PATH=
s3://bucket/rocketmq-windows`` or a shared directory): the window task fails without it.

Knobs (environment): ROCKETMQ_DEMO_TOPIC, ROCKETMQ_DEMO_GROUP, ROCKETMQ_DEMO_OUTPUT
(the default of the ``output`` param: a directory, or an ``s3://``/``gs://``/``abfs://`` URL),
ROCKETMQ_DEMO_OUTPUT_CONN_ID (the default of ``output_conn_id``: an Airflow connection whose
extra holds the output's fsspec storage options and whose login/password are the S3 key/secret,
e.g. ``AIRFLOW_CONN_LAKE='{"conn_type": "generic", "login": "...", "password": "...",
"extra": {"endpoint_url": "https://s3.example"}}'``). The options reach the Spark job as
``$ROCKETMQ_OUTPUT_STORAGE_OPTIONS`` (``env_vars``), not as arguments. For an Iceberg table
(``output`` = ``iceberg://<catalog>/<namespace>.<table>?create=true``) the connection's extra holds
the pyiceberg catalog properties instead (``type``, ``uri``, ``warehouse``, ``s3.*``...).
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
GROUP = os.environ.get("ROCKETMQ_DEMO_GROUP", "demo_window_loader")
OUTPUT = os.environ.get("ROCKETMQ_DEMO_OUTPUT", os.path.join(tempfile.gettempdir(), "rocketmq-demo-output"))
# the output's storage options (object stores): an Airflow connection, rendered into the job's environment
OUTPUT_CONN_ID = os.environ.get("ROCKETMQ_DEMO_OUTPUT_CONN_ID", "")

with DAG(
    dag_id="rocketmq_window_to_spark",
    description="RocketMQ bounded window -> Spark load, offsets committed after the load",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    params={
        "body_format": Param("utf8", enum=["utf8", "json", "binary"], description="how Spark decodes bodies"),
        "output": Param(OUTPUT, type="string", description="Spark output: a directory, an s3://, gs://, abfs:// URL "
                        "or an Iceberg table iceberg://<catalog>/<namespace>.<table>[?create=true]"),
        "output_conn_id": Param(OUTPUT_CONN_ID, type="string", description="connection with the output's "
                                "storage options (object stores) or catalog properties (Iceberg); empty: the "
                                "job's own configuration"),
        # the window's knobs are templated: a run (or `airflow tasks test -t '{...}'`) may change them
        "max_messages": Param(1_000_000, type="integer", minimum=1, description="most messages in one window"),
        "staging_path": Param("", type="string", description="window directory or URL; empty: "
                              "[rocketmq] staging_path/<dag_id>/<run_id>/<task_id>"),
        "rocketmq_conn_id": Param("rocketmq_default", type="string"),
        "pull_batch_size": Param(32, type="integer", minimum=1, maximum=1024),
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

    consume_window = RocketMQConsumeWindowOperator(
        task_id="consume_window",
        topic=TOPIC,
        consumer_group=GROUP,
        commit="after_downstream",
        max_duration=600,
        max_messages="{{ params.max_messages }}",
        staging_path="{{ params.staging_path }}",
        rocketmq_conn_id="{{ params.rocketmq_conn_id }}",
        consumer_overrides={"pull_batch_size": "{{ params.pull_batch_size }}"},
    )

    load_window = SparkSubmitOperator(
        task_id="load_window",
        conn_id="spark_default",
        application=LOAD_WINDOW_APP,
        name="rocketmq-load-window",
        application_args=[
            "--manifest", "{{ ti.xcom_pull(task_ids='consume_window')['manifest'] }}",
            "--output", "{{ params.output }}",
            # counts and duration for the rocketmq.load.* metrics commit_window sends
            "--result-file", "{{ rocketmq_load_result(ti.xcom_pull(task_ids='consume_window')) }}",
            "--body-format", "{{ params.body_format }}",
        ],
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        # credentials reach the job through its environment, never its command line (see docs/airflow.md)
        env_vars={"ROCKETMQ_OUTPUT_STORAGE_OPTIONS":
                  "{{ rocketmq_output_storage_options(params.output, params.output_conn_id) }}"},
        driver_memory="512m",
    )

    commit_window = RocketMQCommitWindowOperator(
        task_id="commit_window", manifests=consume_window.output,
        load_result="{{ rocketmq_load_result(ti.xcom_pull(task_ids='consume_window')) }}")

    wait_for_messages >> consume_window >> load_window >> commit_window
