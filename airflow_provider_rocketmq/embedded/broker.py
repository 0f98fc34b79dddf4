"""EmbeddedBroker: one RocketMQ-protocol broker (a master, brokerId 0) in asyncio.

It serves the remoting requests a producer, push consumer and admin tool send
(see ``handlers``), answers with the response codes, remarks, extFields and
body shapes a real 4.9.7 broker uses, and can call its clients back
(NOTIFY_CONSUMER_IDS_CHANGED, GET_CONSUMER_RUNNING_INFO, RESET_CONSUMER_CLIENT_OFFSET,
CONSUME_MESSAGE_DIRECTLY). It is a test and demo peer, never a production broker.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Any

from ..client.connection import Handler, RemotingProtocol
from ..client.protocol import fastjson
from ..client.protocol.codes import RequestCode, ResponseCode
from ..client.protocol.command import RemotingCommand
from ..client.protocol.errors import ConfigError
from ..client.protocol.message import MessageExt, decode_messages, make_offset_msg_id
from ..client.protocol.names import DEFAULT_TOPIC
from ..client.protocol.queue import MessageQueue
from ..client.route import PERM_INHERIT
from .acl import AclConfig, AclValidator
from .admin_handlers import AdminHandlers
from .bridge import bridged
from .client_handlers import ClientHandlers
from .consumer_manager import ConsumerGroupInfo, ConsumerManager, LockManager
from .faults import FaultInjector
from .headers import HeaderError
from .net import abort_connections, close_server, header_error_response
from .pull import PullService
from .schedule import ScheduleService
from .send import SendHandlers
from .store import PERM_RW, MessageStore, TopicConfig

log = logging.getLogger(__name__)


@dataclass
class BrokerSettings:
    """Knobs of one embedded broker (names follow BrokerConfig where one exists)."""

    name: str = "broker-a"
    cluster: str = "DefaultCluster"
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port, kept across restart()
    queues: int = 8  # read/write queues of auto-created topics
    data_dir: str | None = None
    fsync: bool = False
    time_scale: float = 1.0  # multiplies the delay levels (retry back-off)
    lock_expiry: float = 60.0
    channel_expiry: float = 120.0
    auto_create_topic: bool = True
    auto_create_group: bool = True
    region: str = "DefaultRegion"
    max_message_size: int = 4 * 1024 * 1024
    retry_max_times: int = 16  # subscription-group default
    acl: AclConfig | None = None  # plain ACL (aclEnable=true) when set


@dataclass
class GroupConfig:
    """SubscriptionGroupConfig: the parts the broker uses."""

    group: str
    retry_queues: int = 1
    retry_max_times: int = 16
    consume_enable: bool = True
    notify_ids_changed: bool = True


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
        self.store: MessageStore | None = None
        self.faults = FaultInjector()
        self.consumers = ConsumerManager(self._notify_ids_changed, channel_expiry=self.settings.channel_expiry)
        self.locks = LockManager(self.settings.lock_expiry)
        self.groups: dict[str, GroupConfig] = {}
        # swapped whole by set_acl (like the real broker reloading plain_acl.yml); read once per request
        self.acl = AclValidator(self.settings.acl) if self.settings.acl is not None else None
        self.conns: set[RemotingProtocol] = set()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._late_commits: set[asyncio.Task[None]] = set()  # OffsetFaults.pull_commit_delay
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pull = PullService(self)
        self.send_handlers = SendHandlers(self)
        self.client_handlers = ClientHandlers(self)
        self.admin_handlers = AdminHandlers(self)
        self.schedule = ScheduleService(self)
        # unknown codes too pass the guard (ACL first, as the real broker's RPC hook runs for every code)
        self.handlers: dict[int, Handler] = _HandlerTable(self._guard(_not_supported))
        for table in (self.pull.handlers(), self.send_handlers.handlers(), self.client_handlers.handlers(),
                      self.admin_handlers.handlers()):
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
        if self.store is None:
            data_dir = None
            if self.settings.data_dir is not None:
                data_dir = os.path.join(self.settings.data_dir, self.settings.name)
            try:
                try:
                    self.store = MessageStore(self.addr, data_dir, fsync=self.settings.fsync)
                except OSError as exc:  # unwritable, not a directory, ...: a settings problem, not a port one
                    raise ConfigError("data_dir", f"cannot keep the store in {data_dir}: {exc}") from exc
            except BaseException:
                self._server.close()
                self._server = None
                raise
            self.store.listeners.append(self.pull.on_arrival)
            self.store.listeners.append(self.schedule.on_arrival)
        self._ensure_system_topics()
        self._tasks = [self.loop.create_task(self._expiry_loop(), name=f"{self.name}-expiry"),
                       self.loop.create_task(self.schedule.run(), name=f"{self.name}-schedule")]
        log.info("broker %s listening on %s", self.name, self.addr)

    @bridged
    async def stop(self) -> None:
        """Close the port and every client connection. An in-memory store is kept for restart()."""
        server, self._server = self._server, None
        if server is None:
            return
        late = list(self._late_commits)  # a stopped broker never finishes in-flight work
        for task in self._tasks + late:
            task.cancel()
        await asyncio.gather(*self._tasks, *late, return_exceptions=True)
        self._tasks = []
        self.pull.cancel_all()
        await close_server(server, self.conns)
        if self.settings.data_dir is not None and self.store is not None:
            self.store.close()
            self.store = None  # reopened (and re-scanned) from disk by the next start()
        self.consumers.groups.clear()
        self.consumers.producer_groups.clear()
        self.locks = LockManager(self.settings.lock_expiry)  # a restarted broker forgets its locks
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
        """Enable, replace (a plain_acl.yml reload) or disable (None) the ACL, from the next request on."""
        self.acl = AclValidator(config) if config is not None else None
        self.settings.acl = config

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
                    return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=refusal)
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

    # -- topics and groups ------------------------------------------------------------
    @property
    def topics(self) -> dict[str, TopicConfig]:
        assert self.store is not None, "broker not started"
        return self.store.topics

    def _ensure_system_topics(self) -> None:
        if self.settings.auto_create_topic and DEFAULT_TOPIC not in self.topics:
            q = self.settings.queues
            self.topics[DEFAULT_TOPIC] = TopicConfig(DEFAULT_TOPIC, q, q, PERM_RW | PERM_INHERIT)
            self.save_topics()

    def save_topics(self) -> None:
        assert self.store is not None
        self.store.save_topics()

    def create_topic(self, topic: str, read_queues: int | None = None, write_queues: int | None = None,
                     perm: int = PERM_RW, topic_sys_flag: int = 0, order: bool = False) -> TopicConfig:
        """Create or update a topic (UPDATE_AND_CREATE_TOPIC semantics)."""
        rq = read_queues if read_queues is not None else self.settings.queues
        wq = write_queues if write_queues is not None else rq
        cfg = TopicConfig(topic, rq, wq, perm, topic_sys_flag, order)
        self.topics[topic] = cfg
        self.save_topics()
        return cfg

    def ensure_topic(self, topic: str, queues: int, perm: int = PERM_RW, topic_sys_flag: int = 0) -> TopicConfig:
        cfg = self.topics.get(topic)
        if cfg is None:
            cfg = self.create_topic(topic, queues, queues, perm, topic_sys_flag)
        return cfg

    def group_config(self, group: str) -> GroupConfig | None:
        """findSubscriptionGroupConfig: auto-creates unless disabled."""
        cfg = self.groups.get(group)
        if cfg is None and self.settings.auto_create_group:
            cfg = self.groups[group] = GroupConfig(group, retry_max_times=self.settings.retry_max_times)
        return cfg

    # -- consumer offsets from clients ------------------------------------------------------
    async def commit_client_offset(self, group: str, topic: str, queue_id: int, offset: int, *,
                                   from_pull: bool) -> None:
        """Store an offset a client sent (UPDATE_CONSUMER_OFFSET, or a pull's commitOffset),
        through the `OffsetFaults` of ``self.faults`` when they are on."""
        faults = self.faults.offsets
        if from_pull and faults.pull_commit_delay > 0:
            assert self.loop is not None
            task = self.loop.create_task(self._commit_later(faults.pull_commit_delay, group, topic, queue_id,
                                                            offset), name=f"{self.name}-late-commit")
            self._late_commits.add(task)
            task.add_done_callback(self._late_commits.discard)
            return
        await self._commit(group, topic, queue_id, offset, faults.offset_race)

    def late_commits(self) -> list[asyncio.Task[None]]:
        """Pull commits not yet applied (``OffsetFaults.pull_commit_delay``)."""
        return list(self._late_commits)

    async def _commit_later(self, delay: float, group: str, topic: str, queue_id: int, offset: int) -> None:
        await asyncio.sleep(delay)
        await self._commit(group, topic, queue_id, offset, self.faults.offsets.offset_race)

    async def _commit(self, group: str, topic: str, queue_id: int, offset: int, race: float) -> None:
        store = self.store
        if store is None:
            return
        if race > 0 and not store.has_offsets(group, topic):
            # Java: map = offsetTable.get(key); if null: map = new ...; map.put(q, o); offsetTable.put(key, map)
            await asyncio.sleep(race)
            if self.store is store:  # a broker stopped meanwhile never applied it
                store.replace_offsets(group, topic, {queue_id: offset})
            return
        store.commit_offset(group, topic, queue_id, offset)

    # -- broker -> client --------------------------------------------------------------
    def _notify_ids_changed(self, info: ConsumerGroupInfo) -> None:
        cfg = self.groups.get(info.group)
        if cfg is not None and not cfg.notify_ids_changed:
            return
        for chan in list(info.channels.values()):
            if not chan.conn.is_closed:
                chan.conn.oneway(RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                 {"consumerGroup": info.group}, language="JAVA"))

    def client_channel(self, group: str, client_id: str | None = None) -> RemotingProtocol:
        """A live connection of ``client_id`` (or any member) in ``group``."""
        info = self.consumers.find(group)
        if info is not None:
            for chan in info.channels.values():
                if (client_id is None or chan.client_id == client_id) and not chan.conn.is_closed:
                    return chan.conn
        raise LookupError(f"consumer group {group!r} has no live channel"
                          + (f" for client {client_id!r}" if client_id else ""))

    @bridged(wait=False)  # the client may run on the caller's loop
    async def get_consumer_running_info(self, group: str, client_id: str, *, jstack: bool = False,
                                        timeout: float = 5.0) -> RemotingCommand:
        """Ask a consumer for its running info (GET_CONSUMER_RUNNING_INFO 307); the raw response."""
        conn = self.client_channel(group, client_id)
        cmd = RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO,
                              {"consumerGroup": group, "clientId": client_id,
                               "jstackEnable": "true" if jstack else "false"}, language="JAVA")
        return await conn.request(cmd, timeout)

    @bridged  # oneway to the clients: nothing to wait for on their side
    async def reset_consumer_offset(self, group: str, topic: str, offsets: dict[int, int] | None = None, *,
                                    timestamp: int | None = None, force: bool = True) -> list[str]:
        """RESET_CONSUMER_CLIENT_OFFSET (220) to every member: commit ``offsets`` (queue id -> offset,
        or the offsets of ``timestamp``) on the broker, then tell the clients. Returns the client ids told."""
        assert self.store is not None
        cfg = self.topics.get(topic)
        if cfg is None:
            raise LookupError(f"topic {topic!r} does not exist on {self.name}")
        table: dict[MessageQueue, int] = {}
        for qid in range(cfg.read_queues):
            if offsets is not None:
                if qid not in offsets:
                    continue
                off = offsets[qid]
            else:
                off = self.store.search_offset(topic, qid, timestamp or 0)
            table[MessageQueue(topic, self.name, qid)] = off
            self.store.commit_offset(group, topic, qid, off)
        return self.tell_reset(group, topic, table, -1 if timestamp is None else timestamp, force)

    def tell_reset(self, group: str, topic: str, table: dict[MessageQueue, int], timestamp: int,
                   force: bool) -> list[str]:
        """Send RESET_CONSUMER_CLIENT_OFFSET (oneway) with ``table`` to every member; their client ids."""
        body = fastjson.dumps({"offsetTable": table}).encode()
        told: list[str] = []
        info = self.consumers.find(group)
        for chan in list(info.channels.values()) if info else []:
            if chan.conn.is_closed:
                continue
            chan.conn.oneway(RemotingCommand(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                             # Broker2Client.resetOffset never sets isForce in this header
                                             {"topic": topic, "group": group, "timestamp": str(timestamp),
                                              "isForce": "false"},
                                             body, language="JAVA"))
            told.append(chan.client_id)
        return told

    @bridged(wait=False)  # the client may run on the caller's loop
    async def consume_message_directly(self, group: str, client_id: str, commit_log_offset: int, *,
                                       timeout: float = 5.0) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY (309): hand one stored message to a client; the raw response."""
        assert self.store is not None
        record = self.store.record_at(commit_log_offset)
        if record is None:
            raise LookupError(f"no message at commit-log offset {commit_log_offset}")
        conn = self.client_channel(group, client_id)
        cmd = RemotingCommand(RequestCode.CONSUME_MESSAGE_DIRECTLY,
                              {"consumerGroup": group, "clientId": client_id,
                               "msgId": make_offset_msg_id(self.addr, commit_log_offset),
                               "brokerName": self.name}, record, language="JAVA")
        return await conn.request(cmd, timeout)

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
        return self.store.max_offset(topic, queue_id) if self.store is not None else 0

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The consumer offset the broker holds, -1 when none."""
        return self.store.query_offset(group, topic, queue_id) if self.store is not None else -1

    def messages(self, topic: str, queue_id: int | None = None) -> list[MessageExt]:
        """Decoded stored messages of a topic (one queue or all), in queue order."""
        store = self.store
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
