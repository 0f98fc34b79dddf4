"""Which brokers of a topic a window can reach, and the high-water marks of their queues.

A window takes the queues of the brokers that answer and leaves the queues of a broker it cannot
reach (connections refused, reset or timing out: a broker down, a network cut) to the next window:
they are not in its manifest, so nothing of them is staged, read or committed, and the group's
offsets there stay where they are. Only when no broker of the topic answers does the window fail.
Each unreachable broker costs one request's timeouts, the client's request timeout times its attempts
(about 10 s with the defaults: 3 s, 3 attempts), before it is left out, so a window never hangs on one.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Protocol

from airflow_provider_rocketmq.client.protocol.errors import ConnectionClosedError, RequestTimeoutError
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

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
    brokers that do not (empty when all answer). Raises the error when no broker answers.

    Each broker is asked for one queue's mark first, one broker after the other, so a silent broker
    costs one call's timeouts (not one per queue: connections to one address are opened one at a
    time); then every queue of the brokers that answered."""
    if not hasattr(admin, "topic_queues") or not hasattr(admin, "max_offset"):
        return admin.high_water_marks(topic), {}
    qa: QueueAdmin = admin  # type: ignore[assignment]  # checked just above
    by_broker: dict[str, list[MessageQueue]] = defaultdict(list)
    for mq in qa.topic_queues(topic):
        by_broker[mq.broker_name].append(mq)
    unreachable, error = _probe(qa, by_broker)
    if not unreachable:
        try:
            return qa.high_water_marks(topic), {}  # every queue in one concurrent round
        except UNREACHABLE:
            pass  # a broker went silent since its probe: ask queue by queue
    marks: dict[MessageQueue, int] = {}
    for broker, queues in sorted(by_broker.items()):
        if broker in unreachable:
            continue
        try:
            marks.update({mq: qa.max_offset(mq) for mq in queues})
        except UNREACHABLE as exc:
            unreachable[broker], error = str(exc), exc
    if not marks and error is not None:
        raise error  # no broker answers
    if unreachable:
        log.warning("window of %s: broker(s) %s unreachable (%s): their queues are left to the next window "
                    "(not staged, not committed)", topic, ", ".join(sorted(unreachable)),
                    "; ".join(f"{b}: {e}" for b, e in sorted(unreachable.items())))
    return marks, unreachable


def _probe(qa: QueueAdmin, by_broker: dict[str, list[MessageQueue]]) -> tuple[dict[str, str], Exception | None]:
    """``{broker: error}`` of the brokers whose first queue's mark cannot be read, and the last error."""
    unreachable: dict[str, str] = {}
    error: Exception | None = None
    for broker, queues in sorted(by_broker.items()):
        try:
            qa.max_offset(queues[0])
        except UNREACHABLE as exc:
            unreachable[broker], error = str(exc), exc
    return unreachable, error
