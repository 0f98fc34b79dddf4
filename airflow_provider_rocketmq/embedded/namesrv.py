"""EmbeddedNameServer: topic routes and cluster info for the embedded brokers.

Brokers register in-process (no REGISTER_BROKER round trip): the name server
reads each running broker's topic table at query time, so a topic created or
auto-created on a broker is routable at once (a real name server learns it at
the broker's next 30 s registration). A stopped broker is left out of every
answer, as a broker shutting down cleanly unregisters itself.

Route bodies follow the real 4.9.x name server: standard JSON (``"0"`` keys) when
the request version is >= 401 (V4_9_4) or carries ``acceptStandardJsonOnly=true``,
fastjson's bare integer keys otherwise; cluster info always uses bare keys.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..client.connection import Handler, RemotingProtocol
from ..client.protocol import fastjson
from ..client.protocol.codes import ResponseCode
from ..client.protocol.command import RemotingCommand
from .headers import FAQ_SUFFIX, opt_bool, opt_str
from .net import answer_header_errors, close_server
from .ports import RoutedBroker

log = logging.getLogger(__name__)

STANDARD_JSON_VERSION = 401  # MQVersion.Version.V4_9_4.ordinal()


async def _no_answer(conn: RemotingProtocol, cmd: RemotingCommand) -> None:
    return None


class _SilentTable(dict[int, Handler]):
    """A 4.9.7 name server (DefaultRequestProcessor) answers nothing to a code it does not serve."""

    def get(self, code: int, default: Any = None) -> Any:
        return super().get(code, _no_answer)


class EmbeddedNameServer:
    """A name server that knows the brokers registered with `register`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.brokers: list[RoutedBroker] = []
        self.conns: set[RemotingProtocol] = set()
        self._server: asyncio.AbstractServer | None = None
        self.handlers: dict[int, Handler] = _SilentTable({105: answer_header_errors(self.route_by_topic),
                                                     106: answer_header_errors(self.cluster_info),
                                                     206: answer_header_errors(self.all_topics)})

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def register(self, broker: RoutedBroker) -> None:
        if broker not in self.brokers:
            self.brokers.append(broker)

    async def start(self) -> None:
        if self._server is not None:
            return
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._make_protocol, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("name server listening on %s", self.addr)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        await close_server(server, self.conns)

    def _make_protocol(self) -> RemotingProtocol:
        proto = RemotingProtocol(self.handlers, name="namesrv-server", on_close=self.conns.discard,
                                 response_language="JAVA")
        self.conns.add(proto)
        return proto

    def _live(self) -> list[RoutedBroker]:
        return [b for b in self.brokers if b.running]

    @staticmethod
    def _broker_data(broker: RoutedBroker, standard: bool) -> dict[str, Any]:
        addrs: dict[Any, str] = {"0": broker.addr} if standard else {0: broker.addr}
        return {"brokerAddrs": addrs, "brokerName": broker.name, "cluster": broker.cluster}

    def route(self, topic: str, *, standard: bool = True) -> bytes | None:
        """TopicRouteData JSON for ``topic``, or None when no running broker has it."""
        queue_datas = []
        broker_datas = []
        for broker in self._live():
            cfg = broker.topics.get(topic)
            if cfg is None:
                continue
            queue_datas.append({"brokerName": broker.name, "perm": cfg.perm, "readQueueNums": cfg.read_queues,
                                "topicSysFlag": cfg.topic_sys_flag, "writeQueueNums": cfg.write_queues})
            broker_datas.append(self._broker_data(broker, standard))
        if not queue_datas:
            return None
        body = {"brokerDatas": broker_datas, "filterServerTable": {}, "queueDatas": queue_datas}
        return fastjson.dumps(body).encode("utf-8")

    async def route_by_topic(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        topic = opt_str(cmd, "topic") or "null"  # 4.9.7 looks up a missing topic as null: TOPIC_NOT_EXIST
        standard = cmd.version >= STANDARD_JSON_VERSION or opt_bool(cmd, "acceptStandardJsonOnly")
        body = self.route(topic, standard=standard)
        if body is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                     remark=f"No topic route info in name server for the topic: {topic}{FAQ_SUFFIX}")
        return cmd.make_response(ResponseCode.SUCCESS, body=body)

    async def cluster_info(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        table: dict[str, Any] = {}
        clusters: dict[str, list[str]] = {}
        for broker in self._live():
            table[broker.name] = self._broker_data(broker, standard=False)
            clusters.setdefault(broker.cluster, []).append(broker.name)
        body = fastjson.dumps({"brokerAddrTable": table, "clusterAddrTable": clusters}).encode("utf-8")
        return cmd.make_response(ResponseCode.SUCCESS, body=body)

    async def all_topics(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        topics = sorted({t for b in self._live() for t in b.topics})
        return cmd.make_response(ResponseCode.SUCCESS, body=fastjson.dumps({"topicList": topics}).encode())
