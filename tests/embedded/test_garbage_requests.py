"""Malformed requests to every handled code get an answer and never break the broker."""

from __future__ import annotations

import random
import re

from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.embedded import EmbeddedCluster

from .rawclient import RawClient, send_ext

FIELDS = ["topic", "queueId", "queueOffset", "consumerGroup", "group", "offset", "commitOffset", "maxMsgNums",
          "sysFlag", "suspendTimeoutMillis", "subscription", "subVersion", "expressionType", "timestamp",
          "delayLevel", "maxReconsumeTimes", "clientID", "clientId", "readQueueNums", "writeQueueNums", "perm",
          *"abcdefghijklmn"]
VALUES = ["", "0", "-1", "1", "99999999999999999999", "abc", "T", "%RETRY%g", "*", "TagA || ", "true", "\x01\x02",
          "值", "1e3", "0x10"]
BODIES = [None, b"", b"{", b"[]", b"null", b'{"clientID":1,"consumerDataSet":{}}', b'{"mqSet":[{"x":1}]}',
          b"\x00\x00\x00\x16" + b"\x00" * 18, bytes(range(256))]


async def test_random_garbage_is_answered(embedded_cluster: EmbeddedCluster) -> None:
    broker = embedded_cluster.brokers[0]
    codes = sorted(broker.handlers) + [9999]
    rng = random.Random(20261121)
    c = await RawClient().connect(broker.addr)
    ns = await RawClient().connect(embedded_cluster.namesrv_addr)
    try:
        await c.call(310, send_ext("T", queue_id=0), b"seed")
        answered = 0
        for _ in range(400):
            code = rng.choice(codes)
            ext = {k: rng.choice(VALUES) for k in rng.sample(FIELDS, rng.randint(0, 8))}
            if code == 11:
                ext["suspendTimeoutMillis"] = "0"  # keep pulls from parking
            body = rng.choice(BODIES)
            target = ns if code in (105, 106) and rng.random() < 0.5 else c
            assert target.conn is not None
            resp = await target.conn.request(RemotingCommand(code, ext, body, language="JAVA"), 5)
            assert resp.is_response
            if resp.code not in (0, 19, 20, 21, 22):
                assert resp.remark, f"code {code} ext {ext!r} answered {resp.code} without a remark"
                # an unexpected exception in a handler surfaces as "SomeError: ..." from the transport
                assert not re.match(r"^\w+(Error|Exception): ", resp.remark), (code, ext, body, resp.remark)
            answered += 1
        assert answered == 400
        # still healthy: the seeded message is where it was
        r = await c.call(30, {"topic": "T", "queueId": 0})
        assert r.code == 0 and int(r.ext["offset"]) >= 1
    finally:
        await c.close()
        await ns.close()
