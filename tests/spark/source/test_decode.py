"""`decode_bodies`: a flush's pull bodies decoded as one buffer give what decoding each body gives."""

from __future__ import annotations

import pytest

from airflow_provider_rocketmq.client.protocol import columnar
from airflow_provider_rocketmq.client.protocol.batch import PullFilter
from airflow_provider_rocketmq.client.protocol.columnar import decode_columns, to_record_batch
from airflow_provider_rocketmq.client.protocol.errors import MessageDecodeError
from airflow_provider_rocketmq.client.protocol.message import FLAG_BORNHOST_V6
from airflow_provider_rocketmq.spark.source.decode import decode_bodies
from tests.client.protocol.test_columnar import MQ, stored


def _pulls() -> list[bytes]:
    # pulls of 3 records each, offsets 100..111: plain ones, one with an IPv6 born host (the general
    # walk), one with a tag the filter drops
    recs = [stored(i) for i in range(12)]
    recs[4] = stored(4, born="[2001:db8::1]:5555", sys_flag=FLAG_BORNHOST_V6)
    recs[7] = stored(7, props={"TAGS": "TagB", "KEYS": "k7"})
    return [b"".join(recs[i:i + 3]) for i in range(0, 12, 3)]


def _one_by_one(bodies: list[bytes], stop: int, tags: frozenset[str] | None) -> list[dict]:
    flt = PullFilter(stop=stop, tags=tags, restore_retry_topic=False, namespace="")
    kept = [b for b in (decode_columns(body, MQ, flt) for body in bodies) if b is not None]
    return to_record_batch(kept).to_pylist()


@pytest.mark.parametrize("bulk", [False, True])
@pytest.mark.parametrize(("stop", "tags"), [(112, None), (110, None), (112, frozenset({"TagA"}))])
def test_one_buffer_equals_body_by_body(stop: int, tags: frozenset[str] | None, bulk: bool,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = _pulls()
    if bulk:  # the joined buffer takes the numpy index, as a flush's megabytes do; single bodies do not
        monkeypatch.setattr(columnar, "BULK_INDEX_BYTES", sum(map(len, bodies)))
    batch = decode_bodies(bodies, MQ, stop, tags, "")
    assert batch is not None
    rows = batch.to_pylist()
    assert rows == _one_by_one(bodies, stop, tags)
    want = [o for o in range(100, stop) if not (tags and o == 107)]
    assert [r["queue_offset"] for r in rows] == want


def test_nothing_kept_and_a_corrupt_body() -> None:
    bodies = _pulls()
    assert decode_bodies(bodies, MQ, 112, frozenset({"TagC"}), "") is None
    with pytest.raises(MessageDecodeError):  # a body cut short: the buffer no longer tiles into records
        decode_bodies([*bodies[:2], bodies[2][:-5], bodies[3]], MQ, 112, None, "")


def test_a_flush_of_plain_records_takes_the_bulk_index_and_equals_body_by_body(
        monkeypatch: pytest.MonkeyPatch) -> None:
    recs = [stored(i, props={"TAGS": "TagB"} if i % 5 == 0 else {"TAGS": "TagA", "UNIQ_KEY": f"U{i}"})
            for i in range(300)]
    bodies = [b"".join(recs[i:i + 32]) for i in range(0, 300, 32)]
    monkeypatch.setattr(columnar, "BULK_INDEX_BYTES", sum(map(len, bodies)))
    bulk = columnar._index_plain_bulk
    calls: list[int] = []
    monkeypatch.setattr(columnar, "_index_plain_bulk", lambda data: calls.append(len(data)) or bulk(data))
    for stop, tags in [(400, None), (350, frozenset({"TagA"}))]:
        batch = decode_bodies(bodies, MQ, stop, tags, "")
        assert batch is not None
        assert batch.to_pylist() == _one_by_one(bodies, stop, tags)
        assert batch.column("queue_offset").to_pylist() == [
            100 + i for i in range(300) if 100 + i < stop and (tags is None or i % 5)]
    assert calls == [sum(map(len, bodies))] * 2  # the joined buffer, not the single bodies
