"""Requests the broker sends to its clients (Broker2Client): NOTIFY_CONSUMER_IDS_CHANGED,
RESET_CONSUMER_CLIENT_OFFSET, GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY."""

from __future__ import annotations

from collections.abc import Mapping

from ..client.connection import RemotingProtocol
from ..client.protocol import fastjson
from ..client.protocol.codes import RequestCode
from ..client.protocol.command import RemotingCommand
from ..client.protocol.queue import MessageQueue
from .consumer_manager import ConsumerGroupInfo
from .ports import Members
from .settings import GroupConfigs


class Broker2Client:
    """Calls the members of the broker's consumer groups."""

    def __init__(self, members: Members, groups: GroupConfigs) -> None:
        self.members = members
        self.groups = groups

    def notify_ids_changed(self, info: ConsumerGroupInfo) -> None:
        """Tell every member of ``info``'s group that its membership changed (unless the group opted out)."""
        cfg = self.groups.find(info.group)
        if cfg is not None and not cfg.notify_ids_changed:
            return
        for chan in list(info.channels.values()):
            if not chan.conn.is_closed:
                chan.conn.oneway(RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                 {"consumerGroup": info.group}, language="JAVA"))

    def channel(self, group: str, client_id: str | None = None) -> RemotingProtocol:
        """A live connection of ``client_id`` (or any member) in ``group``."""
        info = self.members.find(group)
        if info is not None:
            for chan in info.channels.values():
                if (client_id is None or chan.client_id == client_id) and not chan.conn.is_closed:
                    return chan.conn
        raise LookupError(f"consumer group {group!r} has no live channel"
                          + (f" for client {client_id!r}" if client_id else ""))

    def tell_reset(self, group: str, topic: str, table: Mapping[MessageQueue, int], timestamp: int,
                   force: bool) -> list[str]:
        """Send RESET_CONSUMER_CLIENT_OFFSET (oneway) with ``table`` to every member; their client ids."""
        body = fastjson.dumps({"offsetTable": table}).encode()
        told: list[str] = []
        info = self.members.find(group)
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

    async def running_info(self, group: str, client_id: str, *, jstack: bool, timeout: float) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO (307) to one client; its raw response."""
        conn = self.channel(group, client_id)
        cmd = RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO,
                              {"consumerGroup": group, "clientId": client_id,
                               "jstackEnable": "true" if jstack else "false"}, language="JAVA")
        return await conn.request(cmd, timeout)

    async def consume_directly(self, group: str, client_id: str, record: bytes, *, msg_id: str,
                               broker_name: str, timeout: float) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY (309): hand one stored ``record`` to a client; its raw response."""
        conn = self.channel(group, client_id)
        cmd = RemotingCommand(RequestCode.CONSUME_MESSAGE_DIRECTLY,
                              {"consumerGroup": group, "clientId": client_id, "msgId": msg_id,
                               "brokerName": broker_name}, record, language="JAVA")
        return await conn.request(cmd, timeout)
