"""Requests a consumer or producer sends while it runs: HEART_BEAT (34),
UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38), QUERY/UPDATE_CONSUMER_OFFSET
(14/15) and LOCK/UNLOCK_BATCH_MQ (41/42).
"""

from __future__ import annotations

from typing import Any

from ..client.connection import Handler, RemotingProtocol
from ..client.protocol import fastjson
from ..client.protocol.codes import ResponseCode
from ..client.protocol.command import RemotingCommand
from ..client.protocol.errors import ProtocolError
from ..client.protocol.names import retry_topic
from ..client.protocol.queue import MessageQueue
from .consumer_manager import ClientChannel
from .filter import SubscriptionData, SubscriptionParseError
from .headers import opt_str, req_int, req_str
from .ports import BrokerContext


def _json_body(cmd: RemotingCommand, what: str) -> dict[str, Any]:
    try:
        data = fastjson.loads(cmd.body or b"")
    except ProtocolError as exc:
        raise ProtocolError(f"{what} body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"{what} body is not a JSON object")
    return data


class ClientHandlers:
    """Membership, offsets and queue locks of one broker."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.store_slot = ctx.store_slot
        self.groups = ctx.groups
        self.members = ctx.members
        self.locks = ctx.locks
        self.offsets = ctx.offsets

    def handlers(self) -> dict[int, Handler]:
        return {34: self.heart_beat, 35: self.unregister_client, 38: self.consumer_list,
                14: self.query_consumer_offset, 15: self.update_consumer_offset,
                41: self.lock_batch, 42: self.unlock_batch}

    async def heart_beat(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        try:
            data = _json_body(cmd, "HEART_BEAT")
            client_id = str(data.get("clientID") or "")
            consumers = data.get("consumerDataSet") or []
            producers = data.get("producerDataSet") or []
            if not isinstance(consumers, list) or not isinstance(producers, list):
                raise ProtocolError("HEART_BEAT consumerDataSet/producerDataSet are not lists")
            parsed = []
            for c in consumers:
                if not isinstance(c, dict) or not isinstance(c.get("groupName"), str):
                    raise ProtocolError(f"HEART_BEAT consumer entry lacks groupName: {c!r}")
                subs = [SubscriptionData.from_json(s) for s in c.get("subscriptionDataSet") or []]
                parsed.append((c, subs))
        except (ProtocolError, SubscriptionParseError) as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        for c, subs in parsed:
            group = c["groupName"]
            # ClientManageProcessor.heartBeat: the retry topic is made for every group that has a
            # subscription-group config (broadcasting ones too); the member registers either way
            gcfg = self.groups.config(group)
            if gcfg is not None:
                self.store_slot.get().ensure_topic(retry_topic(group), gcfg.retry_queues)
            model = str(c.get("messageModel") or "CLUSTERING")
            self.members.register(
                group, ClientChannel(conn, client_id, cmd.language, cmd.version),
                consume_type=str(c.get("consumeType") or "CONSUME_PASSIVELY"), message_model=model,
                consume_from_where=str(c.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"),
                subscriptions=subs)
        for p in producers:
            if isinstance(p, dict) and isinstance(p.get("groupName"), str):
                self.members.register_producer(p["groupName"],
                                               ClientChannel(conn, client_id, cmd.language, cmd.version))
        return cmd.make_response(ResponseCode.SUCCESS)

    async def unregister_client(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        group = opt_str(cmd, "consumerGroup")
        if group:
            self.members.unregister(group, conn)
        producer = opt_str(cmd, "producerGroup")
        if producer:
            self.members.unregister_producer(producer, conn)
        return cmd.make_response(ResponseCode.SUCCESS, {})

    async def consumer_list(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        group = req_str(cmd, "consumerGroup")
        info = self.members.find(group)
        ids = info.client_ids() if info is not None else []
        if ids:
            return cmd.make_response(ResponseCode.SUCCESS, {},
                                     fastjson.dumps({"consumerIdList": ids}).encode("utf-8"))
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, {}, remark=f"no consumer for this group, {group}")

    async def query_consumer_offset(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        store = self.store_slot.get()
        group = req_str(cmd, "consumerGroup")
        topic = req_str(cmd, "topic")
        queue_id = req_int(cmd, "queueId")
        offset = store.query_offset(group, topic, queue_id)
        if offset >= 0:
            return cmd.make_response(ResponseCode.SUCCESS, {"offset": str(offset)})
        # A group without a stored offset starts at 0 while the queue still holds its first
        # message (ConsumerManageProcessor); once old messages are gone the client must decide.
        if store.min_offset(topic, queue_id) <= 0 and self.offsets.zero_for_uncommitted():
            return cmd.make_response(ResponseCode.SUCCESS, {"offset": "0"})
        return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, {},
                                 remark="Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    async def update_consumer_offset(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        await self.offsets.commit(req_str(cmd, "consumerGroup"), req_str(cmd, "topic"), req_int(cmd, "queueId"),
                                  req_int(cmd, "commitOffset"), from_pull=False)
        return cmd.make_response(ResponseCode.SUCCESS, {})

    def _lock_body(self, cmd: RemotingCommand, what: str) -> tuple[str, str, list[MessageQueue]]:
        data = _json_body(cmd, what)
        group, client_id = data.get("consumerGroup"), data.get("clientId")
        if not isinstance(group, str) or not isinstance(client_id, str):
            raise ProtocolError(f"{what} body lacks consumerGroup or clientId")
        mqs = [MessageQueue.from_json(m) for m in data.get("mqSet") or []]
        return group, client_id, mqs

    async def lock_batch(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        try:
            group, client_id, mqs = self._lock_body(cmd, "LOCK_BATCH_MQ")
        except ProtocolError as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        locked = self.locks.try_lock_batch(group, mqs, client_id)
        return cmd.make_response(ResponseCode.SUCCESS,
                                 body=fastjson.dumps({"lockOKMQSet": [mq.to_json() for mq in locked]}).encode())

    async def unlock_batch(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        try:
            group, client_id, mqs = self._lock_body(cmd, "UNLOCK_BATCH_MQ")
        except ProtocolError as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        self.locks.unlock_batch(group, mqs, client_id)
        return cmd.make_response(ResponseCode.SUCCESS)
