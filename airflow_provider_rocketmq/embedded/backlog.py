"""A name server + broker whose topic already holds a large backlog, written straight into its store.

Benchmarks and memory tests need millions of messages waiting; producing them
through the network would take longer than the measurement. This writes the records
a send would store (the store's own encoder and index), round-robin over the topic's
queues, before the broker listens (in-memory store only).

    python -m airflow_provider_rocketmq.embedded.backlog --topic T --messages 1000000 [--size 100] [--queues 8]

prints ``namesrv=127.0.0.1:PORT`` once the backlog is written, then serves until killed.
Messages carry a UNIQ_KEY and ``WAIT=true``, as a Java producer's do.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import struct
import time

from airflow_provider_rocketmq.client.producer.message_id import new_uniq_id
from airflow_provider_rocketmq.client.protocol.message import PROPERTY_UNIQ_KEY, encode_stored_message
from airflow_provider_rocketmq.embedded.broker import EmbeddedBroker
from airflow_provider_rocketmq.embedded.namesrv import EmbeddedNameServer
from airflow_provider_rocketmq.embedded.settings import BrokerSettings

_serial = itertools.count()  # the per-message part of the UNIQ_KEYs, unique within the process
_QOFF = struct.Struct(">q")  # queueOffset at byte 20, commitLogOffset at 28 of a stored record


def fill(broker: EmbeddedBroker, topic: str, messages: int, size: int, queues: int) -> None:
    """Append ``messages`` bodies of ``size`` bytes to ``topic``'s queues, round-robin.

    One record is encoded per queue with the store's own encoder; every message is a copy
    with its queue offset, commit-log offset and UNIQ_KEY written in (about 1 us each,
    against ~25 us through `MessageStore.put_messages`), indexed like a stored send
    (`MessageStore.append_encoded`).
    """
    store = broker.store
    assert store is not None, "start the broker first"
    uniq_prefix = new_uniq_id()[:20]  # ip + pid + seed: then a per-message counter, 12 hex digits
    born = int(time.time() * 1000)
    per_queue = [messages // queues + (1 if q < messages % queues else 0) for q in range(queues)]
    for q, count in enumerate(per_queue):
        cq = store.queue(topic, q)
        placeholder = uniq_prefix + "0" * 12
        template = encode_stored_message(
            topic=topic, body=b"x" * size, properties=f"{PROPERTY_UNIQ_KEY}\x01{placeholder}\x02WAIT\x01true",
            queue_id=q, queue_offset=0, commit_log_offset=0, born_timestamp=born, born_host="127.0.0.1:50000",
            store_timestamp=born, store_host=store.store_host)
        uniq_at = template.index(placeholder.encode()) + 20
        record = bytearray(template)
        append = store.append_encoded  # advances cq.max_offset and commit_log_end as followed here
        qoff, phy = cq.max_offset, store.commit_log_end
        for _ in range(count):
            _QOFF.pack_into(record, 20, qoff)
            _QOFF.pack_into(record, 28, phy)
            record[uniq_at:uniq_at + 12] = b"%012X" % next(_serial)
            append(cq, bytes(record), 0, born)
            phy += len(record)
            qoff += 1


async def serve(topic: str, messages: int, size: int, queues: int) -> None:
    namesrv = EmbeddedNameServer()
    await namesrv.start()
    broker = EmbeddedBroker(BrokerSettings(queues=queues))
    await broker.start()
    namesrv.register(broker)
    broker.create_topic(topic, queues, queues)
    fill(broker, topic, messages, size, queues)
    print(f"namesrv={namesrv.addr}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--messages", type=int, required=True)
    ap.add_argument("--size", type=int, default=100, help="body bytes (default 100)")
    ap.add_argument("--queues", type=int, default=8)
    args = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.topic, args.messages, args.size, args.queues))


if __name__ == "__main__":
    main()
