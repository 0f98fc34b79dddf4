"""Replay the recorded Java-client requests (tests/data/vectors) against the
embedded broker and compare every answer with the real 4.9.7 server's answer:
same response code, same extFields keys, same remark (numbers and addresses
aside), same serialize type, same body structure (JSON key structure, standard vs
fastjson-only JSON, stored-message record fields) and the same
NOTIFY_CONSUMER_IDS_CHANGED traffic per connection.

Preconditions the captures had but did not record (messages produced by an
uncaptured program, a background consumer, stored offsets, an empty topic) are
re-created from the recorded responses before each replay. Long-poll
suspensions are shortened and retry delays scaled down so the replay is fast;
commit-log offsets in CONSUMER_SEND_MSG_BACK / VIEW_MESSAGE_BY_ID are translated
to the embedded store's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections import Counter, defaultdict
from typing import Any

import pytest

from airflow_provider_rocketmq.client.protocol import fastjson
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand, decode_frame
from airflow_provider_rocketmq.client.protocol.message import (
    MessageExt,
    decode_messages,
    parse_offset_msg_id,
    properties_to_string,
)
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.embedded.broker import EmbeddedBroker
from tests import recorded_vectors as vectors

from .rawclient import RawClient

SCENARIOS = ["producer", "push_concurrent", "two_consumers_rebalance", "push_orderly", "admin", "errors"]
SUSPEND_MS = 1500  # recorded pulls park for 15 s; the answer code is the same after 1.5 s


def load(name: str) -> list[dict[str, Any]]:
    return vectors.load(name)


def frame(rec: dict[str, Any]) -> RemotingCommand:
    return decode_frame(bytes.fromhex(rec["frame_hex"]))


# -- comparison -------------------------------------------------------------------------------

def shape(value: Any) -> Any:
    """Structure of a JSON value: object keys kept, map-like keys (numbers, inline objects) dropped."""
    if isinstance(value, dict):
        keys = list(value)
        if keys and all(k.startswith("{") or k.lstrip("-").isdigit() for k in keys):
            return ("map", frozenset(shape(v) for v in value.values()))
        return ("obj", tuple(sorted((k, shape(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("list", frozenset(shape(v) for v in value))
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "num"
    return "null" if value is None else "str"


def is_standard_json(body: bytes) -> bool:
    try:
        json.loads(body)
        return True
    except ValueError:
        return False


def norm_remark(remark: str | None) -> str | None:
    if remark is None:
        return None
    return re.sub(r"\d+", "N", remark)


def message_view(body: bytes) -> list[tuple[Any, ...]]:
    return [(m.topic, m.queue_id, m.queue_offset, m.reconsume_times, m.sys_flag, m.flag, bytes(m.body),
             tuple(sorted(m.properties))) for m in decode_messages(body)]


def compare(name: str, req: dict[str, Any], want: RemotingCommand, got: RemotingCommand) -> list[str]:
    where = f"{name}#{req['index']} code {req['code']}"
    if got.code != want.code:
        return [f"{where}: response code {got.code} ({got.remark!r}), recorded {want.code} ({want.remark!r})"]
    problems = []
    if (got.ext_fields is None) != (want.ext_fields is None) or set(got.ext) != set(want.ext):
        problems.append(f"{where}: extFields {got.ext_fields!r}, recorded {want.ext_fields!r}")
    if norm_remark(got.remark) != norm_remark(want.remark):
        problems.append(f"{where}: remark {got.remark!r}, recorded {want.remark!r}")
    if got.serialize_type != want.serialize_type:
        problems.append(f"{where}: serialize type {got.serialize_type}, recorded {want.serialize_type}")
    if (got.body is None) != (want.body is None):
        problems.append(f"{where}: body {'present' if got.body else 'absent'}, recorded "
                        f"{'present' if want.body else 'absent'}")
    elif want.body is not None and got.body is not None:
        problems += compare_bodies(where, req["code"], want.body, got.body)
    return problems


def compare_bodies(where: str, code: int, want: bytes, got: bytes) -> list[str]:
    """Stored-message records field by field (pull, view by id); JSON bodies by kind and structure."""
    if code in (11, 33):
        if message_view(got) != message_view(want):
            return [f"{where}: messages {message_view(got)} != recorded {message_view(want)}"]
        return []
    problems = []
    if is_standard_json(got) != is_standard_json(want):
        problems.append(f"{where}: standard-JSON {is_standard_json(got)}, recorded {is_standard_json(want)}: "
                        f"{got[:200]!r}")
    if shape(fastjson.loads(got)) != shape(fastjson.loads(want)):
        problems.append(f"{where}: body {got[:400]!r} differs in structure from {want[:400]!r}")
    return problems


# -- preconditions ----------------------------------------------------------------------------------

def produced_topics(records: list[dict[str, Any]]) -> set[str]:
    """Topics the scenario itself writes to (so their messages must not be seeded)."""
    out = set()
    for r in records:
        if r["direction"] != "c2s":
            continue
        cmd = frame(r)
        if r["code"] in (10, 310, 320):
            out.add(cmd.ext.get("b") or cmd.ext.get("topic", ""))
        elif r["code"] == 36:
            out.add("%RETRY%" + cmd.ext["group"])
    return out


def seed_topics(broker: EmbeddedBroker, records: list[dict[str, Any]]) -> None:
    """Create the topics that already existed when the capture began (first route query answered)."""
    first: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["direction"] == "s2c" and r.get("request_code") == 105:
            topic = frame(next(x for x in records if x["index"] == r["request_index"])).ext["topic"]
            first.setdefault(topic, r)
    for topic, r in first.items():
        if r["code"] == 0 and topic not in broker.topics:
            qd = fastjson.loads(frame(r).body)["queueDatas"][0]
            broker.create_topic(topic, qd["readQueueNums"], qd["writeQueueNums"], qd["perm"])


def seed_messages(broker: EmbeddedBroker, records: list[dict[str, Any]], phy_map: dict[int, int]) -> None:
    """Store the messages the scenario pulls or views but did not produce, at their recorded offsets."""
    store = broker.store
    assert store is not None
    for (topic, qid), (by_offset, length) in sorted(recorded_queues(records).items()):
        top = max(max(by_offset, default=-1) + 1, length)
        if top == 0:
            continue
        broker.ensure_topic(topic, 1 if topic.startswith("%RETRY%") else 4)
        for off in range(store.max_offset(topic, qid), top):
            m = by_offset.get(off)
            if m is None:  # a message the capture never showed: any filler keeps offsets aligned
                store.put_message(topic, qid, b"filler", "", born_timestamp=0, born_host="127.0.0.1:1")
                continue
            put = store.put_message(topic, qid, bytes(m.body), properties_to_string(m.properties), flag=m.flag,
                                    sys_flag=m.sys_flag, born_timestamp=m.born_timestamp, born_host=m.born_host,
                                    reconsume_times=m.reconsume_times)
            phy_map[m.commit_log_offset] = put.commit_log_offset


def recorded_queues(records: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[dict[int, MessageExt], int]]:
    """(topic, queue id) -> (the messages pulls and views answered by queue offset, the largest maxOffset
    a pull answered) for the queues the scenario reads but does not write."""
    skip = produced_topics(records)
    wanted: dict[tuple[str, int], dict[int, MessageExt]] = defaultdict(dict)
    lengths: dict[tuple[str, int], int] = defaultdict(int)
    for r in records:
        if r["direction"] != "s2c" or r.get("request_code") not in (11, 33):
            continue
        resp = frame(r)
        req = frame(next(x for x in records if x["index"] == r["request_index"]))
        if r["code"] == 0:
            for m in decode_messages(resp.body or b"", decompress_body=False):
                if m.topic not in skip:
                    wanted[(m.topic, m.queue_id)][m.queue_offset] = m
        if "maxOffset" in resp.ext and req.ext["topic"] not in skip:
            key = (req.ext["topic"], int(req.ext["queueId"]))
            lengths[key] = max(lengths[key], int(resp.ext["maxOffset"]))
    return {key: (wanted.get(key, {}), lengths.get(key, 0)) for key in set(wanted) | set(lengths)}


async def setup_admin(cluster: EmbeddedCluster, records: list[dict[str, Any]]) -> list[RawClient]:
    """The admin capture ran while a consumer of cap_push_group was online with stored offsets."""
    broker = cluster.brokers[0]
    assert broker.store is not None
    helpers = []
    for r in records:
        if r["direction"] == "s2c" and r.get("request_code") == 203 and r["code"] == 0:
            conn_body = fastjson.loads(frame(r).body)
            req = frame(next(x for x in records if x["index"] == r["request_index"]))
            group = req.ext["consumerGroup"]
            hb = {"clientID": conn_body["connectionSet"][0]["clientId"],
                  "consumerDataSet": [{"consumeFromWhere": conn_body["consumeFromWhere"],
                                       "consumeType": conn_body["consumeType"], "groupName": group,
                                       "messageModel": conn_body["messageModel"],
                                       "subscriptionDataSet": list(conn_body["subscriptionTable"].values()),
                                       "unitMode": False}], "producerDataSet": []}
            client = await RawClient().connect(broker.addr)
            assert (await client.call(34, body=json.dumps(hb).encode())).code == 0
            helpers.append(client)
        if r["direction"] == "s2c" and r.get("request_code") == 208 and r["code"] == 0:
            req = frame(next(x for x in records if x["index"] == r["request_index"]))
            table = fastjson.loads(frame(r).body)["offsetTable"]
            for key, value in table.items():
                mq = fastjson.parse_key(key)
                broker.ensure_topic(mq["topic"], 1 if mq["topic"].startswith("%RETRY%") else 4)
                broker.store.commit_offset(req.ext["consumerGroup"], mq["topic"], mq["queueId"],
                                           value["consumerOffset"])
    return helpers


async def setup_errors(cluster: EmbeddedCluster, records: list[dict[str, Any]]) -> list[RawClient]:
    broker = cluster.brokers[0]
    assert broker.store is not None
    broker.ensure_topic("CapErrorsTopic", 4)  # created empty before the capture
    broker.store.commit_offset("cap_push_group", "CapProducerTopic3", 0, 4)  # left by push_concurrent
    return []


SETUP = {"admin": setup_admin, "errors": setup_errors}


# -- replay -------------------------------------------------------------------------------------------

def rewrite(cmd: RemotingCommand, phy_map: dict[int, int]) -> None:
    ext = cmd.ext_fields
    if ext is None:
        return
    if cmd.code == 11 and "suspendTimeoutMillis" in ext:
        ext["suspendTimeoutMillis"] = str(min(int(ext["suspendTimeoutMillis"]), SUSPEND_MS))
    if cmd.code in (33, 36) and "offset" in ext:
        ext["offset"] = str(phy_map.get(int(ext["offset"]), int(ext["offset"])))


def learn_offsets(req: dict[str, Any], want: RemotingCommand, got: RemotingCommand, phy_map: dict[int, int]) -> None:
    if req["code"] in (10, 310, 320) and want.code == 0 and got.code == 0:
        # one msgId per stored message, recorded and replayed alike (a batch gives the same count)
        for w, g in zip(want.ext["msgId"].split(","), got.ext["msgId"].split(","), strict=True):
            phy_map[parse_offset_msg_id(w)[1]] = parse_offset_msg_id(g)[1]


class Replayer:
    """Sends a capture's client requests to the embedded cluster, one connection per recorded stream,
    and compares each answer, then the NOTIFY_CONSUMER_IDS_CHANGED count per connection, with the record."""

    def __init__(self, name: str, records: list[dict[str, Any]], cluster: EmbeddedCluster,
                 phy_map: dict[int, int]) -> None:
        self.name = name
        self.records = records
        self.by_index = {r["index"]: r for r in records}
        self.cluster = cluster
        self.phy_map = phy_map
        self.clients: dict[int, RawClient] = {}
        self.pending: dict[int, asyncio.Task[RemotingCommand]] = {}
        self.notify_expected: Counter[int] = Counter()
        self.problems: list[str] = []
        self.seen_codes: Counter[int] = Counter()

    async def run(self) -> None:
        for r in self.records:
            if r["direction"] == "c2s":
                await self.send(r)
            elif r["rpc"] == "response":
                await self.check_answer(r)
            elif r["code"] == 40:
                self.notify_expected[r["stream"]] += 1
        await self.check_notifications()

    async def send(self, r: dict[str, Any]) -> None:
        if r["rpc"] == "request" and r.get("response_index") is None:
            return  # a long poll still parked when the recorded client shut down
        client = self.clients.get(r["stream"])
        if client is None:
            addr = self.cluster.namesrv_addr if r["server"] == "namesrv" else self.cluster.brokers[0].addr
            client = self.clients[r["stream"]] = await RawClient().connect(addr)
        cmd = frame(r)
        rewrite(cmd, self.phy_map)
        assert client.conn is not None
        if r["rpc"] == "oneway":
            client.conn.send(cmd)
        else:
            self.pending[r["index"]] = asyncio.ensure_future(client.conn.request(cmd, 20.0))

    async def check_answer(self, r: dict[str, Any]) -> None:
        req = self.by_index[r["request_index"]]
        got = await self.pending.pop(r["request_index"])
        want = frame(r)
        learn_offsets(req, want, got, self.phy_map)
        self.seen_codes[req["code"]] += 1
        self.problems += compare(self.name, req, want, got)

    async def check_notifications(self) -> None:
        """Broker-initiated notifications: the recorded number on every connection (within 5 s)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        for stream, count in self.notify_expected.items():
            with contextlib.suppress(asyncio.TimeoutError):
                await self.clients[stream].wait_inbound(40, count, timeout=max(0.0, deadline - loop.time()))
        for stream, client in self.clients.items():
            got = sum(1 for c in client.inbound if c.code == 40)
            if got != self.notify_expected.get(stream, 0):
                self.problems.append(f"{self.name}: stream {stream} got {got} NOTIFY_CONSUMER_IDS_CHANGED, "
                                     f"recorded {self.notify_expected.get(stream, 0)}")
        if self.notify_expected:
            self.seen_codes[40] += sum(self.notify_expected.values())

    async def close(self) -> None:
        for c in self.clients.values():
            await c.close()


async def replay(name: str) -> tuple[list[str], Counter[int]]:
    records = load(name)
    phy_map: dict[int, int] = {}
    async with EmbeddedCluster(queues=4, time_scale=0.002) as cluster:
        seed_topics(cluster.brokers[0], records)
        seed_messages(cluster.brokers[0], records, phy_map)
        helpers = await SETUP[name](cluster, records) if name in SETUP else []
        replayer = Replayer(name, records, cluster, phy_map)
        try:
            await replayer.run()
        finally:
            await replayer.close()
            for c in helpers:
                await c.close()
    return replayer.problems, replayer.seen_codes


def recorded_codes(name: str) -> set[int]:
    """Request codes answered in the capture, plus 40 when the broker sent notifications."""
    out = set()
    for r in load(name):
        if r["rpc"] == "response":
            out.add(r["request_code"])
        elif r["direction"] == "s2c" and r["code"] == 40:
            out.add(40)
    return out


@pytest.mark.parametrize("name", SCENARIOS)
async def test_replay_matches_real_server(name: str) -> None:
    problems, codes = await replay(name)
    assert not problems, "\n".join(problems)
    # every request code with a recorded answer was replayed and compared
    assert set(codes) == recorded_codes(name), f"compared {sorted(codes)}, recorded {sorted(recorded_codes(name))}"
