"""RocketMQCommitWindowOperator: commit staged windows' end offsets after the downstream load."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from airflow_provider_rocketmq.airflow_compat import BaseOperator, Context
from airflow_provider_rocketmq.client import ConfigError
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook
from airflow_provider_rocketmq.metrics import load_metrics_from_file
from airflow_provider_rocketmq.window.commit import commit_manifest_files


def manifest_paths(manifests: Any) -> list[str]:
    """Normalise what DAGs pass: a path, a window XCom dict, or an iterable (mapped XComs) of either."""
    if manifests is None:
        return []
    if isinstance(manifests, (str, dict)):
        manifests = [manifests]
    if not isinstance(manifests, Iterable):
        raise ConfigError("manifests", f"expected paths or window results, got {type(manifests).__name__}")
    out: list[str] = []
    for i, item in enumerate(manifests):
        if isinstance(item, dict):
            item = item.get("manifest")
        if not isinstance(item, str) or not item:
            raise ConfigError(f"manifests[{i}]", f"expected a manifest path or window result, got {item!r}")
        out.append(item)
    return out


class RocketMQCommitWindowOperator(BaseOperator):
    """Commit the end offsets of staged windows (``commit="after_downstream"``).

    Every manifest is read and validated before anything is committed. An offset
    is only ever moved forward, so running the task twice (or after an
    ``after_staging`` window) changes nothing: it is idempotent.

    :param manifests: manifest path(s) or URL(s), or the window operator's XCom(s) (templated;
        an ``XComArg`` of a mapped window task works as is).
    :param staging_options: fsspec storage options to read manifests on a URL (as the window
        operator's ``staging_options``; default: fsspec's own credentials lookup).
    :param rocketmq_conn_id: the `rocketmq` connection (templated; default ``[rocketmq] default_conn_id``).
    :param load_result: the result file the Spark load wrote (``load_window.py --result-file``; a path
        or URL read with ``staging_options``, templated): once the offsets are committed its counts are
        sent as the ``rocketmq.load.*`` metrics (docs/airflow.md, "Metrics"). A missing or unreadable
        file only logs a warning.
    """

    template_fields: Sequence[str] = ("manifests", "rocketmq_conn_id", "load_result")
    ui_color = "#cfe8cf"

    def __init__(self, *, manifests: Any, rocketmq_conn_id: str | None = None,
                 staging_options: dict[str, Any] | None = None, load_result: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if manifests is None or (isinstance(manifests, str) and not manifests):
            raise ConfigError("manifests", "at least one manifest (path or window result) is required")
        self.manifests = manifests
        self.rocketmq_conn_id = rocketmq_conn_id
        self.staging_options = dict(staging_options or {})
        self.load_result = load_result

    def execute(self, context: Context) -> dict[str, Any]:
        paths = manifest_paths(self.manifests)
        with RocketMQHook(self.rocketmq_conn_id).get_admin() as admin:
            moved = commit_manifest_files(admin, paths, storage_options=self.staging_options)
        self.log.info("committed %d queue offset(s) from %d manifest(s)", len(moved), len(paths))
        if self.load_result:
            result = load_metrics_from_file(self.load_result, self.staging_options)
            if result is not None:
                self.log.info("load metrics sent from %s: %s", self.load_result,
                              " ".join(f"{k}={v}" for k, v in result.get("counts", {}).items()))
        return {"manifests": paths, "committed": moved}
