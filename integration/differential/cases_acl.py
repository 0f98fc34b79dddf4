"""ACL (plain_acl.yml, aclEnable=true): signatures and permissions of the example accounts.

The cases read the target's accounts: an admin, and a non-admin with a PUB|SUB topic, a SUB-only
topic and a DENY group (``plain_acl.yml`` in tests/data/differential has them). Those topic names
are fixed by the account file, so their offsets grow from run to run: answers that carry them are
compared without the offsets (``vary``).
"""

from __future__ import annotations

from airflow_provider_rocketmq.client.protocol.acl import sign

from .cases_namesrv import create_topic
from .frames import batch_body, heartbeat, props, pull, send_v2, subscription
from .session import Account, Session, SetupError, case

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


@case("acl.signature", acl=True)
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


@case("acl.permissions", acl=True)
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
