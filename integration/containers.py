"""Container configuration and lifecycle for the testcontainers backend of the integration suite.

Two containers of the RocketMQ image (``${ROCKETMQ_IMAGE:-apache/rocketmq}:${ROCKETMQ_IMAGE_TAG:-4.9.7}``)
on one Docker network:

* ``namesrv``: ``sh mqnamesrv``; network alias ``namesrv``; port 9876 published on a free host port.
* ``broker``: ``sh mqbroker -n namesrv:9876 -c /home/rocketmq/broker.conf``; the broker
  registers ``brokerIP1:listenPort`` with the name server and clients connect to exactly
  that address, so ``brokerIP1`` is the Docker host's address as seen from the test
  process and ``listenPort`` is bound to the *same* port number on the host (a random
  host port would make the advertised address unreachable). The VIP channel
  (listenPort - 2) and the HA port (listenPort + 1) are mapped the same way.

Every container and network carries the suite's labels (``SUITE_LABEL`` = a run id, plus the
owning process id and host name), and the run removes everything with its run id when it ends:
normally, after a failure, on SIGINT/SIGTERM (see conftest.py) and at interpreter exit. testcontainers'
reaper (Ryuk) is used when its image is in the local engine; without it, it is switched off with a
one-line notice (``ryuk_choice``) and containers left by a process that was killed outright
(SIGKILL) are removed by the next run on the same host (``ContainerOwner.sweep_stale``).

The specs are plain data built without a Docker engine, so ``test_container_config.py`` can
pin them everywhere; Docker is only contacted by ``start_rocketmq()``, ``ContainerOwner`` and
``RunningRocketMQ`` (the docker SDK is imported lazily, so the module loads without it).
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import re
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)

DEFAULT_IMAGE_TAG = "4.9.7"
# Documented alternative: the 5.x broker still serves the 4.x remoting protocol on its listen port.
DOCUMENTED_5X_TAG = "5.3.3"
IMAGE_REPOSITORY = "apache/rocketmq"

NAMESRV_PORT = 9876
BROKER_LISTEN_PORT = 10911
NAMESRV_ALIAS = "namesrv"
BROKER_ALIAS = "broker"
BROKER_CONF_PATH = "/home/rocketmq/broker.conf"

# Both lines are printed to stdout by NamesrvStartup / BrokerStartup in 4.9.x and 5.x.
NAMESRV_READY_LOG = r"The Name Server boot success"
BROKER_READY_LOG = r"The broker\[[^\]]*\] boot success"

STARTUP_TIMEOUT_S = 180.0

# Labels on everything the suite creates. The value of SUITE_LABEL is the run's id: a run removes
# exactly its own resources, so runs side by side on one engine leave each other alone.
SUITE_LABEL = "airflow-provider-rocketmq.integration"
PID_LABEL = "airflow-provider-rocketmq.pid"
HOST_LABEL = "airflow-provider-rocketmq.host"

# Docker's reference grammar: [registry[:port]/]path-component(/path-component)*, no tag, no digest.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY_RE = re.compile(rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def image_for(env: Mapping[str, str] | None = None, tag: str | None = None) -> str:
    """``<repository>:<tag>`` from ``ROCKETMQ_IMAGE`` (default ``apache/rocketmq``) and
    ``ROCKETMQ_IMAGE_TAG`` (default 4.9.7); ``tag`` overrides the latter. ``ValueError`` names
    the variable whose value is not a repository / tag."""
    env = os.environ if env is None else env
    repository = env.get("ROCKETMQ_IMAGE", "").strip() or IMAGE_REPOSITORY
    if not _REPOSITORY_RE.fullmatch(repository):
        hint = (" (a repository without a tag or digest: put the tag in ROCKETMQ_IMAGE_TAG)"
                if re.search(r"[@]|:[^/]*$", repository) else "")
        raise ValueError(f"ROCKETMQ_IMAGE: {repository!r} is not a Docker image repository{hint}, "
                         f"e.g. {IMAGE_REPOSITORY} or registry.example.com:5000/rocketmq")
    tag = tag or env.get("ROCKETMQ_IMAGE_TAG", "").strip() or DEFAULT_IMAGE_TAG
    if not _TAG_RE.fullmatch(tag):
        raise ValueError(f"ROCKETMQ_IMAGE_TAG: {tag!r} is not a valid Docker image tag")
    return f"{repository}:{tag}"


@dataclass(frozen=True)
class ContainerSpec:
    """Everything needed to create one container, independent of any Docker client."""

    role: str
    image: str
    command: list[str]
    env: dict[str, str]
    # container port -> host port
    ports: dict[int, int]
    network_aliases: tuple[str, ...]
    # absolute path in the container -> file content
    files: dict[str, str] = field(default_factory=dict)
    ready_log: str = ""
    startup_timeout: float = STARTUP_TIMEOUT_S

    def wait_strategy(self) -> Any:
        """A testcontainers log wait strategy for ``ready_log`` (needs no Docker engine)."""
        from testcontainers.core.wait_strategies import LogMessageWaitStrategy

        return LogMessageWaitStrategy(re.compile(self.ready_log, re.MULTILINE)).with_startup_timeout(
            int(self.startup_timeout)
        )


def broker_conf(
    broker_ip: str,
    listen_port: int = BROKER_LISTEN_PORT,
    broker_name: str = "broker-a",
    cluster_name: str = "DefaultCluster",
) -> str:
    """The broker.conf copied into the broker container."""
    lines = {
        "brokerClusterName": cluster_name,
        "brokerName": broker_name,
        "brokerId": "0",
        # the address the name server hands out to clients: must be reachable from the host
        "brokerIP1": broker_ip,
        "listenPort": str(listen_port),
        "namesrvAddr": f"{NAMESRV_ALIAS}:{NAMESRV_PORT}",
        "brokerRole": "ASYNC_MASTER",
        "flushDiskType": "ASYNC_FLUSH",
        "deleteWhen": "04",
        "fileReservedTime": "48",
        # the suite creates its topics explicitly, but retry/DLQ topics and groups are
        # created by the broker on demand exactly as in production defaults
        "autoCreateTopicEnable": "true",
        "autoCreateSubscriptionGroup": "true",
        # keep the container small: a throw-away store (the property 4.9 and 5.x read; 4.x before 4.4
        # spelt it mapedFileSizeCommitLog)
        "mappedFileSizeCommitLog": str(64 * 1024 * 1024),
        "diskMaxUsedSpaceRatio": "95",
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def rocketmq_specs(
    broker_ip: str = "127.0.0.1",
    tag: str | None = None,
    namesrv_host_port: int = NAMESRV_PORT,
    broker_listen_port: int = BROKER_LISTEN_PORT,
    image: str | None = None,
) -> tuple[ContainerSpec, ContainerSpec]:
    """Specs of the name-server and broker containers (not started); ``image`` defaults to
    ``image_for()`` (the environment's repository and tag, ``tag`` overriding the latter)."""
    image = image or image_for(tag=tag)
    namesrv = ContainerSpec(
        role="namesrv",
        image=image,
        command=["sh", "mqnamesrv"],
        env={"JAVA_OPT_EXT": "-Xms256m -Xmx256m -Xmn128m"},
        ports={NAMESRV_PORT: namesrv_host_port},
        network_aliases=(NAMESRV_ALIAS,),
        ready_log=NAMESRV_READY_LOG,
    )
    p = broker_listen_port
    broker = ContainerSpec(
        role="broker",
        image=image,
        command=["sh", "mqbroker", "-n", f"{NAMESRV_ALIAS}:{NAMESRV_PORT}", "-c", BROKER_CONF_PATH],
        env={
            "JAVA_OPT_EXT": "-Xms512m -Xmx512m -Xmn256m",
            "NAMESRV_ADDR": f"{NAMESRV_ALIAS}:{NAMESRV_PORT}",
        },
        # same port number inside and outside: the advertised brokerIP1:listenPort must work
        ports={p: p, p - 2: p - 2, p + 1: p + 1},
        network_aliases=(BROKER_ALIAS,),
        files={BROKER_CONF_PATH: broker_conf(broker_ip, p)},
        ready_log=BROKER_READY_LOG,
    )
    return namesrv, broker


# -- Docker engine probe ---------------------------------------------------------------


def docker_endpoint(env: dict[str, str] | None = None) -> str:
    """The Docker endpoint testcontainers would use (``DOCKER_HOST`` or the default socket)."""
    env = dict(os.environ) if env is None else env
    return env.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def docker_engine_answers(endpoint: str, timeout: float = 1.5) -> bool:
    """True when a Docker engine answers ``GET /_ping`` at ``endpoint`` within ``timeout``.

    A raw socket keeps the probe fast and free of the docker SDK's own retries.
    """
    url = urlparse(endpoint)
    try:
        if url.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(url.path)
            except OSError:
                sock.close()
                raise
        elif url.scheme in ("tcp", "http"):
            sock = socket.create_connection((url.hostname or "127.0.0.1", url.port or 2375), timeout=timeout)
        else:
            # ssh:// or npipe:// cannot be probed cheaply; let testcontainers try
            return True
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = sock.recv(256)
        status_line = reply.split(b"\r\n", 1)[0].split()
        return len(status_line) >= 2 and status_line[0].startswith(b"HTTP/") and status_line[1] == b"200"
    except OSError:
        return False


def docker_host_ip(endpoint: str) -> str:
    """The address under which containers' published ports are reachable from here."""
    override = os.environ.get("ROCKETMQ_BROKER_IP") or os.environ.get("TESTCONTAINERS_HOST_OVERRIDE")
    if override:
        return override
    url = urlparse(endpoint)
    if url.scheme in ("tcp", "http") and url.hostname:
        return socket.gethostbyname(url.hostname)
    return "127.0.0.1"


def free_listen_port(host: str = "127.0.0.1", rng: random.Random | None = None) -> int:
    """A broker listen port p with p-2, p and p+1 all free here, from 20000-29999 (below Linux's
    ephemeral range), starting at a random place so that runs side by side rarely pick the same."""
    candidates = list(range(20011, 29999, 4))
    start = (rng or random.Random()).randrange(len(candidates))
    for p in candidates[start:] + candidates[:start]:
        if all(_port_free(host, q) for q in (p - 2, p, p + 1)):
            return p
    raise RuntimeError("no free port triple (p-2, p, p+1) in 20009-30000 for the broker container")


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _ephemeral_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- Ryuk --------------------------------------------------------------------------------------------

_ENABLE_FLAGS = ("yes", "true", "t", "y", "1")  # how testcontainers reads its boolean settings


@dataclass(frozen=True)
class RyukChoice:
    enabled: bool
    notice: str = ""  # one line for the user when the suite switched Ryuk off itself


def ryuk_choice(env: Mapping[str, str], properties: Mapping[str, str], image: str,
                image_present: Callable[[str], bool]) -> RyukChoice:
    """Whether testcontainers' reaper runs.

    An explicit ``TESTCONTAINERS_RYUK_DISABLED`` (or ``ryuk.disabled`` in ~/.testcontainers.properties)
    is followed as testcontainers follows it (``false`` lets it pull the image). Otherwise Ryuk runs
    when ``image`` is in the local engine, and is switched off with a notice when it is not: the suite
    never pulls it (a machine without a registry would wait for the pull to fail on every run).
    """
    explicit = env.get("TESTCONTAINERS_RYUK_DISABLED")
    if explicit is None:
        explicit = properties.get("ryuk.disabled")
    if explicit is not None:
        return RyukChoice(enabled=explicit.strip().lower() not in _ENABLE_FLAGS)
    if image_present(image):
        return RyukChoice(enabled=True)
    return RyukChoice(False, f"testcontainers: Ryuk off ({image} is not in the local Docker engine and the suite "
                             f"never pulls it); the suite removes its own containers and networks at the end, also "
                             f"after a failure or SIGINT/SIGTERM (docker pull {image} to have Ryuk)")


def apply_ryuk_choice(docker_client: Any) -> RyukChoice:
    """Decide with the live engine and tell testcontainers (its process-wide configuration)."""
    from docker.errors import ImageNotFound
    from testcontainers.core.config import testcontainers_config as tc

    image = tc.hub_image_name_prefix + tc.ryuk_image  # the name testcontainers would start

    def present(name: str) -> bool:
        try:
            docker_client.images.get(name)
        except ImageNotFound:
            return False
        return True

    choice = ryuk_choice(os.environ, tc.tc_properties, image, present)
    if not choice.enabled:
        tc.ryuk_disabled = True
    return choice


# -- What the run owns on the engine ---------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def docker_client_for(endpoint: str) -> Any:
    """A docker SDK client for ``endpoint`` (what ``docker_endpoint()`` answered)."""
    import docker

    return docker.DockerClient(base_url=endpoint, use_ssh_client=endpoint.startswith("ssh://"))


class ContainerOwner:
    """The labels of one run, and removal of everything on the engine that carries them.

    ``remove_all()`` runs when the run ends (``RunningRocketMQ.stop()``), when starting fails, and
    at interpreter exit (registered on creation: covers an interrupted run that unwound without
    reaching the fixture's teardown). It is idempotent.
    """

    def __init__(self, client: Any, run_id: str | None = None) -> None:
        import uuid

        self.client = client
        self.run_id = run_id or uuid.uuid4().hex
        self.labels = {SUITE_LABEL: self.run_id, PID_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname()}
        atexit.register(self.remove_all)

    def remove_all(self) -> tuple[int, int]:
        """Remove this run's containers (forced, with their anonymous volumes) and networks;
        returns how many of each were removed."""
        return _remove_labelled(self.client, [f"{SUITE_LABEL}={self.run_id}"])

    def close(self) -> tuple[int, int]:
        removed = self.remove_all()
        atexit.unregister(self.remove_all)  # only once removed: an interrupted removal is finished at exit
        return removed

    def sweep_stale(self) -> str:
        """Remove what earlier runs on this host left behind because their process was killed
        outright (their pid is gone); returns a one-line notice, or "" when there was nothing."""
        host = socket.gethostname()
        dead: set[str] = set()
        for kind in (self.client.containers.list(all=True, filters={"label": [SUITE_LABEL, f"{HOST_LABEL}={host}"]}),
                     self.client.networks.list(filters={"label": [SUITE_LABEL, f"{HOST_LABEL}={host}"]})):
            for obj in kind:
                labels = obj.attrs.get("Labels") or obj.attrs.get("Config", {}).get("Labels") or {}
                pid = labels.get(PID_LABEL, "")
                if pid.isdigit() and not _pid_alive(int(pid)) and labels.get(SUITE_LABEL):
                    dead.add(labels[SUITE_LABEL])
        containers = networks = 0
        for run_id in sorted(dead):
            c, n = _remove_labelled(self.client, [f"{SUITE_LABEL}={run_id}"])
            containers, networks = containers + c, networks + n
        if not dead:
            return ""
        return (f"testcontainers: removed {containers} container(s) and {networks} network(s) left by "
                f"{len(dead)} earlier run(s) on this host whose process is gone")


def _remove_labelled(client: Any, label_filter: list[str]) -> tuple[int, int]:
    from docker.errors import NotFound

    containers = networks = 0
    for c in client.containers.list(all=True, filters={"label": label_filter}):
        try:
            c.remove(force=True, v=True)
            containers += 1
        except NotFound:
            pass
    for n in client.networks.list(filters={"label": label_filter}):
        try:
            n.remove()
            networks += 1
        except NotFound:
            pass
    return containers, networks


# -- Running the containers (needs Docker) -------------------------------------------


class RunningRocketMQ:
    """A started name server + broker pair. The broker can be restarted (``docker restart``) or
    killed (SIGKILL) and started again; the container keeps its store either way."""

    def __init__(self, owner: ContainerOwner, network: Any, namesrv: Any, broker: Any, broker_spec: ContainerSpec,
                 addr: str, broker_addr: str, image: str, notices: list[str]):
        self.owner = owner
        self.network = network
        self.namesrv = namesrv
        self.broker = broker
        self.broker_spec = broker_spec
        self.namesrv_addr = addr
        self.broker_addr = broker_addr
        self.image = image
        self.notices = notices

    def _boot_count(self) -> int:
        out, err = self.broker.get_logs()
        text = out.decode(errors="replace") + err.decode(errors="replace")
        return len(re.findall(self.broker_spec.ready_log, text))

    def _await_boot(self, before: int, what: str) -> float:
        deadline = time.monotonic() + self.broker_spec.startup_timeout
        # nothing to await on a container's log stream but the stream itself: poll with a deadline
        while self._boot_count() <= before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker container did not log 'boot success' after {what} within "
                                   f"{self.broker_spec.startup_timeout:.0f} s")
            time.sleep(0.1)
        return time.time()

    def restart_broker(self) -> float:
        """``docker restart`` (SIGTERM, SIGKILL after 10 s); returns when the broker booted again."""
        before = self._boot_count()
        self.broker.get_wrapped_container().restart(timeout=10)
        return self._await_boot(before, "docker restart")

    def kill_broker(self) -> None:
        """SIGKILL the broker's JVM (``docker kill``) and wait until the container has stopped."""
        container = self.broker.get_wrapped_container()
        container.kill()
        deadline = time.monotonic() + 60
        while True:
            container.reload()
            if container.status != "running":
                return
            if time.monotonic() > deadline:
                raise TimeoutError("broker container still running 60 s after docker kill")
            time.sleep(0.1)

    def start_broker(self) -> float:
        """Start the killed broker container again; returns the wall-clock time it booted."""
        before = self._boot_count()
        self.broker.get_wrapped_container().start()
        return self._await_boot(before, "docker start")

    def stop(self) -> None:
        try:
            self.owner.close()
        finally:
            for c in (self.namesrv, self.broker):  # their docker SDK connections
                c.get_docker_client().client.close()
            self.owner.client.close()


def build_container(spec: ContainerSpec, network: Any, docker_client_kw: dict[str, Any] | None = None,
                    labels: Mapping[str, str] | None = None) -> Any:
    """A testcontainers ``DockerContainer`` for ``spec`` (created, not started).

    With an explicit API ``version`` in ``docker_client_kw`` nothing contacts Docker,
    which is how the configuration test builds it without an engine.
    """
    from testcontainers.core.container import DockerContainer

    c = DockerContainer(spec.image, docker_client_kw=docker_client_kw).with_command(spec.command).with_envs(**spec.env)
    for cport, hport in spec.ports.items():
        c = c.with_bind_ports(cport, hport)
    for path, content in spec.files.items():
        c = c.with_copy_into_container(content.encode(), path)
    if labels:
        c = c.with_kwargs(labels=dict(labels))
    return c.with_network(network).with_network_aliases(*spec.network_aliases).waiting_for(spec.wait_strategy())


def start_rocketmq(endpoint: str, image: str | None = None) -> RunningRocketMQ:
    """Start the two containers, labelled, and wait for their boot logs; on any failure (an
    interrupt included) remove what was created before re-raising."""
    from testcontainers.core.network import Network

    image = image or image_for()
    owner = ContainerOwner(docker_client_for(endpoint))
    notices = [n for n in (owner.sweep_stale(), apply_ryuk_choice(owner.client).notice) if n]
    ip = docker_host_ip(endpoint)
    try:
        listen = free_listen_port()
        ns_spec, br_spec = rocketmq_specs(ip, namesrv_host_port=_ephemeral_port(), broker_listen_port=listen,
                                          image=image)
        network = Network(docker_network_kw={"labels": dict(owner.labels)}).create()
        namesrv = build_container(ns_spec, network, labels=owner.labels).start()
        broker = build_container(br_spec, network, labels=owner.labels).start()
    except BaseException:
        owner.close()
        raise
    return RunningRocketMQ(owner, network, namesrv, broker, br_spec, f"{ip}:{ns_spec.ports[NAMESRV_PORT]}",
                           f"{ip}:{listen}", image, notices)
