"""Decode cost per message: pull bodies -> Arrow columns (client/protocol/columnar.py) vs decode_messages.

Pull bodies of 32 records (a broker's in-memory pull limit) of 100-byte messages
with a UNIQ_KEY, as the embedded broker serves them. Prints microseconds per
message for
  (a) decode_columns alone (the pull loop's share: validate, summarise, keep the body),
  (b) to_record_batch over 1,000 such batches (the window writer's share), and (b') the same with
      the properties a real 4.9.7 broker stores for the project's producer (UNIQ_KEY, WAIT, CLUSTER,
      WAIT again),
  (c) decode_messages (MessageExt per message), and
  (d) decode_messages + the former staging path (a dict per message, pyarrow from lists).

    .venv/bin/python bench/columnar_decode.py
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airflow_provider_rocketmq.client.producer.message_id import new_uniq_id
from airflow_provider_rocketmq.client.protocol.batch import PullFilter
from airflow_provider_rocketmq.client.protocol.columnar import decode_columns, to_record_batch
from airflow_provider_rocketmq.client.protocol.message import decode_messages, encode_stored_message
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

MQ = MessageQueue("BenchTopic", "broker-a", 3)
ALL = PullFilter(None, None, False, "")
PER_PULL = 32
PULLS = 1000


def pull_body(first: int, real_broker: bool = False) -> bytes:
    def props() -> str | dict[str, str]:
        if real_broker:
            return f"UNIQ_KEY\x01{new_uniq_id()}\x02WAIT\x01true\x02CLUSTER\x01DefaultCluster\x02WAIT\x01true"
        return {"UNIQ_KEY": new_uniq_id(), "WAIT": "true"}
    return b"".join(encode_stored_message(
        topic=MQ.topic, body=b"x" * 100, properties=props(),
        queue_id=MQ.queue_id, queue_offset=first + i, commit_log_offset=134 * (first + i),
        born_timestamp=1_700_000_000_000, born_host="10.0.0.1:50000", store_timestamp=1_700_000_000_001,
        store_host="10.0.0.2:10911") for i in range(PER_PULL))


def best_of(fn: object, runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    bodies = [pull_body(PER_PULL * k) for k in range(PULLS)]
    n = PER_PULL * PULLS
    batches = [decode_columns(b, MQ, ALL) for b in bodies]
    to_record_batch(batches)  # imports numpy/pyarrow once
    a = best_of(lambda: [decode_columns(b, MQ, ALL) for b in bodies])
    b = best_of(lambda: to_record_batch(batches))
    real = [decode_columns(pull_body(PER_PULL * k, real_broker=True), MQ, ALL) for k in range(PULLS)]
    b2 = best_of(lambda: to_record_batch(real))
    c = best_of(lambda: [decode_messages(x, broker_name="broker-a") for x in bodies])
    from airflow_provider_rocketmq.client.protocol.columnar import to_raw_record_batch
    from airflow_provider_rocketmq.client.protocol.raw_columns import messages_from_raw

    e = best_of(lambda: to_raw_record_batch(real))
    raw = to_raw_record_batch(real)
    f = best_of(lambda: messages_from_raw(raw))

    def old_staging() -> None:
        import pyarrow as pa

        from airflow_provider_rocketmq.window.manifest import STAGED_COLUMNS, staged_row, staged_schema

        rows = [staged_row(m, "w") for x in bodies for m in decode_messages(x, broker_name="broker-a")]
        cols = {name: [r[name] if name != "properties" else list(r[name].items()) for r in rows]
                for name in STAGED_COLUMNS}
        pa.Table.from_arrays([pa.array(cols[f.name], type=f.type) for f in staged_schema()],
                             schema=staged_schema())

    d = best_of(old_staging, runs=2)
    print(f"messages: {n} in pulls of {PER_PULL} x 100 B")
    print(f"(a) decode_columns              {a / n * 1e6:6.2f} us/msg")
    print(f"(b) to_record_batch (1000 pulls) {b / n * 1e6:6.2f} us/msg")
    print(f"(b') the same, 4.9.7's props    {b2 / n * 1e6:6.2f} us/msg")
    print(f"    columnar total (a + b)      {(a + b) / n * 1e6:6.2f} us/msg")
    print(f"(e) to_raw_record_batch, 4.9.7's {e / n * 1e6:5.2f} us/msg (what the window's writer builds)")
    print(f"(f) messages_from_raw of (e)    {f / n * 1e6:6.2f} us/msg (what a load's task derives)")
    print(f"(c) decode_messages             {c / n * 1e6:6.2f} us/msg")
    print(f"(d) decode_messages + row dicts {d / n * 1e6:6.2f} us/msg (the former staging path)")


if __name__ == "__main__":
    main()
