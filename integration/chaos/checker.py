"""The checker: after the run converged, the output holds every stored message exactly once.

Ground truth comes from two places that do not depend on the flow under test:

- the producer's record of every send attempt (acknowledged ones with their (broker, queue,
  offset), indeterminate ones that may or may not be stored), each with a unique body;
- the brokers' high-water marks at the end: every offset below a queue's mark holds a stored
  message, so the output must hold each (broker, queue, offset) in [0, mark) exactly once, whether
  its send was acknowledged or not.

Checks: **lost** (a stored offset not in the output), **duplicates** (an offset in the output more
than once), **outside** (a row at an offset that is not stored, or whose body is no attempt of this
run), **mismatched** (the row at an acknowledged offset carries another attempt's body), **order**
(with an orderly producer: in each queue, the acknowledged messages of a key come in the order of
their sequence numbers; an indeterminate send may be stored long after it timed out, e.g. when a
cut link delivers it late, and RocketMQ's ordering holds only for acknowledged sends, so those are
counted as ``late_stored``, not as order violations),
**window order** (in each queue, rows of later offsets never come from an earlier window) and
**lag** (the group's committed offsets equal the marks). ``ok`` only when all are zero.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

Pos = tuple[str, int, int]  # broker, queue id, queue offset


@dataclass(frozen=True)
class Row:
    topic: str
    broker: str
    queue_id: int
    queue_offset: int
    body: str
    window_id: str


@dataclass
class Verdict:
    produced: int = 0            # stored messages: the sum of the final high-water marks
    acknowledged: int = 0
    indeterminate: int = 0       # attempts without an answer
    indeterminate_stored: int = 0  # ... of which the output shows a stored one
    late_stored: int = 0         # ... stored after a later message of its key (a timed-out send delivered late)
    loaded: int = 0              # rows in the output
    lost: int = 0
    duplicates: int = 0
    outside: int = 0
    mismatched: int = 0
    order: int = 0
    window_order: int = 0
    lag: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicates or self.outside or self.mismatched or self.order
                    or self.window_order or self.lag)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def _example(self, what: str, text: str) -> None:
        seen = self.examples.setdefault(what, [])
        if len(seen) < 5:
            seen.append(text)


def parse_body(body: str) -> tuple[str, int, str] | None:
    try:
        d = json.loads(body)
        return str(d["k"]), int(d["s"]), str(d["a"])
    except (ValueError, KeyError, TypeError):
        return None


def check(topic: str, attempts: Iterable[Mapping[str, Any]], high_water: Mapping[tuple[str, int], int],
          committed: Mapping[tuple[str, int], int], rows: Iterable[Row], *, orderly: bool) -> Verdict:
    v = Verdict()
    by_aid = _attempts(v, attempts)
    expected: set[Pos] = {(b, q, o) for (b, q), hw in high_water.items() for o in range(hw)}
    v.produced = len(expected)
    at = _rows_at(v, topic, rows)
    _check_positions(v, at, expected, high_water, by_aid)
    _check_attempts(v, at, expected, by_aid)
    _check_order(v, at, by_aid, orderly=orderly)
    _check_lag(v, high_water, committed)
    return v


def _attempts(v: Verdict, attempts: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    by_aid: dict[str, Mapping[str, Any]] = {}
    for a in attempts:
        by_aid[a["a"]] = a
        if a["ok"]:
            v.acknowledged += 1
        else:
            v.indeterminate += 1
    return by_aid


def _rows_at(v: Verdict, topic: str, rows: Iterable[Row]) -> dict[Pos, list[Row]]:
    at: dict[Pos, list[Row]] = defaultdict(list)
    for r in rows:
        v.loaded += 1
        at[(r.broker, r.queue_id, r.queue_offset)].append(r)
        if r.topic != topic:
            v.outside += 1
            v._example("outside", f"row of topic {r.topic!r} at {r.broker}:{r.queue_id}@{r.queue_offset}")
    return at


def _check_positions(v: Verdict, at: Mapping[Pos, list[Row]], expected: set[Pos],
                     high_water: Mapping[tuple[str, int], int], by_aid: Mapping[str, Mapping[str, Any]]) -> None:
    """Each stored position once, inside the marks, holding a message this run sent; none missing."""
    for pos, found in at.items():
        if len(found) > 1:
            v.duplicates += len(found) - 1
            v._example("duplicates", f"{pos[0]}:{pos[1]}@{pos[2]} x{len(found)} (windows "
                       f"{sorted(r.window_id for r in found)})")
        if pos not in expected:
            v.outside += len(found)
            v._example("outside", f"{pos[0]}:{pos[1]}@{pos[2]} is beyond the queue's high-water mark "
                       f"{high_water.get(pos[:2], 'unknown queue')}")
            continue
        for r in found:
            parsed = parse_body(r.body)
            if parsed is None or parsed[2] not in by_aid:
                v.outside += 1
                v._example("outside", f"{pos[0]}:{pos[1]}@{pos[2]} body {r.body[:80]!r} is no attempt of this run")
    for pos in sorted(expected - at.keys()):
        v.lost += 1
        v._example("lost", f"{pos[0]}:{pos[1]}@{pos[2]}")


def _check_attempts(v: Verdict, at: Mapping[Pos, list[Row]], expected: set[Pos],
                    by_aid: Mapping[str, Mapping[str, Any]]) -> None:
    """Every acknowledged send is in the output at the position the broker acknowledged."""
    seen_aids: set[str] = set()
    for found in at.values():
        parsed = parse_body(found[0].body)
        if parsed is not None:
            seen_aids.add(parsed[2])
    for a in by_aid.values():
        if not a["ok"]:
            v.indeterminate_stored += a["a"] in seen_aids
            continue
        pos = (a["b"], a["q"], a["o"])
        found = at.get(pos)
        if not found:
            if pos not in expected:  # acknowledged beyond the mark: the broker lost it, count it too
                v.lost += 1
                v._example("lost", f"acknowledged {a['k']}#{a['s']} at {pos} is beyond the high-water mark")
            continue
        parsed = parse_body(found[0].body)
        if parsed is None or parsed[2] != a["a"]:
            v.mismatched += 1
            v._example("mismatched", f"{pos}: acknowledged {a['k']}#{a['s']}/{a['a']}, output has {found[0].body[:80]!r}")


def _check_order(v: Verdict, at: Mapping[Pos, list[Row]], by_aid: Mapping[str, Mapping[str, Any]], *,
                 orderly: bool) -> None:
    """Within each queue: windows in offset order; per key, acknowledged sends in send order (orderly)."""
    per_queue: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for found in at.values():
        per_queue[(found[0].broker, found[0].queue_id)].append(found[0])
    for q, qrows in per_queue.items():
        qrows.sort(key=lambda r: r.queue_offset)
        last_window = ""
        last_seq: dict[str, tuple[int, int]] = {}
        for r in qrows:
            if r.window_id < last_window:
                v.window_order += 1
                v._example("window_order", f"{q[0]}:{q[1]}@{r.queue_offset} from window {r.window_id} after "
                           f"a lower offset from {last_window}")
            last_window = max(last_window, r.window_id)
            if orderly:
                _check_key_order(v, q, r, last_seq, by_aid)


def _check_key_order(v: Verdict, q: tuple[str, int], r: Row, last_seq: dict[str, tuple[int, int]],
                     by_aid: Mapping[str, Mapping[str, Any]]) -> None:
    parsed = parse_body(r.body)
    if parsed is None:
        return
    key, seq, aid = parsed
    prev = last_seq.get(key)
    acknowledged = by_aid.get(aid, {}).get("ok", False)
    if prev is not None and seq < prev[0]:
        if acknowledged:
            v.order += 1
            v._example("order", f"{q[0]}:{q[1]} key {key}: #{seq} at offset {r.queue_offset} after "
                       f"#{prev[0]} at offset {prev[1]}")
        else:
            v.late_stored += 1
        return
    if acknowledged:
        last_seq[key] = (seq, r.queue_offset)


def _check_lag(v: Verdict, high_water: Mapping[tuple[str, int], int],
               committed: Mapping[tuple[str, int], int]) -> None:
    for q, hw in high_water.items():
        c = committed.get(q, -1)
        if c != hw:  # behind: not caught up; ahead: an offset committed past what is stored
            v.lag += abs(hw - max(c, 0))
            v._example("lag", f"{q[0]}:{q[1]} committed {c}, high-water mark {hw}")
