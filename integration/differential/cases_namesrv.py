"""Name server requests: GET_ROUTEINFO_BY_TOPIC (105), GET_BROKER_CLUSTER_INFO (106),
GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), and a code it does not serve."""

from __future__ import annotations

from typing import Any

from .session import Session, SetupError, case

OLD_CLIENT_VERSION = 373  # V4_7_1: before 4.9.4 clients could read standard JSON route bodies
RUN_PREFIXES = ("DF", "IT_", "REL_", "%RETRY%", "%DLQ%")


def create_topic(topic: str, read: int = 4, write: int = 4, perm: int = 6, order: bool = False) -> dict[str, Any]:
    return {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": read, "writeQueueNums": write,
            "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": order}


LAZY_ROUTE_WAIT = 45.0  # a real broker registers a topic made by send-back or the DLQ path at its next 30 s beat


async def routed(s: Session, topic: str, *, lazily: bool = False) -> None:
    """Wait until the name server has the topic's route (a real broker registers a new topic a moment
    later; ``lazily``: only at its next periodic registration - the embedded broker at once). After a
    lazy wait in vain the case goes on: the route step then records the name server's refusal."""
    n = await s.namesrv()

    async def has_route() -> bool:
        r = await n.call(105, {"topic": topic})
        return r is not None and r.code == 0
    try:
        await s.wait_until(f"a route of {topic}", has_route, LAZY_ROUTE_WAIT if lazily else 20.0, 0.5)
    except SetupError:
        if not lazily:
            raise


@case("namesrv.route")
async def route(s: Session) -> None:
    b, n = await s.broker(), await s.namesrv()
    topic = s.name("T")
    await s.setup(b, 17, create_topic(topic, 4, 4))
    await routed(s, topic)
    await s.step("standard-json", n, 105, {"topic": topic, "acceptStandardJsonOnly": "true"})
    await s.step("old-client", n, 105, {"topic": topic}, version=OLD_CLIENT_VERSION)
    await s.step("unknown-topic", n, 105, {"topic": s.name("missing")})
    await s.step("no-topic-header", n, 105, {})
    await s.step("TBW102", n, 105, {"topic": "TBW102", "acceptStandardJsonOnly": "true"})
    ro = s.name("RO")
    await s.setup(b, 17, create_topic(ro, 2, 3, perm=4))
    await routed(s, ro)
    await s.step("read-only-2r-3w", n, 105, {"topic": ro, "acceptStandardJsonOnly": "true"})


@case("namesrv.cluster")
async def cluster(s: Session) -> None:
    n = await s.namesrv()
    await s.step("cluster-info", n, 106)
    await s.step("cluster-info-old-client", n, 106, version=OLD_CLIENT_VERSION)


@case("namesrv.topics")
async def all_topics(s: Session) -> None:
    b, n = await s.broker(), await s.namesrv()
    topic = s.name("T")
    await s.setup(b, 17, create_topic(topic))
    await routed(s, topic)

    def ours(body: Any) -> Any:
        return sorted(t for t in body["topicList"] if t.startswith(s.prefix))

    def system(body: Any) -> Any:
        return sorted(t for t in body["topicList"] if not t.startswith(RUN_PREFIXES))
    await s.step("run-topics", n, 206, view=ours)
    await s.step("system-topics", n, 206, view=system)


@case("namesrv.unknown-code")
async def unknown_code(s: Session) -> None:
    n = await s.namesrv()
    await s.step("code-9999", n, 9999, {}, timeout=3.0)
