"""Admin requests: offsets by queue (29-32), VIEW_MESSAGE_BY_ID (33),
UPDATE_AND_CREATE_TOPIC (17), GET_TOPIC_STATS_INFO (202),
GET_CONSUMER_CONNECTION_LIST (203) and GET_CONSUME_STATS (208).

Stats bodies key their ``offsetTable`` by MessageQueue objects, which fastjson
writes as inline-object map keys (non-standard JSON, like the real broker).
"""

from __future__ import annotations

from typing import Any

from ..client.connection import Handler, RemotingProtocol
from ..client.protocol import fastjson
from ..client.protocol.codes import RequestCode, ResponseCode
from ..client.protocol.command import RemotingCommand
from ..client.protocol.errors import RequestTimeoutError, RocketMQError
from ..client.protocol.message import parse_offset_msg_id
from ..client.protocol.queue import MessageQueue
from .headers import opt_int, opt_str, req_int, req_str
from .ports import BrokerContext
from .store import PERM_RW, TopicConfig
from .topic_rules import validate_topic

RELAY_TIMEOUT = 10.0  # Broker2Client.callClient


class AdminHandlers:
    """Read-mostly admin requests of one broker."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.settings = ctx.settings
        self.store_slot = ctx.store_slot
        self.members = ctx.members
        self.clients = ctx.clients

    def handlers(self) -> dict[int, Handler]:
        return {30: self.max_offset, 31: self.min_offset, 29: self.search_offset, 32: self.earliest_time,
                33: self.view_message, 17: self.create_topic, 202: self.topic_stats,
                203: self.consumer_connections, 208: self.consume_stats, 222: self.reset_offset,
                307: self.forward_to_client, 309: self.forward_to_client}

    async def max_offset(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        off = self.store_slot.get().max_offset(req_str(cmd, "topic"), req_int(cmd, "queueId"))
        return cmd.make_response(ResponseCode.SUCCESS, {"offset": str(off)})

    async def min_offset(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        off = self.store_slot.get().min_offset(req_str(cmd, "topic"), req_int(cmd, "queueId"))
        return cmd.make_response(ResponseCode.SUCCESS, {"offset": str(off)})

    async def search_offset(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        off = self.store_slot.get().search_offset(req_str(cmd, "topic"), req_int(cmd, "queueId"),
                                             req_int(cmd, "timestamp"))
        return cmd.make_response(ResponseCode.SUCCESS, {"offset": str(off)})

    async def earliest_time(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        store = self.store_slot.get()
        topic, queue_id = req_str(cmd, "topic"), req_int(cmd, "queueId")
        offset = store.min_offset(topic, queue_id)
        # -1 for an empty queue, like DefaultMessageStore.getEarliestMessageTime
        ts = store.store_time(topic, queue_id, offset) if offset < store.max_offset(topic, queue_id) else -1
        return cmd.make_response(ResponseCode.SUCCESS, {"timestamp": str(ts)})

    async def view_message(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        offset = req_int(cmd, "offset")
        record = self.store_slot.get().record_at(offset)
        if record is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=f"can not find message by the offset, {offset}")
        return cmd.make_response(ResponseCode.SUCCESS, body=record)

    async def create_topic(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        topic = req_str(cmd, "topic")
        bad = validate_topic(topic)
        if bad is not None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=bad)
        if topic == self.settings.cluster:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     remark=f"The topic[{topic}] is conflict with system topic.")
        read_q = req_int(cmd, "readQueueNums")
        write_q = req_int(cmd, "writeQueueNums")
        # a 4.9.7 broker takes any count (0 and 1025 included); only a negative one would break the store
        if read_q < 0 or write_q < 0:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     remark=f"readQueueNums/writeQueueNums must not be negative, got {read_q}/{write_q}")
        order = (opt_str(cmd, "order") or "false").lower() == "true"
        self.store_slot.get().put_topic(TopicConfig(topic, read_q, write_q, opt_int(cmd, "perm", PERM_RW),
                                               opt_int(cmd, "topicSysFlag", 0), order))
        return cmd.make_response(ResponseCode.SUCCESS)

    async def topic_stats(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        topic = req_str(cmd, "topic")
        store = self.store_slot.get()
        cfg = store.topics.get(topic)
        if cfg is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist")
        table: dict[MessageQueue, dict[str, int]] = {}
        for qid in range(cfg.write_queues):
            mx = store.max_offset(topic, qid)
            table[MessageQueue(topic, self.settings.name, qid)] = {
                "lastUpdateTimestamp": store.store_time(topic, qid, mx - 1) if mx > 0 else 0,
                "maxOffset": mx, "minOffset": store.min_offset(topic, qid)}
        return cmd.make_response(ResponseCode.SUCCESS, body=fastjson.dumps({"offsetTable": table}).encode())

    async def consumer_connections(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        group = req_str(cmd, "consumerGroup")
        info = self.members.find(group)
        if info is None or not info.channels:
            return cmd.make_response(ResponseCode.CONSUMER_NOT_ONLINE, remark=f"the consumer group[{group}] not online")
        body: dict[str, Any] = {
            "connectionSet": [{"clientAddr": c.client_addr, "clientId": c.client_id, "language": c.language,
                               "version": c.version} for c in info.channels.values()],
            "consumeFromWhere": info.consume_from_where, "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": {t: s.to_json() for t, s in info.subscriptions.items()},
        }
        return cmd.make_response(ResponseCode.SUCCESS, body=fastjson.dumps(body).encode("utf-8"))

    async def consume_stats(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        group = req_str(cmd, "consumerGroup")
        wanted = opt_str(cmd, "topic")
        store = self.store_slot.get()
        topics = [wanted] if wanted else store.topics_of_group(group)
        info = self.members.find(group)
        table: dict[MessageQueue, dict[str, int]] = {}
        for topic in topics:
            cfg = store.topics.get(topic)
            if cfg is None:  # AdminBrokerProcessor.getConsumeStats skips it (an empty table, not an error)
                continue
            # like the real broker: an online group only reports topics it still subscribes to
            if info is not None and info.subscriptions and topic not in info.subscriptions:
                continue
            for qid in range(cfg.read_queues):
                consumer = max(store.query_offset(group, topic, qid), 0)
                table[MessageQueue(topic, self.settings.name, qid)] = {
                    "brokerOffset": store.max_offset(topic, qid), "consumerOffset": consumer,
                    "lastTimestamp": store.store_time(topic, qid, consumer - 1) if consumer > 0 else 0}
        body = fastjson.dumps({"consumeTps": 0.0, "offsetTable": table}).encode("utf-8")
        return cmd.make_response(ResponseCode.SUCCESS, body=body)

    async def reset_offset(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET (222, mqadmin resetOffsetByTime): tell the online members.

        Like Broker2Client.resetOffset the broker does not commit the offsets itself; each queue
        goes to the offset of ``timestamp`` (-1: the max offset) unless that is ahead of the
        group's offset and ``isForce`` is false.
        """
        topic = req_str(cmd, "topic")
        group = req_str(cmd, "group")
        timestamp = opt_int(cmd, "timestamp", 0)  # a primitive long in Java's header: absent reads 0
        force = (opt_str(cmd, "isForce") or "false").lower() == "true"
        store = self.store_slot.get()
        cfg = store.topics.get(topic)
        if cfg is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     remark=f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
        table: dict[MessageQueue, int] = {}
        for qid in range(cfg.write_queues):
            current = store.query_offset(group, topic, qid)
            if current == -1:
                return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                         remark=f"THe consumer group <{group}> not exist")
            target = store.max_offset(topic, qid) if timestamp == -1 else store.search_offset(topic, qid, timestamp)
            table[MessageQueue(topic, self.settings.name, qid)] = target if force or target < current else current
        if not self.clients.tell_reset(group, topic, table, timestamp, force):
            return cmd.make_response(ResponseCode.CONSUMER_NOT_ONLINE,
                                     remark=f"Consumer not online, so can not reset offset, Group: {group} "
                                            f"Topic: {topic} Timestamp: {timestamp}")
        return cmd.make_response(ResponseCode.SUCCESS, body=fastjson.dumps({"offsetTable": table}).encode())

    async def forward_to_client(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO (307) / CONSUME_MESSAGE_DIRECTLY (309) from an admin: relay to the client.

        Like Broker2Client.callClient: a 309 carries the stored record its msgId points at as its body;
        the client has 10 s to answer, then the admin gets 207 CONSUME_MSG_TIMEOUT.
        """
        group = req_str(cmd, "consumerGroup")
        client_id = req_str(cmd, "clientId")
        try:
            target = self.clients.channel(group, client_id)
        except LookupError:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     remark=f"The Consumer <{group}> <{client_id}> not online")
        ext, body = dict(cmd.ext), cmd.body
        if cmd.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            ext["brokerName"] = self.settings.name
            try:
                body = self.store_slot.get().record_at(parse_offset_msg_id(req_str(cmd, "msgId"))[1])
            except RocketMQError:
                body = None
        relay = RemotingCommand(cmd.code, ext, body, language="JAVA")
        try:
            answer = await target.request(relay, RELAY_TIMEOUT)
        except RequestTimeoutError:
            return cmd.make_response(ResponseCode.CONSUME_MSG_TIMEOUT, remark=(
                f"consumer <{group}> <{client_id}> Timeout: org.apache.rocketmq.remoting.exception."
                f"RemotingTimeoutException: wait response on the channel <{target.peer}> timeout, "
                f"{int(RELAY_TIMEOUT * 1000)}(ms), org.apache.rocketmq.remoting.netty.NettyRemotingAbstract."
                f"invokeSyncImpl(NettyRemotingAbstract.java)"))
        except RocketMQError as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     remark=f"invoke consumer <{group}> <{client_id}> Exception: {exc}")
        return cmd.make_response(answer.code, answer.ext_fields, answer.body, answer.remark)
