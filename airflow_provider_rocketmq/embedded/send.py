"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
CONSUMER_SEND_MSG_BACK (36).

Stored properties follow the real broker: single sends drop WAIT and gain
CLUSTER; batch items keep their own properties and get the batch header's
properties (WAIT=true plus CLUSTER) appended. A send to ``%RETRY%<group>`` whose
reconsumeTimes reached maxReconsumeTimes goes to ``%DLQ%<group>`` instead. A
message with a DELAY level is parked in the schedule topic (see schedule.py).
Answers, remarks and extFields of failures are those of a 4.9.7 broker (held to one
by integration/differential): a refused send still carries MSG_REGION and TRACE_ON,
except where the real broker failed with an exception.
"""

from __future__ import annotations

import random

from ..client.connection import Handler, RemotingProtocol
from ..client.protocol.codes import ResponseCode
from ..client.protocol.command import RemotingCommand
from ..client.protocol.errors import MessageDecodeError
from ..client.protocol.message import (
    MAX_PROPERTIES_LEN,
    PROPERTY_CLUSTER,
    PROPERTY_DELAY,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_WAIT,
    decode_batch,
    properties_to_string,
    string_to_properties,
)
from ..client.protocol.names import DEFAULT_TOPIC, DLQ_PREFIX, RETRY_PREFIX, dlq_topic, retry_topic
from ..client.route import PERM_INHERIT, PERM_WRITE
from .headers import FAQ_SUFFIX, opt_int, opt_str, req_int, req_str, send_header
from .ports import BrokerContext
from .settings import MAX_DELAY_LEVEL
from .store import PERM_RW, PutResult, TopicConfig
from .topic_rules import NOT_ALLOWED_SEND_TOPICS, SCHEDULE_TOPIC, validate_topic

# PutMessageStatus MESSAGE_ILLEGAL / PROPERTIES_SIZE_EXCEEDED (body or properties too long, delayed batch)
ILLEGAL_MESSAGE = ("the message is illegal, maybe msg body or properties length not matched. "
                   "msg body length limit {max}B, msg properties length limit 32KB.")


class _SendError(Exception):
    """A refused send; ``exception``: the real broker failed with a Java exception (answer without extFields)."""

    def __init__(self, code: int, remark: str, *, exception: bool = False) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark
        self.exception = exception


def _delay_level(props: dict[str, str]) -> int:
    """MessageExt.getDelayTimeLevel: Integer.parseInt of DELAY (a bad value fails the send)."""
    raw = props.get(PROPERTY_DELAY)
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise _SendError(ResponseCode.SYSTEM_ERROR,
                         f'java.lang.NumberFormatException: For input string: "{raw}", java.base/java.lang.'
                         f'NumberFormatException.forInputString(NumberFormatException.java)', exception=True) from None


class SendHandlers:
    """The produce side of one broker."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.settings = ctx.settings
        self.store_slot = ctx.store_slot
        self.groups = ctx.groups

    def handlers(self) -> dict[int, Handler]:
        return {10: self.send_message, 310: self.send_message, 320: self.send_batch,
                36: self.send_back}

    # -- helpers ------------------------------------------------------------------------
    def _check_topic(self, conn: RemotingProtocol, topic: str, queue_id: int,
                     default_queues: int) -> tuple[TopicConfig, int]:
        """msgCheck: topic name, auto-creation and queue id; returns the queue to use.

        Not the topic's permission: a real broker (4.9.7 ``AbstractSendMessageProcessor.msgCheck``,
        5.3.3 too) stores a plain send into a read-only topic; only CONSUMER_SEND_MSG_BACK checks
        that the retry topic is writable. Clients keep off read-only topics by their routes.
        """
        store = self.store_slot.get()
        bad = validate_topic(topic)
        if bad is not None:
            raise _SendError(ResponseCode.SYSTEM_ERROR, bad)
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise _SendError(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        cfg = store.topics.get(topic)
        if cfg is None:
            # createTopicInSendMessageMethod: min(the producer's defaultTopicQueueNums, TBW102's write
            # queues), TBW102's permission without inherit; a retry topic also without auto-creation
            default = store.topics.get(DEFAULT_TOPIC)
            if self.settings.auto_create_topic and default is not None and default.perm & PERM_INHERIT:
                cfg = store.ensure_topic(topic, max(0, min(default_queues, default.write_queues)),
                                         default.perm & ~PERM_INHERIT)
            elif topic.startswith(RETRY_PREFIX):
                cfg = store.ensure_topic(topic, 1)
            else:
                raise _SendError(ResponseCode.TOPIC_NOT_EXIST,
                                 f"topic[{topic}] not exist, apply first please!{FAQ_SUFFIX}")
        if queue_id >= max(cfg.write_queues, cfg.read_queues):
            raise _SendError(ResponseCode.SYSTEM_ERROR,
                             f"request queueId[{queue_id}] is illegal, {cfg} Producer: {conn.peer}")
        if queue_id < 0:
            queue_id = random.randrange(max(1, cfg.write_queues))
        return cfg, queue_id

    def _dlq_topic(self, group: str) -> str:
        topic = dlq_topic(group)
        # Older brokers created DLQs write-only; 4.9.x send-back creates them read-write, which
        # also lets tests and the demo consume dead letters without an admin step.
        self.store_slot.get().ensure_topic(topic, 1, PERM_RW)
        return topic

    def put(self, topic: str, queue_id: int, body: bytes, props: dict[str, str], *, flag: int,
            sys_flag: int, born_timestamp: int, born_host: str, reconsume_times: int) -> PutResult:
        """Store one message, parking it in the schedule topic when it has a DELAY level."""
        store = self.store_slot.get()
        level = _delay_level(props)
        if level > 0 and not topic.startswith(DLQ_PREFIX):
            level = min(level, MAX_DELAY_LEVEL)
            props[PROPERTY_REAL_TOPIC] = topic
            props[PROPERTY_REAL_QID] = str(queue_id)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
        text = properties_to_string(props)
        if len(text.encode("utf-8")) > MAX_PROPERTIES_LEN:
            raise _SendError(ResponseCode.MESSAGE_ILLEGAL,
                             ILLEGAL_MESSAGE.format(max=self.settings.max_message_size))
        return store.put_message(topic, queue_id, body, text, flag=flag, sys_flag=sys_flag,
                                 born_timestamp=born_timestamp, born_host=born_host,
                                 reconsume_times=reconsume_times, tags=props.get(PROPERTY_TAGS, ""))

    def _response(self, cmd: RemotingCommand, msg_id: str, queue_id: int, queue_offset: int) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, {
            "msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset),
            "MSG_REGION": self.settings.region, "TRACE_ON": "true"})

    def _refusal(self, cmd: RemotingCommand, exc: _SendError) -> RemotingCommand:
        """A refused send: the real broker has already added MSG_REGION and TRACE_ON to its answer."""
        ext = None if exc.exception else {"MSG_REGION": self.settings.region, "TRACE_ON": "true"}
        return cmd.make_response(exc.code, ext, remark=exc.remark)

    # -- SEND_MESSAGE / V2 -------------------------------------------------------------------
    async def send_message(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        header = RemotingCommand(cmd.code, send_header(cmd))  # V2's one-letter fields by their long names
        try:
            req_str(header, "producerGroup")
            topic = req_str(header, "topic")
            req_str(header, "defaultTopic")
            default_queues = req_int(header, "defaultTopicQueueNums")
            queue_id = req_int(header, "queueId")
            sys_flag = req_int(header, "sysFlag")
            born_ts = req_int(header, "bornTimestamp")
            flag = req_int(header, "flag")
            reconsume = opt_int(header, "reconsumeTimes", 0)
            body = cmd.body or b""
            _, queue_id = self._check_topic(conn, topic, queue_id, default_queues)
            if len(body) > self.settings.max_message_size:
                raise _SendError(ResponseCode.MESSAGE_ILLEGAL,
                                 ILLEGAL_MESSAGE.format(max=self.settings.max_message_size))
            props = string_to_properties(opt_str(header, "properties") or "")
            if topic.startswith(RETRY_PREFIX):
                group = topic[len(RETRY_PREFIX):]
                gcfg = self.groups.config(group)
                if gcfg is None:
                    raise _SendError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                     f"subscription group not exist, {group}{FAQ_SUFFIX}")
                max_times = opt_int(header, "maxReconsumeTimes", gcfg.retry_max_times)
                if reconsume >= max_times:
                    topic = self._dlq_topic(group)
                    queue_id = 0
            props.pop(PROPERTY_WAIT, None)
            props[PROPERTY_CLUSTER] = self.settings.cluster
            put = self.put(topic, queue_id, body, props, flag=flag, sys_flag=sys_flag, born_timestamp=born_ts,
                           born_host=conn.peer, reconsume_times=reconsume)
        except _SendError as exc:
            return self._refusal(cmd, exc)
        return self._response(cmd, put.msg_id, queue_id, put.queue_offset)

    # -- SEND_BATCH_MESSAGE ---------------------------------------------------------------------
    async def send_batch(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        header = RemotingCommand(cmd.code, send_header(cmd))
        try:
            req_str(header, "producerGroup")
            topic = req_str(header, "topic")
            default_queues = opt_int(header, "defaultTopicQueueNums", 4)
            queue_id = req_int(header, "queueId")
            sys_flag = req_int(header, "sysFlag")
            born_ts = req_int(header, "bornTimestamp")
            body = cmd.body or b""
            _, queue_id = self._check_topic(conn, topic, queue_id, default_queues)
            illegal = ILLEGAL_MESSAGE.format(max=self.settings.max_message_size)
            if len(body) > self.settings.max_message_size:
                raise _SendError(ResponseCode.MESSAGE_ILLEGAL, illegal)
            batch_props = string_to_properties(opt_str(header, "properties") or "")
            if _delay_level(batch_props) > 0:  # CommitLog.putMessages refuses a delayed batch
                raise _SendError(ResponseCode.MESSAGE_ILLEGAL, illegal)
            # a body the broker cannot split fails with an exception (BufferUnderflow, NPE): SYSTEM_ERROR
            try:
                items = decode_batch(body)
            except MessageDecodeError as exc:
                raise _SendError(ResponseCode.SYSTEM_ERROR, f"the batch body is malformed: {exc}",
                                 exception=True) from None
            if not items:
                raise _SendError(ResponseCode.SYSTEM_ERROR, "the batch body holds no message", exception=True)
            suffix = properties_to_string({PROPERTY_CLUSTER: self.settings.cluster, **batch_props})
            staged = []
            for item in items:
                text = properties_to_string(item.properties)
                text = f"{text}\x02{suffix}" if text else suffix
                staged.append((item.body, text, item.flag, sys_flag, born_ts, item.properties.get(PROPERTY_TAGS)))
            results = self.store_slot.get().put_messages(topic, queue_id, staged, born_host=conn.peer)
        except _SendError as exc:
            return self._refusal(cmd, exc)
        return self._response(cmd, ",".join(r.msg_id for r in results), queue_id, results[0].queue_offset)

    # -- CONSUMER_SEND_MSG_BACK -----------------------------------------------------------------
    async def send_back(self, conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        store = self.store_slot.get()
        offset = req_int(cmd, "offset")
        group = req_str(cmd, "group")
        delay_level = req_int(cmd, "delayLevel")
        gcfg = self.groups.config(group)
        if gcfg is None:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                     remark=f"subscription group not exist, {group} {FAQ_SUFFIX}")
        if gcfg.retry_queues <= 0:
            return cmd.make_response(ResponseCode.SUCCESS)
        retry = retry_topic(group)
        cfg = store.ensure_topic(retry, gcfg.retry_queues)
        if not cfg.perm & PERM_WRITE:
            return cmd.make_response(ResponseCode.NO_PERMISSION,
                                     remark=f"the topic[{retry}] sending message is forbidden")
        msg = store.message_at(offset)
        if msg is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=f"look message by offset failed, {offset}")
        props = dict(msg.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        props[PROPERTY_WAIT] = "false"
        max_times = opt_int(cmd, "maxReconsumeTimes", gcfg.retry_max_times)
        if msg.reconsume_times >= max_times or delay_level < 0:
            topic = self._dlq_topic(group)
            queue_id = 0
            props[PROPERTY_DELAY] = "0"  # setDelayTimeLevel(0): dead letters are not delayed
        else:
            if delay_level == 0:
                delay_level = 3 + msg.reconsume_times
            props[PROPERTY_DELAY] = str(delay_level)
            topic = retry
            queue_id = random.randrange(max(1, gcfg.retry_queues))
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.offset_msg_id)
        try:
            self.put(topic, queue_id, msg.body, props, flag=msg.flag, sys_flag=msg.sys_flag,
                     born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                     reconsume_times=msg.reconsume_times + 1)
        except _SendError as exc:
            return cmd.make_response(exc.code, remark=exc.remark)
        return cmd.make_response(ResponseCode.SUCCESS)
