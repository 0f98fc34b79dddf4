"""Name-server routing: TopicRouteData, ClusterInfo, and a failover name-server client.

Route bodies come in two forms (REFERENCE 3): standard JSON (``"brokerAddrs":{"0":..}``)
when the request advertises version >= 401 or ``acceptStandardJsonOnly``, and
fastjson's bare-number keys (``{0:..}``) otherwise; cluster info is always the
latter. Both go through `fastjson.loads`. ``topicSynFlag`` (<= 4.8) and
``topicSysFlag`` (>= 4.9) are accepted alike.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .connection import ConnectionPool
from .protocol import fastjson
from .protocol.codes import RequestCode, ResponseCode
from .protocol.command import RemotingCommand
from .protocol.errors import (
    ConnectionClosedError,
    ProtocolError,
    RequestTimeoutError,
    RocketMQError,
    RouteNotFoundError,
    broker_error,
)
from .protocol.queue import MessageQueue

log = logging.getLogger(__name__)

MASTER_ID = 0
PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1


def _int_field(obj: dict[str, Any], name: str, where: str, default: int | None = None) -> int:
    value = obj.get(name, default)
    if isinstance(value, bool) or value is None:
        raise ProtocolError(f"{where}: field {name!r} missing or not an integer: {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ProtocolError(f"{where}: field {name!r} is not an integer: {value!r}") from None


def _str_field(obj: dict[str, Any], name: str, where: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise ProtocolError(f"{where}: field {name!r} missing or not a string: {value!r}")
    return value


def _as_dict(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where} is not a JSON object")
    return value


def _as_list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(f"{where} is not a JSON array")
    return value


@dataclass(frozen=True)
class QueueData:
    """Queues of one topic on one broker (name) with their permissions."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @classmethod
    def from_json(cls, obj: Any) -> QueueData:
        d = _as_dict(obj, "queueData")
        flag_field = "topicSynFlag" if "topicSysFlag" not in d else "topicSysFlag"  # the name up to 4.8.0
        return cls(_str_field(d, "brokerName", "queueData"),
                   _int_field(d, "readQueueNums", "queueData"),
                   _int_field(d, "writeQueueNums", "queueData"),
                   _int_field(d, "perm", "queueData", PERM_READ | PERM_WRITE),
                   _int_field(d, flag_field, "queueData", 0))

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}


@dataclass(frozen=True)
class BrokerData:
    """One broker name (master + slaves) of a cluster: ``broker_addrs`` maps brokerId -> addr."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def select_addr(self) -> str | None:
        """Master if present, else any slave (Java BrokerData.selectBrokerAddr)."""
        master = self.master_addr()
        if master is not None:
            return master
        return random.choice(list(self.broker_addrs.values())) if self.broker_addrs else None

    @classmethod
    def from_json(cls, obj: Any) -> BrokerData:
        d = _as_dict(obj, "brokerData")
        addrs_raw = _as_dict(d.get("brokerAddrs") or {}, "brokerData.brokerAddrs")
        addrs: dict[int, str] = {}
        for k, v in addrs_raw.items():
            try:
                bid = int(k)
            except ValueError:
                raise ProtocolError(f"brokerData.brokerAddrs key {k!r} is not a broker id") from None
            if not isinstance(v, str):
                raise ProtocolError(f"brokerData.brokerAddrs[{k}] is not an address string")
            addrs[bid] = v
        cluster = d.get("cluster") or ""
        if not isinstance(cluster, str):
            raise ProtocolError("brokerData: field 'cluster' is not a string")
        return cls(cluster, _str_field(d, "brokerName", "brokerData"), addrs)

    def to_json(self) -> dict[str, Any]:
        return {"brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
                "brokerName": self.broker_name, "cluster": self.cluster}


@dataclass(frozen=True)
class TopicRouteData:
    """GET_ROUTEINFO_BY_TOPIC answer: which brokers hold the topic, with how many queues."""

    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    @classmethod
    def from_body(cls, body: bytes | str | None) -> TopicRouteData:
        if not body:
            raise ProtocolError("route body is empty")
        obj = _as_dict(fastjson.loads(body), "route body")
        order = obj.get("orderTopicConf")
        return cls(tuple(QueueData.from_json(q) for q in _as_list(obj.get("queueDatas"), "queueDatas")),
                   tuple(BrokerData.from_json(b) for b in _as_list(obj.get("brokerDatas"), "brokerDatas")),
                   order if isinstance(order, str) else None)

    def to_json(self) -> dict[str, Any]:
        """Standard-JSON form (what a >= 4.9.4 name server sends to a >= 401 client)."""
        out: dict[str, Any] = {"brokerDatas": [b.to_json() for b in self.broker_datas],
                               "filterServerTable": {},
                               "queueDatas": [q.to_json() for q in self.queue_datas]}
        if self.order_topic_conf is not None:
            out["orderTopicConf"] = self.order_topic_conf
        return out

    def broker(self, broker_name: str) -> BrokerData | None:
        for b in self.broker_datas:
            if b.broker_name == broker_name:
                return b
        return None

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues, sorted like Java's MessageQueue.compareTo."""
        out = {MessageQueue(topic, q.broker_name, i)
               for q in self.queue_datas if q.readable for i in range(q.read_queue_nums)}
        return sorted(out)

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        """Writable queues on brokers with a live master, in Java's publish order (by broker name)."""
        out: list[MessageQueue] = []
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            b = self.broker(q.broker_name)
            if not q.writable or b is None or b.master_addr() is None:
                continue
            out.extend(MessageQueue(topic, q.broker_name, i) for i in range(q.write_queue_nums))
        return out

    def master_addrs(self) -> dict[str, str]:
        """broker name -> master address, for brokers that currently have a master."""
        return {b.broker_name: m for b in self.broker_datas if (m := b.master_addr()) is not None}

    def select_addrs(self) -> list[str]:
        """One address per broker name (its master, else a replica), sorted: whom admin RPCs ask."""
        return sorted({a for b in self.broker_datas if (a := b.select_addr()) is not None})


@dataclass(frozen=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO answer: every broker (name -> BrokerData) and cluster membership."""

    broker_addr_table: dict[str, BrokerData]
    cluster_addr_table: dict[str, list[str]]

    @classmethod
    def from_body(cls, body: bytes | str | None) -> ClusterInfo:
        if not body:
            raise ProtocolError("cluster info body is empty")
        obj = _as_dict(fastjson.loads(body), "cluster info body")
        brokers = {str(name): BrokerData.from_json(b)
                   for name, b in _as_dict(obj.get("brokerAddrTable") or {}, "brokerAddrTable").items()}
        clusters: dict[str, list[str]] = {}
        for name, members in _as_dict(obj.get("clusterAddrTable") or {}, "clusterAddrTable").items():
            names = _as_list(members, f"clusterAddrTable[{name}]")
            if not all(isinstance(n, str) for n in names):
                raise ProtocolError(f"clusterAddrTable[{name}] holds a non-string broker name")
            clusters[str(name)] = sorted(names)
        return cls(brokers, clusters)

    def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """broker name -> master address, of one cluster or of all."""
        if cluster is None:
            names: Iterable[str] = self.broker_addr_table
        else:
            if cluster not in self.cluster_addr_table:
                raise RouteNotFoundError(f"cluster {cluster!r} is unknown to the name server "
                                         f"(known: {', '.join(sorted(self.cluster_addr_table)) or 'none'})")
            names = self.cluster_addr_table[cluster]
        out: dict[str, str] = {}
        for name in names:
            b = self.broker_addr_table.get(name)
            m = b.master_addr() if b is not None else None
            if m is not None:
                out[name] = m
        return out


class NameServerClient:
    """Talks to a list of name servers, sticking to one and failing over on network errors.

    Like Java, a random server is chosen first (spreading load) and kept while it
    answers; a connection or timeout error moves on to the next one. Broker
    answers (e.g. TOPIC_NOT_EXIST) are final and are not retried elsewhere.
    """

    def __init__(self, addrs: list[str], pool: ConnectionPool, timeout: float = 3.0) -> None:
        if not addrs:
            raise RouteNotFoundError("no name server address configured")
        self.addrs = list(addrs)
        self.pool = pool
        self.timeout = timeout
        self._current = random.randrange(len(self.addrs))

    @property
    def current(self) -> str:
        return self.addrs[self._current]

    async def invoke(self, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Send ``cmd`` to a live name server; each is tried at most once."""
        errors: list[str] = []
        n = len(self.addrs)
        for step in range(n):
            idx = (self._current + step) % n
            addr = self.addrs[idx]
            try:
                resp = await self.pool.request(addr, cmd, timeout or self.timeout)
            except (ConnectionClosedError, RequestTimeoutError) as exc:
                log.warning("name server %s failed: %s", addr, exc)
                errors.append(f"{addr}: {exc}")
                await self.pool.close_addr(addr)
                continue
            self._current = idx
            return resp
        raise ConnectionClosedError("no name server reachable (" + "; ".join(errors) + ")")

    async def get_route(self, topic: str, timeout: float | None = None) -> TopicRouteData:
        cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                      {"topic": topic, "acceptStandardJsonOnly": "true"})
        resp = await self.invoke(cmd, timeout)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise RouteNotFoundError(f"topic {topic!r} has no route on the name server"
                                     + (f": {resp.remark.splitlines()[0]}" if resp.remark else ""))
        if resp.code != ResponseCode.SUCCESS:
            raise broker_error(resp.code, resp.remark, addr=self.current)
        try:
            return TopicRouteData.from_body(resp.body)
        except RocketMQError as exc:
            raise ProtocolError(f"route of topic {topic!r}: {exc}") from exc

    async def get_cluster_info(self, timeout: float | None = None) -> ClusterInfo:
        resp = await self.invoke(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise broker_error(resp.code, resp.remark, addr=self.current)
        return ClusterInfo.from_body(resp.body)
