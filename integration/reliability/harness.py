"""What the reliability checks share: the broker they run against, member processes, a sequenced
workload, CPU load, and the figure lines.

Broker: ``ROCKETMQ_NAMESRV`` when set (used as is; checks that kill the broker skip unless
``ROCKETMQ_BROKER_KILL_CMD`` and ``ROCKETMQ_BROKER_START_CMD`` say how to do it), the integration
suite's broker container when testcontainers is its backend (killed with ``docker kill`` and started
again with its store), otherwise an embedded broker the suite owns, in its own process (``python -m airflow_provider_rocketmq.embedded``
on fixed ports with a data directory), so it can be killed with SIGKILL and started again on the
same ports and data. ``ROCKETMQ_EMBEDDED_FAULTS`` is passed to it as ``--faults``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, MessageQueue, Producer

from ..backends import BrokerControl, ContainerBrokerControl, ContainerCluster, broker_control

REPO = Path(__file__).resolve().parents[2]
SEQ = "rel_seq"  # the member writes this property of each message
EMBEDDED_TIME_SCALE = 0.02  # retry delay levels 50x faster on the suite's own broker

FIGURES: list[str] = []  # every "reliability: ..." line of this run (printed by conftest's summary hook)


def figure(check: str, text: str, **values: Any) -> str:
    """Record one ``reliability: <id> <text> k=v ...`` line and return it."""
    parts = [f"reliability: {check} {text}"] + [f"{k}={_fmt(v)}" for k, v in values.items()]
    line = " ".join(parts)
    FIGURES.append(line)
    out = os.environ.get("RELIABILITY_FIGURES")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    print(line, flush=True)
    return line


def _fmt(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``predicate`` (broker state, other processes' files: nothing to await) until truthy."""
    deadline = time.monotonic() + timeout
    while True:
        last: Exception | None = None
        try:
            value = predicate()
        except Exception as exc:
            value, last = None, exc
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}"
                                 + (f" (last error: {last!r})" if last else ""))
        time.sleep(interval)


# -- the broker -------------------------------------------------------------------------------------

class Broker:
    """The RocketMQ the checks use; ``can_kill`` when the suite owns it or has its kill/start commands."""

    def __init__(self, namesrv: str, *, owned: bool, faults: str = "", lock_expiry: float = 60.0,
                 control: BrokerControl | ContainerBrokerControl | None = None, kind: str = "") -> None:
        self.namesrv = namesrv
        self.owned = owned
        self.control = control
        self.can_kill = owned or control is not None
        self.faults = faults
        self.kind = kind or ("embedded process" if owned else f"existing {namesrv}")
        self._killed: list[str] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._args: list[str] = []
        self.lock_expiry = lock_expiry
        self.time_scale = EMBEDDED_TIME_SCALE if owned else 1.0
        self._admin: Admin | None = None

    @classmethod
    def from_environment(cls, *, lock_expiry: float = 60.0, faults: str | None = None,
                         queues: int = 8, container: ContainerCluster | None = None) -> Broker:
        """``ROCKETMQ_NAMESRV``, else ``container`` (the suite's testcontainers cluster: not closed
        here, the session owns it), else a new embedded broker process."""
        namesrv = os.environ.get("ROCKETMQ_NAMESRV", "").strip()
        if namesrv:
            return cls(namesrv, owned=False, control=broker_control(os.environ, namesrv))
        if container is not None:
            return cls(container.namesrv_addr, owned=False, control=container.control,
                       kind=f"testcontainers {container.image}")
        spec = os.environ.get("ROCKETMQ_EMBEDDED_FAULTS", "").strip() if faults is None else faults
        np_, bp = free_port(), free_port()
        b = cls(f"127.0.0.1:{np_}", owned=True, faults=spec, lock_expiry=lock_expiry)
        b._tmp = tempfile.TemporaryDirectory(prefix="rmq-rel-")
        b._args = [sys.executable, "-m", "airflow_provider_rocketmq.embedded", "--port", str(np_),
                   "--broker-port", str(bp), "--data-dir", b._tmp.name, "--queues", str(queues),
                   "--time-scale", str(EMBEDDED_TIME_SCALE), "--lock-expiry", str(lock_expiry)]
        if spec:
            b._args += ["--faults", spec]
        b.start()
        return b

    def start(self) -> float:
        """Start the broker (again); returns the wall-clock time at which it accepted connections."""
        if self.control is not None:
            addrs, self._killed = self._killed, []
            return self.control.start(addrs)
        assert self.owned and self._proc is None
        self._proc = subprocess.Popen(self._args, cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()  # "namesrv=..." once everything listens
        if not line.startswith("namesrv="):
            raise RuntimeError(f"embedded broker did not start: {line!r}")
        return time.time()

    def kill(self) -> None:
        """SIGKILL the broker (no shutdown of any kind): the owned process, or ROCKETMQ_BROKER_KILL_CMD."""
        if self.control is not None:
            self._killed = self.control.kill()
            return
        assert self._proc is not None
        self._proc.send_signal(signal.SIGKILL)
        self._proc.wait(30)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(ClientConfig(namesrv_addr=self.namesrv, instance_name=f"rel_admin_{os.getpid()}"))
        return self._admin

    def new_name(self, prefix: str) -> str:
        return f"REL_{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"

    def new_topic(self, prefix: str, queues: int, *, order: bool = False) -> str:
        topic = self.new_name(prefix)
        brokers = self.admin.create_topic(topic, queues=queues, order=order)
        total = queues * max(1, len(brokers))
        wait_until(lambda: len(self.admin.high_water_marks(topic)) == total, 30, f"route of {topic}")
        return topic

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self._proc is not None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(30)
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


# -- the workload -----------------------------------------------------------------------------------

def produce(broker: Broker, topic: str, seqs: Iterable[int], *, size: int = 64, orderly_key: Any = None,
            batch: int = 64) -> int:
    """Send ``seqs`` (property rel_seq) round-robin over the topic's queues, in batches; returns the count.

    With ``orderly_key(seq) -> int``, each message goes to queue ``key % queues`` in seq order.
    """
    body = b"x" * size
    n = 0
    with Producer(ClientConfig(namesrv_addr=broker.namesrv, instance_name=f"rel_p_{uuid.uuid4().hex[:8]}"),
                  group=broker.new_name("prod")) as producer:
        queues = sorted(broker.admin.high_water_marks(topic))
        pending: dict[MessageQueue, list[Message]] = {}
        for i, seq in enumerate(seqs):
            mq = queues[(orderly_key(seq) if orderly_key else i) % len(queues)]
            pending.setdefault(mq, []).append(Message(topic, body, properties={SEQ: str(seq)}))
            if len(pending[mq]) >= batch:
                n += _send(producer, mq, pending.pop(mq))
        for mq, msgs in pending.items():
            n += _send(producer, mq, msgs)
    return n


def _send(producer: Producer, mq: MessageQueue, msgs: list[Message]) -> int:
    for attempt in range(20):  # a restarting broker: retried until it answers again
        try:
            producer.send_batch(msgs, queue=mq)
            return len(msgs)
        except Exception:
            if attempt == 19:
                raise
            time.sleep(0.5)
    return 0


@dataclass(frozen=True)
class Delivery:
    member: str
    seq: int
    queue_id: int
    offset: int
    reconsume: int
    start: float
    end: float


def read_deliveries(path: Path, member: str) -> list[Delivery]:
    out: list[Delivery] = []
    if not path.exists():
        return out
    for line in path.read_text("ascii").splitlines():
        parts = line.split()
        if len(parts) != 6:  # a line torn by SIGKILL mid-write was not acknowledged
            continue
        seq, qid, off, rec = (int(p) for p in parts[:4])
        out.append(Delivery(member, seq, qid, off, rec, float(parts[4]), float(parts[5])))
    return out


def lost_and_duplicates(deliveries: Iterable[Delivery], expected: Iterable[int]) -> tuple[int, int]:
    """(sequence numbers never delivered, deliveries beyond the first of a stored message).

    A stored message is (queue id, queue offset): a producer retry that stored a sequence number
    twice is not a consumer duplicate.
    """
    ds = list(deliveries)
    lost = len(set(expected) - {d.seq for d in ds})
    counts = Counter((d.queue_id, d.offset) for d in ds)
    return lost, sum(c - 1 for c in counts.values())


# -- member processes ------------------------------------------------------------------------------

@dataclass
class Member:
    """One member process; ``deliveries()`` reads what it consumed so far."""

    name: str
    out: Path
    stats: Path
    proc: subprocess.Popen[str]
    client_id: str = ""
    final: dict[str, Any] = field(default_factory=dict)

    def deliveries(self) -> list[Delivery]:
        return read_deliveries(self.out, self.name)

    def stats_lines(self) -> list[dict[str, Any]]:
        if not self.stats.exists():
            return []
        return [json.loads(x) for x in self.stats.read_text("ascii").splitlines() if x.strip()]

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._close()

    def stop(self, timeout: float = 60.0) -> dict[str, Any]:
        """SIGTERM: a clean shutdown; returns the member's final-commit line."""
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate(timeout=30)
        for line in reversed(out.splitlines()):
            if line.startswith("{"):
                self.final = json.loads(line)
                break
        return self.final

    def _close(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Members:
    """Starts and tracks member processes of one check (all stopped at the end)."""

    def __init__(self, broker: Broker, workdir: Path, group: str, topic: str, **defaults: Any) -> None:
        self.broker = broker
        self.workdir = workdir
        self.group = group
        self.topic = topic
        self.defaults = defaults
        self.all: list[Member] = []
        self._n = 0

    def start(self, name: str | None = None, *, wait: bool = True, **kwargs: Any) -> Member:
        self._n += 1
        name = name or f"m{self._n}"
        opts = {**self.defaults, **kwargs}
        out = self.workdir / f"{name}.{self._n}.out"
        stats = self.workdir / f"{name}.{self._n}.stats"
        cmd = [sys.executable, "-m", "integration.reliability.member", "--namesrv", self.broker.namesrv,
               "--group", self.group, "--topic", self.topic, "--out", str(out), "--stats", str(stats)]
        if opts.pop("orderly", False):
            cmd.append("--orderly")
        if opts.pop("fail", False):
            cmd.append("--fail")
        delay = opts.pop("delay_ms", 0.0)
        if delay:
            cmd += ["--delay-ms", str(delay)]
        for key, value in opts.items():
            cmd += ["--option", f"{key}={json.dumps(value)}"]
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
        member = Member(name, out, stats, proc)
        self.all.append(member)
        if wait:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith("started"):
                raise RuntimeError(f"member {name} did not start: {line!r}")
            member.client_id = line.split()[1]
        return member

    def deliveries(self) -> list[Delivery]:
        return [d for m in self.all for d in m.deliveries()]

    def stop_all(self) -> None:
        for m in self.all:
            if m.alive:
                m.stop()


# -- CPU load -----------------------------------------------------------------------------------------

_BURN = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\nwhile True:\n    pass\n"


@contextmanager
def cpu_load(processes: int) -> Iterator[int]:
    """``processes`` busy-looping processes for the duration of the block (stopped by PID)."""
    procs = [subprocess.Popen([sys.executable, "-c", _BURN]) for _ in range(max(0, processes))]
    try:
        yield len(procs)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


def load_average() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


class Stopwatch:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.t0


def run_threads(*targets: Any) -> None:
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
