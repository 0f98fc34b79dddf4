"""Consumer-group membership and queue locks on the embedded broker.

Membership follows ConsumerManager/ConsumerGroupInfo: a HEART_BEAT registers the
sending channel under each of its consumer groups; a group *changes* when a
channel joins or leaves, or a topic is added to or dropped from its
subscriptions (a newer subVersion of a known topic replaces it silently). The
broker tells every member of a changed group with NOTIFY_CONSUMER_IDS_CHANGED.
Channels leave on UNREGISTER_CLIENT, on TCP close, or when no heartbeat arrived
for ``channel_expiry`` seconds (120 s on a real broker).

Queue locks follow RebalanceLockManager: a lock belongs to a client id and lapses
``lock_expiry`` seconds (60 s) after it was last taken or renewed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..client.connection import RemotingProtocol
from ..client.protocol.queue import MessageQueue
from .filter import SubscriptionData


@dataclass
class ClientChannel:
    """One client connection registered in a group."""

    conn: RemotingProtocol
    client_id: str
    language: str
    version: int
    last_update: float = field(default_factory=time.monotonic)

    @property
    def client_addr(self) -> str:
        return self.conn.peer


@dataclass
class ConsumerGroupInfo:
    """Members and subscriptions of one consumer group."""

    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[RemotingProtocol, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [c.client_id for c in self.channels.values()]

    def update_subscriptions(self, subs: Iterable[SubscriptionData]) -> bool:
        """Replace subscriptions; True when a topic was added or removed."""
        changed = False
        new = {s.topic: s for s in subs}
        for topic, sub in new.items():
            old = self.subscriptions.get(topic)
            if old is None:
                self.subscriptions[topic] = sub
                changed = True
            elif sub.sub_version > old.sub_version:
                self.subscriptions[topic] = sub
        for topic in list(self.subscriptions):
            if topic not in new:
                del self.subscriptions[topic]
                changed = True
        return changed


Notify = Callable[[ConsumerGroupInfo], None]


class ConsumerManager:
    """Every consumer group of one broker; calls ``notify`` on every membership change."""

    def __init__(self, notify: Notify, *, channel_expiry: float = 120.0) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self.producer_groups: dict[str, dict[RemotingProtocol, ClientChannel]] = {}
        self.notify = notify
        self.channel_expiry = channel_expiry

    def find(self, group: str) -> ConsumerGroupInfo | None:
        return self.groups.get(group)

    def register(self, group: str, channel: ClientChannel, *, consume_type: str, message_model: str,
                 consume_from_where: str, subscriptions: list[SubscriptionData]) -> bool:
        info = self.groups.get(group)
        if info is None:
            info = self.groups[group] = ConsumerGroupInfo(group)
        info.consume_type = consume_type
        info.message_model = message_model
        info.consume_from_where = consume_from_where
        existing = info.channels.get(channel.conn)
        joined = existing is None
        if joined:
            info.channels[channel.conn] = channel
        else:
            assert existing is not None
            existing.last_update = time.monotonic()
            existing.client_id = channel.client_id
        changed = info.update_subscriptions(subscriptions) or joined
        if changed:
            self.notify(info)
        return changed

    def register_producer(self, group: str, channel: ClientChannel) -> None:
        chans = self.producer_groups.setdefault(group, {})
        old = chans.get(channel.conn)
        if old is None:
            chans[channel.conn] = channel
        else:
            old.last_update = time.monotonic()

    def _remove(self, info: ConsumerGroupInfo, conn: RemotingProtocol) -> bool:
        if info.channels.pop(conn, None) is None:
            return False
        if info.channels:
            self.notify(info)
        else:
            del self.groups[info.group]
        return True

    def unregister(self, group: str, conn: RemotingProtocol) -> bool:
        info = self.groups.get(group)
        return self._remove(info, conn) if info is not None else False

    def unregister_producer(self, group: str, conn: RemotingProtocol) -> None:
        chans = self.producer_groups.get(group)
        if chans is not None:
            chans.pop(conn, None)
            if not chans:
                del self.producer_groups[group]

    def channel_closed(self, conn: RemotingProtocol) -> None:
        for info in list(self.groups.values()):
            self._remove(info, conn)
        for group in list(self.producer_groups):
            self.unregister_producer(group, conn)

    def clear(self) -> None:
        """Forget every member (a stopped broker keeps no channel)."""
        self.groups.clear()
        self.producer_groups.clear()

    def expired_channels(self) -> list[RemotingProtocol]:
        """Remove channels without a heartbeat for ``channel_expiry`` s; return them (to close)."""
        deadline = time.monotonic() - self.channel_expiry
        out: list[RemotingProtocol] = []
        for info in list(self.groups.values()):
            for conn, chan in list(info.channels.items()):
                if chan.last_update < deadline:
                    self._remove(info, conn)
                    out.append(conn)
        for group, chans in list(self.producer_groups.items()):
            for conn, chan in list(chans.items()):
                if chan.last_update < deadline:
                    self.unregister_producer(group, conn)
                    out.append(conn)
        return out


class LockManager:
    """Broker-side queue locks for orderly consumption (RebalanceLockManager)."""

    def __init__(self, lock_expiry: float = 60.0) -> None:
        self.lock_expiry = lock_expiry
        self._locks: dict[str, dict[MessageQueue, tuple[str, float]]] = {}

    def _live(self, entry: tuple[str, float] | None, now: float) -> bool:
        return entry is not None and now - entry[1] <= self.lock_expiry

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> list[MessageQueue]:
        now = time.monotonic()
        table = self._locks.setdefault(group, {})
        locked: list[MessageQueue] = []
        for mq in mqs:
            entry = table.get(mq)
            if not self._live(entry, now) or (entry is not None and entry[0] == client_id):
                table[mq] = (client_id, now)
                locked.append(mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        table = self._locks.get(group, {})
        for mq in mqs:
            entry = table.get(mq)
            if entry is not None and entry[0] == client_id:
                del table[mq]

    def clear(self) -> None:
        """Forget every lock (a restarted broker holds none)."""
        self._locks.clear()

    def owner(self, group: str, mq: MessageQueue) -> str | None:
        """The client id holding a live lock on ``mq``, if any."""
        entry = self._locks.get(group, {}).get(mq)
        return entry[0] if entry is not None and self._live(entry, time.monotonic()) else None
