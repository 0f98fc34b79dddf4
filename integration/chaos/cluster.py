"""The RocketMQ a chaos run works against, and the broker-level faults it can inject there.

- ``EmbeddedProcessCluster`` (quick mode, CI): ``rocketmq-airflow broker --brokers 2`` in a process
  of its own with a durable data directory, so a broker kill is a real kill -9 of that process
  (name server and both brokers die together, like a machine) and a restart reads the store back.
- ``ExistingCluster`` (full mode): any RocketMQ named by ``ROCKETMQ_NAMESRV``. It is killed and
  started only through ``ROCKETMQ_BROKER_KILL_CMD`` / ``ROCKETMQ_BROKER_START_CMD`` (as the
  integration suite does, see integration/backends.py); its network faults need
  ``ROCKETMQ_CHAOS_NETNS=<namespace>:<broker host:port>``, a broker inside a namespace made by
  ``python -m integration.chaos netns up`` (netns.py); ``ROCKETMQ_MQADMIN`` (a command) makes the
  offset resets go through the real ``mqadmin resetOffsetByTime``.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from airflow_provider_rocketmq.client import Admin, ClientConfig, MessageQueue

from ..backends import BrokerControl, broker_control, master_addrs, wait_until
from .netns import NetLink
from .procs import Injection, proc_state
from .schedule import Capabilities

MQ = tuple[str, int]


def cli() -> list[str]:
    """The ``rocketmq-airflow`` console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("rocketmq-airflow")
    return [str(script)] if script.exists() else [sys.executable, "-m", "airflow_provider_rocketmq.cli"]


def accepts(addr: str, timeout: float = 0.5) -> bool:
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


class Cluster:
    """What the flow needs from the cluster besides its name server address."""

    namesrv = ""
    kind = "abstract"
    netlink: NetLink | None = None

    def __init__(self) -> None:
        # one broker-level fault at a time: a kill must not be judged while the link is cut
        self.fault_lock = threading.Lock()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(broker_kill=self.can_kill, net_cut=self.netlink is not None)

    can_kill = False

    def admin(self) -> Admin:
        return Admin(ClientConfig(namesrv_addr=self.namesrv, instance_name=f"chaos-admin-{uuid.uuid4().hex[:6]}"))

    def masters(self) -> list[str]:
        return master_addrs(self.namesrv)

    def create_topic(self, topic: str, queues: int, timeout: float = 120.0) -> int:
        """Create or grow ``topic`` to ``queues`` queues per master; returns the queues in its route."""
        with self.admin() as admin:
            brokers = admin.create_topic(topic, queues)
            total = queues * len(brokers)
            wait_until(lambda: len(admin.high_water_marks(topic)) == total, timeout,
                       f"the route of {topic} to show {total} queues")
        return total

    def kill_brokers(self) -> Injection:
        raise NotImplementedError

    def start_brokers(self) -> dict[str, Any]:
        raise NotImplementedError

    def mqadmin(self) -> str | None:
        return None

    def stop(self) -> None:
        pass


class EmbeddedProcessCluster(Cluster):
    """The embedded name server + 2 brokers in a subprocess, kill -9'ed and restarted for real."""

    kind = "embedded"
    can_kill = True

    def __init__(self, workdir: Path, brokers: int = 2, queues: int = 8) -> None:
        super().__init__()
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.brokers = brokers
        self.queues = queues
        self.data_dir = workdir / "broker-store"
        self.ns_port, self.broker_port = _free_ports(1 + brokers)
        self.namesrv = f"127.0.0.1:{self.ns_port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        try:
            self.start_brokers()
        except BaseException:
            self.stop()  # a broker that never came up (or an interrupt) leaves no process behind
            raise

    def _addrs(self) -> list[str]:
        return [self.namesrv] + [f"127.0.0.1:{self.broker_port + i}" for i in range(self.brokers)]

    def start_brokers(self) -> dict[str, Any]:
        t0 = time.monotonic()
        self.starts += 1
        log = open(self.workdir / f"broker-{self.starts}.log", "wb")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [*cli(), "broker", "--port", str(self.ns_port), "--brokers", str(self.brokers), "--queues",
             str(self.queues), "--data-dir", str(self.data_dir), "--broker-port", str(self.broker_port),
             "--time-scale", "0.02"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        wait_until(lambda: all(accepts(a) for a in self._addrs()) or self.proc.poll() is not None, 120,
                   "the embedded brokers to listen")
        if self.proc.poll() is not None:
            raise RuntimeError(f"embedded broker exited {self.proc.returncode}: see {self.workdir}")
        return {"start_s": round(time.monotonic() - t0, 2)}

    def kill_brokers(self) -> Injection:
        proc = self.proc
        assert proc is not None
        state = proc_state(proc.pid)
        if proc.poll() is not None or state in (None, "Z", "T"):
            return Injection("broker-kill", False, f"broker process {proc.pid} not running (state {state})")
        listening = [a for a in self._addrs() if accepts(a)]
        os.kill(proc.pid, signal.SIGKILL)
        rc = proc.wait(30)
        t0 = time.monotonic()
        wait_until(lambda: not any(accepts(a) for a in self._addrs()), 30, "the killed brokers to stop listening")
        ok = rc == -signal.SIGKILL and len(listening) == len(self._addrs())
        return Injection("broker-kill", ok, f"kill -9 of the embedded broker process {proc.pid} (state {state}, "
                         f"{len(listening)} listening): exit {rc}",
                         data={"exit": rc, "killed": True, "closed_s": round(time.monotonic() - t0, 3)})

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class ExistingCluster(Cluster):
    """A RocketMQ someone else runs; faults only through the commands the environment gives."""

    kind = "existing"

    def __init__(self, env: Mapping[str, str]) -> None:
        super().__init__()
        self.namesrv = env["ROCKETMQ_NAMESRV"].strip()
        self.control: BrokerControl | None = broker_control(env, self.namesrv)
        self.can_kill = self.control is not None
        spec = env.get("ROCKETMQ_CHAOS_NETNS", "").strip()
        if spec:
            ns, _, addr = spec.partition(":")
            if not addr:
                raise ValueError("ROCKETMQ_CHAOS_NETNS: <namespace>:<broker host:port> (the broker inside it)")
            self.netlink = NetLink(ns, addr)
        self._mqadmin = env.get("ROCKETMQ_MQADMIN", "").strip() or None
        self._killed: list[str] = []

    def mqadmin(self) -> str | None:
        return self._mqadmin

    def kill_brokers(self) -> Injection:
        assert self.control is not None
        addrs = self.masters()
        listening = [a for a in addrs if accepts(a, 2.0)]
        if len(listening) != len(addrs):
            return Injection("broker-kill", False, f"not every master accepts connections before the kill: "
                             f"{sorted(set(addrs) - set(listening))}")
        t0 = time.monotonic()
        self._killed = self.control.kill()  # waits until none accepts connections
        closed = time.monotonic() - t0
        # kill -9 closes the sockets at once; a graceful shutdown takes seconds
        return Injection("broker-kill", closed < 10, f"ROCKETMQ_BROKER_KILL_CMD: {', '.join(addrs)} stopped "
                         f"accepting connections {closed:.2f} s later",
                         data={"killed": True, "closed_s": round(closed, 3)})

    def start_brokers(self) -> dict[str, Any]:
        assert self.control is not None
        t0 = time.monotonic()
        self.control.start(self._killed or self.masters())
        return {"start_s": round(time.monotonic() - t0, 2)}


def _free_ports(n: int) -> tuple[int, int]:
    """A free port for the name server and ``n - 1`` consecutive free ports for the brokers."""
    for _ in range(200):
        socks = []
        try:
            ns = socket.socket()
            socks.append(ns)  # closed below whether its bind succeeds or not
            ns.bind(("127.0.0.1", 0))
            base = ns.getsockname()[1] + 1
            for i in range(n - 1):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
            return ns.getsockname()[1], base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free consecutive ports")


def capabilities_from_env(env: Mapping[str, str]) -> Capabilities:
    """What the cluster the environment names would allow, without starting or reaching it."""
    if not env.get("ROCKETMQ_NAMESRV", "").strip():
        return Capabilities(broker_kill=True, net_cut=False)
    return Capabilities(broker_kill=bool(env.get("ROCKETMQ_BROKER_KILL_CMD", "").strip()),
                        net_cut=bool(env.get("ROCKETMQ_CHAOS_NETNS", "").strip()))


# -- offsets reset to an earlier time, as mqadmin resetOffsetByTime does it ---------------------------

def reset_offsets_by_time(cluster: Cluster, group: str, topic: str, timestamp_ms: int,
                          run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> dict[str, Any]:
    """Reset ``group``'s offsets on ``topic`` to ``timestamp_ms``, never forward (``-f false``).

    With ``ROCKETMQ_MQADMIN`` the real ``mqadmin resetOffsetByTime``; otherwise what it does:
    INVOKE_BROKER_TO_RESET_OFFSET (222) to every master, which tells the group's online members to
    reset. A broker refuses that when no member is online (206) or when a queue of the topic has no
    offset yet (a 4.9 broker's "consumer group not exist", e.g. queues a topic expansion just added);
    then each queue is set directly (search by time + UPDATE_CONSUMER_OFFSET): what mqadmin falls
    back to on 206 (its ResetOffsetByTimeOldCommand), done here for both refusals.
    """
    command = cluster.mqadmin()
    if command:
        argv = [*shlex.split(command), "resetOffsetByTime", "-n", cluster.namesrv, "-g", group, "-t", topic,
                "-s", str(timestamp_ms), "-f", "false"]
        p = run(argv, capture_output=True, text=True, timeout=120, check=False)
        text = (p.stdout + p.stderr).strip()
        out: dict[str, Any] = {"via": "mqadmin", "exit": p.returncode, "output": text[-400:]}
        refused = p.returncode != 0 or "Exception" in text
    else:
        codes = _invoke_reset(cluster.masters(), group, topic, timestamp_ms)
        out = {"via": "222", "codes": codes}
        refused = any(code != 0 for code, _ in codes.values())
    if refused:
        moved = {}
        with cluster.admin() as admin:
            for mq in admin.topic_queues(topic):
                current = admin.committed_offset(group, mq)
                target = admin.search_offset(mq, timestamp_ms)
                if 0 <= target < current:
                    admin.update_consumer_offset(group, mq, target)
                    moved[f"{mq.broker_name}:{mq.queue_id}"] = (current, target)
        out.update(via=out["via"] + "+update", moved=moved)
    return out


def _invoke_reset(addrs: list[str], group: str, topic: str, timestamp_ms: int) -> dict[str, tuple[int, str]]:
    # the client's admin API has no resetOffsetByTime: the request is sent as mqadmin sends it
    # (internal remoting modules, as integration/backends.py's master_addrs uses them)
    import asyncio

    from airflow_provider_rocketmq.client.connection import open_connection
    from airflow_provider_rocketmq.client.protocol.command import RemotingCommand

    async def one(addr: str) -> tuple[int, str]:
        conn = await open_connection(addr)
        try:
            cmd = RemotingCommand.request(222, {"topic": topic, "group": group, "timestamp": timestamp_ms,
                                                "isForce": "false"})
            resp = await conn.request(cmd, 10.0)
            return resp.code, resp.remark or ""
        finally:
            await conn.close()

    async def all_of() -> dict[str, tuple[int, str]]:
        results = await asyncio.gather(*(one(a) for a in addrs), return_exceptions=True)
        return {a: (r if isinstance(r, tuple) else (-1, repr(r))) for a, r in zip(addrs, results, strict=True)}

    return asyncio.run(all_of())


def committed_snapshot(cluster: Cluster, group: str, topic: str) -> dict[MQ, int]:
    with cluster.admin() as admin:
        return {(mq.broker_name, mq.queue_id): off for mq, off in admin.committed_offsets(group, topic).items()}


def high_water(cluster: Cluster, topic: str) -> dict[MQ, int]:
    with cluster.admin() as admin:
        return {(mq.broker_name, mq.queue_id): off for mq, off in admin.high_water_marks(topic).items()}


__all__ = ["Cluster", "EmbeddedProcessCluster", "ExistingCluster", "MessageQueue", "committed_snapshot",
           "high_water", "reset_offsets_by_time"]
