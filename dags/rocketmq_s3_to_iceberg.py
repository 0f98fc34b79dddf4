"""Example: RocketMQ -> a window staged on S3 -> Spark loads it into an Iceberg table -> offsets committed.

The complete DAG of the README. Configuration, none of it read while the file is parsed:

- ``AIRFLOW_CONN_ROCKETMQ_DEFAULT``: the name servers (a ``rocketmq`` connection);
- ``AIRFLOW__ROCKETMQ__STAGING_PATH=s3://lake/rocketmq-windows``: where windows are staged, one
  directory per run and task; the Airflow workers reach it through s3fs's own credential lookup
  (instance role, ``AWS_*`` variables, or fsspec's ``FSSPEC_S3``);
- ``AIRFLOW_CONN_LAKE_S3``: the staging bucket's credentials for the Spark job (login/password =
  access key/secret, extra = more s3fs options such as ``endpoint_url``);
- ``AIRFLOW_CONN_LAKE_CATALOG``: the Iceberg catalog's pyiceberg properties in its extra (``type``,
  ``uri``, ``warehouse``, ``s3.*``...);
- ``AIRFLOW_CONN_SPARK_DEFAULT``: where ``spark-submit`` runs.

The two lake connections reach the Spark job as environment variables (``env_vars``), rendered by
`output_storage_options` when the task runs, their secrets masked in logs and rendered templates;
never as ``spark-submit`` arguments. The offsets are committed only after the load: if it fails,
the next run reads the same messages, and the table's ledger loads every offset once.
"""

from datetime import datetime

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

from airflow_provider_rocketmq.hooks.storage import output_storage_options
from airflow_provider_rocketmq.operators.commit import RocketMQCommitWindowOperator
from airflow_provider_rocketmq.operators.window import RocketMQConsumeWindowOperator
from airflow_provider_rocketmq.sensors.lag import RocketMQLagSensor
from airflow_provider_rocketmq.spark import LOAD_WINDOW_APP

with DAG("rocketmq_s3_to_iceberg", schedule="@hourly", start_date=datetime(2024, 1, 1), catchup=False,
         max_active_runs=1,  # the windows of one group follow each other
         params={"topic": "orders", "consumer_group": "orders_to_iceberg",
                 "table": "iceberg://lake/rocketmq.orders?create=true"},
         user_defined_macros={"rocketmq_storage_options": output_storage_options}):
    wait_for_messages = RocketMQLagSensor(
        task_id="wait_for_messages", topic="{{ params.topic }}", consumer_group="{{ params.consumer_group }}",
        min_lag=1, deferrable=True, poke_interval=30, timeout=50 * 60,
        soft_fail=True)  # nothing arrived this hour: the run is skipped
    consume_window = RocketMQConsumeWindowOperator(
        task_id="consume_window", topic="{{ params.topic }}", consumer_group="{{ params.consumer_group }}",
        max_messages=5_000_000, commit="after_downstream")  # commit_window commits, after the load
    load_window = SparkSubmitOperator(
        task_id="load_window", conn_id="spark_default", application=LOAD_WINDOW_APP,
        application_args=["--manifest", "{{ ti.xcom_pull(task_ids='consume_window')['manifest'] }}",
                          "--output", "{{ params.table }}"],
        env_vars={  # credentials travel in the job's environment, rendered when the task runs
            "FSSPEC_S3": "{{ rocketmq_storage_options(ti.xcom_pull(task_ids='consume_window')['manifest'], "
                         "'lake_s3') }}",  # the staging bucket: fsspec's s3 configuration
            "ROCKETMQ_OUTPUT_STORAGE_OPTIONS": "{{ rocketmq_storage_options(params.table, 'lake_catalog') }}"})
    commit_window = RocketMQCommitWindowOperator(task_id="commit_window", manifests=consume_window.output)

    wait_for_messages >> consume_window >> load_window >> commit_window
