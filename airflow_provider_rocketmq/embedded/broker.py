"""EmbeddedBroker: one RocketMQ-protocol broker (a master, brokerId 0) in asyncio.

It serves the remoting requests a producer, push consumer and admin tool send, answers with the
response codes, remarks, extFields and body shapes a real 4.9.7 broker uses, and can call its
clients back (NOTIFY_CONSUMER_IDS_CHANGED, GET_CONSUMER_RUNNING_INFO, RESET_CONSUMER_CLIENT_OFFSET,
CONSUME_MESSAGE_DIRECTLY). It is a test and demo peer, never a production broker.

This module is the composition root: `EmbeddedBroker` builds the shared parts (store slot, group
configs, membership, locks, offset commits, calls to clients), hands them to the request services
as one `ports.BrokerContext`, and puts every handler behind `_guard` (ACL, injected faults,
Java's answer to a bad header). Nothing else in the package imports it but `cluster`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from ..client.connection import Handler, RemotingProtocol
from ..client.protocol.codes import ResponseCode
from ..client.protocol.command import RemotingCommand
from ..client.protocol.errors import ConfigError
from ..client.protocol.message import MessageExt, decode_messages, make_offset_msg_id
from ..client.protocol.names import DEFAULT_TOPIC
from ..client.protocol.queue import MessageQueue
from ..client.route import PERM_INHERIT
from .acl import AclConfig, AclValidator
from .acl2 import Acl2Config, Acl2Verifier, AuthHandlers, AuthMetadata
from .admin_handlers import AdminHandlers
from .bridge import bridged
from .broker2client import Broker2Client
from .client_handlers import ClientHandlers
from .client_offsets import ClientOffsetCommits
from .consumer_manager import ConsumerManager, LockManager
from .faults import FaultInjector
from .headers import HeaderError
from .net import abort_connections, close_server, header_error_response
from .ports import BrokerContext, RequestVerifier, StoreSlot
from .pull import PullService
from .schedule import ScheduleService
from .send import SendHandlers
from .settings import BrokerSettings, GroupConfigs
from .store import PERM_RW, MessageStore, TopicConfig

log = logging.getLogger(__name__)


async def _not_supported(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                             remark=f" request type {cmd.code} not supported")


class _HandlerTable(dict[int, Handler]):
    """The broker's handlers; ``get`` of an unknown code gives the guarded not-supported answer."""

    def __init__(self, fallback: Handler) -> None:
        super().__init__()
        self.fallback = fallback

    def get(self, code: int, default: Any = None) -> Any:
        handler = super().get(code)
        return self.fallback if handler is None else handler


class EmbeddedBroker:
    """A broker master serving the remoting protocol on ``settings.host:settings.port``."""

    def __init__(self, settings: BrokerSettings | None = None) -> None:
        self.settings = settings or BrokerSettings()
        self.store_slot = StoreSlot()
        self.faults = FaultInjector()
        self.groups = GroupConfigs(self.settings)
        # membership changes are told to the members through self.clients, built next from the membership
        self.consumers = ConsumerManager(lambda info: self.clients.notify_ids_changed(info),
                                         channel_expiry=self.settings.channel_expiry)
        self.clients = Broker2Client(self.consumers, self.groups)
        self.locks = LockManager(self.settings.lock_expiry)
        self.offsets = ClientOffsetCommits(self.store_slot, self.faults, self.settings)
        # swapped whole by set_acl (like the real broker reloading plain_acl.yml); read once per request
        self.acl: RequestVerifier | None = AclValidator(self.settings.acl) if self.settings.acl is not None else None
        # ACL 2.0: users and policies, changed by AUTH_* requests (or `auth`) while the broker runs
        self.auth: AuthMetadata | None = None
        if self.settings.acl2 is not None:
            self.set_acl2(self.settings.acl2)
        self.conns: set[RemotingProtocol] = set()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        ctx = BrokerContext(settings=self.settings, store_slot=self.store_slot, groups=self.groups,
                            members=self.consumers, locks=self.locks, offsets=self.offsets, clients=self.clients)
        self.pull = PullService(ctx)
        self.send_handlers = SendHandlers(ctx)
        self.client_handlers = ClientHandlers(ctx)
        self.admin_handlers = AdminHandlers(ctx)
        self.auth_handlers = AuthHandlers(lambda: self.auth)
        self.schedule = ScheduleService(ctx)
        # unknown codes too pass the guard (ACL first, as the real broker's RPC hook runs for every code)
        self.handlers: dict[int, Handler] = _HandlerTable(self._guard(_not_supported))
        for table in (self.pull.handlers(), self.send_handlers.handlers(), self.client_handlers.handlers(),
                      self.admin_handlers.handlers(), self.auth_handlers.handlers()):
            for code, handler in table.items():
                self.handlers[code] = self._guard(handler)

    # -- identity ---------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def cluster(self) -> str:
        return self.settings.cluster

    @property
    def addr(self) -> str:
        return f"{self.settings.host}:{self.settings.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def store(self) -> MessageStore | None:
        """The message store: None before the first start and after a stop with a data dir."""
        return self.store_slot.current

    # -- lifecycle --------------------------------------------------------------------
    @bridged
    async def start(self) -> None:
        """Open the port (and the store). ``await`` it on a loop, or call it via the cluster."""
        if self._server is not None:
            return
        self.loop = asyncio.get_running_loop()
        self._server = await self.loop.create_server(self._make_protocol, self.settings.host, self.settings.port)
        sock = self._server.sockets[0]
        self.settings.port = sock.getsockname()[1]
        if self.store_slot.current is None:
            try:
                store = self._open_store()
            except BaseException:
                self._server.close()
                self._server = None
                raise
            store.listeners.append(self.pull.on_arrival)
            store.listeners.append(self.schedule.on_arrival)
            self.store_slot.current = store
        self._ensure_system_topics()
        self._tasks = [self.loop.create_task(self._expiry_loop(), name=f"{self.name}-expiry"),
                       self.loop.create_task(self.schedule.run(), name=f"{self.name}-schedule")]
        log.info("broker %s listening on %s", self.name, self.addr)

    def _open_store(self) -> MessageStore:
        data_dir = None
        if self.settings.data_dir is not None:
            data_dir = os.path.join(self.settings.data_dir, self.settings.name)
        try:
            return MessageStore(self.addr, data_dir, fsync=self.settings.fsync)
        except OSError as exc:  # unwritable, not a directory, ...: a settings problem, not a port one
            raise ConfigError("data_dir", f"cannot keep the store in {data_dir}: {exc}") from exc

    @bridged
    async def stop(self) -> None:
        """Close the port and every client connection. An in-memory store is kept for restart()."""
        server, self._server = self._server, None
        if server is None:
            return
        late = self.offsets.late()  # a stopped broker never finishes in-flight work
        for task in self._tasks + late:
            task.cancel()
        await asyncio.gather(*self._tasks, *late, return_exceptions=True)
        self._tasks = []
        self.pull.cancel_all()
        await close_server(server, self.conns)
        store = self.store_slot.current
        if self.settings.data_dir is not None and store is not None:
            store.close()
            self.store_slot.current = None  # reopened (and re-scanned) from disk by the next start()
        self.consumers.clear()
        self.locks.clear()  # a restarted broker forgets its locks
        log.info("broker %s stopped", self.name)

    @bridged
    async def restart(self) -> None:
        """Stop, then start again on the same port with the same data."""
        await self.stop()
        await self.start()

    def _make_protocol(self) -> RemotingProtocol:
        proto = RemotingProtocol(self.handlers, name=f"{self.name}-server", on_close=self._on_close,
                                 response_language="JAVA")
        self.conns.add(proto)
        return proto

    def _on_close(self, conn: RemotingProtocol) -> None:
        self.conns.discard(conn)
        self.consumers.channel_closed(conn)

    async def _expiry_loop(self) -> None:
        period = max(0.05, min(10.0, self.settings.channel_expiry / 4))
        while True:
            await asyncio.sleep(period)
            for conn in self.consumers.expired_channels():
                log.info("broker %s: channel %s expired without heartbeat", self.name, conn.peer)
                if conn.transport is not None:
                    conn.transport.close()

    def set_acl(self, config: AclConfig | None) -> None:
        """Enable, replace (a plain_acl.yml reload) or disable (None) the plain ACL 1.0, from the next request
        on (ACL 2.0 goes off)."""
        self.acl = AclValidator(config) if config is not None else None
        self.settings.acl = config
        self.settings.acl2 = self.auth = None

    def set_acl2(self, config: Acl2Config | None) -> None:
        """Enable ACL 2.0 with ``config``'s users and policies (replacing what AUTH_* requests made), or
        disable it (None), from the next request on (the plain ACL goes off)."""
        self.settings.acl2 = config
        self.auth = AuthMetadata(config) if config is not None else None
        self.acl = Acl2Verifier(self.auth, self.settings.cluster) if self.auth is not None else None
        if config is not None:
            self.settings.acl = None

    def _guard(self, handler: Handler) -> Handler:
        """Wrap a handler with the ACL check, fault injection and Java-like answers for bad headers.

        The header-error answer is the one `answer_header_errors` gives, written inline:
        one coroutine layer less on every send and pull (measured ~3% of a 32-message pull).
        """

        async def guarded(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand | None:
            acl = self.acl
            if acl is not None:  # the real broker's RPC hook runs before any processing
                refusal = acl.refusal(cmd, conn.peer)
                if refusal is not None:
                    return cmd.make_response(acl.refusal_code, remark=refusal)
            rule = self.faults.take(cmd.code)
            if rule is not None and rule.action == "respond":
                return cmd.make_response(rule.response_code, remark=rule.remark)
            try:
                resp = await handler(conn, cmd)
            except HeaderError as exc:
                resp = header_error_response(cmd, exc)
            if rule is not None:
                if rule.action == "drop":
                    return None
                if rule.seconds > 0:
                    self.faults.delay_started()
                    try:
                        await asyncio.sleep(rule.seconds)
                    finally:
                        self.faults.delay_ended()
            return resp

        return guarded

    # -- topics -----------------------------------------------------------------------
    @property
    def topics(self) -> dict[str, TopicConfig]:
        return self.store_slot.get().topics

    def _ensure_system_topics(self) -> None:
        if self.settings.auto_create_topic and DEFAULT_TOPIC not in self.topics:
            q = self.settings.queues
            self.store_slot.get().put_topic(TopicConfig(DEFAULT_TOPIC, q, q, PERM_RW | PERM_INHERIT))

    def create_topic(self, topic: str, read_queues: int | None = None, write_queues: int | None = None,
                     perm: int = PERM_RW, topic_sys_flag: int = 0, order: bool = False) -> TopicConfig:
        """Create or update a topic (UPDATE_AND_CREATE_TOPIC semantics)."""
        rq = read_queues if read_queues is not None else self.settings.queues
        wq = write_queues if write_queues is not None else rq
        return self.store_slot.get().put_topic(TopicConfig(topic, rq, wq, perm, topic_sys_flag, order))

    def ensure_topic(self, topic: str, queues: int, perm: int = PERM_RW, topic_sys_flag: int = 0) -> TopicConfig:
        return self.store_slot.get().ensure_topic(topic, queues, perm, topic_sys_flag)

    def late_commits(self) -> list[asyncio.Task[None]]:
        """Pull commits not yet applied (``OffsetFaults.pull_commit_delay``)."""
        return self.offsets.late()

    # -- broker -> client --------------------------------------------------------------
    def client_channel(self, group: str, client_id: str | None = None) -> RemotingProtocol:
        """A live connection of ``client_id`` (or any member) in ``group``."""
        return self.clients.channel(group, client_id)

    @bridged(wait=False)  # the client may run on the caller's loop
    async def get_consumer_running_info(self, group: str, client_id: str, *, jstack: bool = False,
                                        timeout: float = 5.0) -> RemotingCommand:
        """Ask a consumer for its running info (GET_CONSUMER_RUNNING_INFO 307); the raw response."""
        return await self.clients.running_info(group, client_id, jstack=jstack, timeout=timeout)

    @bridged  # oneway to the clients: nothing to wait for on their side
    async def reset_consumer_offset(self, group: str, topic: str, offsets: dict[int, int] | None = None, *,
                                    timestamp: int | None = None, force: bool = True) -> list[str]:
        """RESET_CONSUMER_CLIENT_OFFSET (220) to every member: commit ``offsets`` (queue id -> offset,
        or the offsets of ``timestamp``) on the broker, then tell the clients. Returns the client ids told."""
        store = self.store_slot.get()
        cfg = store.topics.get(topic)
        if cfg is None:
            raise LookupError(f"topic {topic!r} does not exist on {self.name}")
        table: dict[MessageQueue, int] = {}
        for qid in range(cfg.read_queues):
            if offsets is not None:
                if qid not in offsets:
                    continue
                off = offsets[qid]
            else:
                off = store.search_offset(topic, qid, timestamp or 0)
            table[MessageQueue(topic, self.name, qid)] = off
            store.commit_offset(group, topic, qid, off)
        return self.clients.tell_reset(group, topic, table, -1 if timestamp is None else timestamp, force)

    @bridged(wait=False)  # the client may run on the caller's loop
    async def consume_message_directly(self, group: str, client_id: str, commit_log_offset: int, *,
                                       timeout: float = 5.0) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY (309): hand one stored message to a client; the raw response."""
        record = self.store_slot.get().record_at(commit_log_offset)
        if record is None:
            raise LookupError(f"no message at commit-log offset {commit_log_offset}")
        return await self.clients.consume_directly(group, client_id, record,
                                                   msg_id=make_offset_msg_id(self.addr, commit_log_offset),
                                                   broker_name=self.name, timeout=timeout)

    @bridged
    async def close_client_connections(self, client_id: str | None = None) -> int:
        """Abort the TCP connections of one client id (every client when None); returns how many."""
        targets: set[RemotingProtocol] = set()
        if client_id is None:
            targets = set(self.conns)
        else:
            for info in self.consumers.groups.values():
                targets |= {c.conn for c in info.channels.values() if c.client_id == client_id}
            for chans in self.consumers.producer_groups.values():
                targets |= {c.conn for c in chans.values() if c.client_id == client_id}
        return await abort_connections(targets)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "cluster": self.cluster, "addr": self.addr, "running": self.running,
                "acl": self.acl is not None}

    # -- read-only views for tests (safe from any thread: they copy what they read) ------------
    def max_offset(self, topic: str, queue_id: int) -> int:
        store = self.store_slot.current
        return store.max_offset(topic, queue_id) if store is not None else 0

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The consumer offset the broker holds, -1 when none."""
        store = self.store_slot.current
        return store.query_offset(group, topic, queue_id) if store is not None else -1

    def messages(self, topic: str, queue_id: int | None = None) -> list[MessageExt]:
        """Decoded stored messages of a topic (one queue or all), in queue order."""
        store = self.store_slot.current
        if store is None:
            return []
        out: list[MessageExt] = []
        for (t, qid), cq in sorted(store.queues.items()):
            if t != topic or (queue_id is not None and qid != queue_id):
                continue
            for rec in list(cq.records[cq.min_offset:]):
                msg = decode_messages(rec)[0]
                msg.broker_name = self.name
                out.append(msg)
        return out

    def consumer_ids(self, group: str) -> list[str]:
        info = self.consumers.find(group)
        return info.client_ids() if info is not None else []

    def lock_owner(self, group: str, mq: MessageQueue) -> str | None:
        return self.locks.owner(group, mq)
