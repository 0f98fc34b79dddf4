"""Checks over recorded deliveries of orderly consumption (shared by R3 and R4)."""

from __future__ import annotations

from .harness import Delivery


def overlaps(deliveries: list[Delivery]) -> list[tuple[int, str, str, float]]:
    """(queue id, member, member, seconds) wherever two members ran a listener on one queue at once.

    Deliveries of one listener call share their start and end; calls of one queue are sorted by
    start and each is compared with every earlier call of another member still running.
    """
    by_queue: dict[int, list[Delivery]] = {}
    for d in deliveries:
        by_queue.setdefault(d.queue_id, []).append(d)
    found = []
    for qid, ds in by_queue.items():
        calls = sorted({(d.start, d.end, d.member) for d in ds})
        open_until: dict[str, float] = {}
        for start, end, member in calls:
            for other, until in open_until.items():
                if other != member and until > start:
                    found.append((qid, other, member, until - start))
            open_until[member] = max(open_until.get(member, 0.0), end)
    return found


def order_breaks(deliveries: list[Delivery]) -> list[tuple[int, int, int]]:
    """(queue id, previous seq, seq) wherever a queue's first deliveries are not in order."""
    by_queue: dict[int, list[Delivery]] = {}
    for d in sorted(deliveries, key=lambda d: (d.start, d.offset)):
        by_queue.setdefault(d.queue_id, []).append(d)
    breaks = []
    for qid, ds in by_queue.items():
        seen: set[int] = set()
        last = -1
        for d in ds:  # re-deliveries after a takeover repeat a suffix: only first deliveries count
            if d.offset in seen:
                continue
            seen.add(d.offset)
            if d.offset < last:
                breaks.append((qid, last, d.offset))
            last = d.offset
    return breaks
