"""The embedded broker's plain-ACL mode: the verifier against the signatures recorded from a real
4.9.7 mqadmin, and the 4.9.7 semantics (which request needs which permission, admin-only codes, white
lists, exact refusal remarks) over real sockets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_rocketmq.client import AclDeniedError, ClientConfig, Message
from airflow_provider_rocketmq.client.admin import Admin
from airflow_provider_rocketmq.client.producer import Producer
from airflow_provider_rocketmq.client.protocol.acl import AclHook
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand, decode_frame
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.embedded.acl import AclConfig, AclValidator, AddressRule, java_hashmap_order
from tests import recorded_vectors as vectors

from .rawclient import RawClient, heartbeat_body, pull_ext, send_ext

VALIDATE = "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java)"
CHECK_PERM = "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java)"
EXC = "org.apache.rocketmq.acl.common.AclException"

ACL: dict[str, Any] = {
    "globalWhiteRemoteAddresses": ["10.10.103.*", "192.168.0.{1,2}"],  # neither admits 127.0.0.1
    "accounts": [
        # the key the recorded mqadmin frames are signed with (INDEX.md #23): no admin, no permission
        {"accessKey": "rocketmq2", "secretKey": "12345678"},
        {"accessKey": "producer_ak", "secretKey": "producer_sk", "defaultTopicPerm": "DENY",
         "topicPerms": ["AclOrders=PUB", "AclAudit=SUB"]},
        {"accessKey": "consumer_ak", "secretKey": "consumer_sk", "defaultTopicPerm": "DENY",
         "defaultGroupPerm": "DENY", "topicPerms": ["AclOrders=SUB", "AclAudit=PUB|SUB"],
         "groupPerms": ["readers=SUB", "blocked=DENY"]},
        {"accessKey": "admin_ak", "secretKey": "admin_sk_1", "admin": True},
        # an admin with a permission list is checked against it like anybody else
        {"accessKey": "admin_listed", "secretKey": "admin_sk_2", "admin": True, "defaultTopicPerm": "DENY",
         "topicPerms": ["AclAudit=SUB"]},
    ],
}


def remark(message: str, frame: str = VALIDATE) -> str:
    return f"{EXC}: {message}, {frame}"


@pytest.fixture(scope="module")
def acl_cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(queues=2, acl=ACL) as cluster:
        cluster.create_topic("AclOrders", 2)
        cluster.create_topic("AclAudit", 2)
        yield cluster


def signed(code: int, ext: dict[str, Any] | None, body: bytes | None = None, *,
           ak: str | None = None, sk: str = "", oneway: bool = False) -> RemotingCommand:
    cmd = RemotingCommand.request(code, ext, body, oneway=oneway)
    if ak is not None:
        AclHook(ak, sk)(cmd)
    return cmd


async def call(cluster: EmbeddedCluster, cmd: RemotingCommand) -> RemotingCommand:
    client = await RawClient().connect(cluster.brokers[0].addr)
    try:
        assert client.conn is not None
        return await client.conn.request(cmd, 5.0)
    finally:
        await client.close()


# -- the verifier against the recorded mqadmin signatures --------------------------------------------

def _signed_records() -> list[RemotingCommand]:
    recs = [r for r in vectors.load("admin") if (r.get("decoded") or {}).get("acl_signature_recomputed")]
    assert len(recs) == 12  # INDEX.md #23
    return [decode_frame(bytes.fromhex(r["frame_hex"])) for r in recs]


def test_recorded_mqadmin_signatures_are_accepted_with_the_right_secret_only() -> None:
    right = AclValidator(AclConfig.from_mapping(ACL))
    wrong = AclValidator(AclConfig.from_mapping(
        {"accounts": [{"accessKey": "rocketmq2", "secretKey": "12345679"}]}))
    for cmd in _signed_records():
        assert right.refusal(cmd, "192.0.2.2:51000") is None, cmd
        assert wrong.refusal(cmd, "192.0.2.2:51000") == remark("Check signature failed for accessKey=rocketmq2")


def test_any_mutation_of_a_recorded_frame_breaks_its_signature() -> None:
    validator = AclValidator(AclConfig.from_mapping(ACL))
    failed = remark("Check signature failed for accessKey=rocketmq2")
    checked = 0
    for cmd in _signed_records():
        for key in cmd.ext:
            if key in ("Signature", "AccessKey"):
                continue
            changed = RemotingCommand(cmd.code, {**cmd.ext, key: cmd.ext[key] + "x"}, cmd.body)
            assert validator.refusal(changed, "192.0.2.2:1") == failed, (cmd.code, key)
            checked += 1
        extra = RemotingCommand(cmd.code, {**cmd.ext, "brokerName": "broker-a"}, cmd.body)
        assert validator.refusal(extra, "192.0.2.2:1") == failed
        with_body = RemotingCommand(cmd.code, dict(cmd.ext), b"{}")
        assert validator.refusal(with_body, "192.0.2.2:1") == failed
        unsigned = RemotingCommand(cmd.code, {k: v for k, v in cmd.ext.items() if k != "Signature"}, cmd.body)
        assert validator.refusal(unsigned, "192.0.2.2:1") == failed
        other_key = RemotingCommand(cmd.code, {**cmd.ext, "AccessKey": "producer_ak"}, cmd.body)
        assert validator.refusal(other_key, "192.0.2.2:1") == remark(
            "Check signature failed for accessKey=producer_ak")
        # 4.9.7 leaves _UNIQUE_KEY_QUERY out of the signed content (PlainAccessValidator.parse)
        unique = RemotingCommand(cmd.code, {**cmd.ext, "_UNIQUE_KEY_QUERY": "true"}, cmd.body)
        assert validator.refusal(unique, "192.0.2.2:1") is None
    assert checked >= 14


async def test_recorded_frames_replayed_to_an_acl_broker(acl_cluster: EmbeddedCluster) -> None:
    """The broker-bound recorded frames, byte for byte over a socket: accepted, then refused once the
    broker holds another secret for rocketmq2 (a reload of plain_acl.yml)."""
    frames = [c for c in _signed_records() if c.code in (202, 203, 208, 35)]
    assert {c.code for c in frames} == {202, 203, 208, 35}
    for cmd in frames:
        resp = await call(acl_cluster, cmd)
        assert not (resp.remark or "").startswith(EXC), (cmd.code, resp.code, resp.remark)
    other = json.loads(json.dumps(ACL))
    other["accounts"][0]["secretKey"] = "87654321"
    acl_cluster.set_acl(other)
    try:
        for cmd in frames:
            resp = await call(acl_cluster, cmd)
            assert (resp.code, resp.remark) == (1, remark("Check signature failed for accessKey=rocketmq2"))
    finally:
        acl_cluster.set_acl(ACL)


# -- semantics over sockets, with the real client ------------------------------------------------------

@pytest.mark.parametrize("creds,reason", [
    ({}, "No accessKey is configured"),
    ({"access_key": "nobody_ak", "secret_key": "whatever"}, "No acl config for nobody_ak"),
    ({"access_key": "producer_ak", "secret_key": "not-the-secret"},
     "Check signature failed for accessKey=producer_ak"),
    ({"access_key": "producer_ak", "secret_key": "producer_sk", "security_token": "tok"}, None),
])
def test_send_credentials(acl_cluster: EmbeddedCluster, creds: dict[str, str], reason: str | None) -> None:
    before = len(acl_cluster.messages("AclOrders"))
    with Producer(ClientConfig(namesrv_addr=acl_cluster.namesrv_addr, **creds)) as producer:
        if reason is None:
            assert producer.send(Message("AclOrders", b"ok")).status == "SEND_OK"
            assert len(acl_cluster.messages("AclOrders")) == before + 1
            return
        with pytest.raises(AclDeniedError) as info:
            producer.send(Message("AclOrders", b"refused"))
    err = info.value
    assert (err.code, err.remark, err.reason) == (1, remark(reason), reason)
    who = "user producer_ak was not authenticated" if creds.get("access_key") == "producer_ak" else \
        "user nobody_ak was not authenticated" if creds else "a request without credentials was refused"
    assert str(err) == f"access denied by broker {acl_cluster.brokers[0].addr} (ACL 1.0): {who} (SEND_MESSAGE_V2): " \
        f"{reason}"
    assert len(acl_cluster.messages("AclOrders")) == before  # refused before anything was stored


def test_topic_permissions_and_admin_codes(acl_cluster: EmbeddedCluster) -> None:
    ns = acl_cluster.namesrv_addr
    producer_cfg = ClientConfig(namesrv_addr=ns, access_key="producer_ak", secret_key="producer_sk")
    with Producer(producer_cfg) as producer:
        for topic in ("AclAudit", "AclElsewhere"):  # SUB only / no entry and DENY by default
            with pytest.raises(AclDeniedError) as info:
                producer.send(Message(topic, b"x"))
            assert info.value.remark == remark(f"No default permission for topic:{topic}", CHECK_PERM)
        assert acl_cluster.messages("AclElsewhere") == []
        # 4.9.7 checks no resource for SEND_BATCH_MESSAGE (5.x does): only the signature
        assert producer.send_batch([Message("AclElsewhere", b"a"), Message("AclElsewhere", b"b")]).status == \
            "SEND_OK"
    with Admin(producer_cfg) as admin:
        with pytest.raises(AclDeniedError) as info:
            admin.create_topic("AclNew", 2)
        assert info.value.remark == remark("Need admin permission for request code=17, but accessKey=producer_ak "
                                           "is not", CHECK_PERM)
        assert admin.high_water_marks("AclOrders")  # GET_MAX_OFFSET needs no resource, only a signature
    with Admin(ClientConfig(namesrv_addr=ns, access_key="admin_ak", secret_key="admin_sk_1")) as admin:
        assert admin.create_topic("AclNew", 2) == ["broker-a"]
    with Producer(ClientConfig(namesrv_addr=ns, access_key="admin_listed", secret_key="admin_sk_2")) as producer, \
            pytest.raises(AclDeniedError, match="No default permission for topic:AclOrders"):
        producer.send(Message("AclOrders", b"x"))


async def test_group_permissions_of_consumer_requests(acl_cluster: EmbeddedCluster) -> None:
    creds = {"ak": "consumer_ak", "sk": "consumer_sk"}
    hb = await call(acl_cluster, signed(34, None, heartbeat_body("c1", "readers", {"AclOrders": "*"}), **creds))
    assert hb.code == 0, hb.remark
    refused = {
        # heartbeat: %RETRY%<group> and every subscribed topic need SUB
        "group:others": signed(34, None, heartbeat_body("c1", "others", {"AclOrders": "*"}), **creds),
        "topic:AclSecret": signed(34, None, heartbeat_body("c1", "readers", {"AclSecret": "*"}), **creds),
        "group:blocked": signed(11, pull_ext("blocked", "AclOrders", 0, 0, suspend_ms=0), **creds),
        "topic:AclElsewhere": signed(11, pull_ext("readers", "AclElsewhere", 0, 0, suspend_ms=0), **creds),
        # a send to a retry topic needs SUB on %RETRY%<producer group> (field a), not PUB
        "group:CLIENT_INNER_PRODUCER": signed(310, send_ext("%RETRY%readers", queue_id=0,
                                                            group="CLIENT_INNER_PRODUCER"), b"x", **creds),
        "group:nobody": signed(36, {"offset": "0", "group": "nobody", "delayLevel": "0",
                                    "originMsgId": "X", "originTopic": "AclOrders"}, **creds),
        "group:elsewhere": signed(38, {"consumerGroup": "elsewhere"}, **creds),
    }
    for resource, cmd in refused.items():
        resp = await call(acl_cluster, cmd)
        assert (resp.code, resp.remark) == (1, remark(f"No default permission for {resource}", CHECK_PERM))
    allowed = [signed(11, pull_ext("readers", "AclOrders", 0, 0, suspend_ms=0), **creds),
               signed(310, send_ext("%RETRY%readers", queue_id=0, group="readers"), b"x", **creds),
               signed(38, {"consumerGroup": "readers"}, **creds)]
    for cmd in allowed:
        resp = await call(acl_cluster, cmd)
        assert not (resp.remark or "").startswith(EXC), (cmd.code, resp.remark)
    # the one HashMap Java iterates first is the one named: topic T before %RETRY%g
    resp = await call(acl_cluster, signed(11, pull_ext("g", "T", 0, 0, suspend_ms=0), ak="rocketmq2",
                                          sk="12345678"))
    assert resp.remark == remark("No default permission for topic:T", CHECK_PERM)
    # a header the parse cannot read is an AclException of the parse itself; an absent field is not
    # (4.9.7 passes it on, the processor then fails: SYSTEM_ERROR without the ACL's text)
    resp = await call(acl_cluster, signed(15, {"consumerGroup": "readers", "topic": "AclOrders", "queueId": "x"},
                                          **creds))
    parse = "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java)"
    assert resp.remark == remark("the custom field <queueId> is not a number: 'x'", parse)
    resp = await call(acl_cluster, signed(15, {"consumerGroup": "readers", "topic": "AclOrders"}, **creds))
    assert resp.code == 1 and not resp.remark.startswith(EXC)


async def test_refused_offset_commits_are_not_stored(acl_cluster: EmbeddedCluster) -> None:
    header = {"consumerGroup": "others", "topic": "AclOrders", "queueId": "1", "commitOffset": "1"}
    resp = await call(acl_cluster, signed(15, header, ak="consumer_ak", sk="consumer_sk"))
    assert resp.remark == remark("No default permission for group:others", CHECK_PERM)
    client = await RawClient().connect(acl_cluster.brokers[0].addr)
    try:
        assert client.conn is not None
        client.conn.oneway(signed(15, header, ak="consumer_ak", sk="consumer_sk", oneway=True))
        ok = {**header, "consumerGroup": "readers"}
        resp = await client.conn.request(signed(15, ok, ak="consumer_ak", sk="consumer_sk"), 5.0)
        assert resp.code == 0  # answered after the refused oneway on the same connection, which got none
    finally:
        await client.close()
    assert acl_cluster.brokers[0].committed_offset("others", "AclOrders", 1) == -1
    assert acl_cluster.brokers[0].committed_offset("readers", "AclOrders", 1) == 1


async def test_white_remote_addresses(acl_cluster: EmbeddedCluster) -> None:
    unsigned = RemotingCommand.request(30, {"topic": "AclOrders", "queueId": "0"})
    assert (await call(acl_cluster, unsigned)).remark == remark("No accessKey is configured")
    # unknown request codes are checked too: admin-only ones need admin before anything else
    resp = await call(acl_cluster, signed(25, {}, ak="producer_ak", sk="producer_sk"))
    assert resp.remark == remark("Need admin permission for request code=25, but accessKey=producer_ak is not",
                                 CHECK_PERM)
    white = json.loads(json.dumps(ACL))
    white["accounts"][1]["whiteRemoteAddress"] = "127.0.0.*"
    acl_cluster.set_acl(white)
    try:  # the account's white address skips the signature and permission checks
        bad = signed(310, send_ext("AclElsewhere", queue_id=0), b"x", ak="producer_ak", sk="wrong")
        assert (await call(acl_cluster, bad)).code == 0
        assert (await call(acl_cluster, unsigned)).remark == remark("No accessKey is configured")
        acl_cluster.set_acl({**ACL, "globalWhiteRemoteAddresses": ["127.0.0.1"]})
        assert (await call(acl_cluster, unsigned)).code == 0  # no credentials at all
        acl_cluster.set_acl(None)
        assert (await call(acl_cluster, unsigned)).code == 0
    finally:
        acl_cluster.set_acl(ACL)


def test_address_rules() -> None:
    probes = ("127.0.0.1", "10.0.0.1", "192.168.0.1", "192.168.0.2", "192.168.0.3", "10.1.1.2", "10.10.103.7",
              "10.10.9.9", "10.10.1.10", "10.10.1.20", "10.10.1.21", "10.11.1.1")
    ten_ten = {"10.10.103.7", "10.10.9.9", "10.10.1.10", "10.10.1.20", "10.10.1.21"}
    cases = {"*": set(probes), "": set(), "192.168.0.{1,2}": {"192.168.0.1", "192.168.0.2"},
             "10.1.1.1,10.1.1.2": {"10.1.1.2"}, "10.10.103.*": {"10.10.103.7"}, "10.10.*.*": ten_ten,
             "10.10.*": ten_ten, "10.10.1.10-20": {"10.10.1.10", "10.10.1.20"}, "127.0.0.1": {"127.0.0.1"}}
    for text, admitted in cases.items():
        rule = AddressRule(text, "x")
        assert {p for p in probes if rule.match(p)} == admitted, text
    for bad in ("300.1.1.1", "10.1.{1,2}.3", "10.1.5-1.*", "10.*.1.1", "host.example"):
        with pytest.raises(ConfigError):
            AddressRule(bad, "acl.accounts[0].whiteRemoteAddress")


def test_java_hashmap_order() -> None:
    # orders printed by java.util.HashMap.keySet() on OpenJDK 17 for these insertion orders
    cases = [(["%RETRY%g", "T"], ["T", "%RETRY%g"]),
             (["Orders", "%RETRY%loader"], ["Orders", "%RETRY%loader"]),
             (["%RETRY%cli_group", "AclT", "%RETRY%x", "Zeta", *"abcdefghij"],
              [*"abcdefghij", "Zeta", "%RETRY%cli_group", "AclT", "%RETRY%x"]),
             (["TopicA", "TopicB", "%RETRY%G1", "%RETRY%G2", "%RETRY%%RETRY%G1"],
              ["TopicB", "TopicA", "%RETRY%%RETRY%G1", "%RETRY%G1", "%RETRY%G2"])]
    for inserted, java in cases:
        assert java_hashmap_order(dict.fromkeys(inserted, 8)) == java


@pytest.mark.parametrize("config,field", [
    ({"accounts": [{"accessKey": "short", "secretKey": "long-enough"}]}, "acl.accounts[0].accessKey"),
    ({"accounts": [{"accessKey": "long-enough", "secretKey": "s3cr3t"}]}, "acl.accounts[0].secretKey"),
    ({"accounts": [{"accessKey": "long-enough", "secretKey": "long-enough", "topicPerms": ["Orders"]}]},
     "acl.accounts[0].topicPerms"),
    ({"accounts": [{"accessKey": "long-enough", "secretKey": "long-enough", "admin": "yes"}]},
     "acl.accounts[0].admin"),
    ({"accounts": [{"accessKey": "long-enough", "secretKey": "long-enough", "whiteRemoteAddress": "1.2.3"}]},
     "acl.accounts[0].whiteRemoteAddress"),
    ({"globalWhiteRemoteAddresses": "10.0.0.1"}, "acl.globalWhiteRemoteAddresses"),
    (["not", "a", "mapping"], "acl"),
])
def test_bad_acl_config_names_the_field(config: Any, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        EmbeddedCluster(acl=config)
    assert info.value.field == field
    assert "s3cr3t" not in str(info.value)


def test_acl_file_yaml_and_json(tmp_path: Any) -> None:
    yml = tmp_path / "plain_acl.yml"
    yml.write_text("globalWhiteRemoteAddresses:\n- 10.10.103.*\naccounts:\n- accessKey: RocketMQ\n"
                   "  secretKey: 12345678\n  whiteRemoteAddress:\n  admin: false\n  defaultTopicPerm: DENY\n"
                   "  defaultGroupPerm: SUB\n  topicPerms:\n  - topicA=DENY\n  - topicB=PUB|SUB\n"
                   "  groupPerms:\n  - groupA=DENY\n", encoding="utf-8")
    config = AclConfig.load(yml)
    assert config.global_white_remote_addresses == ("10.10.103.*",)
    account = config.accounts[0]
    assert (account.access_key, account.secret_key, account.admin) == ("RocketMQ", "12345678", False)
    assert dict(account.topic_perms) == {"topicA": "DENY", "topicB": "PUB|SUB"}
    assert "12345678" not in repr(config)
    js = tmp_path / "acl.json"
    js.write_text(json.dumps(ACL), encoding="utf-8")
    assert AclConfig.load(js) == AclConfig.from_mapping(ACL)
    with pytest.raises(ConfigError, match="cannot read"):
        AclConfig.load(tmp_path / "missing.yml")
