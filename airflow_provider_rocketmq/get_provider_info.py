"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from typing import Any

_CONN_FIELDS: dict[str, Any] = {
    "namesrv": {
        "label": "Name servers (alternative to Host)",
        "description": "host:port[;host:port...]; wins over Host when both are set.",
        "schema": {"type": ["string", "null"]},
    },
    "namespace": {
        "label": "Namespace",
        "description": "Resource namespace; topics and groups become <namespace>%<name>.",
        "schema": {"type": ["string", "null"]},
    },
    "tls": {
        "label": "Use TLS",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "request_timeout": {
        "label": "Request timeout (seconds)",
        "schema": {"type": ["number", "null"], "default": 3.0},
    },
    "security_token": {
        "label": "Security token",
        "description": "Optional STS token sent with ACL signatures.",
        "schema": {"type": ["string", "null"], "format": "password"},
    },
    "client_options": {
        "label": "Client options",
        "description": "JSON object of further ClientConfig/ConsumerConfig settings, "
        'e.g. {"instance_name": "etl", "pull_batch_size": 64}.',
        "schema": {"type": ["object", "null"]},
    },
}


# the connection form (RocketMQHook.get_ui_field_behaviour returns the same, with snake_case keys)
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema"],
    "relabeling": {"host": "Name servers", "login": "Access key", "password": "Secret key"},
    "placeholders": {"host": "127.0.0.1:9876;127.0.0.2:9876", "port": "9876"},
}


# [rocketmq] in airflow.cfg / AIRFLOW__ROCKETMQ__<KEY>; read through airflow_compat.config_get
CONFIG: dict[str, Any] = {
    "rocketmq": {
        "description": "Defaults of the Apache RocketMQ provider.",
        "options": {
            "default_conn_id": {
                "description": "Connection used by the RocketMQ hook, operators, sensors and triggers "
                "when they are given no rocketmq_conn_id.\n",
                "version_added": "0.1.0",
                "type": "string",
                "example": "rocketmq_prod",
                "default": "rocketmq_default",
            },
            "staging_path": {
                "description": "Base location (directory or URL: s3://, gs://, file://...) under which "
                "RocketMQConsumeWindowOperator stages windows that are given no staging_path, as "
                "<base>/<dag_id>/<run_id>/<task_id>[/<map_index>]. It must be durable and reachable by "
                "every worker (offsets are committed against what is staged there). Unset: a window "
                "task without staging_path fails at once.\n",
                "version_added": "0.1.0",
                "type": "string",
                "example": "s3://my-bucket/rocketmq-windows",
                "default": "",
            },
            "progress_interval": {
                "description": "Seconds between two progress lines of RocketMQConsumeWindowOperator in the "
                "task log (messages and bytes staged against the window's total, rate, ETA, the queues "
                "with the most left); the operator's progress_interval wins. The first line comes one "
                "interval after consuming started, so shorter windows log none. 0: no progress lines.\n",
                "version_added": "0.1.0",
                "type": "float",
                "example": "60",
                "default": "30",
            },
            "metrics_per_topic_names": {
                "description": "Also send every rocketmq.* metric as <name>.<topic>.<consumer_group>, for "
                "metrics backends that drop tags (plain StatsD). The tagged names are always sent.\n",
                "version_added": "0.1.0",
                "type": "boolean",
                "example": "True",
                "default": "False",
            },
        },
    }
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-rocketmq",
        "name": "Apache RocketMQ",
        "description": "`Apache RocketMQ <https://rocketmq.apache.org/>`__: pure-Python push consumer, "
        "consumer-lag sensors and bounded-window operators feeding Spark loads.\n",
        "versions": ["0.1.0"],
        "integrations": [
            {
                "integration-name": "Apache RocketMQ",
                "external-doc-url": "https://rocketmq.apache.org/",
                "tags": ["apache", "service"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Apache RocketMQ",
                "python-modules": ["airflow_provider_rocketmq.hooks.rocketmq"],
            }
        ],
        "operators": [
            {
                "integration-name": "Apache RocketMQ",
                "python-modules": [
                    "airflow_provider_rocketmq.operators.window",
                    "airflow_provider_rocketmq.operators.commit",
                    "airflow_provider_rocketmq.operators.produce",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "Apache RocketMQ",
                "python-modules": [
                    "airflow_provider_rocketmq.sensors.lag",
                    "airflow_provider_rocketmq.sensors.await_message",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "Apache RocketMQ",
                "python-modules": [
                    "airflow_provider_rocketmq.triggers.lag",
                    "airflow_provider_rocketmq.triggers.watch",
                    "airflow_provider_rocketmq.triggers.await_message",
                ],
            }
        ],
        "queues": ["airflow_provider_rocketmq.queues.rocketmq.RocketMQMessageQueueProvider"],
        "asset-uris": [
            {
                "schemes": ["rocketmq"],
                "handler": "airflow_provider_rocketmq.assets.rocketmq.sanitize_uri",
                "factory": "airflow_provider_rocketmq.assets.rocketmq.create_asset",
                "to_openlineage_converter":
                    "airflow_provider_rocketmq.assets.rocketmq.convert_asset_to_openlineage",
            }
        ],
        "config": CONFIG,
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_rocketmq.hooks.rocketmq.RocketMQHook",
                "hook-name": "Apache RocketMQ",
                "connection-type": "rocketmq",
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
                "conn-fields": _CONN_FIELDS,
            }
        ],
    }
