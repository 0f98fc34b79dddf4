"""OpenLineage datasets of the window operator: the topic in, the staging location out.

Used only when ``apache-airflow-providers-openlineage`` is installed: its listener calls
``get_openlineage_facets_on_complete`` after the task succeeded, in the task's process. Nothing
here is imported before that, so the provider works without OpenLineage.

- input: ``namespace="rocketmq://<name servers>"`` (normalized like the ``rocketmq://`` asset
  URIs), ``name=<topic>``;
- output: the window's staging directory (the parent of the manifest the task returned, else
  the configured ``staging_path``):
  ``namespace="file"``, ``name=<absolute path>`` for a local path, ``namespace="<scheme>://<netloc>"``,
  ``name=<path>`` for a URL (``s3://bucket/...``).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_rocketmq.assets.rocketmq import SCHEME, normalize_netloc


def topic_dataset(namesrv_or_conn: str, topic: str) -> Any:
    from openlineage.client.event_v2 import Dataset

    return Dataset(namespace=f"{SCHEME}://{normalize_netloc(namesrv_or_conn)}", name=topic)


def staging_dataset(location: str) -> Any:
    from openlineage.client.event_v2 import Dataset

    parts = urlsplit(location)
    if parts.scheme and parts.scheme != "file" and len(parts.scheme) > 1:  # not a Windows drive letter
        return Dataset(namespace=f"{parts.scheme}://{parts.netloc}", name=parts.path.lstrip("/") or "/")
    return Dataset(namespace="file", name=os.path.abspath(parts.path if parts.scheme == "file" else location))


class WindowLineageMixin:
    """``get_openlineage_facets_on_complete`` for `RocketMQConsumeWindowOperator`.

    Reads the operator's ``topic``, ``rocketmq_conn_id`` and ``staging_path`` and the result
    ``execute`` passed to `staged` (``{"manifest": path, ...}``). The OpenLineage listener calls
    it in a process forked from the task's, where the task instance cannot be asked for XComs,
    so the result is kept on the operator.
    """

    topic: str
    rocketmq_conn_id: str | None
    staging_path: str | None
    _staged_result: dict[str, Any] | None = None
    _staged_namesrv: str | None = None

    def staged(self, result: dict[str, Any]) -> dict[str, Any]:
        """Record the window's XCom (and the name servers) for the lineage datasets; returns it unchanged."""
        self._staged_result = result
        self._staged_namesrv = self._lineage_namesrv()
        return result

    def _lineage_namesrv(self) -> str:
        from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook

        hook = RocketMQHook(self.rocketmq_conn_id)
        try:
            return str(hook.get_client_config().namesrv_addr)
        except Exception:
            return hook.rocketmq_conn_id

    def _lineage_staging(self) -> str | None:
        result = self._staged_result
        if isinstance(result, dict) and isinstance(result.get("manifest"), str):
            manifest: str = result["manifest"]
            return manifest.rsplit("/", 1)[0] if "://" in manifest else os.path.dirname(manifest)
        return self.staging_path or None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The OpenLineage provider's hook; ``task_instance`` is not needed."""
        from airflow.providers.openlineage.extractors import OperatorLineage

        staging = self._lineage_staging()
        namesrv = self._staged_namesrv or self._lineage_namesrv()
        return OperatorLineage(inputs=[topic_dataset(namesrv, self.topic)],
                               outputs=[staging_dataset(staging)] if staging else [])
