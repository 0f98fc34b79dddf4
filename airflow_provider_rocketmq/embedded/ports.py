"""The narrow interfaces the broker's request services are built with (`broker.EmbeddedBroker` wires them).

No service holds the broker or a sibling: each gets a `BrokerContext` at construction and keeps the
parts it uses. Imports point one way only - `broker` imports the services, the services import this
module and leaf modules (store, settings, consumer_manager, filter, headers) - so `embedded/` has no
import cycle (tests/test_structure.py).

    pull      -> store_slot, groups, members, offsets
    send      -> store_slot, groups, settings
    client    -> store_slot, groups, members (registration), locks, offsets
    admin     -> store_slot, members, clients, settings
    schedule  -> store_slot, settings
    namesrv   -> RoutedBroker (what a route names of each broker)
    the guard -> RequestVerifier (the ACL mode, checked before any handler)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from ..client.connection import RemotingProtocol
from ..client.protocol.command import RemotingCommand
from ..client.protocol.queue import MessageQueue
from .consumer_manager import ClientChannel, ConsumerGroupInfo
from .filter import SubscriptionData
from .settings import BrokerSettings, GroupConfig
from .store import MessageStore, TopicConfig


class StoreSlot:
    """The broker's message store: opened by `start`; a `stop` with a data dir drops it and the next
    start reopens it from disk, so services look it up on every request instead of keeping it."""

    __slots__ = ("current",)

    def __init__(self) -> None:
        self.current: MessageStore | None = None

    def get(self) -> MessageStore:
        """The open store (requests are served only while the broker runs)."""
        store = self.current
        if store is None:
            raise RuntimeError("the broker is not started")
        return store


class GroupLookup(Protocol):
    """Subscription-group configs (`settings.GroupConfigs`)."""

    def config(self, group: str) -> GroupConfig | None:
        """findSubscriptionGroupConfig: None when the group does not exist and may not be auto-created."""
        ...


class Members(Protocol):
    """Consumer-group membership as the pull and admin handlers read it."""

    def find(self, group: str) -> ConsumerGroupInfo | None: ...


class Membership(Members, Protocol):
    """Membership as HEART_BEAT and UNREGISTER_CLIENT change it (`consumer_manager.ConsumerManager`)."""

    def register(self, group: str, channel: ClientChannel, *, consume_type: str, message_model: str,
                 consume_from_where: str, subscriptions: list[SubscriptionData]) -> bool: ...

    def register_producer(self, group: str, channel: ClientChannel) -> None: ...

    def unregister(self, group: str, conn: RemotingProtocol) -> bool: ...

    def unregister_producer(self, group: str, conn: RemotingProtocol) -> None: ...


class QueueLocks(Protocol):
    """Orderly consumers' queue locks (`consumer_manager.LockManager`)."""

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> list[MessageQueue]: ...

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None: ...


class OffsetCommits(Protocol):
    """Where consumer offsets sent by clients go (`client_offsets.ClientOffsetCommits`)."""

    async def commit(self, group: str, topic: str, queue_id: int, offset: int, *, from_pull: bool) -> None:
        """Store an UPDATE_CONSUMER_OFFSET (``from_pull`` False) or a pull's commitOffset."""
        ...

    def zero_for_uncommitted(self) -> bool:
        """Whether a never-committed queue that starts at 0 is answered offset 0 (first message in memory)."""
        ...


class ClientCalls(Protocol):
    """Requests the broker sends to its clients (`broker2client.Broker2Client`)."""

    def channel(self, group: str, client_id: str | None = None) -> RemotingProtocol:
        """A live connection of ``client_id`` (or any member) in ``group``; LookupError when none."""
        ...

    def tell_reset(self, group: str, topic: str, table: Mapping[MessageQueue, int], timestamp: int,
                   force: bool) -> list[str]:
        """RESET_CONSUMER_CLIENT_OFFSET to every member of ``group``; the client ids told."""
        ...


class RequestVerifier(Protocol):
    """An ACL mode as the broker's guard uses it before any handler (plain ACL 1.0: `acl.AclValidator`,
    SYSTEM_ERROR refusals; ACL 2.0: `acl2.Acl2Verifier`, NO_PERMISSION refusals)."""

    @property
    def refusal_code(self) -> int:
        """The response code of a refusal."""
        ...

    def refusal(self, cmd: RemotingCommand, peer: str) -> str | None:
        """The remark of the refusal when ``cmd`` from ``peer`` is refused, else None."""
        ...


class RoutedBroker(Protocol):
    """A broker as the name server describes it in routes and cluster info."""

    @property
    def name(self) -> str: ...

    @property
    def cluster(self) -> str: ...

    @property
    def addr(self) -> str: ...

    @property
    def running(self) -> bool: ...

    @property
    def topics(self) -> Mapping[str, TopicConfig]: ...


@dataclass(frozen=True, slots=True)
class BrokerContext:
    """What the request services of one broker share; `EmbeddedBroker` builds it once."""

    settings: BrokerSettings  # name, cluster, region, limits, auto-creation (read at request time)
    store_slot: StoreSlot
    groups: GroupLookup
    members: Membership
    locks: QueueLocks
    offsets: OffsetCommits
    clients: ClientCalls
