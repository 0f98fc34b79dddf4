"""Which brokers of a topic a window can reach, and the high-water marks of their queues.

A window takes the queues of the brokers that answer and leaves the queues of a broker it cannot
reach (connections refused, reset or timing out: a broker down, a network cut) to the next window:
they are not in its manifest, so nothing of them is staged, read or committed, and the group's
offsets there stay where they are. Only when no broker of the topic answers does the window fail.
Each unreachable broker costs the client's request timeout times its attempts (about 9 s with the
defaults: 3 s, 3 attempts) before it is left out, so a window never hangs on one.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Protocol

from airflow_provider_rocketmq.client.errors import ConnectionClosedError, RequestTimeoutError
from airflow_provider_rocketmq.client.queue import MessageQueue

log = logging.getLogger(__name__)

# a broker that does not answer, as opposed to one that answers with an error (which fails the window)
UNREACHABLE = (ConnectionClosedError, RequestTimeoutError)


class MarksAdmin(Protocol):
    def high_water_marks(self, topic: str) -> dict[MessageQueue, int]: ...


class QueueAdmin(MarksAdmin, Protocol):
    def topic_queues(self, topic: str) -> list[MessageQueue]: ...

    def max_offset(self, mq: MessageQueue) -> int: ...


def reachable_high_water_marks(admin: MarksAdmin, topic: str) -> tuple[dict[MessageQueue, int], dict[str, str]]:
    """The high-water marks of every queue on a broker that answers, and ``{broker: error}`` for the
    brokers that do not (empty when all answer). Raises the error when no broker answers."""
    try:
        return admin.high_water_marks(topic), {}
    except UNREACHABLE as exc:
        first: Exception = exc
    if not hasattr(admin, "topic_queues") or not hasattr(admin, "max_offset"):
        raise first
    qa: QueueAdmin = admin  # type: ignore[assignment]  # checked just above
    by_broker: dict[str, list[MessageQueue]] = defaultdict(list)
    for mq in qa.topic_queues(topic):
        by_broker[mq.broker_name].append(mq)
    marks: dict[MessageQueue, int] = {}
    unreachable: dict[str, str] = {}
    for broker, queues in sorted(by_broker.items()):
        try:
            for mq in queues:
                marks[mq] = qa.max_offset(mq)
        except UNREACHABLE as exc:
            unreachable[broker] = str(exc)
            for mq in queues:
                marks.pop(mq, None)
    if not marks:
        raise first
    if unreachable:
        log.warning("window of %s: broker(s) %s unreachable (%s): their queues are left to the next window "
                    "(not staged, not committed)", topic, ", ".join(sorted(unreachable)),
                    "; ".join(f"{b}: {e}" for b, e in sorted(unreachable.items())))
    return marks, unreachable
