"""Requests the broker sends to a consumer (Java ClientRemotingProcessor).

NOTIFY_CONSUMER_IDS_CHANGED wakes the rebalancer; RESET_CONSUMER_CLIENT_OFFSET
moves offsets (body in fastjson object-key form or the C++ list form);
GET_CONSUMER_RUNNING_INFO answers a Java-compatible ConsumerRunningInfo (fastjson
object keys for ``mqTable``); CONSUME_MESSAGE_DIRECTLY runs the listener on one
message; GET_CONSUMER_STATUS_FROM_CLIENT reports the in-memory offsets of the asked topic
(an empty table when the asked group is not this consumer's, like Java).
"""

from __future__ import annotations

import logging

from ..connection import RemotingProtocol
from ..mqclient import MQClient
from ..protocol import fastjson
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.errors import ProtocolError
from ..protocol.queue import MessageQueue
from .lifecycle import Background
from .ports import BrokerRequests

log = logging.getLogger(__name__)


def parse_reset_body(body: bytes | None) -> dict[MessageQueue, int]:
    """ResetOffsetBody: ``{"offsetTable":{<mq>:n}}`` (fastjson), ``[[{mq},n],...]`` or CPP list form."""
    if not body:
        raise ProtocolError("RESET_CONSUMER_CLIENT_OFFSET without a body")
    obj = fastjson.loads(body)
    table = obj.get("offsetTable") if isinstance(obj, dict) else None
    out: dict[MessageQueue, int] = {}
    try:
        if isinstance(table, dict):
            for key, value in table.items():
                out[MessageQueue.from_json(fastjson.parse_key(key))] = int(value)
        elif isinstance(table, list):
            for item in table:
                if isinstance(item, list) and len(item) == 2:  # gson form [[{mq}, n], ...]
                    out[MessageQueue.from_json(item[0])] = int(item[1])
                elif isinstance(item, dict):  # ResetOffsetBodyForC: [{brokerName,queueId,topic,offset}]
                    out[MessageQueue.from_json(item)] = int(item["offset"])
                else:
                    raise ProtocolError(f"unexpected offsetTable entry {item!r}")
        else:
            raise ProtocolError("ResetOffsetBody has no offsetTable")
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed ResetOffsetBody: {exc}") from None
    return out


def register_handlers(client: MQClient, consumer: BrokerRequests, bg: Background) -> None:
    """Answer the broker's requests for ``consumer`` on every connection of ``client``."""

    async def notify_ids_changed(conn: RemotingProtocol, cmd: RemotingCommand) -> None:
        if consumer.owns_group(cmd.ext.get("consumerGroup")):
            log.info("group %s membership changed; rebalancing now", cmd.ext.get("consumerGroup"))
            consumer.wake_rebalance()

    async def reset_offset(conn: RemotingProtocol, cmd: RemotingCommand) -> None:
        if not consumer.owns_group(cmd.ext.get("group")):
            return
        try:
            table = parse_reset_body(cmd.body)
        except ProtocolError as exc:
            log.warning("ignoring RESET_CONSUMER_CLIENT_OFFSET: %s", exc)
            return
        # oneway, and the reset waits for in-flight consumption: run it apart from the reader
        bg.spawn(consumer.reset_offsets(cmd.ext.get("topic", ""), table), "reset offsets")

    async def running_info(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        if not consumer.owns_group(cmd.ext.get("consumerGroup")):
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     remark=f"The Consumer Group <{cmd.ext.get('consumerGroup')}> "
                                            "not exist in this consumer", language="PYTHON")
        body = fastjson.dumps(consumer.running_info()).encode("utf-8")
        return cmd.make_response(ResponseCode.SUCCESS, body=body, language="PYTHON")

    async def consume_directly(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        try:
            result = await consumer.consume_directly(cmd.body or b"", cmd.ext.get("brokerName", ""))
        except ProtocolError as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc), language="PYTHON")
        return cmd.make_response(ResponseCode.SUCCESS, body=fastjson.dumps(result).encode("utf-8"),
                                 language="PYTHON")

    async def consumer_status(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        # Java MQClientInstance.getConsumerStatus: an empty table for a group this client does not run
        table: dict[MessageQueue, int] = {}
        if consumer.owns_group(cmd.ext.get("group")):
            table = consumer.offsets_of(cmd.ext.get("topic", ""))
        body = fastjson.dumps({"messageQueueTable": dict(sorted(table.items()))}).encode()
        return cmd.make_response(ResponseCode.SUCCESS, body=body, language="PYTHON")

    client.register_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, notify_ids_changed)
    client.register_handler(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, reset_offset)
    client.register_handler(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info)
    client.register_handler(RequestCode.CONSUME_MESSAGE_DIRECTLY, consume_directly)
    client.register_handler(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, consumer_status)
