"""Client message ids (UNIQ_KEY): their form, the local month they count from, ids made by the chunk."""

from __future__ import annotations

import datetime
import struct
import time

import pytest

from airflow_provider_rocketmq.client.producer.message_id import UniqIdGenerator


@pytest.mark.skipif(not hasattr(time, "tzset"), reason="needs time.tzset")
def test_uniq_id_counts_from_the_local_month_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Around a month boundary west of UTC the UTC month has begun but the local one has not."""
    monkeypatch.setenv("TZ", "EST+5")  # fixed UTC-5, no DST
    time.tzset()
    try:
        now = datetime.datetime(2026, 12, 1, 2, 0, tzinfo=datetime.timezone.utc).timestamp()  # Nov 30, 21:00 local
        monkeypatch.setattr(time, "time", lambda: now)
        uid = UniqIdGenerator().next_id()
        ms_since_start, counter = struct.unpack(">IH", bytes.fromhex(uid[-12:]))
        local_nov_1 = datetime.datetime(2026, 11, 1, 5, 0, tzinfo=datetime.timezone.utc).timestamp()
        # 29 days 16 h: past 2**31 ms, so the field holds the low 32 bits, as Java's int cast does
        assert ms_since_start == int((now - local_nov_1) * 1000) & 0xFFFFFFFF and counter == 1
    finally:
        monkeypatch.undo()
        time.tzset()


def test_ids_made_by_the_chunk_are_new_ids_of_the_same_form(monkeypatch: pytest.MonkeyPatch) -> None:
    now = 1_790_000_000.25
    monkeypatch.setattr(time, "time", lambda: now)
    gen = UniqIdGenerator()
    one = gen.next_id()
    chunk = gen.next_ids(300)
    after = gen.next_id()
    ids = [one, *chunk, after]
    assert len(chunk) == 300 and len(set(ids)) == 302
    assert {len(u) for u in ids} == {32} and {u[:-4] for u in ids} == {one[:-4]}  # host, pid, seed, time
    counters = [int(u[-4:], 16) for u in ids]
    assert counters[1:-1] == list(range(counters[1], counters[1] + 300)) and counters[-1] > counters[-2]
