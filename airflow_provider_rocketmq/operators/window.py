"""RocketMQConsumeWindowOperator: consume a bounded window and stage it for a Spark load."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_rocketmq.airflow_compat import BaseOperator, Context

from airflow_provider_rocketmq.client.consumer.config import (
    ConsumeFromWhere,
    ConsumerConfig,
    parse_consume_timestamp,
)
from airflow_provider_rocketmq.client.errors import ConfigError
from airflow_provider_rocketmq.hooks.connection_config import config_field_names
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook
from airflow_provider_rocketmq.operators.window_lineage import WindowLineageMixin
from airflow_provider_rocketmq.window.collector import parse_tag_expression
from airflow_provider_rocketmq.window.manifest import HANDOFF_OFFSETS, HANDOFFS
from airflow_provider_rocketmq.window.runner import Listener, WindowResult, WindowSpec, run_window, safe_name
from airflow_provider_rocketmq.window.snapshot import OffsetsWindow, snapshot_window

COMMIT_POLICIES = ("after_staging", "after_downstream")
STAGING_ENV = "ROCKETMQ_STAGING_DIR"
DEFAULT_MAPPED_SETTLE = 5.0
# the window owns these: offsets are committed from the manifest, and every member must see every queue
_FORCED = {"enable_offset_commit": False, "message_model": "CLUSTERING"}


def default_staging_base() -> str:
    """Where windows are staged when ``staging_path`` is not given: $ROCKETMQ_STAGING_DIR or a temp dir."""
    return os.environ.get(STAGING_ENV) or os.path.join(tempfile.gettempdir(), "rocketmq-windows")


class RocketMQConsumeWindowOperator(WindowLineageMixin, BaseOperator):
    """Consume a bounded window of a topic with a push consumer, stage it as Parquet + manifest.

    At start the high-water mark of every queue is snapshotted; the group's push
    consumer (``enable_offset_commit=False``) reads the queues it is assigned up to
    those marks, or until ``max_messages``/``max_bytes``/``max_duration`` is hit.
    Mapped instances of one group share the queues through rebalancing; each writes
    its own manifest. The XCom is ``{"manifest": path, "messages": n, "bytes": b}``.

    A retry of the same task instance finds its manifest and returns it instead of
    consuming again, so retries never duplicate or lose a window.

    :param topic: topic to consume (templated).
    :param consumer_group: consumer group whose committed offsets start the window (templated).
    :param expression: tag expression (``"*"``, ``"TagA || TagB"``), applied client-side (templated).
    :param staging_path: window directory (templated); default
        ``$ROCKETMQ_STAGING_DIR/<dag_id>/<run_id>/<task_id>[/<map_index>]``.
    :param max_messages: stage at most this many messages.
    :param max_bytes: stage at most this many body bytes (at least one message moves).
    :param max_duration: stop consuming after this many seconds and stage what is complete.
    :param commit: ``"after_staging"`` commits the end offsets once the files are durable;
        ``"after_downstream"`` leaves that to `RocketMQCommitWindowOperator`.
    :param consumer_overrides: `ConsumerConfig` knobs (e.g. ``consume_from_where``,
        ``pull_batch_size``); windows default to ``CONSUME_FROM_FIRST_OFFSET``.
    :param assignment_timeout: seconds to wait for a first queue assignment before staging
        an empty window (a member with no queue).
    :param settle_time: seconds the group's membership must stay unchanged before this member
        takes queues; default 5 for mapped instances (so they split the queues), else 0.
    :param idle_timeout: seconds without any progress (broker gone, queue stuck) after which the
        window stages what is contiguous; the rest is left for the next window.
    :param handoff: ``"staging"`` (default) consumes the window and stages Parquet files;
        ``"offsets"`` consumes nothing: it snapshots per queue [committed offset, high-water mark)
        into the manifest, and the Spark job reads those ranges from the brokers through the
        ``rocketmq`` data source (``window/snapshot.py``). Offsets need
        ``commit="after_downstream"``, take ``max_messages`` but not ``max_bytes``/``max_duration``,
        and are not mapped (one instance snapshots every queue).
    :param rocketmq_conn_id: the `rocketmq` connection (default ``[rocketmq] default_conn_id``).
    """

    template_fields: Sequence[str] = ("topic", "consumer_group", "expression", "staging_path")
    ui_color = "#f5e2c8"

    def __init__(
        self,
        *,
        topic: str,
        consumer_group: str,
        expression: str = "*",
        staging_path: str | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        max_duration: float | None = None,
        commit: str = "after_staging",
        consumer_overrides: Mapping[str, Any] | None = None,
        assignment_timeout: float = 60.0,
        idle_timeout: float = 120.0,
        settle_time: float | None = None,
        handoff: str = "staging",
        rocketmq_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if commit not in COMMIT_POLICIES:
            raise ConfigError("commit", f"must be one of {', '.join(COMMIT_POLICIES)}, got {commit!r}")
        if handoff not in HANDOFFS:
            raise ConfigError("handoff", f"must be one of {', '.join(HANDOFFS)}, got {handoff!r}")
        if handoff == HANDOFF_OFFSETS:
            if commit != "after_downstream":
                raise ConfigError("commit", "handoff='offsets' reads the messages in Spark later: use "
                                  "commit='after_downstream' and a RocketMQCommitWindowOperator after the load")
            for name, value in (("max_bytes", max_bytes), ("max_duration", max_duration)):
                if value is not None:
                    raise ConfigError(name, "is not available with handoff='offsets' (nothing is read before "
                                      "Spark); use max_messages")
        self.handoff = handoff
        overrides = dict(consumer_overrides or {})
        allowed = config_field_names(ConsumerConfig)
        for name in overrides:
            if name not in allowed:
                raise ConfigError(f"consumer_overrides.{name}", "unknown consumer option")
            if name in _FORCED:
                raise ConfigError(f"consumer_overrides.{name}", "is set by the window operator")
        if not isinstance(expression, str) or "{{" not in expression:  # a template is checked at run time
            parse_tag_expression(expression)
        self.topic = topic
        self.consumer_group = consumer_group
        self.expression = expression
        self.staging_path = staging_path
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_duration = max_duration
        self.commit = commit
        self.consumer_overrides = overrides
        self.assignment_timeout = assignment_timeout
        self.idle_timeout = idle_timeout
        self.settle_time = settle_time
        self.rocketmq_conn_id = rocketmq_conn_id
        # the bounds and timeouts are checked by WindowSpec.validate() (shared with the CLI), now and at run time
        WindowSpec(topic="t", consumer_group="g", staging_dir="d", **self._spec_kwargs(mapped=False)).validate()

    def _spec_kwargs(self, *, mapped: bool) -> dict[str, Any]:
        """The WindowSpec bounds and timeouts; a mapped instance settles the group first by default."""
        settle = self.settle_time if self.settle_time is not None else DEFAULT_MAPPED_SETTLE if mapped else 0.0
        return {"max_messages": self.max_messages, "max_bytes": self.max_bytes, "max_duration": self.max_duration,
                "assignment_timeout": self.assignment_timeout, "idle_timeout": self.idle_timeout,
                "settle_time": settle}

    def _run_ids(self, context: Context) -> tuple[list[str], str]:
        """Path parts of the per-run default staging dir and the window id derived from them."""
        ti = context["ti"]
        parts = [ti.dag_id, context["run_id"], ti.task_id]
        map_index = getattr(ti, "map_index", -1)
        if map_index is not None and map_index >= 0:
            parts.append(str(map_index))
        # deterministic per task instance: a re-run appends to (never duplicates in) its own Spark partition
        return parts, "__".join(safe_name(p) for p in parts)

    def execute(self, context: Context) -> dict[str, Any]:
        parts, window_id = self._run_ids(context)
        staging = self.staging_path or os.path.join(default_staging_base(), *(safe_name(p) for p in parts))
        overrides = {"consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                     **self.consumer_overrides, **_FORCED}
        hook = RocketMQHook(self.rocketmq_conn_id)
        if self.handoff == HANDOFF_OFFSETS:
            return self.staged(self._snapshot_offsets(hook, overrides, staging, window_id,
                                                      mapped=len(parts) == 4).to_xcom())
        if "instance_name" not in self.consumer_overrides:
            # a unique client id per task instance: mapped siblings on one host (or a connection's
            # fixed instance_name) would otherwise share one id and each take every queue
            base = hook.get_consumer_config().instance_name
            overrides["instance_name"] = f"{base}#{os.getpid()}#{time.monotonic_ns()}"
        config = hook.get_consumer_config(**overrides)
        spec = WindowSpec(
            topic=self.topic,
            consumer_group=self.consumer_group,
            staging_dir=staging,
            window_id=window_id,
            expression=self.expression,
            commit=self.commit == "after_staging",
            consume_from_where=config.consume_from_where,  # type: ignore[arg-type]
            consume_timestamp_ms=parse_consume_timestamp(config.consume_timestamp),
            **self._spec_kwargs(mapped=len(parts) == 4),  # <dag>/<run>/<task>/<map index>
        )

        def make_consumer(listener: Listener) -> Any:
            # "*": the window filters tags itself so that every offset is seen (see window/collector.py)
            return hook.get_consumer(self.consumer_group, self.topic, "*", listener, **overrides)

        self.log.info("consuming window %s of %s for group %s into %s (commit %s)", window_id, self.topic,
                      self.consumer_group, staging, self.commit)
        with hook.get_admin() as admin:
            result = run_window(spec, admin, make_consumer, namesrv=config.namesrv_addr)
        self.log.info("window %s: %d messages, %d bytes%s; manifest %s", result.window_id, result.messages,
                      result.bytes, " (reused)" if result.reused else "", result.manifest)
        return self.staged(result.to_xcom())  # recorded for the OpenLineage datasets (window_lineage.py)

    def _snapshot_offsets(self, hook: RocketMQHook, overrides: dict[str, Any], staging: str, window_id: str, *,
                          mapped: bool) -> WindowResult:
        """handoff="offsets": write the manifest of [committed, high-water) per queue; consume nothing."""
        if mapped:
            raise ConfigError("handoff", "an offsets window covers every queue in one task: do not map it")
        config = hook.get_consumer_config(**overrides)
        spec = OffsetsWindow(topic=self.topic, consumer_group=self.consumer_group, staging_dir=staging,
                             window_id=window_id, expression=self.expression,
                             consume_from_where=config.consume_from_where,  # type: ignore[arg-type]
                             consume_timestamp_ms=parse_consume_timestamp(config.consume_timestamp),
                             max_messages=self.max_messages)
        self.log.info("snapshotting offsets window %s of %s for group %s into %s", window_id, self.topic,
                      self.consumer_group, staging)
        with hook.get_admin() as admin:
            result = snapshot_window(spec, admin, namesrv=config.namesrv_addr)
        self.log.info("offsets window %s: %d offsets%s; manifest %s", result.window_id, result.messages,
                      " (reused)" if result.reused else "", result.manifest)
        return result
