"""RocketMQConsumeWindowOperator: consume a bounded window and stage it for a Spark load."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from airflow_provider_rocketmq import metrics
from airflow_provider_rocketmq.airflow_compat import BaseOperator, Context, config_get
from airflow_provider_rocketmq.client import (
    ConfigError,
    ConsumeFromWhere,
    ConsumerConfig,
    parse_consume_timestamp,
)
from airflow_provider_rocketmq.hooks.connection_config import config_field_names
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook
from airflow_provider_rocketmq.operators.window_lineage import WindowLineageMixin
from airflow_provider_rocketmq.window.collector import parse_tag_expression
from airflow_provider_rocketmq.window.manifest import HANDOFF_OFFSETS, HANDOFFS
from airflow_provider_rocketmq.window.progress import WindowProgress
from airflow_provider_rocketmq.window.runner import (
    WINDOW_CONSUMER_DEFAULTS,
    Listener,
    WindowResult,
    WindowSpec,
    default_staging_dir,
    register_window_listener,
    run_window,
    safe_name,
)
from airflow_provider_rocketmq.window.snapshot import OffsetsWindow, snapshot_window

COMMIT_POLICIES = ("after_staging", "after_downstream")
STAGING_OPTION = "staging_path"
PROGRESS_OPTION = "progress_interval"
DEFAULT_PROGRESS_INTERVAL = 30.0
DEFAULT_MAPPED_SETTLE = 5.0
# the window owns these: offsets are committed from the manifest, and every member must see every queue
_FORCED = {"enable_offset_commit": False, "message_model": "CLUSTERING"}
_LIMITS = ("max_messages", "max_bytes", "max_duration")


def configured_staging_base() -> str | None:
    """``[rocketmq] staging_path`` (``AIRFLOW__ROCKETMQ__STAGING_PATH``) from Airflow's configuration."""
    value = config_get(STAGING_OPTION, "").strip()
    return value or None


def resolve_progress_interval(value: float | None) -> float:
    """Seconds between two progress lines: ``value``, else ``[rocketmq] progress_interval``; 0 = none."""
    field = "progress_interval"
    if value is None:
        field = f"[rocketmq] {PROGRESS_OPTION}"
        text = config_get(PROGRESS_OPTION, str(DEFAULT_PROGRESS_INTERVAL))
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(field, f"must be a number of seconds, got {text!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(field, f"must be >= 0 seconds (0: no progress lines), got {value!r}")
    return float(value)


def _number(field: str, value: Any, kind: type) -> Any:
    """A templated limit arrives as text ("1000"); anything else stays as given (validated later)."""
    if isinstance(value, str):
        try:
            return kind(value.strip())
        except ValueError:
            raise ConfigError(field, f"must be a {kind.__name__}, got {value!r}") from None
    return value


def _coerce_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Rendered ``consumer_overrides`` values are text; give numbers and booleans their type."""
    types = {f.name: str(f.type) for f in dataclasses.fields(ConsumerConfig)}
    out: dict[str, Any] = {}
    for name, value in overrides.items():
        kind = types.get(name, "")
        if isinstance(value, str) and kind.split(" ")[0] in ("int", "float", "bool"):
            try:
                parsed = json.loads(value.strip().lower() if kind.startswith("bool") else value)
            except ValueError:
                raise ConfigError(f"consumer_overrides.{name}", f"must be a {kind}, got {value!r}") from None
            value = parsed
        out[name] = value
    return out


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


class RocketMQConsumeWindowOperator(WindowLineageMixin, BaseOperator):
    """Consume a bounded window of a topic with a push consumer, stage it as Parquet + manifest.

    At start the high-water mark of every queue is snapshotted; the group's push
    consumer (``enable_offset_commit=False``) reads the queues it is assigned up to
    those marks (it never pulls past them), or until ``max_messages``/``max_bytes``/
    ``max_duration`` is hit. Parquet part files are written while consuming, in
    bounded memory, and ``manifest.json`` is written last. Mapped instances of one group
    share the queues through rebalancing; each writes its own manifest. The XCom is
    ``{"manifest": path or URL, "messages": n, "bytes": b}``.

    **Staging location.** ``staging_path`` (templated) is the window directory: a local
    path or a URL (``s3://bucket/prefix``, ``gs://...``, ``file://...``; an
    ``ObjectStoragePath`` works too). Without it, ``[rocketmq] staging_path``
    (``AIRFLOW__ROCKETMQ__STAGING_PATH``) is the base and the window directory is
    ``<base>/<dag_id>/<run_id>/<task_id>[/<map_index>]``. Without either the task fails
    at once: there is no temp-directory default, because staging is what the offsets
    are committed against.

    **What holds, and when.** Offsets are only committed for messages whose files and
    manifest were written first, so nothing is lost *as long as the staging location
    keeps what was written* (durable, shared by the workers, e.g. an object store or a
    shared filesystem) until the load has read it:

    - ``commit="after_staging"``: the end offsets are committed once the manifest is
      written. A retry of the task returns the same manifest. If the staging location
      loses the window before the load read it (a local disk wiped, a retry on another
      worker with a local path), those messages are gone from the group: the next window
      starts after them.
    - ``commit="after_downstream"``: `RocketMQCommitWindowOperator` commits after the load.
      If staging is lost before that, the next window reads the same offsets again and
      stages them anew; the Spark loader's ledger loads each offset once, so the output has
      no duplicates and misses nothing. This is the policy for non-durable staging.

    :param topic: topic to consume (templated).
    :param consumer_group: consumer group whose committed offsets start the window (templated).
    :param expression: tag expression (``"*"``, ``"TagA || TagB"``), applied client-side (templated).
    :param staging_path: window directory, path or URL (templated); see above.
    :param staging_conn_id: Airflow connection of the object store (e.g. ``aws_default``), used
        through ``ObjectStoragePath``; default: fsspec's own credentials lookup.
    :param staging_options: extra fsspec storage options (e.g. ``{"endpoint_url": ...}``).
    :param max_messages: stage at most this many messages (templated).
    :param max_bytes: stage at most this many body bytes, at least one message (templated).
    :param max_duration: stop consuming after this many seconds and stage what is complete (templated).
    :param commit: ``"after_staging"`` or ``"after_downstream"`` (see above).
    :param consumer_overrides: `ConsumerConfig` knobs (templated; e.g. ``consume_from_where``,
        ``pull_batch_size``); windows default to ``CONSUME_FROM_FIRST_OFFSET`` and a 64 MiB
        flow-control cache for the whole topic (``pull_threshold_size_for_topic``).
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
    :param progress_interval: seconds between two progress lines in the task log (messages and bytes
        staged against the window's total, rate, ETA, the queues with the most left); the first comes
        one interval after consuming started, so a shorter window logs none. Default
        ``[rocketmq] progress_interval`` (30); 0 logs none.
    :param rocketmq_conn_id: the `rocketmq` connection (templated; default ``[rocketmq] default_conn_id``).
    """

    template_fields: Sequence[str] = ("topic", "consumer_group", "expression", "staging_path", "rocketmq_conn_id",
                                      "max_messages", "max_bytes", "max_duration", "consumer_overrides")
    template_fields_renderers: ClassVar[dict[str, str]] = {"consumer_overrides": "json"}
    ui_color = "#f5e2c8"

    def __init__(
        self,
        *,
        topic: str,
        consumer_group: str,
        expression: str = "*",
        staging_path: Any = None,
        staging_conn_id: str | None = None,
        staging_options: Mapping[str, Any] | None = None,
        max_messages: int | str | None = None,
        max_bytes: int | str | None = None,
        max_duration: float | str | None = None,
        commit: str = "after_staging",
        consumer_overrides: Mapping[str, Any] | None = None,
        assignment_timeout: float = 60.0,
        idle_timeout: float = 120.0,
        settle_time: float | None = None,
        handoff: str = "staging",
        progress_interval: float | None = None,
        rocketmq_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if progress_interval is not None:
            progress_interval = resolve_progress_interval(progress_interval)
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
        self._check_overrides(overrides)
        if not _is_template(expression):  # a template is checked at run time
            parse_tag_expression(expression)
        self.topic = topic
        self.consumer_group = consumer_group
        self.expression = expression
        self.staging_path = staging_path
        self.staging_conn_id = staging_conn_id
        self.staging_options = dict(staging_options or {})
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_duration = max_duration
        self.commit = commit
        self.consumer_overrides = overrides
        self.assignment_timeout = assignment_timeout
        self.idle_timeout = idle_timeout
        self.settle_time = settle_time
        self.progress_interval = progress_interval
        self.rocketmq_conn_id = rocketmq_conn_id
        self._cancel: threading.Event | None = None  # made in execute(): operators get deep-copied
        # the bounds and timeouts are checked by WindowSpec.validate() (shared with the CLI), now and at
        # run time; templated limits are checked once rendered
        self._validate_spec(mapped=False, rendered=False)

    @staticmethod
    def _check_overrides(overrides: Mapping[str, Any]) -> None:
        allowed = config_field_names(ConsumerConfig)
        for name in overrides:
            if name not in allowed:
                raise ConfigError(f"consumer_overrides.{name}", "unknown consumer option")
            if name in _FORCED:
                raise ConfigError(f"consumer_overrides.{name}", "is set by the window operator")

    def _limits(self, *, rendered: bool) -> dict[str, Any]:
        out = {}
        for name, kind in zip(_LIMITS, (int, int, float), strict=True):
            value = getattr(self, name)
            if _is_template(value) and not rendered:
                value = None
            out[name] = _number(name, value, kind)
        return out

    def _spec_kwargs(self, *, mapped: bool, rendered: bool = True) -> dict[str, Any]:
        """The WindowSpec bounds and timeouts; a mapped instance settles the group first by default."""
        settle = self.settle_time if self.settle_time is not None else DEFAULT_MAPPED_SETTLE if mapped else 0.0
        return {**self._limits(rendered=rendered), "assignment_timeout": self.assignment_timeout,
                "idle_timeout": self.idle_timeout, "settle_time": settle}

    def _validate_spec(self, *, mapped: bool, rendered: bool) -> None:
        WindowSpec(topic="t", consumer_group="g", staging_dir="d",
                   **self._spec_kwargs(mapped=mapped, rendered=rendered)).validate()

    def _run_ids(self, context: Context) -> tuple[list[str], str]:
        """Path parts of the per-run default staging dir and the window id derived from them."""
        ti = context["ti"]
        parts = [ti.dag_id, context["run_id"], ti.task_id]
        map_index = getattr(ti, "map_index", -1)
        if map_index is not None and map_index >= 0:
            parts.append(str(map_index))
        # deterministic per task instance: a re-run appends to (never duplicates in) its own Spark partition
        return parts, "__".join(safe_name(p) for p in parts)

    def _staging(self, parts: list[str]) -> tuple[str, dict[str, Any]]:
        """The window directory (path or URL) and its fsspec storage options."""
        given = self.staging_path
        if given is not None and not isinstance(given, str):  # an ObjectStoragePath (or os.PathLike)
            location = str(given)
            options = dict(getattr(given, "storage_options", {}) or {})
            conn_id = getattr(given, "conn_id", None) or self.staging_conn_id
        else:
            base = configured_staging_base()
            if not given and base is None:
                raise ConfigError(STAGING_OPTION, "no staging location: give the operator a staging_path, or "
                                  "set [rocketmq] staging_path (AIRFLOW__ROCKETMQ__STAGING_PATH) to a durable "
                                  "directory or URL every worker can reach (e.g. s3://bucket/rocketmq-windows)")
            location = given or default_staging_dir(base or "", *parts)
            options, conn_id = {}, self.staging_conn_id
        options.update(self.staging_options)
        if "://" in location and not location.startswith("file://") and conn_id:
            # the object store's credentials from an Airflow connection (e.g. aws_default)
            from airflow.sdk import ObjectStoragePath

            fs = ObjectStoragePath(location, conn_id=conn_id).fs
            options = {**dict(getattr(fs, "storage_options", {}) or {}), **options}
        return location, options

    def execute(self, context: Context) -> dict[str, Any]:
        parts, window_id = self._run_ids(context)
        mapped = len(parts) == 4  # <dag>/<run>/<task>/<map index>
        self._validate_spec(mapped=mapped, rendered=True)
        parse_tag_expression(self.expression)
        staging, storage_options = self._staging(parts)
        consumer_overrides = _coerce_overrides(self.consumer_overrides)
        self._check_overrides(consumer_overrides)
        overrides = {"consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **WINDOW_CONSUMER_DEFAULTS,
                     **consumer_overrides, **_FORCED}
        hook = RocketMQHook(self.rocketmq_conn_id)
        if self.handoff == HANDOFF_OFFSETS:
            return self.staged(self._snapshot_offsets(hook, overrides, staging, storage_options, window_id,
                                                      mapped=mapped).to_xcom())
        if "instance_name" not in consumer_overrides:
            # a unique client id per task instance: mapped siblings on one host (or a connection's
            # fixed instance_name) would otherwise share one id and each take every queue
            base = hook.get_consumer_config().instance_name
            overrides["instance_name"] = f"{base}#{os.getpid()}#{time.monotonic_ns()}"
        config = hook.get_consumer_config(**overrides)
        spec = WindowSpec(
            topic=self.topic,
            consumer_group=self.consumer_group,
            staging_dir=staging,
            storage_options=storage_options,
            window_id=window_id,
            expression=self.expression,
            commit=self.commit == "after_staging",
            consume_from_where=ConsumeFromWhere(config.consume_from_where),
            consume_timestamp_ms=parse_consume_timestamp(config.consume_timestamp),
            **self._spec_kwargs(mapped=mapped),
        )

        def make_consumer(listener: Listener) -> Any:
            # "*": the window filters tags itself so that every offset is seen (see window/collector.py)
            consumer = hook.get_consumer(self.consumer_group, self.topic, "*", **overrides)
            register_window_listener(consumer, listener)
            return consumer

        self.log.info("consuming window %s of %s for group %s into %s (commit %s, connection %s, limits %s, "
                      "consumer overrides %s)", window_id, self.topic, self.consumer_group, staging, self.commit,
                      self.rocketmq_conn_id, {k: v for k, v in self._limits(rendered=True).items() if v is not None},
                      consumer_overrides)
        self._cancel = threading.Event()
        progress = WindowProgress(interval=resolve_progress_interval(self.progress_interval),
                                  emit=lambda text: self.log.info("window %s: %s", window_id, text),
                                  max_messages=spec.max_messages)
        started = time.monotonic()
        with hook.get_admin() as admin:
            result = run_window(spec, admin, make_consumer, namesrv=config.namesrv_addr, cancel=self._cancel,
                                progress=progress)
        self.log.info("window %s: %d messages, %d bytes%s; manifest %s", result.window_id, result.messages,
                      result.bytes, " (reused)" if result.reused else "", result.manifest)
        self._send_metrics(result, progress, time.monotonic() - started)
        return self.staged(result.to_xcom())  # recorded for the OpenLineage datasets (window_lineage.py)

    def _send_metrics(self, result: WindowResult, progress: WindowProgress, seconds: float) -> None:
        if result.reused:
            metrics.window_reused(self.topic, self.consumer_group)
            return
        metrics.window_metrics(self.topic, self.consumer_group, messages=result.messages, size=result.bytes,
                               seconds=seconds, consuming_seconds=progress.consuming_seconds,
                               queues=len(progress.last.queues) if progress.last is not None else 0)

    def _snapshot_offsets(self, hook: RocketMQHook, overrides: dict[str, Any], staging: str,
                          storage_options: dict[str, Any], window_id: str, *, mapped: bool) -> WindowResult:
        """handoff="offsets": write the manifest of [committed, high-water) per queue; consume nothing."""
        if mapped:
            raise ConfigError("handoff", "an offsets window covers every queue in one task: do not map it")
        config = hook.get_consumer_config(**overrides)
        spec = OffsetsWindow(topic=self.topic, consumer_group=self.consumer_group, staging_dir=staging,
                             window_id=window_id, expression=self.expression,
                             consume_from_where=ConsumeFromWhere(config.consume_from_where),
                             consume_timestamp_ms=parse_consume_timestamp(config.consume_timestamp),
                             max_messages=self._limits(rendered=True)["max_messages"],
                             storage_options=storage_options)
        self.log.info("snapshotting offsets window %s of %s for group %s into %s", window_id, self.topic,
                      self.consumer_group, staging)
        with hook.get_admin() as admin:
            result = snapshot_window(spec, admin, namesrv=config.namesrv_addr)
        self.log.info("offsets window %s: %d offsets%s; manifest %s", result.window_id, result.messages,
                      " (reused)" if result.reused else "", result.manifest)
        return result

    def on_kill(self) -> None:
        """Stop consuming at once: the consumer is shut down, no manifest is written, nothing is committed
        (a manifest already written stays valid; its offsets are committed by the next attempt)."""
        if self._cancel is not None:
            self._cancel.set()
