"""Commit a window's end offsets to the broker, never moving an offset backwards.

Used by the window operator (``commit="after_staging"``), the commit operator
(``"after_downstream"``) and the ``window`` CLI command. Committing is idempotent:
a second commit of the same manifest finds every offset already there.

Every write is read back: a real 4.x broker may lose an acknowledged offset when the
first commits of a group's topic overlap (mapped window instances committing at once;
see client/consumer/offset_store.py), so a commit counts only once the broker holds it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential

from airflow_provider_rocketmq.client.protocol.errors import RocketMQError
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.window.manifest import WindowManifest, read_manifest

log = logging.getLogger(__name__)


class OffsetAdmin(Protocol):
    """The part of `Admin` that committing needs."""

    def committed_offset(self, group: str, mq: MessageQueue) -> int: ...

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> Any: ...


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, RocketMQError) and exc.retriable


# reading an offset and writing an absolute offset are both idempotent, so they may be retried
_retry = retry(
    retry=retry_if_exception(_retriable),
    stop=stop_after_attempt(4),
    wait=wait_random_exponential(multiplier=0.2, max=3),
    reraise=True,
)


@_retry
def _committed(admin: OffsetAdmin, group: str, mq: MessageQueue) -> int:
    return admin.committed_offset(group, mq)


@_retry
def _update(admin: OffsetAdmin, group: str, mq: MessageQueue, offset: int) -> None:
    admin.update_consumer_offset(group, mq, offset)


WRITE_ROUNDS = 3  # write + read back; a broker that lost the offset gets it again
RECHECK_DELAY = 0.1  # a concurrent first commit of the group replaces the broker's table a moment later


class OffsetCommitError(RocketMQError):
    """The broker still holds a lower offset after every write of the window's end offset."""


def commit_offsets(admin: OffsetAdmin, group: str, ends: Iterable[tuple[MessageQueue, int]]) -> dict[str, int]:
    """Set ``group``'s offset of each queue to ``end`` unless the broker already holds one at/after it.

    Returns ``{str(mq): offset}`` for the queues actually moved, each read back from the broker
    (RECHECK_DELAY after the last write); raises `OffsetCommitError` naming a queue that does not stick.
    """
    todo: dict[MessageQueue, int] = {}
    before: dict[MessageQueue, int] = {}
    for mq, end in ends:
        current = _committed(admin, group, mq)
        if end > current:
            todo[mq] = end
            before[mq] = current
    held: dict[MessageQueue, int] = {}
    pending = dict(todo)
    for _ in range(WRITE_ROUNDS):
        for mq, end in pending.items():
            _update(admin, group, mq, end)
        time.sleep(RECHECK_DELAY)
        held = {mq: _committed(admin, group, mq) for mq in todo}
        pending = {mq: end for mq, end in todo.items() if held[mq] < end}
        if not pending:
            break
        log.warning("the broker lost %d of %d offset(s) of group %s just written; writing them again",
                    len(pending), len(todo), group)
    else:
        mq, end = next(iter(pending.items()))
        raise OffsetCommitError(f"offset {end} of {mq} for group {group} was not kept: the broker "
                                f"holds {held[mq]} after {WRITE_ROUNDS} acknowledged writes")
    for mq, end in todo.items():
        log.info("committed %s offset %d -> %d for group %s", mq, before[mq], end, group)
    return {str(mq): end for mq, end in todo.items()}


def manifest_ends(manifest: WindowManifest) -> list[tuple[MessageQueue, int]]:
    return [(MessageQueue(manifest.topic, q.broker, q.queue_id), q.end_offset) for q in manifest.queues]


def commit_manifest(admin: OffsetAdmin, manifest: WindowManifest) -> dict[str, int]:
    """Commit one manifest's end offsets for its consumer group (never backwards)."""
    return commit_offsets(admin, manifest.consumer_group, manifest_ends(manifest))


def commit_manifest_files(admin: OffsetAdmin, paths: Iterable[str | os.PathLike[str]], *,
                          storage_options: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Read and validate each manifest (path or URL), then commit them all; every manifest is
    checked first, so a corrupt one commits nothing."""
    manifests = [read_manifest(p, verify_files=False, storage_options=storage_options) for p in paths]
    moved: dict[str, int] = {}
    for manifest in manifests:
        for key, offset in commit_manifest(admin, manifest).items():
            moved[f"{manifest.consumer_group}:{key}"] = offset
    return moved
