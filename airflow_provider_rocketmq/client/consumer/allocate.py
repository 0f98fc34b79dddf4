"""Queue allocation strategies (REFERENCE 1.4), producing Java's assignments.

Every strategy takes the *sorted* queue list and the *sorted* client-id list
(the rebalancer sorts both like Java's ``RebalanceImpl``) and returns the queues
the current client owns. All members of a group must use the same strategy,
otherwise queues are consumed twice or not at all.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from ..protocol.errors import ConfigError
from ..protocol.queue import MessageQueue

log = logging.getLogger(__name__)


class AllocateStrategy(Protocol):
    """What the rebalancer calls: ``allocate(group, current_cid, mq_all, cid_all)``."""

    name: str

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]: ...


def _check(current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> bool:
    """Java's AbstractAllocateMessageQueueStrategy.check: False means "own nothing"."""
    if not current_cid:
        raise ValueError("current_cid is empty")
    if not mq_all or not cid_all:
        return False
    if current_cid not in cid_all:
        log.info("client %s is not in the consumer list %s; owning no queue", current_cid, list(cid_all))
        return False
    return True


class AllocateMessageQueueAveragely:
    """Contiguous blocks; the first ``|mq| % |cid|`` clients get one extra queue."""

    name = "AVG"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        n_mq, n_cid = len(mq_all), len(cid_all)
        index = list(cid_all).index(current_cid)
        mod = n_mq % n_cid
        if n_mq <= n_cid:
            avg = 1
        elif mod > 0 and index < mod:
            avg = n_mq // n_cid + 1
        else:
            avg = n_mq // n_cid
        start = index * avg if (mod > 0 and index < mod) else index * avg + mod
        count = min(avg, n_mq - start)
        return list(mq_all[start:start + count]) if count > 0 else []


class AllocateMessageQueueAveragelyByCircle:
    """Round robin: queue k goes to client ``k % |cid|``."""

    name = "AVG_BY_CIRCLE"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        index = list(cid_all).index(current_cid)
        return [mq for k, mq in enumerate(mq_all) if k % len(cid_all) == index]


class AllocateMessageQueueByConfig:
    """A fixed queue list, whatever the group looks like."""

    name = "CONFIG"

    def __init__(self, message_queues: Iterable[MessageQueue]) -> None:
        self.message_queues = list(message_queues)

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        return list(self.message_queues)


class AllocateMessageQueueByMachineRoom:
    """Only queues of brokers named ``<room>@<name>`` in ``consumer_idcs``, split in blocks."""

    name = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Iterable[str]) -> None:
        self.consumer_idcs = set(consumer_idcs)

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if current_cid not in cid_all:
            return []
        index = list(cid_all).index(current_cid)
        pre: list[MessageQueue] = []
        for mq in mq_all:
            parts = mq.broker_name.split("@")
            if len(parts) == 2 and parts[0] in self.consumer_idcs:
                pre.append(mq)
        mod, rem = divmod(len(pre), len(cid_all))
        result = pre[mod * index:mod * index + mod]
        if rem > index:
            result.append(pre[index + mod * len(cid_all)])
        return result


class MachineRoomResolver(Protocol):
    def broker_deploy_in(self, mq: MessageQueue) -> str: ...

    def consumer_deploy_in(self, client_id: str) -> str: ...


class PrefixMachineRoomResolver:
    """Rooms from name prefixes: broker ``room@name`` and client id ``room@ip@instance``.

    A convention (Java leaves the resolver to the user); pass your own resolver otherwise.
    """

    def __init__(self, separator: str = "@") -> None:
        self.separator = separator

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return mq.broker_name.split(self.separator)[0]

    def consumer_deploy_in(self, client_id: str) -> str:
        return client_id.split(self.separator)[0]


class AllocateMachineRoomNearby:
    """Queues of a room go to that room's consumers; rooms without consumers are shared by all."""

    def __init__(self, inner: AllocateStrategy, resolver: MachineRoomResolver | None = None) -> None:
        if inner is None:
            raise ConfigError("allocate_strategy", "machine-room nearby needs an inner strategy")
        self.inner = inner
        self.resolver = resolver or PrefixMachineRoomResolver()
        self.name = f"MACHINE_ROOM_NEARBY-{inner.name}"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        mr2mq: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = self.resolver.broker_deploy_in(mq)
            if not room:
                raise ValueError(f"machine room is empty for {mq}")
            mr2mq.setdefault(room, []).append(mq)
        mr2c: dict[str, list[str]] = {}
        for cid in cid_all:
            room = self.resolver.consumer_deploy_in(cid)
            if not room:
                raise ValueError(f"machine room is empty for consumer {cid}")
            mr2c.setdefault(room, []).append(cid)
        result: list[MessageQueue] = []
        mine = self.resolver.consumer_deploy_in(current_cid)
        local = mr2mq.pop(mine, None)
        if local:
            result += self.inner.allocate(group, current_cid, local, mr2c.get(mine, []))
        for room in sorted(mr2mq):  # Java iterates a TreeMap: rooms in sorted order
            if room not in mr2c:
                result += self.inner.allocate(group, current_cid, mr2mq[room], cid_all)
        return result


def md5_hash(key: str) -> int:
    """First four MD5 bytes, big-endian, unsigned (Java ConsistentHashRouter.MD5Hash)."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


class AllocateMessageQueueConsistentHash:
    """A hash ring of ``virtual_node_cnt`` nodes per client keyed ``"<clientId>-<i>"``."""

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_node_cnt: int = 10, hash_function: Callable[[str], int] | None = None) -> None:
        if virtual_node_cnt < 0:
            raise ConfigError("virtual_node_cnt", f"must be >= 0, got {virtual_node_cnt}")
        self.virtual_node_cnt = virtual_node_cnt
        self.hash_function = hash_function or md5_hash

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        ring: dict[int, str] = {}
        for cid in cid_all:  # later nodes overwrite colliding positions, like TreeMap.put
            for i in range(self.virtual_node_cnt):
                ring[self.hash_function(f"{cid}-{i}")] = cid
        if not ring:
            return []
        points = sorted(ring)
        out = []
        for mq in mq_all:
            pos = bisect.bisect_left(points, self.hash_function(str(mq)))
            if ring[points[pos if pos < len(points) else 0]] == current_cid:
                out.append(mq)
        return out


STRATEGY_NAMES = ("averagely", "by_circle", "consistent_hash")


def strategy_by_name(name: str) -> AllocateStrategy:
    """Strategies that need no parameters, by snake_case or Java name."""
    key = name.strip().lower()
    if key in ("averagely", "avg"):
        return AllocateMessageQueueAveragely()
    if key in ("by_circle", "averagely_by_circle", "avg_by_circle", "circle"):
        return AllocateMessageQueueAveragelyByCircle()
    if key in ("consistent_hash",):
        return AllocateMessageQueueConsistentHash()
    raise ConfigError("allocate_strategy",
                      f"unknown strategy {name!r}; expected one of {', '.join(STRATEGY_NAMES)} "
                      "or a strategy object (by config / machine room / nearby need parameters)")
