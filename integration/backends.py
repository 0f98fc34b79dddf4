"""Which RocketMQ the integration suite runs against, and the cluster object tests use.

Explicit settings choose; detection only fills in when there are none:

* ``ROCKETMQ_NAMESRV=host:port[;host:port]`` - an existing broker, used as is (restarted only
  when ``ROCKETMQ_BROKER_KILL_CMD`` and ``ROCKETMQ_BROKER_START_CMD`` say how, see ``BrokerControl``);
* ``ROCKETMQ_DOCKER=1`` - testcontainers starts ``${ROCKETMQ_IMAGE:-apache/rocketmq}:${ROCKETMQ_IMAGE_TAG:-4.9.7}``
  (see ``containers.py``); the session fails, naming the variable, when no Docker engine answers;
* ``ROCKETMQ_EMBEDDED=1`` - the project's in-process ``EmbeddedCluster``
  (``ROCKETMQ_EMBEDDED_FAULTS=offset-race,pull-commit-delay`` switches on a real broker's
  offset behaviour, see ``OffsetFaults`` in docs/embedded.md).

Two of them at once is a ``BackendConfigError`` naming both (the suite never guesses which broker a
user meant). With none of them: testcontainers when a Docker engine answers on ``DOCKER_HOST`` / the
default socket (``ROCKETMQ_DOCKER=0`` turns that probe off), otherwise every test that needs a broker
is skipped with the reason.

Whatever the backend, tests create their own uniquely named topics and groups
through the admin API, so a shared broker is left with nothing but ``IT_*`` names.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .containers import docker_endpoint, docker_engine_answers, image_for

NO_BACKEND_REASON = "no Docker engine (and none of ROCKETMQ_NAMESRV, ROCKETMQ_DOCKER=1, ROCKETMQ_EMBEDDED=1 set)"
DOCKER_OFF_REASON = "ROCKETMQ_DOCKER=0 and none of ROCKETMQ_NAMESRV, ROCKETMQ_EMBEDDED=1 set"
# The broker's first retry level (delay level 3) on a real broker.
REAL_FIRST_RETRY_DELAY_S = 10.0
# Embedded broker: every broker-side delay (retry levels, long-poll suspension) runs this much faster.
EMBEDDED_TIME_SCALE = 0.02

if TYPE_CHECKING:  # the client is imported lazily so the selection logic loads without it
    from airflow_provider_rocketmq.client import Admin, ClientConfig, MessageQueue, Producer

    from .containers import RunningRocketMQ

_NAMESRV_RE = re.compile(r"[A-Za-z0-9_.\-]+:\d{1,5}(;[A-Za-z0-9_.\-]+:\d{1,5})*")


class BackendConfigError(ValueError):
    """A backend-selecting environment variable has an unusable value."""


@dataclass(frozen=True)
class BrokerControl:
    """How the suite kills and restarts a broker it does not own (``ROCKETMQ_NAMESRV``).

    ``kill_cmd`` (``ROCKETMQ_BROKER_KILL_CMD``) must stop every master broker of the name server
    at once, as ``kill -9`` would; ``start_cmd`` (``ROCKETMQ_BROKER_START_CMD``) must start them
    again on the same ports and store. Both run through ``sh -c`` with the suite's environment;
    the start command may return before the broker listens (the suite waits for it).
    """

    namesrv: str
    kill_cmd: str
    start_cmd: str
    timeout: float = 300.0

    def kill(self) -> list[str]:
        """Run the kill command, wait until no master accepts connections; returns their addresses."""
        addrs = master_addrs(self.namesrv)
        _run_shell("ROCKETMQ_BROKER_KILL_CMD", self.kill_cmd, self.timeout)
        wait_until(lambda: not any(_accepts(a) for a in addrs), 60,
                   f"brokers {', '.join(addrs)} to stop accepting connections after ROCKETMQ_BROKER_KILL_CMD")
        return addrs

    def start(self, addrs: list[str]) -> float:
        """Run the start command; returns the wall-clock time at which every broker in ``addrs``
        accepted connections again, after waiting until the name server lists them again."""
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(["sh", "-c", self.start_cmd], stdout=out, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + self.timeout
            while not all(_accepts(a) for a in addrs):
                rc = proc.poll()
                if rc not in (None, 0) or time.monotonic() > deadline:
                    if rc is None:
                        proc.kill()
                        proc.wait()
                    out.seek(0)
                    tail = out.read().decode(errors="replace")[-800:]
                    what = f"exited {rc}" if rc is not None else f"did not bring back {', '.join(addrs)}"
                    raise AssertionError(f"ROCKETMQ_BROKER_START_CMD {what} within {self.timeout:.0f} s: {tail}")
                time.sleep(0.05)
            back = time.time()
            try:
                rc = proc.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            if rc != 0:
                out.seek(0)
                raise AssertionError(f"ROCKETMQ_BROKER_START_CMD exited {rc}: "
                                     f"{out.read().decode(errors='replace')[-800:]}")
        wait_until(lambda: set(addrs) <= set(master_addrs(self.namesrv)), 120,
                   f"the name server to list {', '.join(addrs)} again")
        return back

    def restart(self) -> float:
        return self.start(self.kill())


def _run_shell(variable: str, command: str, timeout: float) -> None:
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{variable} exited {proc.returncode}: {(proc.stdout + proc.stderr)[-800:]}")


def _accepts(addr: str) -> bool:
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def master_addrs(namesrv: str) -> list[str]:
    """Addresses of the master brokers the name server lists (GET_BROKER_CLUSTER_INFO)."""
    from airflow_provider_rocketmq.client.connection import open_connection
    from airflow_provider_rocketmq.client.protocol.codes import RequestCode
    from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
    from airflow_provider_rocketmq.client.route import ClusterInfo

    async def ask() -> list[str]:
        conn = await open_connection(namesrv.split(";")[0])
        try:
            resp = await conn.request(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 5.0)
        finally:
            await conn.close()
        return sorted(ClusterInfo.from_body(resp.body).master_addrs().values())

    return asyncio.run(ask())


def broker_control(env: Mapping[str, str], namesrv: str) -> BrokerControl | None:
    """``ROCKETMQ_BROKER_KILL_CMD`` + ``ROCKETMQ_BROKER_START_CMD`` (both or neither)."""
    kill = env.get("ROCKETMQ_BROKER_KILL_CMD", "").strip()
    start = env.get("ROCKETMQ_BROKER_START_CMD", "").strip()
    if bool(kill) != bool(start):
        missing = "ROCKETMQ_BROKER_START_CMD" if kill else "ROCKETMQ_BROKER_KILL_CMD"
        raise BackendConfigError(f"{missing}: must be set too (the suite needs both commands to kill and "
                                 f"restart the broker of ROCKETMQ_NAMESRV)")
    return BrokerControl(namesrv, kill, start) if kill else None


@dataclass(frozen=True)
class BackendChoice:
    kind: str  # "existing" | "testcontainers" | "embedded" | "skip"
    detail: str  # namesrv list, docker endpoint, or the skip reason
    faults: str = ""  # embedded only: the ROCKETMQ_EMBEDDED_FAULTS spec
    control: BrokerControl | None = None  # existing only: how to kill and restart its broker
    image: str = ""  # testcontainers only: the image both containers run
    how: str = ""  # what decided it: the explicit variable, or the detection

    def describe(self) -> str:
        """One line for pytest's header and summary."""
        if self.kind == "skip":
            return f"rocketmq integration backend: none ({self.detail})"
        if self.kind == "testcontainers":
            what = f"testcontainers {self.image} via {self.detail}"
        else:
            control = " (broker kill/start commands set)" if self.control is not None else ""
            what = f"{self.kind} {self.detail}{control}".rstrip()
        return f"rocketmq integration backend: {what} [{self.how}]"


def embedded_faults(env: Mapping[str, str]) -> str:
    """The validated ``ROCKETMQ_EMBEDDED_FAULTS`` spec ("" when unset)."""
    spec = env.get("ROCKETMQ_EMBEDDED_FAULTS", "").strip()
    if spec:
        from airflow_provider_rocketmq.client.protocol.errors import ConfigError
        from airflow_provider_rocketmq.embedded import parse_offset_faults

        try:
            parse_offset_faults(spec, "ROCKETMQ_EMBEDDED_FAULTS")
        except ConfigError as exc:
            raise BackendConfigError(str(exc)) from None
    return spec


def _flag(env: Mapping[str, str], name: str, meaning: str) -> str:
    value = env.get(name, "").strip()
    if value not in ("", "0", "1"):
        raise BackendConfigError(f"{name}: {value!r} must be {meaning} (or unset)")
    return value


def _container_image(env: Mapping[str, str]) -> str:
    try:
        return image_for(env)
    except ValueError as exc:
        raise BackendConfigError(str(exc)) from None


def choose_backend(env: Mapping[str, str], docker_answers: Callable[[str], bool]) -> BackendChoice:
    """Pick the backend from the environment; ``docker_answers(endpoint)`` probes Docker (only
    when nothing explicit decides, or to check an explicit ``ROCKETMQ_DOCKER=1``)."""
    namesrv = env.get("ROCKETMQ_NAMESRV", "").strip()
    docker = _flag(env, "ROCKETMQ_DOCKER", "1 (use testcontainers) or 0 (never probe Docker)")
    embedded = _flag(env, "ROCKETMQ_EMBEDDED", "1 (use the embedded broker) or 0")
    explicit = [name for name, on in (("ROCKETMQ_NAMESRV", bool(namesrv)), ("ROCKETMQ_DOCKER=1", docker == "1"),
                                      ("ROCKETMQ_EMBEDDED=1", embedded == "1")) if on]
    if len(explicit) > 1:
        names = f"{', '.join(explicit[:-1])} and {explicit[-1]} {'both' if len(explicit) == 2 else 'all'}"
        raise BackendConfigError(f"{names} choose the integration backend (an existing broker, testcontainers, "
                                 f"the embedded broker): set only one")
    if namesrv:
        if not _NAMESRV_RE.fullmatch(namesrv):
            raise BackendConfigError(
                f"ROCKETMQ_NAMESRV: {namesrv!r} is not host:port[;host:port] (e.g. 127.0.0.1:9876)"
            )
        return BackendChoice("existing", namesrv, control=broker_control(env, namesrv), how="ROCKETMQ_NAMESRV")
    endpoint = docker_endpoint(dict(env))
    if docker == "1":
        image = _container_image(env)
        if not docker_answers(endpoint):
            raise BackendConfigError(f"ROCKETMQ_DOCKER=1: no Docker engine answers GET /_ping at {endpoint} "
                                     f"(DOCKER_HOST)")
        return BackendChoice("testcontainers", endpoint, image=image, how="ROCKETMQ_DOCKER=1")
    if embedded == "1":
        faults = embedded_faults(env)
        return BackendChoice("embedded", f"faults={faults}" if faults else "", faults, how="ROCKETMQ_EMBEDDED=1")
    if docker == "0":
        return BackendChoice("skip", DOCKER_OFF_REASON)
    image = _container_image(env)
    if docker_answers(endpoint):
        return BackendChoice("testcontainers", endpoint, image=image, how="a Docker engine answered")
    return BackendChoice("skip", NO_BACKEND_REASON)


def choose_backend_from_environment() -> BackendChoice:
    return choose_backend(os.environ, docker_engine_answers)


_session_choice: BackendChoice | BackendConfigError | None = None


def session_backend() -> BackendChoice:
    """The choice for this process, made once (the report header, the fixtures and the
    reliability harness all see the same); raises the ``BackendConfigError`` every time."""
    global _session_choice
    if _session_choice is None:
        try:
            _session_choice = choose_backend_from_environment()
        except BackendConfigError as exc:
            _session_choice = exc
    if isinstance(_session_choice, BackendConfigError):
        raise _session_choice
    return _session_choice


class IntegrationCluster:
    """The running RocketMQ a test talks to.

    ``namesrv_addr``, a shared ``admin``, ``config()`` for clients, ``new_topic()`` /
    ``new_group()`` (unique names; topics are created and their routes awaited),
    ``restart_broker()`` when ``can_restart``, and ``first_retry_delay`` (seconds until
    a message sent back with the default delay level is redelivered).
    """

    kind = "abstract"
    can_restart = False
    first_retry_delay = REAL_FIRST_RETRY_DELAY_S

    def __init__(self, namesrv_addr: str) -> None:
        self.namesrv_addr = namesrv_addr
        self.run_id = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self._admin: Admin | None = None

    # -- clients -------------------------------------------------------------
    def config(self, **overrides: Any) -> ClientConfig:
        from airflow_provider_rocketmq.client import ClientConfig

        return ClientConfig(namesrv_addr=self.namesrv_addr, **overrides)

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            from airflow_provider_rocketmq.client import Admin

            self._admin = Admin(self.config(instance_name=f"it_admin_{self.run_id}"))
        return self._admin

    def producer(self, **overrides: Any) -> Producer:
        """A producer with a unique group (context manager; starts on first send); the caller closes it."""
        from airflow_provider_rocketmq.client import Producer

        overrides.setdefault("instance_name", f"it_prod_{uuid.uuid4().hex[:8]}")
        return Producer(self.config(**overrides), group=self.new_group("prod"))

    # -- names ---------------------------------------------------------------
    def unique_name(self, prefix: str) -> str:
        # [A-Za-z0-9_-], well under the broker's 127-character limit
        return f"IT_{prefix}_{self.run_id}_{uuid.uuid4().hex[:8]}"

    def new_group(self, prefix: str = "group") -> str:
        return self.unique_name(prefix)

    def new_topic(self, prefix: str = "topic", queues: int = 8, timeout: float = 30.0) -> str:
        """Create a uniquely named topic with ``queues`` queues on every master broker of the
        cluster, and wait until its route shows all of them."""
        topic = self.unique_name(prefix)
        brokers = self.admin.create_topic(topic, queues=queues)
        total = queues * max(1, len(brokers))
        wait_until(lambda: len(self.admin.high_water_marks(topic)) == total, timeout,
                   f"route of {topic} with {total} queues")
        return topic

    def queues(self, topic: str) -> list[MessageQueue]:
        return sorted(self.admin.high_water_marks(topic))

    # -- lifecycle -----------------------------------------------------------
    def restart_broker(self) -> None:
        raise NotImplementedError(f"the {self.kind} backend cannot restart its broker")

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


class ExistingCluster(IntegrationCluster):
    """A broker somebody else runs (``ROCKETMQ_NAMESRV``); never cleaned, restarted only through
    ``BrokerControl`` (kill -9, then start again)."""

    kind = "existing"

    def __init__(self, namesrv_addr: str, control: BrokerControl | None = None) -> None:
        super().__init__(namesrv_addr)
        self.control = control
        self.can_restart = control is not None

    def restart_broker(self) -> None:
        if self.control is None:
            super().restart_broker()
            return
        self.control.restart()


class ContainerBrokerControl:
    """Kill (SIGKILL, ``docker kill``) and start again the broker container of a testcontainers
    run; the same surface as ``BrokerControl``, so the reliability checks use either."""

    def __init__(self, running: RunningRocketMQ) -> None:
        self.running = running
        self.namesrv = running.namesrv_addr

    def kill(self) -> list[str]:
        self.running.kill_broker()
        return [self.running.broker_addr]

    def start(self, addrs: list[str]) -> float:
        """Start the container; returns the wall-clock time its broker logged 'boot success' (it
        listens from then on: the published port accepts earlier, through docker-proxy), after
        waiting until the name server lists it again."""
        back = self.running.start_broker()
        wait_until(lambda: set(addrs) <= set(master_addrs(self.namesrv)), 120,
                   f"the name server to list {', '.join(addrs)} again")
        return back

    def restart(self) -> float:
        return self.start(self.kill())


class ContainerCluster(IntegrationCluster):
    """Name server and broker containers this run started; removed (by label) on close."""

    kind = "testcontainers"
    can_restart = True

    def __init__(self, endpoint: str, image: str) -> None:
        from .containers import start_rocketmq

        self._running = start_rocketmq(endpoint, image)
        self.image = image
        self.notices = self._running.notices
        self.control = ContainerBrokerControl(self._running)
        super().__init__(self._running.namesrv_addr)

    def restart_broker(self) -> None:
        self._running.restart_broker()
        addr = self._running.broker_addr
        wait_until(lambda: addr in master_addrs(self.namesrv_addr), 120,
                   f"the name server to list {addr} again")

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._running.stop()


class EmbeddedBackend(IntegrationCluster):
    kind = "embedded"
    can_restart = True

    def __init__(self, faults: str = "") -> None:
        from airflow_provider_rocketmq.embedded import EmbeddedCluster, parse_offset_faults

        self._tmp = tempfile.TemporaryDirectory(prefix="rmq-it-")
        self._cluster = EmbeddedCluster(brokers=1, queues=8, data_dir=self._tmp.name,
                                        time_scale=EMBEDDED_TIME_SCALE)
        self.faults = parse_offset_faults(faults, "ROCKETMQ_EMBEDDED_FAULTS")
        self._cluster.set_offset_faults(self.faults)
        self._cluster.start()
        super().__init__(self._cluster.namesrv_addr)
        self.first_retry_delay = REAL_FIRST_RETRY_DELAY_S * EMBEDDED_TIME_SCALE

    def restart_broker(self) -> None:
        # bridged: runs on the cluster's own loop thread and blocks until done
        for broker in self._cluster.brokers:
            self._cluster.restart_broker(broker.name)

    def close(self) -> None:
        super().close()
        try:
            self._cluster.stop()
        finally:
            self._tmp.cleanup()


def start_cluster(choice: BackendChoice) -> IntegrationCluster:
    if choice.kind == "existing":
        return ExistingCluster(choice.detail, choice.control)
    if choice.kind == "testcontainers":
        return ContainerCluster(choice.detail, choice.image)
    if choice.kind == "embedded":
        return EmbeddedBackend(choice.faults)
    raise ValueError(f"no cluster for backend {choice.kind!r}")


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until truthy; raise ``AssertionError`` naming ``what`` on timeout.

    Only for states nothing can be awaited on (broker-side offsets, routes, assignments
    after a rebalance); consumption itself is awaited through ``Collector``.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:
            last_error = exc
        if time.monotonic() > deadline:
            suffix = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{suffix}")
        time.sleep(interval)
