"""Metrics of the provider, sent through Airflow's ``Stats`` (StatsD, Datadog, OpenTelemetry).

Every name is under ``rocketmq.`` and names one quantity; the topic and the consumer group are
tags (``topic``, ``consumer_group``). A backend without tags (plain StatsD) therefore sums the
counters and timers over all topics and groups, and a gauge holds whichever topic reported last;
``[rocketmq] metrics_per_topic_names = True`` also sends each figure as
``<name>.<topic>.<consumer_group>`` (characters other than letters, digits, ``_`` and ``-``
replaced by ``_``) for such backends. docs/airflow.md ("Metrics") has the table.

Sending a metric never fails a task: Airflow's backends drop what they cannot send, and any
error here is logged as a warning.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from airflow_provider_rocketmq.airflow_compat import Stats, config_get

log = logging.getLogger(__name__)

PREFIX = "rocketmq"
# per staging window (RocketMQConsumeWindowOperator, handoff="staging"), once it is staged
WINDOW_MESSAGES = f"{PREFIX}.window.messages"  # counter
WINDOW_BYTES = f"{PREFIX}.window.bytes"  # counter (message bodies)
WINDOW_DURATION = f"{PREFIX}.window.duration"  # timer: snapshot -> manifest (-> commit)
WINDOW_RATE = f"{PREFIX}.window.rate"  # gauge: messages / second while consuming
WINDOW_QUEUES = f"{PREFIX}.window.queues"  # gauge: queues the window read
WINDOW_REUSED = f"{PREFIX}.window.reused"  # counter: a re-run found the window already staged
# per lag check (RocketMQLagSensor poke, RocketMQLagTrigger poll), per topic of the snapshot
LAG_TOTAL = f"{PREFIX}.lag.total"  # gauge: messages waiting for the group
LAG_MAX_QUEUE = f"{PREFIX}.lag.max_queue"  # gauge: the largest lag of one queue
# per load of spark/load_window.py: reserved names, not sent yet (the load job reports its counts on
# stdout; sending them through Stats needs the Airflow side of the load, which is not written yet)
LOAD_ROWS_IN = f"{PREFIX}.load.rows_in"  # counter: rows read from the windows
LOAD_ROWS_OUT = f"{PREFIX}.load.rows_out"  # counter: rows appended to the output
LOAD_ALREADY_LOADED = f"{PREFIX}.load.already_loaded"  # counter: rows the output's ledger already held
LOAD_DUPLICATES = f"{PREFIX}.load.duplicates"  # counter: rows dropped as repeats within the load
LOAD_DURATION = f"{PREFIX}.load.duration"  # timer

PER_TOPIC_OPTION = "metrics_per_topic_names"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def _per_topic_names() -> bool:
    return config_get(PER_TOPIC_OPTION, "False").strip().lower() in ("true", "1", "yes", "on")


def _send(kind: str, name: str, value: Any, topic: str, group: str) -> None:
    tags = {"topic": topic, "consumer_group": group}
    send: Callable[..., None] = getattr(Stats, kind)
    try:
        send(name, value, tags=tags)
        if _per_topic_names():
            send(f"{name}.{_UNSAFE.sub('_', topic)}.{_UNSAFE.sub('_', group)}", value)
    except Exception as exc:  # noqa: BLE001 - a metric must never fail the task
        log.warning("could not send metric %s: %s", name, exc)


def window_metrics(topic: str, group: str, *, messages: int, size: int, seconds: float,
                   consuming_seconds: float | None, queues: int) -> None:
    """A staged window: its counts, its duration and the rate while it consumed."""
    _send("incr", WINDOW_MESSAGES, messages, topic, group)
    _send("incr", WINDOW_BYTES, size, topic, group)
    _send("timing", WINDOW_DURATION, timedelta(seconds=seconds), topic, group)
    if consuming_seconds:
        _send("gauge", WINDOW_RATE, messages / consuming_seconds, topic, group)
    _send("gauge", WINDOW_QUEUES, queues, topic, group)


def window_reused(topic: str, group: str) -> None:
    """A re-run returned the manifest an earlier attempt wrote (nothing consumed: no counts sent)."""
    _send("incr", WINDOW_REUSED, 1, topic, group)


def lag_metrics(snapshot: Mapping[str, Any]) -> None:
    """One lag check (``LagSnapshot.to_dict()``): total and largest queue lag, per topic it covers."""
    group = str(snapshot.get("group", ""))
    per_topic: dict[str, list[int]] = {}
    if snapshot.get("topic"):
        per_topic[str(snapshot["topic"])] = []  # a topic with no queue reports 0, not nothing
    for q in snapshot.get("queues", ()):
        per_topic.setdefault(str(q["topic"]), []).append(int(q["lag"]))
    for topic, lags in sorted(per_topic.items()):
        _send("gauge", LAG_TOTAL, sum(lags), topic, group)
        _send("gauge", LAG_MAX_QUEUE, max(lags, default=0), topic, group)
