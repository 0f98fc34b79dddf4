"""The manifests as the load sees them: each one verified, with its files and the offsets it claims.

`load_manifests` reads and fully verifies every manifest (window/manifest.py: schema, sizes,
SHA-256, rows) before Spark starts, and returns them in load order (window id, then location), so
the same inputs always load the same way. A manifest's *claim* is its queue ranges minus their
gaps (offsets another window holds). `LoadError` is a problem with the job's input that deserves
one line, not a stack trace. No Spark, no Airflow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_rocketmq.spark.load.ledger import OffsetRanges
from airflow_provider_rocketmq.window.manifest import (
    HANDOFF_OFFSETS,
    WindowManifest,
    manifest_url,
    read_manifest,
    staged_file_urls,
)


class LoadError(Exception):
    """A problem with the job's input that deserves one line, not a stack trace."""


@dataclass(frozen=True)
class Staged:
    """One verified manifest, the locations of its files and the offsets it claims."""

    location: str
    manifest: WindowManifest
    files: tuple[str, ...]
    claim: OffsetRanges

    @property
    def offsets_handoff(self) -> bool:
        """No staged files: the rows are read from the brokers (spark/load/handoff.py)."""
        return self.manifest.handoff == HANDOFF_OFFSETS


def is_url(location: str) -> bool:
    """A URL other than ``file://`` (local paths and ``file://`` are read as files)."""
    return "://" in location and not location.startswith("file://")


def local_path(location: str) -> str:
    return location.removeprefix("file://")


def claim_of(manifest: WindowManifest) -> OffsetRanges:
    """What a window accounts for: its queue ranges minus the gaps another window holds."""
    def key(broker: str, queue_id: int) -> tuple[str, str, int]:
        return manifest.topic, broker, queue_id

    ranges = OffsetRanges.of((key(q.broker, q.queue_id), q.start_offset, q.end_offset) for q in manifest.queues)
    gaps = OffsetRanges.of((key(q.broker, q.queue_id), lo, hi) for q in manifest.queues for lo, hi in q.gaps)
    return ranges - gaps


def load_manifests(paths: Sequence[str]) -> list[Staged]:
    """Read and fully verify every manifest (`ManifestError` on the first problem), in load order.
    Paths and URLs are resolved by window/manifest.py (files relative to their manifest's directory)."""
    out: dict[str, Staged] = {}
    for raw in paths:
        location = manifest_url(raw)
        if not is_url(location):
            location = str(Path(local_path(location)).resolve())
        if location in out:
            continue  # the same manifest twice would only double rows_in
        manifest = read_manifest(location, verify_files=True)
        out[location] = Staged(location, manifest, tuple(staged_file_urls(location, manifest)), claim_of(manifest))
    return sorted(out.values(), key=lambda s: (s.manifest.window_id, s.location))
