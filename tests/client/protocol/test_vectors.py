"""Every frame recorded from a real RocketMQ 4.9.7 namesrv/broker decodes, parses and re-encodes."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import zlib
from typing import Any

import pytest

from airflow_provider_rocketmq.client.protocol import fastjson
from airflow_provider_rocketmq.client.protocol.acl import AclHook
from airflow_provider_rocketmq.client.protocol.admin_bodies import (
    ConsumerConnection,
    ConsumeStats,
    TopicStatsTable,
    consume_stats_body,
)
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand, decode_frame
from airflow_provider_rocketmq.client.protocol.message import (
    decode_batch,
    decode_messages,
    decode_messages_sized,
    java_string_hash,
    string_to_properties,
)
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.client.route import ClusterInfo, TopicRouteData
from tests import recorded_vectors as vectors

RECORDS = vectors.all_records()

# errors.jsonl #50 was hand-written with a JSON *number* in extFields ({"queueId":0}); extFields
# are strings on the wire, so re-encoding it gives "0" - by design, not a codec gap.
NON_DETERMINISTIC = {("errors", 50)}


def _frame(rec: dict[str, Any]) -> bytes:
    return bytes.fromhex(rec["frame_hex"])


@pytest.mark.parametrize("rec", RECORDS, ids=vectors.rec_id)
def test_frame_header_matches_recording(rec: dict[str, Any]) -> None:
    raw = _frame(rec)
    cmd = decode_frame(raw)
    assert cmd.code == rec["code"]
    assert cmd.opaque == rec["opaque"]
    assert cmd.flag == rec["flag"]
    assert cmd.version == rec["version"]
    assert cmd.serialize_type == rec["serialize_type"]
    assert len(cmd.body or b"") == rec["body_len"]
    assert cmd.is_response == (rec["rpc"] == "response")
    assert cmd.is_oneway == (rec["rpc"] == "oneway")
    if rec["header"] is not None:
        header = json.loads(rec["header"])
        expected_ext = {k: str(v) for k, v in header.get("extFields", {}).items()}
        assert cmd.ext == expected_ext
        assert (cmd.ext_fields is None) == ("extFields" not in header)
        assert cmd.remark == header.get("remark")
        assert cmd.language == header["language"]
    else:
        binary = rec["header_binary_decoded"]
        assert cmd.ext == binary["extFields"]
        assert cmd.language == ("JAVA", "CPP", "DOTNET", "PYTHON")[binary["language"]]
    if (rec["_file"], rec["index"]) not in NON_DETERMINISTIC:
        assert cmd.encode() == raw


def _request_code(rec: dict[str, Any]) -> int:
    return rec["request_code"] if rec["rpc"] == "response" else rec["code"]


def _check_message(m: Any, exp: dict[str, Any]) -> None:
    assert m.store_size == exp["totalSize"]
    assert m.body_crc == exp["bodyCRC"]
    assert m.queue_id == exp["queueId"]
    assert m.queue_offset == exp["queueOffset"]
    assert m.commit_log_offset == exp["commitLogOffset"]
    assert m.sys_flag == exp["sysFlag"]
    assert m.born_timestamp == exp["bornTimestamp"]
    assert m.store_timestamp == exp["storeTimestamp"]
    assert m.born_host == exp["bornHost"]
    assert m.store_host == exp["storeHost"]
    assert m.reconsume_times == exp["reconsumeTimes"]
    assert m.topic == exp["topic"]
    assert m.properties == exp["properties"]
    assert m.tags == exp["properties"].get("TAGS")
    assert m.keys == exp["properties"].get("KEYS")
    assert m.offset_msg_id == exp["offsetMsgId"]
    assert m.msg_id == exp["properties"].get("UNIQ_KEY", exp["offsetMsgId"])
    if exp.get("compression"):
        assert len(m.body) == exp["decompressed_len"]
        assert m.body.decode().startswith(exp["body_text"].split("...(")[0])
    else:
        assert m.body.decode("utf-8") == exp["body_text"]


@pytest.mark.parametrize("rec", [r for r in RECORDS if r["body_len"]], ids=vectors.rec_id)
def test_every_body_parses(rec: dict[str, Any]) -> None:
    cmd = decode_frame(_frame(rec))
    body = cmd.body
    assert body is not None
    code = _request_code(rec)
    decoded = rec.get("decoded") or {}
    response = rec["rpc"] == "response"
    if "messages" in decoded:
        msgs = decode_messages(body)
        assert len(msgs) == len(decoded["messages"])
        for m, exp in zip(msgs, decoded["messages"], strict=True):
            _check_message(m, exp)
        sized, body_bytes = decode_messages_sized(body)  # the consumer's path: same messages, the tally
        assert [m.msg_id for m in sized] == [m.msg_id for m in msgs]
        assert body_bytes == sum(len(m.body) for m in msgs)
        return
    if code == 320 and not response:
        items = decode_batch(body)
        exp_items = decoded["batch_messages"]
        assert [i.properties for i in items] == [e["properties"] for e in exp_items]
        assert [i.body.decode() for i in items] == [e["body_text"] for e in exp_items]
        return
    if code == 310 and not response:
        exp_body = decoded["body"]
        assert len(body) == exp_body["stored_body_len"]
        assert zlib.crc32(body) & 0x7FFFFFFF == exp_body["stored_body_crc32"]
        if exp_body.get("compression") == "ZLIB":
            assert int(cmd.ext["f"]) == 0x301
            assert len(zlib.decompress(body)) == exp_body["decompressed_len"]
        else:
            assert body.decode() == exp_body["body_text"]
        return
    _check_json_body(body, code, response, decoded)


def _check_json_body(body: bytes, code: int, response: bool, decoded: dict[str, Any]) -> None:
    parsed = fastjson.loads(body)  # every JSON body, standard or fastjson-style
    assert isinstance(parsed, dict)
    if decoded.get("body_is_standard_json"):
        assert json.loads(body) == parsed
    if code == 105 and response:
        route = TopicRouteData.from_body(body)
        assert route.broker_datas[0].master_addr() == "127.0.0.1:10911"
        assert all(q.broker_name == "broker-a" for q in route.queue_datas)
    elif code == 106:
        info = ClusterInfo.from_body(body)
        assert info.master_addrs("DefaultCluster") == {"broker-a": "127.0.0.1:10911"}
    elif code == 208:
        stats = ConsumeStats.from_body(body)
        assert stats.offset_table and all(isinstance(mq, MessageQueue) for mq in stats.offset_table)
        # re-encoding in fastjson form parses back to the same table
        assert ConsumeStats.from_body(consume_stats_body(stats.offset_table)).offset_table == \
            stats.offset_table
    elif code == 202:
        table = TopicStatsTable.from_body(body).offset_table
        assert {mq.queue_id for mq in table} == {0, 1, 2, 3}
    elif code == 203:
        conn = ConsumerConnection.from_body(body)
        assert conn.connections and conn.message_model == "CLUSTERING"
    elif code == 34:
        codes = {s["subString"]: s["codeSet"] for c in parsed["consumerDataSet"]
                 for s in c["subscriptionDataSet"]}
        for sub, code_set in codes.items():
            tags = [t.strip() for t in sub.split("||")] if sub != "*" else []
            assert code_set == [java_string_hash(t) for t in tags]


def test_route_forms_and_cluster_info_from_errors_capture() -> None:
    recs = {r["index"]: r for r in vectors.load("errors")}
    legacy = decode_frame(_frame(recs[3])).body  # version 399: {0:"addr"}
    standard = decode_frame(_frame(recs[5])).body
    assert legacy is not None and standard is not None
    with pytest.raises(ValueError):
        json.loads(legacy)
    assert TopicRouteData.from_body(legacy) == TopicRouteData.from_body(standard)
    route = TopicRouteData.from_body(standard)
    assert route.publish_queues("CapProducerTopic3") == \
        [MessageQueue("CapProducerTopic3", "broker-a", i) for i in range(4)]


def test_consume_stats_figures_match_mqadmin_capture() -> None:
    rec = next(r for r in vectors.load("admin") if r["rpc"] == "response" and r["request_code"] == 208)
    stats = ConsumeStats.from_body(decode_frame(_frame(rec)).body)
    q0 = stats.offset_table[MessageQueue("CapProducerTopic3", "broker-a", 0)]
    assert (q0.broker_offset, q0.consumer_offset, q0.last_timestamp) == (4, 4, 1795244530244)
    assert stats.consume_tps == 0.0


def test_producer_request_properties_and_non_ascii_value() -> None:
    sends = [r for r in vectors.load("producer") if r["code"] == 310 and r["rpc"] == "request"]
    assert len(sends) == 5
    for rec in sends:
        cmd = decode_frame(_frame(rec))
        props = string_to_properties(cmd.ext["i"])
        assert props == rec["decoded"]["properties"]
        assert props["note"] == "值"


# -- ACL -----------------------------------------------------------------------------------

def _hand_signature(secret: str, fields: dict[str, str], body: bytes = b"") -> str:
    """The algorithm as written in REFERENCE 2.13, independent of acl.py."""
    ordered = sorted((k, v) for k, v in fields.items() if k != "Signature")
    content = "".join(v for _, v in ordered).encode("utf-8") + body
    return base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()


def test_acl_signature_without_security_token() -> None:
    cmd = RemotingCommand.request(14, {"topic": "T", "queueId": 3, "consumerGroup": "g"})
    AclHook("ak", "secret")(cmd)
    # sorted keys: AccessKey, consumerGroup, queueId, topic -> "ak" "g" "3" "T"
    expected = base64.b64encode(hmac.new(b"secret", b"akg3T", hashlib.sha1).digest()).decode()
    assert cmd.ext["Signature"] == expected
    assert cmd.ext["AccessKey"] == "ak" and "SecurityToken" not in cmd.ext


def test_acl_signature_with_security_token_and_body() -> None:
    cmd = RemotingCommand.request(34, {"b": "2", "a": "1"}, b"\x00body\xff")
    AclHook("ak", "secret", "tok")(cmd)
    # sorted keys: AccessKey, SecurityToken, a, b -> "ak" "tok" "1" "2", then the raw body
    expected = base64.b64encode(hmac.new(b"secret", b"aktok12\x00body\xff", hashlib.sha1).digest()).decode()
    assert cmd.ext["Signature"] == expected
    assert cmd.ext["SecurityToken"] == "tok"
    assert _hand_signature("secret", cmd.ext, cmd.body or b"") == expected
    AclHook("ak", "secret", "tok")(cmd)  # re-signing a re-sent command gives the same signature
    assert cmd.ext["Signature"] == expected


def test_acl_signatures_recorded_from_mqadmin() -> None:
    signed = [r for r in vectors.load("admin") if (r.get("decoded") or {}).get("acl_signature_recomputed")]
    assert len(signed) == 12
    for rec in signed:
        cmd = decode_frame(_frame(rec))
        recorded = cmd.ext["Signature"]
        assert _hand_signature("12345678", cmd.ext, cmd.body or b"") == recorded
        fresh = RemotingCommand.request(cmd.code, {k: v for k, v in cmd.ext.items()
                                                   if k not in ("Signature", "AccessKey")}, cmd.body)
        AclHook("rocketmq2", "12345678")(fresh)
        assert fresh.ext["Signature"] == recorded


# -- tag hashes ----------------------------------------------------------------------------

@pytest.mark.parametrize("tag,expected", [("TagA", 2598919), ("*", 42), ("标签", 857175),
                                          ("😀", 1772899), ("TagB", 2598920), ("", 0)])
def test_java_string_hash(tag: str, expected: int) -> None:
    assert java_string_hash(tag) == expected


def test_missing_vectors_fail_collection_instead_of_skipping(tmp_path):
    """A checkout without the captures must fail loudly: a skip would pass while checking nothing."""
    import subprocess
    import sys

    env = {**__import__("os").environ, "ROCKETMQ_VECTORS_DIR": str(tmp_path)}
    code = "import recorded_vectors as v; v.all_records()"
    tests_dir = str(vectors.DEFAULT_DIR.parents[1])
    proc = subprocess.run([sys.executable, "-c", code], cwd=tests_dir, env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode != 0
    assert "VectorsMissingError" in proc.stderr and str(tmp_path) in proc.stderr


def test_vectors_travel_with_the_repository():
    assert vectors.DEFAULT_DIR.is_dir()
    assert len(vectors.all_records()) == len(RECORDS) > 400
