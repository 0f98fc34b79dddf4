"""RocketMQWatchTrigger: one event per arrival of messages, for event-driven scheduling.

``MessageQueueTrigger(scheme="rocketmq", ...)`` (common-messaging) builds this trigger; an
``AssetWatcher`` runs it in the triggerer. Its ``run()`` keeps polling after an event, but the
triggerer builds a new instance from the serialized form whenever the run ends or is cancelled
(a triggerer restart, the trigger moving to another triggerer, an error), so "what was
signalled" cannot live in the trigger object: it lives on the broker,
as the committed offsets of a *watcher group* that no consumer ever joins.

Each poll compares the topic's high-water marks with the watcher group's offsets. When at
least ``min_messages`` arrived beyond them, the trigger first moves the watcher group's offsets
to the high-water marks (absolute, idempotent offset updates) and only then yields one event
carrying the ranges it signalled. A re-created trigger therefore starts from the new position
and stays silent until more messages arrive; messages that arrive while no trigger runs wait
beyond the position and are signalled by the next poll, so none is skipped.

What holds, and under which conditions:

- every message is signalled once, if the event that follows the offset update reaches
  Airflow's database; a triggerer killed between the update and that moment loses the event
  for those messages (the same at-most-once window as the Kafka provider, which commits
  before it yields);
- a queue whose offset update fails is left out of the event and signalled by a later poll.

The position never lags behind ``consumer_group``'s committed offsets: messages the consuming
group has already read are not announced (a new watcher's first event is the group's backlog;
messages a DAG run consumed after they arrived cause no second run). ``consumer_group``'s own
offsets are only read, never moved.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow_provider_rocketmq.airflow_compat import BaseEventTrigger, TriggerEvent, default_conn_id
from airflow_provider_rocketmq.client import AclDeniedError, ConfigError, MessageQueue, RocketMQError
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook

WATCHER_SUFFIX = "-watcher"


def default_watcher_group(consumer_group: str) -> str:
    return f"{consumer_group}{WATCHER_SUFFIX}"


def pending_ranges(high_water: dict[MessageQueue, int],
                   positions: dict[MessageQueue, int]) -> list[tuple[MessageQueue, int, int]]:
    """``(queue, start, end)`` of every queue with messages beyond its position, in queue order."""
    out = []
    for mq in sorted(high_water, key=lambda q: (q.broker_name, q.queue_id)):
        end = high_water[mq]
        start = positions[mq]
        if end > start:
            out.append((mq, start, end))
    return out


class RocketMQWatchTrigger(BaseEventTrigger):
    """Fire once per arrival of messages on ``topic``; the position is kept on the broker.

    Event payload: ``{"status": "success", "topic", "consumer_group", "watcher_group",
    "messages": n, "ranges": [{"broker", "queue_id", "start_offset", "end_offset"}, ...]}``
    (``end_offset`` exclusive). Broker errors are logged and retried at the next poll (the
    topic may not exist yet); a bad connection and an ACL refusal (`AclDeniedError`: the user
    lacks Get on the topic or Sub/Get/Update on a group) raise, ending the trigger.

    :param topic: topic to watch.
    :param consumer_group: the group the scheduled DAG consumes with; only read: what it has
        consumed is not announced.
    :param min_messages: fire once at least this many messages arrived since the last event.
    :param poll_interval: seconds between two polls.
    :param watcher_group: group whose offsets hold the watcher's position (default
        ``<consumer_group>-watcher``); no consumer may use it.
    :param rocketmq_conn_id: the `rocketmq` connection (default ``[rocketmq] default_conn_id``).
    """

    def __init__(
        self,
        topic: str,
        consumer_group: str,
        min_messages: int = 1,
        poll_interval: float = 5.0,
        watcher_group: str | None = None,
        rocketmq_conn_id: str | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call,unused-ignore]  # untyped in Airflow 3.0
        if isinstance(min_messages, bool) or not isinstance(min_messages, int) or min_messages < 1:
            raise ConfigError("min_messages", f"must be an integer >= 1, got {min_messages!r}")
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)) \
                or not poll_interval > 0:
            raise ConfigError("poll_interval", f"must be > 0 seconds, got {poll_interval!r}")
        for name, value in (("topic", topic), ("consumer_group", consumer_group)):
            if not isinstance(value, str) or not value:
                raise ConfigError(name, f"must be a non-empty name, got {value!r}")
        watcher_group = watcher_group or default_watcher_group(consumer_group)
        if watcher_group == consumer_group:
            raise ConfigError("watcher_group",
                              "must differ from consumer_group: the watcher moves its offsets")
        self.topic = topic
        self.consumer_group = consumer_group
        self.min_messages = min_messages
        self.poll_interval = float(poll_interval)
        self.watcher_group = watcher_group
        self.rocketmq_conn_id = rocketmq_conn_id or default_conn_id()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "topic": self.topic,
                "consumer_group": self.consumer_group,
                "min_messages": self.min_messages,
                "poll_interval": self.poll_interval,
                "watcher_group": self.watcher_group,
                "rocketmq_conn_id": self.rocketmq_conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        admin = await RocketMQHook(self.rocketmq_conn_id).aget_async_admin()  # a bad connection raises
        async with admin:
            while True:
                try:
                    event = await self._poll(admin)
                except (ConfigError, AclDeniedError):
                    raise
                except RocketMQError as exc:
                    self.log.warning("watching %s: %s; retrying in %.1f s", self.topic, exc,
                                     self.poll_interval)
                    event = None
                if event is not None:
                    yield TriggerEvent(event)  # type: ignore[no-untyped-call,unused-ignore]  # untyped in Airflow 3.0
                await asyncio.sleep(self.poll_interval)

    async def _positions(self, admin: Any, high_water: dict[MessageQueue, int]) -> dict[MessageQueue, int]:
        """Per queue: the watcher's position, never behind what the consuming group already read."""
        watched = await admin.committed_offsets(self.watcher_group, self.topic)
        consumed = await admin.committed_offsets(self.consumer_group, self.topic)
        positions: dict[MessageQueue, int] = {}
        for mq, high in high_water.items():
            offset = max(watched.get(mq, -1), consumed.get(mq, -1))
            if offset < 0:  # neither group has an offset and the queue's first messages are gone
                offset = await admin.min_offset(mq)
            if offset > high:  # the queue was reset (topic re-created): restart at its end
                self.log.warning("%s is at %d on %s, beyond its end %d: restarting there", self.watcher_group,
                                 offset, mq, high)
                offset = high
                await admin.update_consumer_offset(self.watcher_group, mq, offset)
            positions[mq] = offset
        return positions

    async def _poll(self, admin: Any) -> dict[str, Any] | None:
        high_water = await admin.high_water_marks(self.topic)
        ranges = pending_ranges(high_water, await self._positions(admin, high_water))
        waiting = sum(end - start for _, start, end in ranges)
        if waiting < self.min_messages:
            self.log.debug("%s: %d new message(s), waiting for %d", self.topic, waiting, self.min_messages)
            return None
        signalled: list[dict[str, Any]] = []
        for mq, start, end in ranges:  # move the position first: a re-created trigger must not fire again
            try:
                await admin.update_consumer_offset(self.watcher_group, mq, end)
            except AclDeniedError:
                raise  # the same answer next time: the watcher would never fire
            except RocketMQError as exc:
                self.log.warning("could not move %s on %s to %d (signalled later): %s",
                                 self.watcher_group, mq, end, exc)
                continue
            signalled.append({"broker": mq.broker_name, "queue_id": mq.queue_id, "start_offset": start,
                              "end_offset": end})
        if not signalled:
            return None
        messages = sum(r["end_offset"] - r["start_offset"] for r in signalled)
        self.log.info("%d new message(s) on %s in %d queue(s): firing", messages, self.topic, len(signalled))
        return {"status": "success", "topic": self.topic, "consumer_group": self.consumer_group,
                "watcher_group": self.watcher_group, "messages": messages, "ranges": signalled}
