"""The offsets hand-off: a window as queue ranges only, for Spark to read from the brokers (no Airflow).

`snapshot_window` records per queue of the topic ``[start, high-water mark)`` in a manifest
(``handoff: "offsets"``, no files) without consuming a message; ``start`` as for a consumed window
(window/starts.py). ``max_messages`` caps the window's offsets, shared out in proportion to each
queue's backlog. The load reads the ranges through the ``rocketmq`` data source, and the end offsets
are committed after it, as for a staged window. The window covers every offset of its ranges once;
the messages must still be on the brokers when Spark reads them (else the data source's
``failOnDataLoss`` decides). A re-run returns the manifest written before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow_provider_rocketmq.client.consumer.config import ConsumeFromWhere
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.window.collector import parse_tag_expression
from airflow_provider_rocketmq.window.manifest import (
    HANDOFF_OFFSETS,
    MANIFEST_NAME,
    ManifestError,
    QueueRange,
    WindowManifest,
    new_window_id,
    read_manifest,
    write_manifest,
)
from airflow_provider_rocketmq.window.reach import reachable_high_water_marks
from airflow_provider_rocketmq.window.runner import WindowResult
from airflow_provider_rocketmq.window.staging import StagingLocation
from airflow_provider_rocketmq.window.starts import (
    GroupConsumed,
    GroupStart,
    StartAdmin,
    decidable_queues,
    initial_offset,
)

log = logging.getLogger(__name__)


class SnapshotAdmin(StartAdmin, Protocol):
    """The part of `Admin` a snapshot needs."""

    def high_water_marks(self, topic: str) -> dict[MessageQueue, int]: ...


@dataclass(frozen=True)
class OffsetsWindow:
    """What to snapshot: the group's window of ``topic`` (see the module docstring)."""

    topic: str
    consumer_group: str
    staging_dir: str  # where manifest.json goes: a path or a URL (s3://, gs://, file://)
    window_id: str | None = None
    expression: str = "*"
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    consume_timestamp_ms: int | None = None
    max_messages: int | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict)  # fsspec options for a URL

    def validate(self) -> None:
        for name in ("topic", "consumer_group", "staging_dir"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(name, "must be a non-empty string")
        parse_tag_expression(self.expression)
        m = self.max_messages
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ConfigError("max_messages", f"must be a positive integer, got {m!r}")
        if self.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP and self.consume_timestamp_ms is None:
            raise ConfigError("consume_timestamp_ms", "needed with CONSUME_FROM_TIMESTAMP")


def cap_ranges(ranges: list[tuple[int, int]], max_messages: int | None) -> list[tuple[int, int]]:
    """Shorten ``[start, end)`` ranges to at most ``max_messages`` offsets in all, in proportion to
    their sizes (every non-empty range keeps at least one offset while the budget lasts)."""
    total = sum(end - start for start, end in ranges)
    if max_messages is None or total <= max_messages:
        return ranges
    out, budget = [], max_messages
    for start, end in ranges:
        take = min(end - start, budget, max(1, (end - start) * max_messages // total)) if end > start else 0
        out.append((start, start + take))
        budget -= take
    return out


def snapshot_window(spec: OffsetsWindow, admin: SnapshotAdmin, *, namesrv: str = "") -> WindowResult:
    """Write (or, on a re-run, find) the offsets manifest of one window; nothing is consumed."""
    spec.validate()
    staging = StagingLocation(spec.staging_dir, spec.storage_options)
    path = staging.url(MANIFEST_NAME)
    if staging.exists(MANIFEST_NAME):
        manifest = read_manifest(path, verify_files=False, storage_options=spec.storage_options)
        if manifest.handoff != HANDOFF_OFFSETS:
            raise ManifestError("handoff", f"{path} holds a {manifest.handoff} window, not an offsets one",
                                path=path)
        if spec.window_id is not None and manifest.window_id != spec.window_id:
            raise ManifestError("window_id", f"{path} belongs to window {manifest.window_id!r}, not "
                                f"{spec.window_id!r}", path=path)
        log.info("offsets window %s already snapshotted: %s", manifest.window_id, path)
        return WindowResult(str(path), _offsets(manifest), 0, manifest.window_id, reused=True)
    # a broker that does not answer is left out: its queues wait for the next window (window/reach.py)
    reachable, unreachable = reachable_high_water_marks(admin, spec.topic)
    group = GroupStart(spec.consumer_group, spec.consume_from_where, spec.consume_timestamp_ms)
    marks = sorted(decidable_queues(admin, group, reachable, unreachable).items())
    consumed = GroupConsumed(admin, spec.consumer_group, [mq for mq, _ in marks])
    ranges = cap_ranges([(initial_offset(admin, group, mq, high, consumed), high) for mq, high in marks],
                        spec.max_messages)
    queues = [QueueRange(mq.broker_name, mq.queue_id, start, end, high, 0)
              for (mq, high), (start, end) in zip(marks, ranges, strict=True)]
    manifest = WindowManifest(window_id=spec.window_id or new_window_id(), topic=spec.topic,
                              consumer_group=spec.consumer_group, expression=spec.expression, namesrv=namesrv,
                              queues=queues, handoff=HANDOFF_OFFSETS)
    written = write_manifest(manifest, path, storage_options=spec.storage_options)
    log.info("offsets window %s: %d offsets on %d queues; manifest %s", manifest.window_id, _offsets(manifest),
             len(queues), written)
    return WindowResult(str(written), _offsets(manifest), 0, manifest.window_id)


def _offsets(manifest: WindowManifest) -> int:
    return sum(q.end_offset - q.start_offset for q in manifest.queues)
