"""Consumer offset stores: the broker (clustering) or a local file (broadcasting).

Both keep offsets in memory, updated after every consumed batch with
increase-only semantics (a late result of an older batch never moves an offset
back), and persist periodically and at shutdown (`persist_final`, which returns
an `OffsetPersistReport`). The local store writes Java's ``offsets.json``
(fastjson object keys, pretty-printed) with a ``.bak`` copy and an atomic replace.

The remote store is this consumer's only writer of its offsets on the broker, and
it writes one acknowledged UPDATE_CONSUMER_OFFSET at a time per broker (Java sends
them oneway and also piggy-backs offsets on pulls). A real 4.x broker runs those
requests on a 32-thread executor and pulls on another, and its
ConsumerOffsetManager.commitOffset is a last-writer-wins put whose first commit of
a ``topic@group`` creates the table with an unguarded get/new/put: concurrent
first commits lose all but one queue although every one is answered SUCCESS, and
a pull's offset can land after a newer UPDATE. Writes that never
overlap cannot race; the final persist also reads every written offset back and
writes again what the broker lost.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..protocol import fastjson
from ..protocol.errors import AclDeniedError, ProtocolError, RocketMQError
from ..protocol.queue import MessageQueue

log = logging.getLogger(__name__)


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


FINAL_WRITE_ROUNDS = 3  # write + read back; a broker that lost an offset gets it again
# Reading back at once would miss another writer's overlapping first commit, whose table replaces
# ours when its install lands; on a real broker that window is microseconds.
RECHECK_DELAY = 0.1


@dataclass
class OffsetPersistReport:
    """What the final offset persist of `PushConsumer.shutdown` achieved, per owned queue.

    ``committed``: written and read back from the broker (or written to ``offsets.json``)
    at this value or above. ``unchanged``: no progress in this run, and the store already
    holds this offset (read from it when the queue was assigned); nothing was written.
    ``failed``: not committed, with the reason (not acknowledged, the broker's ACL refused
    it, or the broker kept a lower offset after every write): those messages will be
    delivered again. Queues for which this member never had an offset are in none of them.
    ``enabled`` is False when the consumer runs with ``enable_offset_commit=False``
    (nothing is written; the caller commits, e.g. the window operator). ``drained`` is
    False when in-flight consumption did not finish within the shutdown timeout: those
    messages were not committed and will be delivered again. ``denied`` is the broker's
    ACL error when it refused a write.
    """

    enabled: bool = True
    committed: dict[MessageQueue, int] = field(default_factory=dict)
    unchanged: dict[MessageQueue, int] = field(default_factory=dict)
    failed: dict[MessageQueue, str] = field(default_factory=dict)
    drained: bool = True
    denied: AclDeniedError | None = None

    @property
    def ok(self) -> bool:
        """True when every owned queue's offset is on the store (committed or unchanged)."""
        return not self.failed

    def describe_failures(self) -> str:
        """One line naming each failed queue and why (empty when none failed)."""
        return "; ".join(f"{mq.topic}/{mq.broker_name}/{mq.queue_id}: {why}"
                         for mq, why in sorted(self.failed.items()))


class OffsetClient(Protocol):
    """The MQClient helpers the remote store needs."""

    async def query_consumer_offset(self, mq: MessageQueue, group: str) -> int: ...

    async def update_consumer_offset(self, mq: MessageQueue, group: str, offset: int,
                                     oneway: bool = False, timeout: float | None = None,
                                     attempts: int | None = None) -> None: ...


DeniedHook = Callable[[str, AclDeniedError], None]  # (what was refused, the broker's ACL error)


class OffsetStore:
    """In-memory table shared by both stores; subclasses say how to load and persist."""

    def __init__(self, group: str, *, enable_commit: bool = True, on_denied: DeniedHook | None = None) -> None:
        self.group = group
        self.enable_commit = enable_commit
        self.on_denied = on_denied  # an ACL refusal of a read or a write: the consumer fails
        self.table: dict[MessageQueue, int] = {}
        # the offset last read from the store (at assignment, or by the final read-back): a queue
        # whose memory offset still equals it needs no final write, which could only move back
        # an offset somebody else (another member, an admin commit) advanced meanwhile
        self.stored: dict[MessageQueue, int] = {}

    async def load(self) -> None:
        return None

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = True) -> None:
        if offset < 0:
            return
        old = self.table.get(mq)
        if old is None or not increase_only or offset > old:
            self.table[mq] = offset

    def memory_offset(self, mq: MessageQueue) -> int:
        return self.table.get(mq, -1)

    async def read_offset(self, mq: MessageQueue, how: ReadOffsetType) -> int:
        """-1: no offset stored; -2 (remote only): the broker could not answer."""
        if how is not ReadOffsetType.READ_FROM_STORE:
            off = self.table.get(mq)
            if off is not None or how is ReadOffsetType.READ_FROM_MEMORY:
                return -1 if off is None else off
        stored = await self._read_store(mq)
        if stored >= 0:
            self.update_offset(mq, stored, increase_only=False)
            self.stored[mq] = stored
        return stored

    async def _read_store(self, mq: MessageQueue) -> int:
        raise NotImplementedError

    async def persist(self, mq: MessageQueue) -> None:
        raise NotImplementedError

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        raise NotImplementedError

    async def persist_sync(self, mq: MessageQueue) -> None:
        """Persist ``mq``'s offset and return once it is durable (acknowledged or written)."""
        raise NotImplementedError

    async def persist_final(self, mqs: Iterable[MessageQueue]) -> OffsetPersistReport:
        """Shutdown: commit the offsets of ``mqs`` (the owned queues) and say, per queue, what holds."""
        raise NotImplementedError

    def remove_offset(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)
        self.stored.pop(mq, None)

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        return {mq: off for mq, off in self.table.items() if topic is None or mq.topic == topic}


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()  # the awaiting caller was cancelled: nobody else reads it


class RemoteBrokerOffsetStore(OffsetStore):
    """Offsets held by the broker that masters each queue (clustering); see the module docstring."""

    def __init__(self, client: OffsetClient, group: str, *, enable_commit: bool = True,
                 on_denied: DeniedHook | None = None) -> None:
        super().__init__(group, enable_commit=enable_commit, on_denied=on_denied)
        self.client = client
        self._writers: dict[str, asyncio.Lock] = {}  # broker name -> one write at a time

    def _writer(self, mq: MessageQueue) -> asyncio.Lock:
        return self._writers.setdefault(mq.broker_name, asyncio.Lock())

    def _denied(self, what: str, exc: RocketMQError) -> bool:
        """Report an ACL refusal to ``on_denied``; whether ``exc`` was one."""
        if isinstance(exc, AclDeniedError) and self.on_denied is not None:
            self.on_denied(what, exc)
            return True
        return False

    async def _read_store(self, mq: MessageQueue) -> int:
        try:
            return await self.client.query_consumer_offset(mq, self.group)
        except RocketMQError as exc:
            if not self._denied(f"reading the offset of {mq}", exc):
                log.warning("cannot read the committed offset of %s for %s: %s", mq, self.group, exc)
            return -2

    async def _write(self, mq: MessageQueue, offset: int, attempts: int | None) -> None:
        """One acknowledged UPDATE_CONSUMER_OFFSET, never overlapping another write to the broker.

        The write runs in its own task: a caller cancelled meanwhile (shutdown cancels the
        periodic persist) leaves it to finish under the lock, so the next writer still waits
        for it rather than racing a request that is already on its way.
        """
        lock = self._writer(mq)

        async def write() -> None:
            async with lock:
                await self.client.update_consumer_offset(mq, self.group, offset, attempts=attempts)

        task = asyncio.get_running_loop().create_task(write(), name=f"offset {mq}")
        task.add_done_callback(_retrieve)
        await asyncio.shield(task)

    async def persist(self, mq: MessageQueue) -> None:
        """Write ``mq``'s offset once (a released queue, an illegal offset); failures are logged."""
        off = self.table.get(mq)
        if off is None or not self.enable_commit:
            return
        try:
            await self._write(mq, off, attempts=1)
        except RocketMQError as exc:
            if not self._denied(f"offset commit of {mq}", exc):
                log.warning("cannot persist offset %d of %s: %s", off, mq, exc)

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """The periodic persist: every owned queue's offset, one write at a time per broker.

        Every round writes every owned offset again (an acknowledged write may still have been
        lost by a broker, see the module docstring); a broker that fails a write is left alone
        until the next round.
        """
        owned = set(mqs)
        for mq in list(self.table):
            if mq not in owned:  # Java evicts offsets of queues this client no longer owns
                self.table.pop(mq, None)
                self.stored.pop(mq, None)
        if not self.enable_commit:
            return
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in sorted(self.table):
            by_broker.setdefault(mq.broker_name, []).append(mq)
        await asyncio.gather(*(self._persist_broker(broker, mqs) for broker, mqs in by_broker.items()))

    async def _persist_broker(self, broker: str, mqs: list[MessageQueue]) -> None:
        for i, mq in enumerate(mqs):
            off = self.table.get(mq)
            if off is None:
                continue
            try:
                await self._write(mq, off, attempts=1)
            except RocketMQError as exc:
                if not self._denied(f"offset commit of {mq}", exc):
                    log.warning("cannot persist offsets on %s (%d queue(s) wait for the next round): %s",
                                broker, len(mqs) - i, exc)
                return

    async def persist_sync(self, mq: MessageQueue) -> None:
        """Acknowledged write with retries, for paths that must not lose the offset (a reset)."""
        off = self.table.get(mq)
        if off is None or not self.enable_commit:
            return
        await self._write(mq, off, attempts=None)

    async def persist_final(self, mqs: Iterable[MessageQueue]) -> OffsetPersistReport:
        """Write each owned queue that made progress, one at a time per broker, read it back, and
        write again what the broker does not hold (at most FINAL_WRITE_ROUNDS times)."""
        report = OffsetPersistReport(enabled=self.enable_commit)
        if not self.enable_commit:
            return report
        by_broker: dict[str, dict[MessageQueue, int]] = {}
        for mq in sorted(set(mqs)):
            off = self.table.get(mq)
            if off is None:
                continue
            if self.stored.get(mq) == off:
                report.unchanged[mq] = off
            else:
                by_broker.setdefault(mq.broker_name, {})[mq] = off
        await asyncio.gather(*(self._final_broker(todo, report) for todo in by_broker.values()))
        return report

    async def _final_broker(self, todo: dict[MessageQueue, int], report: OffsetPersistReport) -> None:
        lock = self._writers.setdefault(next(iter(todo)).broker_name, asyncio.Lock())
        async with lock:
            pending = dict(todo)
            held: dict[MessageQueue, int] = {}
            for _ in range(FINAL_WRITE_ROUNDS):
                for mq, off in pending.items():  # one at a time: our own first commits never overlap
                    try:
                        await self.client.update_consumer_offset(mq, self.group, off)
                    except RocketMQError as exc:
                        report.failed[mq] = f"offset {off} not acknowledged: {exc}"
                        if isinstance(exc, AclDeniedError):
                            report.denied = exc
                written = {mq: off for mq, off in todo.items() if mq not in report.failed}
                if not written:
                    return
                # another member's first commit that overlapped ours replaces the table a moment later
                await asyncio.sleep(RECHECK_DELAY)
                got = await asyncio.gather(*(self.client.query_consumer_offset(mq, self.group) for mq in written),
                                           return_exceptions=True)
                pending = {}
                for (mq, off), value in zip(written.items(), got, strict=True):
                    if isinstance(value, BaseException):
                        report.failed[mq] = f"offset {off} written, but it could not be read back: {value}"
                    elif value >= off:
                        report.committed[mq] = off
                        self.stored[mq] = value
                    else:  # lost (or overwritten by an older offset): write it again
                        pending[mq] = off
                        held[mq] = value
                        report.committed.pop(mq, None)
                if not pending:
                    return
            for mq, off in pending.items():
                report.failed[mq] = f"the broker holds {held[mq]}, not {off}, after {FINAL_WRITE_ROUNDS} writes"


OFFSETS_FILE = "offsets.json"


def offsets_file_path(base_dir: str, client_id: str, group: str) -> Path:
    """Java: ``<localOffsetStoreDir>/<clientId>/<group>/offsets.json``."""
    return Path(os.path.expanduser(base_dir)) / client_id / group / OFFSETS_FILE


def encode_offsets(table: dict[MessageQueue, int]) -> str:
    """Java OffsetSerializeWrapper as fastjson PrettyFormat writes it."""
    return fastjson.dumps_pretty({"offsetTable": dict(sorted(table.items()))})


def decode_offsets(text: str) -> dict[MessageQueue, int]:
    """Parse ``offsets.json``; object keys (MessageQueue) and plain numbers as values."""
    obj = fastjson.loads(text)
    if not isinstance(obj, dict):
        raise ProtocolError("offsets.json: top level is not an object")
    table = obj.get("offsetTable") or {}
    if not isinstance(table, dict):
        raise ProtocolError("offsets.json: offsetTable is not an object")
    out: dict[MessageQueue, int] = {}
    for key, value in table.items():
        mq = MessageQueue.from_json(fastjson.parse_key(key))
        try:
            out[mq] = int(value)
        except (TypeError, ValueError):
            raise ProtocolError(f"offsets.json: offset of {mq} is not a number: {value!r}") from None
    return out


class LocalFileOffsetStore(OffsetStore):
    """Offsets in a local file (broadcasting): every member keeps its own progress."""

    def __init__(self, base_dir: str, client_id: str, group: str, *, enable_commit: bool = True) -> None:
        super().__init__(group, enable_commit=enable_commit)
        self.path = offsets_file_path(base_dir, client_id, group)

    def _read_file(self) -> dict[MessageQueue, int] | None:
        for candidate in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                text = candidate.read_text("utf-8")
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("cannot read %s: %s", candidate, exc)
                continue
            try:
                return decode_offsets(text)
            except ProtocolError as exc:  # a torn or corrupt file: fall back to the .bak copy
                log.warning("ignoring corrupt offset file %s: %s", candidate, exc)
        return None

    async def load(self) -> None:
        table = self._read_file()
        if table:
            self.table.update(table)

    async def _read_store(self, mq: MessageQueue) -> int:
        table = self._read_file()
        return -1 if table is None else table.get(mq, -1)

    async def persist(self, mq: MessageQueue) -> None:
        await self.persist_all(self.table)

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        if not self.enable_commit:
            return
        owned = set(mqs)
        data = {mq: off for mq, off in self.table.items() if mq in owned}
        if not data:
            return
        write_atomically(self.path, encode_offsets(data))

    async def persist_sync(self, mq: MessageQueue) -> None:
        await self.persist_all(self.table)

    async def persist_final(self, mqs: Iterable[MessageQueue]) -> OffsetPersistReport:
        report = OffsetPersistReport(enabled=self.enable_commit)
        if not self.enable_commit:
            return report
        wanted = set(mqs)
        owned = {mq: off for mq, off in self.table.items() if mq in wanted}
        try:
            await self.persist_all(owned)
        except OSError as exc:
            report.failed.update({mq: f"cannot write {self.path}: {exc}" for mq in owned})
        else:
            report.committed.update(owned)
        return report


def write_atomically(path: Path, text: str) -> None:
    """tmp file + fsync, previous content to ``.bak``, then rename over (Java MixAll.string2File)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    if path.exists():
        bak = path.with_name(path.name + ".bak")
        try:
            os.replace(path, bak)
        except OSError as exc:
            log.warning("cannot keep a backup of %s: %s", path, exc)
    os.replace(tmp, path)

