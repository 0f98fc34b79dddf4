"""Admin requests: UPDATE_AND_CREATE_TOPIC (17), GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS (208);
CONSUMER_SEND_MSG_BACK (36) into %RETRY% and %DLQ%; codes a broker does not serve."""

from __future__ import annotations

from airflow_provider_rocketmq.client.protocol.message import decode_messages

from .cases_namesrv import create_topic, routed
from .cases_pull import fill, group_known
from .frames import heartbeat, props, pull, send_v2, subscription
from .session import Session, case
from .wire import Conn


@case("admin.create-topic")
async def create(s: Session) -> None:
    b, n = await s.broker(), await s.namesrv()
    t = s.name("T")
    await s.step("create", b, 17, create_topic(t, 3, 5, perm=6))
    await routed(s, t)
    await s.step("route", n, 105, {"topic": t, "acceptStandardJsonOnly": "true"})
    await s.step("update-perm-read", b, 17, create_topic(t, 3, 5, perm=4))
    await s.step("update-fewer-queues", b, 17, create_topic(t, 1, 1, perm=6))
    await s.step("order", b, 17, create_topic(s.name("O"), 2, 2, order=True))
    await s.step("illegal-name", b, 17, create_topic(s.name("a/b")))
    await s.step("cluster-name", b, 17, create_topic(s.target.cluster))
    await s.step("zero-queues", b, 17, create_topic(s.name("Z"), 0, 0))
    await s.step("queues-1025", b, 17, create_topic(s.name("Big"), 1025, 1025))
    ext = create_topic(s.name("M"))
    del ext["readQueueNums"]
    await s.step("missing-read-queues", b, 17, ext)
    await s.step("perm-inherit-7", b, 17, create_topic(s.name("I"), 1, 1, perm=7))


@case("admin.stats")
async def stats(s: Session) -> None:
    b = await s.broker()
    t, g = s.name("T"), s.name("g")
    await s.setup(b, 17, create_topic(t, 2, 3))
    await fill(s, b, t, 0, ["", ""])
    await s.step("topic-stats", b, 202, {"topic": t})
    await s.step("topic-stats-unknown", b, 202, {"topic": s.name("missing")})
    await s.step("consume-stats-none", b, 208, {"consumerGroup": g, "topic": t})
    await group_known(s, b, g, t)
    await s.setup(b, 15, {"consumerGroup": g, "topic": t, "queueId": 0, "commitOffset": 1})
    await s.step("consume-stats-topic", b, 208, {"consumerGroup": g, "topic": t})
    await s.step("consume-stats-all", b, 208, {"consumerGroup": g})
    await s.step("consume-stats-unknown-topic", b, 208, {"consumerGroup": g, "topic": s.name("missing")})
    await s.step("consume-stats-unknown-group", b, 208, {"consumerGroup": s.name("nobody")})
    other = s.name("other")
    await s.setup(b, 17, create_topic(other, 1, 1))
    await s.setup(b, 15, {"consumerGroup": g, "topic": other, "queueId": 0, "commitOffset": 0})
    member = await s.broker()
    await s.setup(member, 34, body=heartbeat(s.name("cid"), g, [subscription(t)]))
    await s.step("consume-stats-online-subscribed-only", b, 208, {"consumerGroup": g})


@case("admin.unknown-codes")
async def unknown_codes(s: Session) -> None:
    b = await s.broker()
    await s.step("code-9999", b, 9999, {})
    await s.step("code-0", b, 0, {})
    await s.step("register-broker-103-to-broker", b, 103, {})
    t = s.name("Q")
    await s.setup(b, 17, create_topic(t, 1, 1))
    await s.setup(b, 310, send_v2(t, queue_id=0, properties=props(KEYS="findme", WAIT="true")), b"by key")
    await s.settled(b, t, 0, 1)
    await s.step("query-message-by-key-12", b, 12, {"topic": t, "key": "findme", "maxNum": 32, "beginTimestamp": 0,
                                                    "endTimestamp": 2**62}, vary=("ext.indexLastUpdateTimestamp",
                                                                                  "ext.indexLastUpdatePhyoffset"))


async def _one(s: Session, b: Conn, topic: str, tag: str = "S") -> int:
    """Store one message and return its commit-log offset."""
    start = await s.max_offset(b, topic, 0)
    await s.setup(b, 310, send_v2(topic, queue_id=0, properties=props(TAGS=tag, KEYS="K", UNIQ_KEY=f"U-{tag}",
                                                                      WAIT="true")), b"payload")
    await s.settled(b, topic, 0, start + 1)
    r = await b.call(11, pull(s.name("reader"), topic, 0, start, max_nums=1))
    assert r is not None and r.body
    return decode_messages(r.body)[0].commit_log_offset


def _back(offset: int, group: str, topic: str, delay: int, max_times: int = 16) -> dict[str, object]:
    return {"offset": offset, "group": group, "delayLevel": delay, "originMsgId": "0A0B", "originTopic": topic,
            "unitMode": False, "maxReconsumeTimes": max_times, "bname": "broker-a"}


@case("retry.send-back")
async def send_back(s: Session) -> None:
    b = await s.broker()
    t, g = s.name("T"), s.name("g")
    retry, dlq = "%RETRY%" + g, "%DLQ%" + g
    await s.setup(b, 17, create_topic(t, 1, 1))
    phy = await _one(s, b, t)
    await s.step("level-1", b, 36, _back(phy, g, t, 1))
    await routed(s, retry, lazily=True)
    await s.step("retry-route", await s.namesrv(), 105, {"topic": retry, "acceptStandardJsonOnly": "true"})
    await s.settled(b, retry, 0, 1, timeout=30)
    await s.step("redelivered", b, 11, pull(g, retry, 0, 0))
    r = await b.call(11, pull(g, retry, 0, 0))
    again = decode_messages(r.body)[0].commit_log_offset if r is not None and r.body else 0
    await s.step("second-failure-level-1", b, 36, _back(again, g, t, 1))
    await s.settled(b, retry, 0, 2, timeout=30)
    await s.step("redelivered-twice", b, 11, pull(g, retry, 0, 1))
    await s.step("delay-minus-1-to-dlq", b, 36, _back(phy, g, t, -1))
    await s.settled(b, dlq, 0, 1)
    await routed(s, dlq, lazily=True)
    await s.step("dlq-route", await s.namesrv(), 105, {"topic": dlq, "acceptStandardJsonOnly": "true"})
    await s.step("dlq-pull", b, 11, pull(s.name("dlqreader"), dlq, 0, 0))
    await s.step("max-reached-to-dlq", b, 36, _back(again, g, t, 1, max_times=1))
    await s.settled(b, dlq, 0, 2)
    await s.step("dlq-max-reached-view", b, 30, {"topic": dlq, "queueId": 0})
    await s.step("bad-offset", b, 36, _back(2**62, g, t, 1))
    await s.step("missing-group", b, 36, {"offset": phy, "delayLevel": 1})


@case("retry.send-back-level-0")
async def send_back_level_0(s: Session) -> None:
    """delayLevel 0: the broker picks 3 + reconsumeTimes (10 s); only the scheduling is observed."""
    b = await s.broker()
    t, g = s.name("T"), s.name("g")
    await s.setup(b, 17, create_topic(t, 1, 1))
    phy = await _one(s, b, t)
    before = await s.max_offset(b, "SCHEDULE_TOPIC_XXXX", 2)
    await s.step("level-0", b, 36, _back(phy, g, t, 0))

    async def scheduled() -> bool:
        return await s.max_offset(b, "SCHEDULE_TOPIC_XXXX", 2) > before
    await s.wait_until("the level-3 schedule queue", scheduled, 10)
    s.note("parked-in-schedule-queue-2", grew=True)
    await s.step("retry-empty-at-once", b, 30, {"topic": "%RETRY%" + g, "queueId": 0})


@case("retry.send-back-perm")
async def send_back_perm(s: Session) -> None:
    b = await s.broker()
    t, g = s.name("T"), s.name("g")
    await s.setup(b, 17, create_topic(t, 1, 1))
    await s.setup(b, 17, create_topic("%RETRY%" + g, 1, 1, perm=4))
    phy = await _one(s, b, t)
    await s.step("read-only-retry", b, 36, _back(phy, g, t, 1))
    await s.step("plain-send-to-read-only-retry", b, 310, send_v2("%RETRY%" + g, queue_id=0, reconsume=1),
                 b"fallback")
    await s.step("dlq-despite-read-only-retry", b, 36, _back(phy, g, t, -1))
    await s.setup(b, 17, create_topic("%RETRY%" + s.name("g2"), 1, 1, perm=2))
    await s.step("write-only-retry", b, 36, _back(phy, s.name("g2"), t, 1))


@case("retry.consume-via-heartbeat")
async def retry_heartbeat(s: Session) -> None:
    """A member's pull of %RETRY% by its heartbeat subscription (the Java consumer subscribes it)."""
    b = await s.broker()
    t, g = s.name("T"), s.name("g")
    await s.setup(b, 17, create_topic(t, 1, 1))
    member = await s.broker()
    await s.setup(member, 34, body=heartbeat(s.name("cid"), g, [subscription(t), subscription("%RETRY%" + g)]))
    phy = await _one(s, b, t)
    await s.setup(b, 36, _back(phy, g, t, 1))
    await s.settled(b, "%RETRY%" + g, 0, 1, timeout=30)
    await s.step("retry-by-heartbeat", member, 11, pull(g, "%RETRY%" + g, 0, 0, sys_flag=0, sub_version=1))
