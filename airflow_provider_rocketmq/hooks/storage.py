"""fsspec storage options of a Spark load's output or staging, from an Airflow connection (Airflow side).

`output_storage_options(output, conn_id)` is what the example DAGs render into
``SparkSubmitOperator(env_vars={"ROCKETMQ_OUTPUT_STORAGE_OPTIONS": ...})``: the Spark job
(spark/load/load_window.py, which imports no Airflow) reads it from its environment and ships it to
its tasks. For an ``s3://`` staging location the same options, rendered into ``FSSPEC_S3`` (fsspec's
own configuration), are what the job reads the windows with (dags/rocketmq_s3_to_iceberg.py).
No credential is on the ``spark-submit`` command line *when env_vars reach spark-submit as
environment* — which the Spark provider does for local and standalone masters in client mode.
For YARN and Kubernetes masters the Spark provider turns ``env_vars`` into ``--conf
spark.yarn.appMasterEnv.*`` / ``spark.kubernetes.driverEnv.*`` arguments: there, give the
cluster its own credentials (instance role, IRSA, workload identity) and keep only non-secret
options (endpoint, region) in the connection.

The connection: its ``extra`` (a JSON object) is taken as fsspec storage options as is; for
``s3://``/``s3a://`` outputs its login/password become ``key``/``secret``. Every string value
is registered with Airflow's secrets masker, so rendered templates and logs show ``***``.

For an ``iceberg://`` output the extra holds pyiceberg *catalog properties* (``type``, ``uri``,
``warehouse``, ``s3.endpoint``, ``s3.secret-access-key``, ``credential``...; the job adds them to
pyiceberg's own configuration, spark/load/outputs/iceberg_table.py); login and password are not used.
The values of properties whose names suggest a secret (key, secret, password, token, credential,
and ``uri``, which may embed a database password) are masked.
"""

from __future__ import annotations

import json
from typing import Any

from airflow_provider_rocketmq.client import ConfigError

_S3 = ("s3://", "s3a://")
_SECRET_WORDS = ("key", "secret", "password", "token", "credential", "uri")


def output_storage_options(output: str, conn_id: str | None = None) -> str:
    """The JSON object of storage options for ``output`` from connection ``conn_id``; ``""``
    for a local output or no connection (the job then uses fsspec's own configuration)."""
    if not conn_id or "://" not in output or output.startswith("file://"):
        return ""
    from airflow_provider_rocketmq.airflow_compat import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:
        raise ConfigError("output_conn_id", f"connection {conn_id!r}: {exc}") from None
    options: dict[str, Any] = {}
    extra = conn.extra_dejson
    if output.startswith("iceberg://"):
        if not isinstance(extra, dict):
            raise ConfigError(f"{conn_id}.extra", "must be a JSON object of Iceberg catalog properties")
        bad = [k for k, v in extra.items() if not isinstance(v, (str, int, float, bool))]
        if bad:
            raise ConfigError(f"{conn_id}.extra.{bad[0]}", "a catalog property must be a string, number or boolean")
        _mask({k: v for k, v in extra.items() if any(w in k.lower() for w in _SECRET_WORDS)})
        return json.dumps(extra, sort_keys=True)
    if not isinstance(extra, dict):
        raise ConfigError(f"{conn_id}.extra", "must be a JSON object of fsspec storage options")
    options.update(extra)
    if output.startswith(_S3):
        if conn.login:
            options.setdefault("key", conn.login)
        if conn.password:
            options.setdefault("secret", conn.password)
    _mask(options)
    return json.dumps(options, sort_keys=True)


def _mask(value: Any) -> None:
    mask_secret: Any = None
    for module in ("airflow.sdk.log", "airflow.sdk.execution_time.secrets_masker",
                   "airflow.utils.log.secrets_masker"):  # where Airflow 3.x releases keep it
        try:
            mask_secret = __import__(module, fromlist=["mask_secret"]).mask_secret
            break
        except (ImportError, AttributeError):
            continue
    if mask_secret is None:  # pragma: no cover
        return
    if isinstance(value, dict):
        for key, v in value.items():
            if isinstance(v, str) and key not in ("endpoint_url", "region_name"):
                mask_secret(v)
            elif isinstance(v, dict):
                _mask(v)
