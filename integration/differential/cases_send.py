"""Sends: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) - normal, edge and
error cases, and what the broker stored (read back with a pull)."""

from __future__ import annotations

import contextlib

from .cases_namesrv import create_topic, routed
from .frames import batch_body, props, pull, send_v1, send_v2
from .session import Session, SetupError, case
from .wire import Conn


async def stored(s: Session, label: str, b: Conn, topic: str, queue_id: int, count: int, *,
                 offset: int = 0) -> None:
    """Record what the queue holds from ``offset`` once ``count`` messages are there."""
    await s.settled(b, topic, queue_id, offset + count)
    await s.step(label, b, 11, pull(s.name("reader"), topic, queue_id, offset, max_nums=count))


@case("send.v2")
async def send_v2_cases(s: Session) -> None:
    b = await s.broker()
    topic = s.name("T")
    await s.setup(b, 17, create_topic(topic, 4, 4))
    p = props(TAGS="TagA", KEYS="k1 k2", UNIQ_KEY="0A0B0C0D000000000000000000000001", WAIT="true",
              user="v\u00e9rt \u6d4b\u8bd5")
    await s.step("tags-keys-props", b, 310, send_v2(topic, queue_id=1, properties=p), b"hello")
    await s.step("second-same-queue", b, 310, send_v2(topic, queue_id=1, properties=props(WAIT="false")), b"again")
    await s.step("no-properties", b, 310, send_v2(topic, queue_id=2), b"bare")
    await s.step("compressed-flag", b, 310, send_v2(topic, queue_id=3, sys_flag=0x1, flag=7), b"not really zlib")
    await stored(s, "stored-q1", b, topic, 1, 2)
    await stored(s, "stored-q2", b, topic, 2, 1)
    await stored(s, "stored-q3", b, topic, 3, 1)
    anyq = s.name("AnyQ")  # a topic of its own: the random queue must not shift the offsets compared here
    await s.setup(b, 17, create_topic(anyq, 4, 4))
    r = await s.step("queue-id-minus-1", b, 310, send_v2(anyq, queue_id=-1), b"any queue", vary=("ext.queueId",
                                                                                                 "ext.queueOffset"))
    s.note("queue-id-minus-1-range", in_range=r is not None and 0 <= int(r.ext.get("queueId", "-9")) < 4)
    await s.step("queue-id-4-of-4", b, 310, send_v2(topic, queue_id=4), b"x")
    await s.step("queue-id-huge", b, 310, send_v2(topic, queue_id=2**31 - 1), b"x")
    await s.step("empty-body", b, 310, send_v2(topic, queue_id=0), b"")
    await s.step("no-body", b, 310, send_v2(topic, queue_id=0), None)


@case("send.v1")
async def send_v1_cases(s: Session) -> None:
    b = await s.broker()
    topic = s.name("T")
    await s.setup(b, 17, create_topic(topic, 2, 2))
    await s.step("v1-header", b, 10, send_v1(topic, queue_id=1, properties=props(TAGS="T1", WAIT="true")), b"v1")
    await stored(s, "stored", b, topic, 1, 1)
    ext = send_v1(topic)
    del ext["bornTimestamp"]
    await s.step("v1-missing-born", b, 10, ext, b"x")
    ext = send_v1(topic)
    ext["queueId"] = "one"
    await s.step("v1-queue-id-not-a-number", b, 10, ext, b"x")


@case("send.auto-create")
async def auto_create(s: Session) -> None:
    b, n = await s.broker(), await s.namesrv()
    topic = s.name("New")
    await s.step("first-send", b, 310, send_v2(topic, queue_id=0, properties=props(WAIT="true")), b"x")
    await routed(s, topic)
    await s.step("route", n, 105, {"topic": topic, "acceptStandardJsonOnly": "true"})
    await s.step("send-queue-3", b, 310, send_v2(topic, queue_id=3), b"y")
    await s.step("send-queue-7", b, 310, send_v2(topic, queue_id=7), b"z")
    small = s.name("New2")
    await s.step("first-send-d2", b, 310, send_v2(small, queue_id=0, default_queues=2), b"x")
    await routed(s, small)
    await s.step("route-d2", n, 105, {"topic": small, "acceptStandardJsonOnly": "true"})
    big = s.name("New16")
    await s.step("first-send-d16", b, 310, send_v2(big, queue_id=0, default_queues=16), b"x")
    await routed(s, big)
    await s.step("route-d16", n, 105, {"topic": big, "acceptStandardJsonOnly": "true"})


@case("send.names")
async def names(s: Session) -> None:
    b = await s.broker()
    await s.step("illegal-chars", b, 310, send_v2(s.name("a b")), b"x")
    await s.step("blank", b, 310, send_v2(" "), b"x")
    await s.step("too-long-127", b, 310, send_v2(s.name("L" * 127)), b"x")
    await s.step("schedule-topic", b, 310, send_v2("SCHEDULE_TOPIC_XXXX"), b"x")
    # the real broker has these system topics already (their offsets grow from run to run)
    await s.step("cluster-name", b, 310, send_v2(s.target.cluster), b"x", vary=("ext.queueOffset",))
    await s.step("broker-name", b, 310, send_v2(s.target.broker_name), b"x", vary=("ext.queueOffset",))
    await s.step("TBW102", b, 310, send_v2("TBW102"), b"x", vary=("ext.queueOffset",))
    await s.step("trans-half", b, 310, send_v2("RMQ_SYS_TRANS_HALF_TOPIC"), b"x")


@case("send.limits")
async def limits(s: Session) -> None:
    b = await s.broker()
    topic = s.name("T")
    await s.setup(b, 17, create_topic(topic, 1, 1))
    await s.step("body-4MiB", b, 310, send_v2(topic), b"x" * (4 * 1024 * 1024))
    await s.step("body-4MiB-plus-1", b, 310, send_v2(topic), b"x" * (4 * 1024 * 1024 + 1))
    await s.step("properties-32767", b, 310, send_v2(topic, properties=props(big="p" * 32760)), b"x")
    await s.step("properties-32768", b, 310, send_v2(topic, properties=props(big="p" * 32761)), b"x")
    await s.step("properties-over-64KiB", b, 310, send_v2(topic, properties=props(big="p" * 70000)), b"x")
    odd = "k\u0001only-key-separator\u0002\u0002empty\u0001\u0002=\u0001eq"
    await s.step("odd-properties", b, 310, send_v2(topic, properties=odd), b"y")
    await stored(s, "stored", b, topic, 0, 3)


@case("send.perm")
async def perm(s: Session) -> None:
    b = await s.broker()
    ro, wo, none = s.name("RO"), s.name("WO"), s.name("NONE")
    await s.setup(b, 17, create_topic(ro, 2, 2, perm=4))
    await s.setup(b, 17, create_topic(wo, 2, 2, perm=2))
    await s.setup(b, 17, create_topic(none, 2, 2, perm=0))
    await s.step("read-only", b, 310, send_v2(ro), b"x")
    await s.step("read-only-batch", b, 320, send_v2(ro, queue_id=1, batch=True), batch_body(ro, [(b"a", {})]))
    await s.step("write-only", b, 310, send_v2(wo), b"x")
    await s.step("no-perm", b, 310, send_v2(none), b"x")
    await s.step("pull-write-only", b, 11, pull(s.name("g"), wo, 0, 0))
    await s.step("pull-read-only", b, 11, pull(s.name("g"), ro, 0, 0))
    await s.step("pull-no-perm", b, 11, pull(s.name("g"), none, 0, 0))


@case("send.delay")
async def delay(s: Session) -> None:
    b = await s.broker()
    topic = s.name("T")
    await s.setup(b, 17, create_topic(topic, 4, 4))
    # a delayed send answers the offset in the schedule topic's queue, shared by every run: not compared
    parked = ("ext.queueOffset",)
    await s.step("level-1", b, 310, send_v2(topic, queue_id=0, properties=props(DELAY="1", TAGS="D")), b"d1",
                 vary=parked)
    await s.step("right-after", b, 11, pull(s.name("g"), topic, 0, 0))
    await stored(s, "delivered-after-level-1", b, topic, 0, 1)
    await s.step("level-0", b, 310, send_v2(topic, queue_id=1, properties=props(DELAY="0")), b"d0")
    await stored(s, "level-0-at-once", b, topic, 1, 1)
    await s.step("level-99", b, 310, send_v2(topic, queue_id=2, properties=props(DELAY="99")), b"d99", vary=parked)
    await s.step("level-99-not-at-once", b, 11, pull(s.name("g"), topic, 2, 0))
    await s.step("level-minus-1", b, 310, send_v2(topic, queue_id=3, properties=props(DELAY="-1")), b"dm1")
    await stored(s, "level-minus-1-at-once", b, topic, 3, 1)
    await s.step("level-not-a-number", b, 310, send_v2(topic, queue_id=3, properties=props(DELAY="soon")), b"dx")
    await s.step("after-level-not-a-number", b, 30, {"topic": topic, "queueId": 3})
    await s.step("batch-with-delay", b, 320, send_v2(topic, queue_id=0, batch=True,
                                                     properties=props(DELAY="1")), batch_body(topic, [(b"a", {})]))
    await s.step("batch-item-with-delay", b, 320, send_v2(topic, queue_id=0, batch=True),
                 batch_body(topic, [(b"a", {"DELAY": "2"})]))


@case("send.batch")
async def batch(s: Session) -> None:
    b = await s.broker()
    topic = s.name("T")
    await s.setup(b, 17, create_topic(topic, 2, 2))
    items = [(b"one", {"TAGS": "A", "UNIQ_KEY": "U1"}), (b"two", {"KEYS": "k", "UNIQ_KEY": "U2"}),
             (b"three", {"UNIQ_KEY": "U3", "user": "\u00e9"})]
    await s.step("three-items", b, 320, send_v2(topic, queue_id=1, batch=True, properties=props(WAIT="true")),
                 batch_body(topic, items))
    await stored(s, "stored", b, topic, 1, 3)
    await s.step("single-item", b, 320, send_v2(topic, queue_id=0, batch=True), batch_body(topic, [(b"x", {})]))
    await s.step("to-retry-topic", b, 320, send_v2("%RETRY%" + s.name("g"), batch=True),
                 batch_body("%RETRY%" + s.name("g"), [(b"x", {})]))
    await s.step("malformed-body", b, 320, send_v2(topic, batch=True), b"\x00\x00\x00\x05abc")
    await s.step("empty-body", b, 320, send_v2(topic, batch=True), b"")
    await s.step("bad-queue", b, 320, send_v2(topic, queue_id=9, batch=True), batch_body(topic, [(b"x", {})]))
    await s.step("auto-create", b, 320, send_v2(s.name("NewB"), queue_id=0, batch=True),
                 batch_body(s.name("NewB"), [(b"x", {})]))


@case("send.retry-topic")
async def retry_topic(s: Session) -> None:
    b = await s.broker()
    group = s.name("g")
    retry = "%RETRY%" + group
    await s.step("below-max", b, 310, send_v2(retry, queue_id=0, properties=props(TAGS="R"), reconsume=1,
                                                  max_reconsume=3), b"r1")
    await stored(s, "retry-stored", b, retry, 0, 1)
    dlq = "%DLQ%" + group
    for label, reconsume, max_reconsume in (("at-max", 3, 3), ("above-max", 4, 3), ("default-max-16", 16, None)):
        before = await stored_count(b, [(retry, 0), (dlq, 0)])
        await s.step(label, b, 310, send_v2(retry, queue_id=0, reconsume=reconsume, max_reconsume=max_reconsume),
                     label.encode())
        await landed(s, b, [(retry, 0), (dlq, 0)], before)
        await s.step(f"{label}-retry-max", b, 30, {"topic": retry, "queueId": 0})
        await s.step(f"{label}-dlq-max", b, 30, {"topic": dlq, "queueId": 0})
    await s.step("dlq-stored", b, 11, pull(s.name("reader"), dlq, 0, 0))
    await routed(s, dlq, lazily=True)
    await s.step("dlq-route", await s.namesrv(), 105, {"topic": dlq, "acceptStandardJsonOnly": "true"})
    await s.step("bad-queue", b, 310, send_v2(retry, queue_id=1, reconsume=0), b"x")


async def stored_count(b: Conn, queues: list[tuple[str, int]]) -> int:
    n = 0
    for topic, qid in queues:
        r = await b.call(30, {"topic": topic, "queueId": qid})
        n += int(r.ext.get("offset", "0")) if r is not None and r.code == 0 else 0
    return n


async def landed(s: Session, b: Conn, queues: list[tuple[str, int]], before: int, timeout: float = 5.0) -> None:
    """Wait until ``queues`` hold more than ``before`` messages (which one got it is compared after)."""
    async def more() -> bool:
        return await stored_count(b, queues) > before
    with contextlib.suppress(SetupError):  # not stored at all: the steps that follow show it
        await s.wait_until("the message to land", more, timeout)
