"""PULL_MESSAGE (11): found, tag filters, every not-found status, errors, limits, long polling,
the piggy-backed commit; consumer offsets (14, 15) and the offset queries (29-33)."""

from __future__ import annotations

import asyncio
import time

from airflow_provider_rocketmq.client.protocol.message import decode_messages

from .cases_namesrv import create_topic
from .frames import PULL_COMMIT, PULL_SUB, PULL_SUSPEND, heartbeat, props, pull, send_v2, subscription
from .observe import observe
from .session import Session, case
from .wire import Conn


async def fill(s: Session, b: Conn, topic: str, queue_id: int, tags: list[str], *, size: int = 0) -> None:
    """Store one message per tag ("" = no tag) in order, and wait until the queue has them."""
    start = await s.max_offset(b, topic, queue_id)
    for i, tag in enumerate(tags):
        p = props(TAGS=tag, WAIT="true") if tag else props(WAIT="true")
        body = (f"m{i}".encode() + b"." * max(0, size - 2)) if size else f"m{i}-{tag}".encode()
        await s.setup(b, 310, send_v2(topic, queue_id=queue_id, properties=p), body)
    await s.settled(b, topic, queue_id, start + len(tags))


async def group_known(s: Session, b: Conn, group: str, topic: str) -> None:
    """Make the broker know ``group`` (a pull auto-creates it): 5.x refuses offset commits of
    a group it does not know, 4.9.7 creates it on the commit."""
    await s.setup(b, 11, pull(group, topic, 0, 0, max_nums=1), expect_any=True)


@case("pull.statuses")
async def statuses(s: Session) -> None:
    b = await s.broker()
    topic, g = s.name("T"), s.name("g")
    await s.setup(b, 17, create_topic(topic, 2, 2))
    await fill(s, b, topic, 0, ["A", "B", "A", "C", "A"])
    await s.step("found-all", b, 11, pull(g, topic, 0, 0))
    await s.step("found-max-2", b, 11, pull(g, topic, 0, 1, max_nums=2))
    await s.step("tag-A-or-C", b, 11, pull(g, topic, 0, 0, subscription="A || C"))
    await s.step("tag-B-from-2", b, 11, pull(g, topic, 0, 2, subscription="B"))
    await s.step("tag-none-match", b, 11, pull(g, topic, 0, 0, subscription="Z"))
    await s.step("tag-spaces", b, 11, pull(g, topic, 0, 0, subscription="  B  ||C "))
    await s.step("overflow-one", b, 11, pull(g, topic, 0, 5))
    await s.step("overflow-badly", b, 11, pull(g, topic, 0, 9))
    await s.step("negative-offset", b, 11, pull(g, topic, 0, -1))
    await s.step("empty-queue-0", b, 11, pull(g, topic, 1, 0))
    await s.step("empty-queue-3", b, 11, pull(g, topic, 1, 3))
    await s.step("max-nums-0", b, 11, pull(g, topic, 0, 0, max_nums=0))
    await s.step("unknown-topic", b, 11, pull(g, s.name("missing"), 0, 0))
    await s.step("queue-2-of-2", b, 11, pull(g, topic, 2, 0))
    await s.step("queue-minus-1", b, 11, pull(g, topic, -1, 0))
    await s.step("sql92", b, 11, pull(g, topic, 0, 0, subscription="a > 1", expression_type="SQL92"))
    await s.step("bad-expression-type", b, 11, pull(g, topic, 0, 0, expression_type="REGEX"))
    ext = pull(g, topic, 0, 0)
    del ext["maxMsgNums"]
    await s.step("missing-max-nums", b, 11, ext)


@case("pull.subscription")
async def by_heartbeat(s: Session) -> None:
    """Without sysFlag 0x4 the broker filters by the subscription the group's heartbeat registered."""
    b = await s.broker()
    topic, g = s.name("T"), s.name("g")
    await s.setup(b, 17, create_topic(topic, 1, 1))
    await fill(s, b, topic, 0, ["A", "B", "A"])
    await s.step("no-heartbeat", b, 11, pull(g, topic, 0, 0, sys_flag=0))
    member = await s.broker()
    await s.setup(member, 34, body=heartbeat(s.name("cid"), g, [subscription(topic, "B", version=100)]))
    await s.step("by-codeset-B", member, 11, pull(g, topic, 0, 0, sys_flag=0, sub_version=100))
    await s.step("older-version-asked", member, 11, pull(g, topic, 0, 0, sys_flag=0, sub_version=50))
    await s.step("newer-version-asked", member, 11, pull(g, topic, 0, 0, sys_flag=0, sub_version=200))
    await s.step("other-topic", member, 11, pull(g, s.name("other"), 0, 0, sys_flag=0))
    await s.setup(member, 17, create_topic(s.name("other"), 1, 1))
    await s.step("unsubscribed-topic", member, 11, pull(g, s.name("other"), 0, 0, sys_flag=0))


@case("pull.limits")
async def limits(s: Session) -> None:
    b = await s.broker()
    topic, g = s.name("T"), s.name("g")
    await s.setup(b, 17, create_topic(topic, 2, 2))
    await fill(s, b, topic, 0, [""] * 40)
    r = await s.step("40-ask-64", b, 11, pull(g, topic, 0, 0, max_nums=64))
    await s.step("rest", b, 11, pull(g, topic, 0, int(r.ext.get("nextBeginOffset", "0")) if r else 0,
                                     max_nums=64))
    await fill(s, b, topic, 1, [""] * 3, size=100 * 1024)
    await s.step("3x100KiB", b, 11, pull(g, topic, 1, 0))


@case("pull.long-poll")
async def long_poll(s: Session) -> None:
    b = await s.broker()
    topic, g = s.name("T"), s.name("g")
    await s.setup(b, 17, create_topic(topic, 1, 1))
    started = time.monotonic()
    await s.step("suspend-1s-nothing", b, 11, pull(g, topic, 0, 0, sys_flag=PULL_SUB | PULL_SUSPEND,
                                                   suspend_ms=1000), timeout=20)
    s.note("waited", at_least_1s=time.monotonic() - started >= 0.9)
    other = await s.broker()
    task = asyncio.ensure_future(b.call(11, pull(g, topic, 0, 0, sys_flag=PULL_SUB | PULL_SUSPEND,
                                                  suspend_ms=15000), timeout=30))
    await asyncio.sleep(0.5)  # the pull is parked by now (a parked pull has no observable state to await)
    await s.setup(other, 310, send_v2(topic, queue_id=0, properties=props(WAIT="true")), b"wake")
    s.record("woken-by-arrival", observe(11, await task, s.norm))


@case("pull.commit-offset")
async def commit_offset(s: Session) -> None:
    b = await s.broker()
    topic, g = s.name("T"), s.name("g")
    await s.setup(b, 17, create_topic(topic, 1, 1))
    await fill(s, b, topic, 0, ["", "", ""])
    await s.step("query-before", b, 14, {"consumerGroup": g, "topic": topic, "queueId": 0})
    await s.step("pull-commit-2", b, 11, pull(g, topic, 0, 2, sys_flag=PULL_SUB | PULL_COMMIT, commit_offset=2))
    await s.step("query-after", b, 14, {"consumerGroup": g, "topic": topic, "queueId": 0})
    await s.step("pull-commit-beyond", b, 11, pull(g, topic, 0, 3, sys_flag=PULL_SUB | PULL_COMMIT,
                                                   commit_offset=99))
    await s.step("query-after-beyond", b, 14, {"consumerGroup": g, "topic": topic, "queueId": 0})


@case("offsets.consumer")
async def consumer_offsets(s: Session) -> None:
    b = await s.broker()
    topic, g = s.name("T"), s.name("g")
    await s.setup(b, 17, create_topic(topic, 2, 2))
    await fill(s, b, topic, 0, ["", ""])
    stranger = {"consumerGroup": s.name("stranger"), "topic": topic, "queueId": 0}  # a group the broker never saw
    await s.step("query-group-never-seen", b, 14, stranger)
    await s.step("update-group-never-seen", b, 15, {**stranger, "commitOffset": 1})
    await group_known(s, b, g, topic)
    q = {"consumerGroup": g, "topic": topic}
    await s.step("query-none-q0", b, 14, {**q, "queueId": 0})
    await s.step("query-none-empty-q1", b, 14, {**q, "queueId": 1})
    await s.step("update-q0-1", b, 15, {**q, "queueId": 0, "commitOffset": 1})
    await s.step("query-q0", b, 14, {**q, "queueId": 0})
    await s.step("update-q0-beyond-max", b, 15, {**q, "queueId": 0, "commitOffset": 50})
    await s.step("query-q0-beyond", b, 14, {**q, "queueId": 0})
    await s.step("update-negative", b, 15, {**q, "queueId": 1, "commitOffset": -5})
    await s.step("query-q1-negative", b, 14, {**q, "queueId": 1})
    await s.step("update-unknown-topic", b, 15, {"consumerGroup": g, "topic": s.name("missing"), "queueId": 0,
                                                 "commitOffset": 3})
    await s.step("query-unknown-topic", b, 14, {"consumerGroup": g, "topic": s.name("missing"), "queueId": 0})
    await s.step("update-bad-queue", b, 15, {**q, "queueId": 7, "commitOffset": 1})
    await s.step("query-bad-queue", b, 14, {**q, "queueId": 7})
    await s.step("update-missing-queue", b, 15, {**q, "commitOffset": 1})
    await s.step("update-oneway", b, 15, {**q, "queueId": 1, "commitOffset": 1}, oneway=True)

    async def committed() -> bool:
        r = await b.call(14, {**q, "queueId": 1})
        return r is not None and r.ext.get("offset") == "1"
    await s.wait_until("the oneway commit", committed, 10)
    s.note("oneway-applied", applied=True)


@case("offsets.queries")
async def queries(s: Session) -> None:
    b = await s.broker()
    topic = s.name("T")
    await s.setup(b, 17, create_topic(topic, 2, 2))
    before = int(time.time() * 1000) - 1
    await fill(s, b, topic, 0, ["", "", ""])
    q0 = {"topic": topic, "queueId": 0}
    await s.step("max-q0", b, 30, q0)
    await s.step("min-q0", b, 31, q0)
    await s.step("max-empty-q1", b, 30, {"topic": topic, "queueId": 1})
    await s.step("earliest-q0", b, 32, q0)
    await s.step("earliest-empty-q1", b, 32, {"topic": topic, "queueId": 1})
    await s.step("search-before-all", b, 29, {**q0, "timestamp": before - 60_000})
    await s.step("search-future", b, 29, {**q0, "timestamp": before + 3_600_000})
    await s.step("search-empty-q1", b, 29, {"topic": topic, "queueId": 1, "timestamp": before})
    missing = {"topic": s.name("missing"), "queueId": 0}
    await s.step("max-unknown-topic", b, 30, missing)
    await s.step("min-unknown-topic", b, 31, missing)
    await s.step("earliest-unknown-topic", b, 32, missing)
    await s.step("search-unknown-topic", b, 29, {**missing, "timestamp": before})
    await s.step("max-bad-queue", b, 30, {"topic": topic, "queueId": 9})
    await s.step("max-no-queue-header", b, 30, {"topic": topic})
    r = await b.call(11, pull(s.name("g"), topic, 0, 1, max_nums=1))
    phy = decode_messages(r.body)[0].commit_log_offset if r is not None and r.body else 0
    await s.step("view-by-offset", b, 33, {"offset": phy})
    await s.step("view-bad-offset", b, 33, {"offset": 2**62})
    await s.step("view-missing-offset", b, 33, {})
