"""The run's producer: keyed messages all the time, each send attempt recorded with its outcome.

Every attempt has its own body ``{"k": key, "s": seq, "a": attempt id}``, so a row of the output
names exactly the attempt it came from. An attempt is *acknowledged* (the broker answered SEND_OK:
we know its (broker, queue, offset)) or *indeterminate* (an error or a timeout: it may or may not
be stored). A message whose attempt failed is sent again as a new attempt with the same key and
sequence number before the key's next message, so per-key order holds among stored attempts. With
``orderly`` the queue is chosen by key (``Producer.send(key=...)``: Java's SelectMessageQueueByHash).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from airflow_provider_rocketmq.client import ClientConfig, Message, Producer

TAG = "chaos"


@dataclass
class Attempt:
    key: str
    seq: int
    aid: str
    sent_at: float
    ok: bool = False
    broker: str = ""
    queue_id: int = -1
    offset: int = -1
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"k": self.key, "s": self.seq, "a": self.aid, "t": round(self.sent_at, 3), "ok": self.ok,
                "b": self.broker, "q": self.queue_id, "o": self.offset, "e": self.error[:200]}


def body_of(key: str, seq: int, aid: str) -> bytes:
    return json.dumps({"k": key, "s": seq, "a": aid}, separators=(",", ":")).encode()


class ChaosProducer:
    """A thread sending ``rate`` messages per second over ``keys`` keys until ``stop()``."""

    def __init__(self, namesrv: str, topic: str, *, rate: float, keys: int, orderly: bool) -> None:
        self.topic = topic
        self.rate = rate
        self.keys = [f"key{i:03d}" for i in range(keys)]
        self.orderly = orderly
        self.attempts: list[Attempt] = []
        self._seq = dict.fromkeys(self.keys, 0)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        cfg = ClientConfig(namesrv_addr=namesrv, instance_name=f"chaos-producer-{uuid.uuid4().hex[:6]}",
                           request_timeout=3.0)
        self._producer = Producer(cfg, group=f"chaos_producer_{uuid.uuid4().hex[:8]}")
        self._thread = threading.Thread(target=self._run, daemon=True, name="chaos-producer")

    def start(self) -> ChaosProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        with contextlib.suppress(Exception):  # the producer's failure is the run's result, not this close
            self._producer.close()

    @property
    def counts(self) -> dict[str, int]:
        with self._lock:
            ok = sum(a.ok for a in self.attempts)
            return {"attempts": len(self.attempts), "acknowledged": ok, "indeterminate": len(self.attempts) - ok}

    def _run(self) -> None:
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        i = 0
        # a key whose last attempt failed waits before its next try (the others go on)
        retry_at: dict[str, float] = {}
        while not self._stop.is_set():
            key = self.keys[i % len(self.keys)]
            i += 1
            now = time.monotonic()
            if retry_at.get(key, 0.0) > now:
                if all(retry_at.get(k, 0.0) > now for k in self.keys):
                    self._stop.wait(min(retry_at.values()) - now)
                continue
            seq = self._seq[key]
            attempt = Attempt(key, seq, uuid.uuid4().hex[:12], time.time())
            with self._lock:
                self.attempts.append(attempt)
            msg = Message(self.topic, body_of(key, seq, attempt.aid), tags=TAG, keys=[key])
            try:
                result = self._producer.send(msg, key=key if self.orderly else None, timeout=6.0)
            except Exception as exc:
                attempt.error = f"{type(exc).__name__}: {exc}"
                retry_at[key] = time.monotonic() + 0.5
            else:
                # any status is an answer from the broker that stored it (not SEND_OK: a flush or a
                # slave not confirmed in time, which does not unstore it)
                attempt.ok = True
                attempt.broker = result.queue.broker_name
                attempt.queue_id = result.queue.queue_id
                attempt.offset = result.queue_offset
                attempt.error = "" if result.status == "SEND_OK" else result.status
                self._seq[key] = seq + 1
                retry_at.pop(key, None)
            next_at = max(next_at + interval, time.monotonic() - 1.0)
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
