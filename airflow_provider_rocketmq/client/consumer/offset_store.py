"""Consumer offset stores: the broker (clustering) or a local file (broadcasting).

Both keep offsets in memory, updated after every consumed batch with
increase-only semantics (a late result of an older batch never moves an offset
back), and persist periodically. The remote store writes UPDATE_CONSUMER_OFFSET
oneway like Java; the local store writes Java's ``offsets.json`` (fastjson
object keys, pretty-printed) with a ``.bak`` copy and an atomic replace.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from ..errors import ProtocolError, RocketMQError
from ..queue import MessageQueue
from ..remoting import fastjson

log = logging.getLogger(__name__)


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetClient(Protocol):
    """The MQClient helpers the remote store needs."""

    async def query_consumer_offset(self, mq: MessageQueue, group: str) -> int: ...

    async def update_consumer_offset(self, mq: MessageQueue, group: str, offset: int,
                                     oneway: bool = False) -> None: ...


class OffsetStore:
    """In-memory table shared by both stores; subclasses say how to load and persist."""

    def __init__(self, group: str, *, enable_commit: bool = True) -> None:
        self.group = group
        self.enable_commit = enable_commit
        self.table: dict[MessageQueue, int] = {}

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

    def remove_offset(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        return {mq: off for mq, off in self.table.items() if topic is None or mq.topic == topic}


class RemoteBrokerOffsetStore(OffsetStore):
    """Offsets held by the broker that masters each queue (clustering)."""

    def __init__(self, client: OffsetClient, group: str, *, enable_commit: bool = True) -> None:
        super().__init__(group, enable_commit=enable_commit)
        self.client = client

    async def _read_store(self, mq: MessageQueue) -> int:
        try:
            return await self.client.query_consumer_offset(mq, self.group)
        except RocketMQError as exc:
            log.warning("cannot read the committed offset of %s for %s: %s", mq, self.group, exc)
            return -2

    async def persist(self, mq: MessageQueue) -> None:
        off = self.table.get(mq)
        if off is None or not self.enable_commit:
            return
        try:
            await self.client.update_consumer_offset(mq, self.group, off, oneway=True)
        except RocketMQError as exc:
            log.warning("cannot persist offset %d of %s: %s", off, mq, exc)

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        owned = set(mqs)
        for mq in list(self.table):
            if mq in owned:
                await self.persist(mq)
            else:  # Java evicts offsets of queues this client no longer owns
                self.table.pop(mq, None)

    async def persist_sync(self, mq: MessageQueue) -> None:
        """Acknowledged write, for shutdown/drop paths that must not lose the offset."""
        off = self.table.get(mq)
        if off is None or not self.enable_commit:
            return
        await self.client.update_consumer_offset(mq, self.group, off, oneway=False)


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

