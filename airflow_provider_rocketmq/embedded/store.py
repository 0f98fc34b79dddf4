"""The embedded broker's message store: one commit log, one consume queue per (topic, queue id),
consumer offsets and topic configs.

Every message is kept as its encoded stored-message record (what a pull answer carries), so a pull
slices and joins records and never re-encodes. With a data directory a send is in the commit log
(``os.write``; also ``fsync`` when asked) and an offset update in ``offsets.log`` before the broker
answers; opening rebuilds the consume queues from the commit log and cuts a torn tail (see
docs/embedded.md, "Storage and durability").
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..client.protocol.errors import ConfigError, MessageDecodeError
from ..client.protocol.message import (
    PROPERTY_TAGS,
    MessageExt,
    decode_messages,
    encode_stored_message,
    make_offset_msg_id,
    string_to_properties,
    tags_code,
)
from ..client.route import PERM_INHERIT, PERM_READ, PERM_WRITE

log = logging.getLogger(__name__)

PERM_RW = PERM_READ | PERM_WRITE

_SIZE = struct.Struct(">i")


@dataclass
class TopicConfig:
    """What the broker knows about one topic (TopicConfig.java, the parts that matter here)."""

    topic: str
    read_queues: int = 8
    write_queues: int = 8
    perm: int = PERM_RW
    topic_sys_flag: int = 0
    order: bool = False

    def __str__(self) -> str:  # TopicConfig.toString, quoted in some error remarks
        perm = ("R" if self.perm & PERM_READ else "-") + ("W" if self.perm & PERM_WRITE else "-") + \
            ("X" if self.perm & PERM_INHERIT else "-")
        return (f"TopicConfig [topicName={self.topic}, readQueueNums={self.read_queues}, writeQueueNums="
                f"{self.write_queues}, perm={perm}, topicFilterType=SINGLE_TAG, topicSysFlag={self.topic_sys_flag}, "
                f"order={'true' if self.order else 'false'}]")


@dataclass(frozen=True)
class PutResult:
    """Where a message landed."""

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    msg_id: str  # offsetMsgId: store host + commit-log offset
    store_timestamp: int


class ConsumeQueue:
    """The messages of one (topic, queue id), indexed by queue offset.

    ``records[i]`` is the encoded record of queue offset ``i``; ``tags[i]`` its
    tagsCode (for broker-side tag filtering), ``store_ts[i]`` its store time and
    ``phy[i]`` its commit-log offset. ``min_offset`` rises when old messages are
    deleted (``delete_before``, used to emulate retention).
    """

    __slots__ = ("min_offset", "phy", "queue_id", "records", "store_ts", "tags", "topic")

    def __init__(self, topic: str, queue_id: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.records: list[bytes] = []
        self.tags: list[int] = []
        self.store_ts: list[int] = []
        self.phy: list[int] = []
        self.min_offset = 0

    @property
    def max_offset(self) -> int:
        return len(self.records)


ArrivalListener = Callable[[str, int, int], None]  # (topic, queue id, tagsCode)

# Few distinct tags, many messages: hashing each tag once keeps the send path cheap.
cached_tags_code = functools.lru_cache(maxsize=4096)(tags_code)


class MessageStore:
    """Commit log + consume queues + consumer offsets (+ topic configs) of one broker."""

    def __init__(self, store_host: str, data_dir: str | os.PathLike[str] | None = None, *,
                 fsync: bool = False) -> None:
        self.store_host = store_host
        self.fsync = fsync
        self.dir = Path(data_dir) if data_dir is not None else None
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.by_phy: dict[int, tuple[ConsumeQueue, int]] = {}
        self.commit_log_end = 0
        # group -> topic -> queue id -> offset
        self.offsets: dict[str, dict[str, dict[int, int]]] = {}
        self.topics: dict[str, TopicConfig] = {}
        self.listeners: list[ArrivalListener] = []
        self._log_fd: int | None = None
        self._offsets_fd: int | None = None
        self._lock_fd: int | None = None
        if self.dir is not None:
            self._open_files()

    # -- persistence ------------------------------------------------------------
    def _open_files(self) -> None:
        assert self.dir is not None
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock_dir()
        self._load_topics()
        self._load_commit_log()
        self._load_offsets()

    def _lock_dir(self) -> None:
        """One broker per directory: two writers would interleave commit-log records."""
        assert self.dir is not None
        try:
            import fcntl
        except ImportError:  # not on POSIX: no protection, as documented
            return
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ConfigError("data_dir", f"{self.dir} is in use by another running broker") from None
        self._lock_fd = fd

    def _load_topics(self) -> None:
        assert self.dir is not None
        path = self.dir / "topics.json"
        if not path.exists():
            return
        try:
            raw = json.loads(path.read_text("utf-8"))
            for item in raw.get("topics", []):
                cfg = TopicConfig(**item)
                self.topics[cfg.topic] = cfg
        except (ValueError, TypeError) as exc:
            raise MessageDecodeError(f"{path}: topic configs are corrupt: {exc}") from None

    def put_topic(self, cfg: TopicConfig) -> TopicConfig:
        """Create or replace a topic's config (UPDATE_AND_CREATE_TOPIC) and save the table."""
        self.topics[cfg.topic] = cfg
        self.save_topics()
        return cfg

    def ensure_topic(self, topic: str, queues: int, perm: int = PERM_RW, topic_sys_flag: int = 0) -> TopicConfig:
        """The topic's config, created with ``queues`` read and write queues when it has none."""
        cfg = self.topics.get(topic)
        if cfg is None:
            cfg = self.put_topic(TopicConfig(topic, queues, queues, perm, topic_sys_flag))
        return cfg

    def save_topics(self) -> None:
        if self.dir is None:
            return
        path = self.dir / "topics.json"
        tmp = path.with_suffix(".tmp")
        data = json.dumps({"topics": [asdict(c) for c in self.topics.values()]}, indent=1)
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            if self.fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)

    def _load_commit_log(self) -> None:
        assert self.dir is not None
        path = self.dir / "commitlog"
        data = path.read_bytes() if path.exists() else b""
        pos = 0
        end = len(data)
        while pos + 4 <= end:
            (size,) = _SIZE.unpack_from(data, pos)
            if size < 92 or pos + size > end:
                break
            try:
                (msg,) = decode_messages(data[pos:pos + size], decompress_body=False)
            except (MessageDecodeError, ValueError):
                break
            if msg.commit_log_offset != pos:
                log.warning("%s: record at %d claims offset %d; stopping the scan", path, pos,
                            msg.commit_log_offset)
                break
            cq = self.queue(msg.topic, msg.queue_id)
            if msg.queue_offset != cq.max_offset:
                log.warning("%s: queue offset gap in %s/%d at %d", path, msg.topic, msg.queue_id, pos)
            self._index(cq, data[pos:pos + size], cached_tags_code(msg.properties.get(PROPERTY_TAGS)),
                        msg.store_timestamp, pos)
            pos += size
        if pos != end:
            log.warning("%s: truncating %d bytes of torn tail at %d", path, end - pos, pos)
            with open(path, "r+b") as fh:
                fh.truncate(pos)
        self.commit_log_end = pos
        self._log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _load_offsets(self) -> None:
        assert self.dir is not None
        path = self.dir / "offsets.log"
        if path.exists():
            for line in path.read_text("utf-8", errors="replace").splitlines():
                try:
                    g, t, q, o = json.loads(line)
                    if o is None:  # removed by replace_offsets
                        self.offsets.get(g, {}).get(t, {}).pop(int(q), None)
                    else:
                        self.offsets.setdefault(g, {}).setdefault(t, {})[int(q)] = int(o)
                except (ValueError, TypeError):
                    continue  # a torn last line: that update was never acknowledged
        # compact: one line per (group, topic, queue)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for g, topics in self.offsets.items():
                for t, qs in topics.items():
                    for q, o in qs.items():
                        fh.write(json.dumps([g, t, q, o]) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        self._offsets_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def close(self) -> None:
        for fd in (self._log_fd, self._offsets_fd, self._lock_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)  # closing the lock descriptor releases the flock
        self._log_fd = self._offsets_fd = self._lock_fd = None

    # -- writing ----------------------------------------------------------------------
    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self.queues.get(key)
        if cq is None:
            cq = self.queues[key] = ConsumeQueue(topic, queue_id)
        return cq

    def _index(self, cq: ConsumeQueue, record: bytes, tcode: int, store_ts: int, phy: int) -> None:
        self.by_phy[phy] = (cq, len(cq.records))
        cq.records.append(record)
        cq.tags.append(tcode)
        cq.store_ts.append(store_ts)
        cq.phy.append(phy)

    def append_encoded(self, cq: ConsumeQueue, record: bytes, tags_code: int, store_ts: int) -> None:
        """Index ``record`` as the next message of ``cq`` at the commit-log end, without writing it to disk.

        For stores filled in memory before they serve (embedded.backlog): ``record`` must already
        carry ``cq.max_offset`` as its queue offset and ``commit_log_end`` as its commit-log offset.
        """
        phy = self.commit_log_end
        self._index(cq, record, tags_code, store_ts, phy)
        self.commit_log_end = phy + len(record)

    def put_messages(self, topic: str, queue_id: int,
                     items: Iterable[tuple[bytes, str, int, int, int, str | None]], *,
                     born_host: str, reconsume_times: int = 0) -> list[PutResult]:
        """Append messages to one queue as one write batch.

        ``items`` are ``(body, properties string, flag, sys_flag, born timestamp, TAGS)``.
        """
        cq = self.queue(topic, queue_id)
        store_ts = int(time.time() * 1000)
        phy = self.commit_log_end
        qoff = cq.max_offset
        out: list[PutResult] = []
        staged: list[tuple[bytes, int, int]] = []
        for body, props, flag, sys_flag, born_ts, tags_value in items:
            record = encode_stored_message(
                topic=topic, body=body, properties=props, queue_id=queue_id, queue_offset=qoff,
                commit_log_offset=phy, born_timestamp=born_ts, born_host=born_host,
                store_timestamp=store_ts, store_host=self.store_host, flag=flag, sys_flag=sys_flag,
                reconsume_times=reconsume_times)
            tags = cached_tags_code(tags_value) if tags_value else 0
            staged.append((record, tags, phy))
            out.append(PutResult(topic, queue_id, qoff, phy, make_offset_msg_id(self.store_host, phy),
                                 store_ts))
            phy += len(record)
            qoff += 1
        if self._log_fd is not None:
            _write_all(self._log_fd, b"".join(r for r, _, _ in staged))
            if self.fsync:
                os.fsync(self._log_fd)
        for record, tags, p in staged:
            self._index(cq, record, tags, store_ts, p)
        self.commit_log_end = phy
        for listener in list(self.listeners):
            for _, tags, _ in staged:
                listener(topic, queue_id, tags)
        return out

    def put_message(self, topic: str, queue_id: int, body: bytes, properties: str, *, flag: int = 0,
                    sys_flag: int = 0, born_timestamp: int, born_host: str, reconsume_times: int = 0,
                    tags: str | None = None) -> PutResult:
        """Append one message; ``tags`` is its TAGS property (parsed from ``properties`` when None)."""
        if tags is None:
            tags = _tags_of(properties)
        return self.put_messages(topic, queue_id, [(body, properties, flag, sys_flag, born_timestamp, tags)],
                                 born_host=born_host, reconsume_times=reconsume_times)[0]

    def delete_before(self, topic: str, queue_id: int, offset: int) -> None:
        """Emulate retention: messages below ``offset`` are gone (min offset rises)."""
        cq = self.queue(topic, queue_id)
        cq.min_offset = max(cq.min_offset, min(offset, cq.max_offset))

    # -- reading ----------------------------------------------------------------------
    def get_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.max_offset if cq is not None else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.min_offset if cq is not None else 0

    def store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store timestamp of the message at ``offset``, or 0 when there is none."""
        cq = self.queues.get((topic, queue_id))
        if cq is None or not cq.min_offset <= offset < cq.max_offset:
            return 0
        return cq.store_ts[offset]

    def search_offset(self, topic: str, queue_id: int, timestamp: int) -> int:
        """ConsumeQueue.getOffsetInQueueByTime of 4.9.7: a binary search by store time that stops at an
        exact match (any one of equal times), else takes the nearer neighbour (the earlier on a tie),
        the first entry for a time before all, the *last* entry (max offset - 1) for one after all,
        0 for an empty or unknown queue."""
        cq = self.queues.get((topic, queue_id))
        if cq is None or cq.max_offset <= cq.min_offset:
            return 0
        ts = cq.store_ts
        low, high = cq.min_offset, cq.max_offset - 1
        left = right = -1
        left_ts = right_ts = -1
        while high >= low:
            mid = (low + high) // 2
            t = ts[mid]
            if t == timestamp:
                return mid
            if t > timestamp:
                high, right, right_ts = mid - 1, mid, t
            else:
                low, left, left_ts = mid + 1, mid, t
        if left_ts == -1:
            return right
        if right_ts == -1:
            return left
        return right if abs(timestamp - left_ts) > abs(timestamp - right_ts) else left

    def record_at(self, commit_log_offset: int) -> bytes | None:
        hit = self.by_phy.get(commit_log_offset)
        if hit is None:
            return None
        cq, idx = hit
        return cq.records[idx]

    def message_at(self, commit_log_offset: int) -> MessageExt | None:
        rec = self.record_at(commit_log_offset)
        return decode_messages(rec, decompress_body=False)[0] if rec is not None else None

    # -- consumer offsets ----------------------------------------------------------------
    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Committed offset, or -1 when the group never committed one for the queue."""
        return self.offsets.get(group, {}).get(topic, {}).get(queue_id, -1)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.offsets.setdefault(group, {}).setdefault(topic, {})[queue_id] = offset
        if self._offsets_fd is not None:
            _write_all(self._offsets_fd, (json.dumps([group, topic, queue_id, offset]) + "\n").encode())
            if self.fsync:
                os.fsync(self._offsets_fd)

    def has_offsets(self, group: str, topic: str) -> bool:
        """True once ``group`` committed an offset for any queue of ``topic``."""
        return bool(self.offsets.get(group, {}).get(topic))

    def replace_offsets(self, group: str, topic: str, table: dict[int, int]) -> None:
        """Make ``table`` the group's whole offset table for ``topic`` (queues not in it are dropped)."""
        old = self.offsets.setdefault(group, {}).get(topic, {})
        self.offsets[group][topic] = dict(table)
        if self._offsets_fd is not None:
            lines = [[group, topic, q, None] for q in old if q not in table]
            lines += [[group, topic, q, o] for q, o in table.items()]
            _write_all(self._offsets_fd, "".join(json.dumps(x) + "\n" for x in lines).encode())
            if self.fsync:
                os.fsync(self._offsets_fd)

    def topics_of_group(self, group: str) -> list[str]:
        return list(self.offsets.get(group, {}))


def _tags_of(props: str) -> str | None:
    # Only TAGS matters for the consume queue; avoid a full parse when it is absent.
    if "TAGS\x01" not in props:
        return None
    return string_to_properties(props).get(PROPERTY_TAGS)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]

