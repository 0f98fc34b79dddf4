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
# per load of spark/load/load_window.py, per topic and group of its windows: sent on the Airflow side from the
# job's result file (`load_metrics_from_file`; RocketMQCommitWindowOperator(load_result=...))
LOAD_ROWS_IN = f"{PREFIX}.load.rows_in"  # counter: rows read from the windows
LOAD_ROWS_OUT = f"{PREFIX}.load.rows_out"  # counter: rows appended to the output
LOAD_ALREADY_LOADED = f"{PREFIX}.load.already_loaded"  # counter: rows the output's ledger already held
LOAD_DUPLICATES = f"{PREFIX}.load.duplicates"  # counter: rows dropped as repeats within the load
LOAD_DURATION = f"{PREFIX}.load.duration"  # timer: the load job's work (manifests -> commit), not JVM start
LOAD_RESULT_NAME = "load_result.json"  # where the example DAGs put the result: next to the window's manifest

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
    except Exception as exc:
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


def load_metrics(result: Mapping[str, Any]) -> None:
    """One Spark load's result (``load_window.py --result-file``, spark/load/report.py): rows in, out,
    already loaded and repeated, summed per (topic, consumer group) of its windows, and the load's
    duration once per (topic, group)."""
    per: dict[tuple[str, str], dict[str, int]] = {}
    for w in result.get("windows", ()):
        c = per.setdefault((str(w.get("topic", "")), str(w.get("consumer_group", ""))),
                           {"rows_in": 0, "rows_out": 0, "already_loaded": 0, "duplicates": 0})
        for k in c:
            c[k] += int(w.get(k, 0))
    seconds = float(result.get("seconds", 0.0))
    for (topic, group), c in sorted(per.items()):
        _send("incr", LOAD_ROWS_IN, c["rows_in"], topic, group)
        _send("incr", LOAD_ROWS_OUT, c["rows_out"], topic, group)
        _send("incr", LOAD_ALREADY_LOADED, c["already_loaded"], topic, group)
        _send("incr", LOAD_DUPLICATES, c["duplicates"], topic, group)
        _send("timing", LOAD_DURATION, timedelta(seconds=seconds), topic, group)


def load_result_location(window: Any) -> str:
    """Where the example DAGs let the load job write its result: ``load_result.json`` next to the
    window's manifest (a path or URL, or the window operator's XCom dict)."""
    manifest = window.get("manifest") if isinstance(window, Mapping) else window
    if not isinstance(manifest, str) or not manifest:
        raise ValueError(f"expected a manifest path or a window result, got {window!r}")
    head = manifest.rstrip("/")
    if head.endswith(".json"):
        head = head.rsplit("/", 1)[0] if "/" in head else "."
    return f"{head}/{LOAD_RESULT_NAME}"


def load_metrics_from_file(where: str, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """Read a load's result file (a path or fsspec URL) and send its metrics; returns the result, or
    None (with a warning in the task log) when it is missing or unreadable: metrics never fail a task."""
    import json

    try:
        if "://" in where and not where.startswith("file://"):
            import fsspec

            with fsspec.open(where, "r", encoding="utf-8", **dict(storage_options or {})) as fh:
                result = json.load(fh)
        else:
            with open(where.removeprefix("file://"), encoding="utf-8") as fh:
                result = json.load(fh)
        if not isinstance(result, dict):
            raise TypeError("not a JSON object")
    except Exception as exc:
        log.warning("no load metrics: could not read the load result %s: %s", where, exc)
        return None
    load_metrics(result)
    return result
