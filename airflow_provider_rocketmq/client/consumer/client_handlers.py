"""Requests the broker sends to a consumer (Java ClientRemotingProcessor).

NOTIFY_CONSUMER_IDS_CHANGED wakes the rebalancer; RESET_CONSUMER_CLIENT_OFFSET
moves offsets (body in fastjson object-key form or the C++ list form);
GET_CONSUMER_RUNNING_INFO answers a Java-compatible ConsumerRunningInfo (fastjson
object keys for ``mqTable``); CONSUME_MESSAGE_DIRECTLY runs the listener on one
message; GET_CONSUMER_STATUS_FROM_CLIENT reports the in-memory offsets of the asked topic
(an empty table when the asked group is not this consumer's, like Java).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from ..errors import MessageDecodeError, ProtocolError, RocketMQError
from ..message import decode_messages
from ..queue import MessageQueue
from ..remoting import fastjson
from ..remoting.codes import CLIENT_VERSION, RequestCode, ResponseCode
from ..remoting.command import RemotingCommand
from ..remoting.connection import RemotingProtocol
from .config import ConsumeStatus
from .listener import ConsumeContext, OrderlyContext, maybe_await, orderly_ok
from .offset_store import RemoteBrokerOffsetStore

if TYPE_CHECKING:
    from .core import ConsumerCore

log = logging.getLogger(__name__)

RESET_WAIT = 10.0  # Java resetOffset waits for in-flight pulls/consumption to settle


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


def register_handlers(core: ConsumerCore) -> None:
    client = core.client

    def mine(cmd: RemotingCommand, field: str = "consumerGroup") -> bool:
        return cmd.ext.get(field) in (core.ns_group, core.group)

    async def notify_ids_changed(conn: RemotingProtocol, cmd: RemotingCommand) -> None:
        if mine(cmd):
            log.info("group %s membership changed; rebalancing now", core.group)
            core.wake_rebalance()

    async def reset_offset(conn: RemotingProtocol, cmd: RemotingCommand) -> None:
        if not mine(cmd, "group"):
            return
        try:
            table = parse_reset_body(cmd.body)
        except ProtocolError as exc:
            log.warning("ignoring RESET_CONSUMER_CLIENT_OFFSET: %s", exc)
            return
        asyncio.get_running_loop().create_task(reset_offsets(core, cmd.ext.get("topic", ""), table))
        return

    async def running_info(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        if not mine(cmd):
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     remark=f"The Consumer Group <{cmd.ext.get('consumerGroup')}> "
                                            "not exist in this consumer", language="PYTHON")
        body = fastjson.dumps(consumer_running_info(core)).encode("utf-8")
        return cmd.make_response(ResponseCode.SUCCESS, body=body, language="PYTHON")

    async def consume_directly(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        try:
            msgs = decode_messages(cmd.body or b"")
        except MessageDecodeError as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=f"bad message body: {exc}",
                                     language="PYTHON")
        if len(msgs) != 1:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=f"expected 1 message, got {len(msgs)}",
                                     language="PYTHON")
        msg = msgs[0]
        msg.broker_name = cmd.ext.get("brokerName", "")
        result = await consume_message_directly(core, msg)
        return cmd.make_response(ResponseCode.SUCCESS, body=fastjson.dumps(result).encode("utf-8"),
                                 language="PYTHON")

    async def consumer_status(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
        # Java MQClientInstance.getConsumerStatus: an empty table for a group this client does not run
        table: dict[MessageQueue, int] = {}
        if mine(cmd, "group") and core.offset_store is not None:
            table = core.offset_store.clone_offset_table(core.config.with_namespace(cmd.ext.get("topic", "")))
        body = fastjson.dumps({"messageQueueTable": dict(sorted(table.items()))}).encode()
        return cmd.make_response(ResponseCode.SUCCESS, body=body, language="PYTHON")

    client.register_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, notify_ids_changed)
    client.register_handler(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, reset_offset)
    client.register_handler(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info)
    client.register_handler(RequestCode.CONSUME_MESSAGE_DIRECTLY, consume_directly)
    client.register_handler(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, consumer_status)


async def reset_offsets(core: ConsumerCore, topic: str, table: dict[MessageQueue, int],
                        wait: float = RESET_WAIT) -> None:
    """Java MQClientInstance.resetOffset: pause, drop, wait, set + persist, forget queues, resume."""
    core.suspend()
    try:
        topic = core.config.with_namespace(topic)
        affected = [mq for mq in core.rebalancer.table if mq.topic == topic and mq in table]
        dropped = []
        for mq in affected:
            pq = core.rebalancer.table.get(mq)
            if pq is not None:
                pq.drop()
                core.pull.stop_queue(mq)
                dropped.append(pq)
        # Java sleeps 10 s so in-flight consumption settles; here: until it has, at most ``wait``
        deadline = time.monotonic() + wait
        while any(pq.inflight or pq.consuming for pq in dropped) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # settled by worker threads: nothing to await
        for mq, offset in table.items():
            core.offset_store.update_offset(mq, offset, increase_only=False)
            try:
                if isinstance(core.offset_store, RemoteBrokerOffsetStore):
                    await core.offset_store.persist_sync(mq)
            except RocketMQError as exc:
                log.warning("cannot persist the reset offset of %s: %s", mq, exc)
        if not isinstance(core.offset_store, RemoteBrokerOffsetStore):
            await core.offset_store.persist_all(table)
        for mq in affected:
            core.rebalancer.remove_queue(mq)
    finally:
        core.resume()


_CR = {ConsumeStatus.CONSUME_SUCCESS: "CR_SUCCESS", ConsumeStatus.RECONSUME_LATER: "CR_LATER"}


async def consume_message_directly(core: ConsumerCore, msg: Any) -> dict[str, Any]:
    """Run the listener on one message; ConsumeMessageDirectlyResult as a dict."""
    listener = core.listener
    start = time.monotonic()
    remark = None
    mq = MessageQueue(msg.topic, msg.broker_name, msg.queue_id)
    ctx: Any = OrderlyContext(mq) if core.orderly else ConsumeContext(mq)
    try:
        assert listener is not None
        if asyncio.iscoroutinefunction(listener):
            status = await listener([msg], ctx)
        else:
            status = await maybe_await(await asyncio.get_running_loop().run_in_executor(None, listener, [msg], ctx))
        if status is None:
            result = "CR_RETURN_NULL"
        elif core.orderly:
            result = "CR_SUCCESS" if orderly_ok(status) else "CR_LATER"
        else:
            result = _CR.get(status, "CR_LATER")
    except Exception as exc:  # noqa: BLE001 - a user listener may raise anything; report it like Java
        result = "CR_THROW_EXCEPTION"
        remark = f"{type(exc).__name__}: {exc}"
    out: dict[str, Any] = {"autoCommit": True, "consumeResult": result, "order": core.orderly,
                           "spentTimeMills": int((time.monotonic() - start) * 1000)}
    if remark is not None:
        out["remark"] = remark
    return out


def consumer_running_info(core: ConsumerCore) -> dict[str, Any]:
    """ConsumerRunningInfo (REFERENCE 2.9) with Java property names."""
    cfg = core.config
    props = {
        "consumerGroup": core.group, "messageModel": cfg.message_model.value,  # type: ignore[union-attr]
        "consumeFromWhere": cfg.consume_from_where.value,  # type: ignore[union-attr]
        "consumeTimestamp": cfg.consume_timestamp, "consumeThreadMin": str(cfg.consume_thread_min),
        "consumeThreadMax": str(cfg.consume_thread_max), "pullBatchSize": str(cfg.pull_batch_size),
        "consumeMessageBatchMaxSize": str(cfg.consume_message_batch_max_size),
        "pullThresholdForQueue": str(cfg.pull_threshold_for_queue),
        "pullThresholdSizeForQueue": str(cfg.pull_threshold_size_for_queue),
        "consumeConcurrentlyMaxSpan": str(cfg.consume_concurrently_max_span),
        "maxReconsumeTimes": str(cfg.max_reconsume_times), "instanceName": cfg.instance_name,
        "unitName": cfg.unit_name, "namespace": cfg.namespace,
        "PROP_NAMESERVER_ADDR": cfg.namesrv_addr, "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
        "PROP_CONSUMEORDERLY": str(core.orderly).lower(), "PROP_CLIENT_VERSION": f"V4_9_7 ({CLIENT_VERSION})",
        "PROP_THREADPOOL_CORE_SIZE": str(cfg.consume_thread_min),
        "PROP_CONSUMER_START_TIMESTAMP": str(int(core.started_at * 1000)),
    }
    props = {k: str(v) for k, v in props.items()}
    mq_table = {mq: pq.info(core.offset_store.memory_offset(mq)) for mq, pq in sorted(core.rebalancer.table.items())}
    consume = core.consume
    status_table: dict[str, Any] = {}
    for topic in core.subscriptions:
        status_table[topic] = {"pullRT": 0.0, "pullTPS": 0.0, "consumeRT": 0.0, "consumeOKTPS": 0.0,
                               "consumeFailedTPS": 0.0,
                               "consumeFailedMsgs": consume.consumed_failed if consume else 0}
    return {"jstack": "", "mqTable": mq_table, "properties": props,
            "statusTable": status_table,
            "subscriptionSet": [s.to_json() for s in core.subscriptions.values()]}
