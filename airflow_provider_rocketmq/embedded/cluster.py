"""EmbeddedCluster: a name server and N brokers in one process, for tests and the demo."""

from __future__ import annotations

import asyncio
import logging
import os
import string
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from ..client.loop_thread import LoopThread
from ..client.protocol.errors import ConfigError
from ..client.protocol.message import MessageExt
from ..client.protocol.names import check_topic
from .acl import AclConfig
from .acl2 import Acl2Config, AclEntry, AuthUser
from .bridge import bridged
from .broker import EmbeddedBroker
from .faults import FaultRule, OffsetFaults
from .namesrv import EmbeddedNameServer
from .settings import BrokerSettings
from .store import PERM_RW

log = logging.getLogger(__name__)


def broker_name(index: int) -> str:
    """broker-a, broker-b, ... (broker-26, ... past z)."""
    return f"broker-{string.ascii_lowercase[index]}" if index < 26 else f"broker-{index}"


class EmbeddedCluster:
    """A RocketMQ-protocol name server plus brokers on 127.0.0.1 (free ports by default).

    Use ``with EmbeddedCluster() as c:`` from synchronous code (the servers run on a
    private loop thread) or ``async with EmbeddedCluster() as c:`` on the caller's
    loop. ``c.namesrv_addr`` is what clients need. ``clusters={"c1": 2, "c2": 1}``
    spreads brokers over several cluster names (``brokers``/``cluster_name`` are
    then ignored). ``acl`` (an `AclConfig`, a plain_acl.yml-shaped mapping or the
    path of such a file) makes every broker check signatures and permissions like
    a 4.9 broker with ``aclEnable=true`` (see `embedded.acl`). ``acl2`` (an `Acl2Config`, a mapping
    or True for a super user ``rocketmq`` / ``12345678`` and nobody else) makes every broker
    authenticate and authorize like a 5.3 broker with ACL 2.0 (see `embedded.acl2`); users and
    policies then come from `create_user` / `create_acl` or the AUTH_* requests of ``mqadmin``.
    """

    def __init__(self, brokers: int = 1, queues: int = 8, data_dir: str | None = None, time_scale: float = 1.0,
                 cluster_name: str = "DefaultCluster", *, clusters: Mapping[str, int] | None = None,
                 host: str = "127.0.0.1", namesrv_port: int = 0, broker_ports: list[int] | None = None,
                 fsync: bool = False, lock_expiry: float = 60.0, channel_expiry: float = 120.0,
                 auto_create_topic: bool = True,
                 acl: AclConfig | Mapping[str, object] | str | os.PathLike[str] | None = None,
                 acl2: Acl2Config | Mapping[str, Any] | bool | None = None) -> None:
        acl_config = AclConfig.coerce(acl) if acl is not None else None
        acl2_config = Acl2Config.coerce(acl2) if acl2 not in (None, False) else None
        if acl_config is not None and acl2_config is not None:
            raise ConfigError("acl2", "a broker runs ACL 1.0 (acl) or ACL 2.0 (acl2), not both")
        layout = dict(clusters) if clusters is not None else {cluster_name: brokers}
        total = sum(layout.values()) if layout else 0
        if not layout or any(not isinstance(n, int) or n < 1 for n in layout.values()):
            raise ConfigError("brokers", f"every cluster needs at least one broker, got {layout!r}")
        if not isinstance(queues, int) or not 1 <= queues <= 1024:
            raise ConfigError("queues", f"must be an integer in [1, 1024], got {queues!r}")
        if not time_scale > 0:
            raise ConfigError("time_scale", f"must be > 0, got {time_scale!r}")
        for knob, value in (("lock_expiry", lock_expiry), ("channel_expiry", channel_expiry)):
            if not value > 0:
                raise ConfigError(knob, f"must be > 0 seconds, got {value!r}")
        if broker_ports is not None and len(broker_ports) != total:
            raise ConfigError("broker_ports", f"needs {total} ports, got {len(broker_ports)}")
        self.namesrv = EmbeddedNameServer(host, namesrv_port)
        self.brokers: list[EmbeddedBroker] = []
        i = 0
        for cname, count in layout.items():
            for _ in range(count):
                settings = BrokerSettings(
                    name=broker_name(i), cluster=cname, host=host,
                    port=broker_ports[i] if broker_ports else 0, queues=queues, data_dir=data_dir,
                    fsync=fsync, time_scale=time_scale, lock_expiry=lock_expiry,
                    channel_expiry=channel_expiry, auto_create_topic=auto_create_topic, acl=acl_config,
                    acl2=acl2_config)
                self.brokers.append(EmbeddedBroker(settings))
                i += 1
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: LoopThread | None = None

    # -- addresses ---------------------------------------------------------------------------
    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.addr

    def broker(self, name: str) -> EmbeddedBroker:
        for b in self.brokers:
            if b.name == name:
                return b
        raise KeyError(f"no broker named {name!r} (have {[b.name for b in self.brokers]})")

    # -- lifecycle -----------------------------------------------------------------------------
    async def astart(self) -> EmbeddedCluster:
        """Start on the running loop."""
        self.loop = asyncio.get_running_loop()
        try:
            await self.namesrv.start()
            for b in self.brokers:
                await b.start()
                self.namesrv.register(b)
        except BaseException:
            await self.astop()
            raise
        log.info("embedded cluster up: namesrv=%s brokers=%s", self.namesrv_addr,
                 ",".join(f"{b.name}@{b.addr}" for b in self.brokers))
        return self

    async def astop(self) -> None:
        for b in self.brokers:
            try:
                await b.stop()
            except Exception:
                log.exception("stopping broker %s failed", b.name)
        await self.namesrv.stop()

    def start(self) -> EmbeddedCluster:
        """Start on a private loop thread (synchronous use)."""
        if self._thread is not None:
            return self
        self._thread = LoopThread("embedded-rocketmq")
        try:
            self._thread.run(self.astart(), timeout=60)
        except BaseException:
            self._thread.stop()
            self._thread = None
            raise
        return self

    def stop(self) -> None:
        """Stop everything (idempotent)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        try:
            thread.run(self.astop(), timeout=60)
        finally:
            thread.stop()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    async def __aenter__(self) -> EmbeddedCluster:
        return await self.astart()

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.astop()

    # -- control (bridged: sync, or awaitable from any loop) ---------------------------------------
    @bridged
    async def create_topic(self, topic: str, queues: int | None = None, *, brokers: list[str] | None = None,
                           perm: int = PERM_RW, order: bool = False) -> None:
        """Create ``topic`` on every broker (or the named ones) with ``queues`` read/write queues."""
        check_topic(topic)
        if queues is not None and (isinstance(queues, bool) or not isinstance(queues, int)
                                   or not 1 <= queues <= 1024):
            raise ConfigError("queues", f"must be an integer in [1, 1024], got {queues!r}")
        unknown = sorted(set(brokers or ()) - {b.name for b in self.brokers})
        if unknown:
            raise ConfigError("brokers", f"no broker named {', '.join(unknown)} "
                                         f"(have {', '.join(b.name for b in self.brokers)})")
        for b in self.brokers:
            if brokers is None or b.name in brokers:
                b.create_topic(topic, queues, queues, perm, order=order)

    @bridged
    async def stop_broker(self, name: str) -> None:
        await self.broker(name).stop()

    @bridged
    async def start_broker(self, name: str) -> None:
        await self.broker(name).start()

    @bridged
    async def restart_broker(self, name: str) -> None:
        """Stop and start a broker on the same port with the same data."""
        await self.broker(name).restart()

    @bridged
    async def close_client_connections(self, client_id: str | None = None) -> int:
        """Abort client connections on every broker (all, or one client id's); returns how many."""
        n = 0
        for b in self.brokers:
            if b.running:
                n += await b.close_client_connections(client_id)
        return n

    def set_acl(self, acl: AclConfig | Mapping[str, object] | str | os.PathLike[str] | None) -> None:
        """Enable, replace or (None) disable the ACL of every broker, effective for the next request
        (the real broker reloads a changed plain_acl.yml the same way)."""
        config = AclConfig.coerce(acl) if acl is not None else None
        for b in self.brokers:
            b.set_acl(config)

    def set_acl2(self, acl2: Acl2Config | Mapping[str, Any] | bool | None) -> None:
        """Enable ACL 2.0 on every broker with these users and policies (replacing the ones made since),
        or disable it (None), effective for the next request."""
        config = Acl2Config.coerce(acl2) if acl2 not in (None, False) else None
        for b in self.brokers:
            b.set_acl2(config)

    @bridged
    async def create_user(self, username: str, password: str, *, user_type: str = "Normal",
                          status: str = "enable") -> None:
        """ACL 2.0: add a user on every broker (``mqadmin createUser -c``)."""
        for b in self._auth_brokers():
            assert b.auth is not None
            b.auth.create_user(AuthUser(username, password, user_type, status))

    @bridged
    async def create_acl(self, username: str, resources: list[str], actions: list[str], decision: str = "Allow",
                         source_ips: list[str] | None = None) -> None:
        """ACL 2.0: give ``username`` ``actions`` on ``resources`` (``Topic:T``, ``Group:G``, ``Topic:pre*``,
        ``*``) on every broker (``mqadmin createAcl -c``); an entry for a listed resource is replaced."""
        entries = [AclEntry(r, tuple(actions), decision, tuple(source_ips or ())) for r in resources]
        for b in self._auth_brokers():
            assert b.auth is not None
            b.auth.create_acl(f"User:{username}", entries)

    def _auth_brokers(self) -> list[EmbeddedBroker]:
        if any(b.auth is None for b in self.brokers):
            raise ConfigError("acl2", "the cluster does not run ACL 2.0 (EmbeddedCluster(acl2=...))")
        return list(self.brokers)

    # -- faults --------------------------------------------------------------------------------
    def _targets(self, broker: str | None) -> list[EmbeddedBroker]:
        return [self.broker(broker)] if broker is not None else list(self.brokers)

    def delay_responses(self, code: int | None, seconds: float, *, times: int | None = None,
                        broker: str | None = None) -> list[FaultRule]:
        return [b.faults.delay_responses(code, seconds, times) for b in self._targets(broker)]

    def drop_responses(self, code: int | None, *, times: int | None = None,
                       broker: str | None = None) -> list[FaultRule]:
        return [b.faults.drop_responses(code, times) for b in self._targets(broker)]

    def system_busy(self, code: int | None, *, times: int | None = None, broker: str | None = None) -> list[FaultRule]:
        return [b.faults.system_busy(code, times) for b in self._targets(broker)]

    def flow_control(self, code: int | None, *, times: int | None = None,
                     broker: str | None = None) -> list[FaultRule]:
        return [b.faults.flow_control(code, times) for b in self._targets(broker)]

    def set_offset_faults(self, faults: OffsetFaults, *, broker: str | None = None) -> None:
        """Switch on a real broker's offset behaviour (see `OffsetFaults`); kept across restarts."""
        for b in self._targets(broker):
            b.faults.set_offset_faults(faults)

    @bridged
    async def apply_late_commits(self) -> int:
        """Wait until every pull commit held back by ``pull_commit_delay`` has been applied;
        returns how many there were."""
        late = [t for b in self.brokers for t in b.late_commits()]
        await asyncio.gather(*late, return_exceptions=True)
        return len(late)

    def clear_faults(self) -> None:
        for b in self.brokers:
            b.faults.clear()

    # -- views ------------------------------------------------------------------------------------
    def messages(self, topic: str) -> list[MessageExt]:
        """Every stored message of ``topic`` across brokers (broker, then queue order)."""
        out: list[MessageExt] = []
        for b in self.brokers:
            out.extend(b.messages(topic))
        return out

    def max_offsets(self, topic: str) -> dict[tuple[str, int], int]:
        """(broker name, queue id) -> max offset for every queue of ``topic``."""
        out: dict[tuple[str, int], int] = {}
        for b in self.brokers:
            cfg = b.topics.get(topic) if b.store is not None else None
            if cfg is not None:
                for qid in range(cfg.read_queues):
                    out[(b.name, qid)] = b.max_offset(topic, qid)
        return out

    def committed_offsets(self, group: str, topic: str) -> dict[tuple[str, int], int]:
        """(broker name, queue id) -> committed offset (-1: none) for every queue of ``topic``."""
        return {key: self.broker(key[0]).committed_offset(group, topic, key[1]) for key in self.max_offsets(topic)}

    def describe(self) -> dict[str, Any]:
        return {"namesrv": self.namesrv_addr, "brokers": [b.describe() for b in self.brokers]}
