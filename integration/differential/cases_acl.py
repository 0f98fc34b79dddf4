"""ACL cases, for the two generations of RocketMQ's ACL.

ACL 1.0 (``acl.*``; 4.x ``plain_acl.yml``, ``aclEnable=true``): signatures and permissions of the example
accounts. The cases read the target's accounts: an admin, and a non-admin with a PUB|SUB topic, a
SUB-only topic and a DENY group (``plain_acl.yml`` in tests/data/differential has them). Those topic
names are fixed by the account file, so their offsets grow from run to run: answers that carry them
are compared without the offsets (``vary``).

ACL 2.0 (``acl2.*``; 5.3+ users and policies): the cases sign as the target's super user, create their
own users and policies with the AUTH_* requests (names unique per run), then send every request the
client and its tools use as each user. Only the verdict of a request is compared - refused with this
code and remark, or let through - since what a let-through request answers is the broker release's
business (the plain cases compare that).
"""

from __future__ import annotations

import json
from typing import Any

from airflow_provider_rocketmq.client.protocol.acl import sign
from airflow_provider_rocketmq.client.protocol.acl_refusals import parse_refusal

from .cases_namesrv import create_topic
from .frames import batch_body, heartbeat, lock_body, mq, props, pull, send_v2, subscription
from .session import Account, Session, SetupError, case
from .wire import Conn

GROWS = ("ext.queueOffset", "ext.msgId", "ext.nextBeginOffset", "ext.maxOffset", "ext.minOffset",
         "ext.offset", "body")


def accounts(s: Session) -> tuple[Account, Account, str, str, str]:
    """(admin, app account, its PUB|SUB topic, its SUB topic, its DENY group)."""
    admin = next((a for a in s.target.accounts if a.admin), None)
    app = next((a for a in s.target.accounts if not a.admin and a.topic_perms), None)
    if admin is None or app is None:
        raise SetupError("the ACL cases need an admin account and a non-admin one with topicPerms")
    pub = next(t for t, p in app.topic_perms.items() if "PUB" in p and "SUB" in p)
    sub = next(t for t, p in app.topic_perms.items() if p == "SUB")
    deny = next(g for g, p in app.group_perms.items() if p == "DENY")
    return admin, app, pub, sub, deny


async def prepared(s: Session) -> tuple[Account, Account, str, str, str]:
    admin, app, pub, sub, deny = accounts(s)
    a = await s.broker(acl=admin)
    for t in (pub, sub):
        await s.setup(a, 17, create_topic(t, 2, 2))
    return admin, app, pub, sub, deny


@case("acl.signature", acl="plain")
async def signature(s: Session) -> None:
    _, app, pub, _, _ = await prepared(s)
    unsigned = await s.broker()
    await s.step("unsigned-send", unsigned, 310, send_v2(pub), b"x")
    await s.step("unsigned-max-offset", unsigned, 30, {"topic": pub, "queueId": 0})
    ghost = Account("ghost_access", "ghost_secret_1", False)
    await s.step("unknown-key", await s.broker(acl=ghost), 30, {"topic": pub, "queueId": 0})
    wrong = Account(app.access_key, app.secret_key + "x", False)
    await s.step("wrong-secret", await s.broker(acl=wrong), 30, {"topic": pub, "queueId": 0})
    ext = {"topic": pub, "queueId": "0", "AccessKey": app.access_key}
    ext["Signature"] = sign(app.secret_key, ext, None)
    await s.step("signed-by-hand", unsigned, 30, ext, vary=GROWS)
    tampered = {**ext, "queueId": "1"}
    await s.step("field-changed-after-signing", unsigned, 30, tampered)
    send = {k: str(v) for k, v in send_v2(pub).items()} | {"AccessKey": app.access_key}
    send["Signature"] = sign(app.secret_key, send, b"signed body")
    await s.step("body-changed-after-signing", unsigned, 310, send, b"other body")
    await s.step("extra-field-after-signing", unsigned, 30, {**ext, "extra": "1"})
    await s.step("namesrv-unsigned", await s.namesrv(), 105, {"topic": pub, "acceptStandardJsonOnly": "true"})


@case("acl.permissions", acl="plain")
async def permissions(s: Session) -> None:
    admin, app, pub, sub, deny = await prepared(s)
    c = await s.broker(acl=app)
    a = await s.broker(acl=admin)
    other = s.name("T")
    await s.setup(a, 17, create_topic(other, 1, 1))
    g = s.name("g")
    await s.step("send-pub-topic", c, 310, send_v2(pub, properties=props(WAIT="true")), b"x", vary=GROWS)
    await s.step("send-sub-only-topic", c, 310, send_v2(sub), b"x")
    await s.step("send-default-deny-topic", c, 310, send_v2(other), b"x")
    await s.step("send-v1-default-deny-topic", c, 10, {"producerGroup": g, "topic": other, "defaultTopic": "TBW102",
                                                      "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0,
                                                      "bornTimestamp": 1, "flag": 0, "properties": "",
                                                      "reconsumeTimes": 0, "unitMode": False}, b"x")
    await s.step("batch-default-deny-topic", c, 320, send_v2(other, batch=True), batch_body(other, [(b"x", {})]),
                 vary=GROWS)
    await s.step("pull-sub-topic", c, 11, pull(g, sub, 0, 10**9), vary=GROWS)
    await s.step("pull-deny-topic", c, 11, pull(g, other, 0, 0))
    await s.step("pull-deny-group", c, 11, pull(deny, sub, 0, 10**9))
    await s.step("heartbeat-ok", c, 34, body=heartbeat(s.name("cid"), g, [subscription(pub)]))
    await s.step("heartbeat-deny-topic", c, 34, body=heartbeat(s.name("cid2"), g, [subscription(other)]))
    await s.step("heartbeat-deny-group", c, 34, body=heartbeat(s.name("cid3"), deny, [subscription(pub)]))
    await s.step("update-offset-ok", c, 15, {"consumerGroup": g, "topic": pub, "queueId": 0, "commitOffset": 0})
    await s.step("update-offset-deny-group", c, 15, {"consumerGroup": deny, "topic": pub, "queueId": 0,
                                                     "commitOffset": 0})
    await s.step("update-offset-no-queue-id", c, 15, {"consumerGroup": g, "topic": pub, "commitOffset": 0})
    await s.step("query-offset-signature-only", c, 14, {"consumerGroup": deny, "topic": other, "queueId": 0},
                 vary=GROWS)
    await s.step("send-back-deny-group", c, 36, {"offset": 0, "group": deny, "delayLevel": 1, "originMsgId": "x",
                                                 "originTopic": pub, "unitMode": False, "maxReconsumeTimes": 16})
    await s.step("consumer-list-deny-group", c, 38, {"consumerGroup": deny})
    await s.step("unregister-deny-group", c, 35, {"clientID": s.name("cid"), "consumerGroup": deny})
    await s.step("send-retry-deny-group", c, 310, send_v2("%RETRY%" + deny, reconsume=1, group=deny), b"x")
    await s.step("create-topic-not-admin", c, 17, create_topic(s.name("N")))
    await s.step("create-topic-admin", a, 17, create_topic(s.name("N")))
    await s.step("topic-stats-signature-only", c, 202, {"topic": other}, vary=GROWS)
    await s.step("consume-stats-signature-only", c, 208, {"consumerGroup": deny, "topic": other}, vary=GROWS)


# -- ACL 2.0 ----------------------------------------------------------------------------------------

def _super(s: Session) -> Account:
    if s.target.super_user is None:
        raise SetupError("the ACL 2.0 cases need the target's super user (ROCKETMQ_ACL2_ACCESS_KEY/SECRET_KEY)")
    return Account(*s.target.super_user, True)


def _acl_body(subject: str, entries: list[tuple[str, list[str], str, list[str] | None]]) -> bytes:
    return json.dumps({"subject": subject, "policies": [{"policyType": "CUSTOM", "entries": [
        {"resource": r, "actions": a, "decision": d, **({"sourceIps": ips} if ips else {})}
        for r, a, d, ips in entries]}]}).encode()


async def _user(s: Session, su: Conn, name: str, entries: list[tuple[str, list[str], str, list[str] | None]],
                status: str = "enable") -> Account:
    user, password = s.name(name), f"{name}_secret_1"
    await s.setup(su, 3001, {"username": user},
                  json.dumps({"username": user, "password": password, "userStatus": status}).encode())
    if entries:
        await s.setup(su, 3006, {"subject": f"User:{user}"}, _acl_body(f"User:{user}", entries))
    return Account(user, password, False)


async def verdict(s: Session, label: str, conn: Conn, code: int, ext: dict[str, Any] | None = None,
                  body: bytes | None = None) -> None:
    """Record whether the ACL let the request through; a refusal (or any code 16) with its code and remark."""
    resp = await conn.call(code, ext, body, timeout=10.0)
    if resp is None:
        s.record(label, {"code": "no answer"})
    elif resp.code == 16 or parse_refusal(resp.code, resp.remark) is not None:
        s.record(label, {"code": resp.code, "remark": s.norm.text(resp.remark or "")})
    else:
        s.record(label, {"passed": True})


async def _every_request(s: Session, who: str, conn: Conn, topic: str, group: str) -> None:
    """The requests of the producer, the push consumer, the window and the admin tools, as one user."""
    cid = s.name(f"{who}_cid")
    queue = {"topic": topic, "queueId": 0}
    await verdict(s, f"{who}-send", conn, 310, send_v2(topic, properties=props(WAIT="true")), b"x")
    await verdict(s, f"{who}-send-retry-topic", conn, 310, send_v2("%RETRY%" + group, group=group, reconsume=1),
                  b"x")
    await verdict(s, f"{who}-pull", conn, 11, pull(group, topic, 0, 0))
    await verdict(s, f"{who}-heartbeat", conn, 34, body=heartbeat(cid, group, [subscription(topic)]))
    await verdict(s, f"{who}-consumer-list", conn, 38, {"consumerGroup": group})
    await verdict(s, f"{who}-query-offset", conn, 14, {"consumerGroup": group, **queue})
    await verdict(s, f"{who}-update-offset", conn, 15, {"consumerGroup": group, **queue, "commitOffset": 0})
    await verdict(s, f"{who}-max-offset", conn, 30, queue)
    await verdict(s, f"{who}-min-offset", conn, 31, queue)
    await verdict(s, f"{who}-search-offset", conn, 29, {**queue, "timestamp": 0})
    await verdict(s, f"{who}-lock", conn, 41, body=lock_body(group, cid, [mq(topic, s.target.broker_name, 0)]))
    await verdict(s, f"{who}-unlock", conn, 42, body=lock_body(group, cid, [mq(topic, s.target.broker_name, 0)]))
    await verdict(s, f"{who}-send-back", conn, 36, {"offset": 0, "group": group, "delayLevel": 1, "originMsgId": "x",
                                                    "originTopic": topic, "unitMode": False, "maxReconsumeTimes": 16})
    await verdict(s, f"{who}-topic-stats", conn, 202, {"topic": topic})
    await verdict(s, f"{who}-consume-stats", conn, 208, {"consumerGroup": group, "topic": topic})
    await verdict(s, f"{who}-connection-list", conn, 203, {"consumerGroup": group})
    await verdict(s, f"{who}-unregister", conn, 35, {"clientID": cid, "consumerGroup": group})
    await verdict(s, f"{who}-create-topic", conn, 17, create_topic(s.name(f"{who}_new"), 1, 1))


@case("acl2.authentication", acl="acl2")
async def acl2_authentication(s: Session) -> None:
    su = await s.broker(acl=_super(s))
    topic = s.name("T")
    await s.setup(su, 17, create_topic(topic, 2, 2))
    ok = await _user(s, su, "ok", [("Topic:" + topic, ["Get"], "Allow", None)])
    off = await _user(s, su, "off", [("Topic:" + topic, ["Get"], "Allow", None)], status="disable")
    queue = {"topic": topic, "queueId": 0}
    await verdict(s, "signed", await s.broker(acl=ok), 30, queue)
    await verdict(s, "unsigned", await s.broker(), 30, queue)
    await verdict(s, "unsigned-heartbeat", await s.broker(), 34, body=heartbeat(s.name("cid"), s.name("g"), []))
    await verdict(s, "unknown-user", await s.broker(acl=Account(s.name("ghost"), "ghost_secret_1", False)), 30, queue)
    await verdict(s, "wrong-password", await s.broker(acl=Account(ok.access_key, "not_the_secret", False)), 30, queue)
    await verdict(s, "disabled-user", await s.broker(acl=off), 30, queue)
    unsigned = await s.broker()
    ext = {"topic": topic, "queueId": "0", "AccessKey": ok.access_key}
    ext["Signature"] = sign(ok.secret_key, ext, None)
    await verdict(s, "signed-by-hand", unsigned, 30, ext)
    await verdict(s, "field-changed-after-signing", unsigned, 30, {**ext, "queueId": "1"})
    await verdict(s, "unknown-code-unsigned", unsigned, 9999)
    await verdict(s, "runtime-info-normal-user", await s.broker(acl=ok), 28)
    await s.step("namesrv-unsigned", await s.namesrv(), 105, {"topic": topic, "acceptStandardJsonOnly": "true"},
                 view=lambda body: {"queues": len(body.get("queueDatas", []))} if isinstance(body, dict) else body)


@case("acl2.matrix", acl="acl2")
async def acl2_matrix(s: Session) -> None:
    su = await s.broker(acl=_super(s))
    topic, group = s.name("T"), s.name("G")
    await s.setup(su, 17, create_topic(topic, 2, 2))
    t, g = f"Topic:{topic}", f"Group:{group}"
    users = {
        "super": _super(s),
        "full": await _user(s, su, "full", [(t, ["Pub", "Sub", "Get", "Update", "Create"], "Allow", None),
                                            (g, ["Sub", "Get", "Update"], "Allow", None)]),
        "sub": await _user(s, su, "sub", [(t, ["Sub"], "Allow", None), (g, ["Sub"], "Allow", None)]),
        "nogroup": await _user(s, su, "nogroup", [(t, ["Pub", "Sub", "Get"], "Allow", None)]),
        "notopic": await _user(s, su, "notopic", [(g, ["Sub", "Get", "Update"], "Allow", None)]),
        "get": await _user(s, su, "get", [(t, ["Get"], "Allow", None), (g, ["Get"], "Allow", None)]),
        "none": await _user(s, su, "none", []),
        "deny": await _user(s, su, "deny", [("Topic:*", ["All"], "Allow", None), (g, ["Sub"], "Deny", None)]),
        "prefix": await _user(s, su, "prefix", [(f"Topic:{topic[:-1]}*", ["Pub", "Sub", "Get"], "Allow", None),
                                                ("Group:*", ["Sub"], "Allow", None)]),
        "any": await _user(s, su, "any", [("*", ["All"], "Allow", None)]),
        "elsewhere": await _user(s, su, "elsewhere", [(t, ["All"], "Allow", ["10.0.0.0/8"]),
                                                      (g, ["All"], "Allow", ["10.0.0.0/8"])]),
    }
    for who, account in users.items():
        await _every_request(s, who, await s.broker(acl=account), topic, group)


@case("acl2.admin", acl="acl2")
async def acl2_admin(s: Session) -> None:
    su = await s.broker(acl=_super(s))
    user = await _user(s, su, "u", [])
    subject = f"User:{user.access_key}"
    normal = await s.broker(acl=user)
    await s.step("create-user-twice", su, 3001, {"username": user.access_key},
                 json.dumps({"username": user.access_key, "password": "other_secret"}).encode())
    await verdict(s, "create-user-as-normal-user", normal, 3001, {"username": s.name("x")},
                  json.dumps({"username": s.name("x"), "password": "x_secret_12"}).encode())
    await verdict(s, "get-acl-as-normal-user", normal, 3009, {"subject": subject})
    await s.step("acl-of-unknown-user", su, 3006, {"subject": f"User:{s.name('ghost')}"},
                 _acl_body(f"User:{s.name('ghost')}", [("Topic:T", ["Pub"], "Allow", None)]))
    await s.step("acl-bad-resource", su, 3006, {"subject": subject}, _acl_body(subject, [("Queue:T", ["Pub"], "Allow", None)]))
    await s.step("acl-bad-action", su, 3006, {"subject": subject}, _acl_body(subject, [("Topic:T", ["Eat"], "Allow", None)]))
    await s.step("acl-bad-decision", su, 3006, {"subject": subject},
                 _acl_body(subject, [("Topic:T", ["Pub"], "Maybe", None)]))
    await s.setup(su, 3006, {"subject": subject}, _acl_body(subject, [("Topic:A", ["Pub"], "Allow", None)]))
    await s.setup(su, 3006, {"subject": subject}, _acl_body(subject, [("Topic:A", ["Sub"], "Allow", None),
                                                                      ("Group:B", ["Sub", "Get"], "Deny", None)]))
    await s.step("acl-merged", su, 3009, {"subject": subject})
    await s.setup(su, 3008, {"subject": subject, "policyType": "CUSTOM", "resource": "Topic:A"})
    await s.step("acl-after-deleting-a-resource", su, 3009, {"subject": subject})
    await s.step("get-user", su, 3004, {"username": user.access_key})
