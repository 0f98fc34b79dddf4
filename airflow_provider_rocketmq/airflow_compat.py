"""The Airflow names this provider uses, imported from where each supported Airflow has them.

Supported: Airflow 3.0.1 (the floor common-messaging 2.0 needs) up to the newest 3.x.
Every Airflow-facing module imports Airflow's base classes from here, never directly, so a
name that moved between 3.x releases is guarded in one place:

- ``BaseHook``: ``airflow.sdk`` from 3.1; ``airflow.hooks.base`` in 3.0.
- ``conf``: ``airflow.sdk.configuration`` where the task SDK has it, else
  ``airflow.configuration``.
- ``Stats``: ``airflow.sdk.observability.stats`` (3.3 has it; its ``airflow.stats`` is a shim that
  warns), else ``airflow.observability.stats``, else ``airflow.stats`` (3.0) — the order the
  common-compat provider uses.

``scripts/compat.sh`` installs the lowest supported versions and runs the Airflow tests, so
an import that only newer releases have fails there.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator, BaseSensorOperator, Context, PokeReturnValue
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

try:  # Airflow >= 3.1
    from airflow.sdk import BaseHook
except ImportError:  # Airflow 3.0
    from airflow.hooks.base import BaseHook  # type: ignore[no-redef,attr-defined,unused-ignore]  # 3.0's name

try:  # the task SDK's metrics (newer 3.x)
    from airflow.sdk.observability.stats import Stats
except ImportError:  # pragma: no cover - depends on the installed Airflow
    try:
        from airflow.observability.stats import Stats  # type: ignore[no-redef,assignment,unused-ignore]  # core copy
    except ImportError:  # Airflow 3.0
        from airflow.stats import Stats  # type: ignore[no-redef,assignment,unused-ignore]  # 3.0 name

try:  # the task SDK's configuration (newer 3.x)
    from airflow.sdk.configuration import conf
except ImportError:  # pragma: no cover - depends on the installed Airflow
    from airflow.configuration import conf  # type: ignore[no-redef,unused-ignore]  # older 3.x's name

__all__ = [
    "BaseEventTrigger",
    "BaseHook",
    "BaseOperator",
    "BaseSensorOperator",
    "Context",
    "PokeReturnValue",
    "Stats",
    "TriggerEvent",
    "conf",
    "config_get",
    "default_deferrable",
]

CONFIG_SECTION = "rocketmq"
DEFAULT_CONN_ID = "rocketmq_default"


def config_get(key: str, fallback: str) -> str:
    """``[rocketmq] <key>`` from Airflow's configuration (``AIRFLOW__ROCKETMQ__<KEY>`` too).

    ``fallback`` is the default declared in the provider info: Airflow only merges a provider's
    declared defaults into ``conf`` once the providers' configuration is loaded, which a task
    process does not always do.
    """
    value: Any = conf.get(CONFIG_SECTION, key, fallback=fallback)
    return str(value) if value not in (None, "") else fallback


def default_conn_id() -> str:
    """The connection id used when none is given: ``[rocketmq] default_conn_id``."""
    return config_get("default_conn_id", DEFAULT_CONN_ID)


def default_deferrable() -> bool:
    """``[operators] default_deferrable``: what ``deferrable`` means when a sensor is not told."""
    return bool(conf.getboolean("operators", "default_deferrable", fallback=False))
