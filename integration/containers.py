"""Container configuration for the testcontainers backend of the integration suite.

Two containers of the official ``apache/rocketmq`` image on one Docker network:

* ``namesrv``: ``sh mqnamesrv``; network alias ``namesrv``; port 9876 mapped to the host.
* ``broker``: ``sh mqbroker -n namesrv:9876 -c /home/rocketmq/broker.conf``; the broker
  registers ``brokerIP1:listenPort`` with the name server and clients connect to exactly
  that address, so ``brokerIP1`` is the Docker host's address as seen from the test
  process and ``listenPort`` is bound to the *same* port number on the host (a random
  host port would make the advertised address unreachable). The VIP channel
  (listenPort - 2) and the HA port (listenPort + 1) are mapped the same way.

Everything here is plain data built without a Docker engine, so
``test_container_config.py`` can pin it everywhere; ``start_rocketmq()`` is the only
function that talks to Docker (imported lazily so the module loads without it).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)

DEFAULT_IMAGE_TAG = "4.9.7"
# Documented alternative: the 5.x broker still serves the 4.x remoting protocol on 10911.
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


def image_for(tag: str | None = None) -> str:
    """``apache/rocketmq:<tag>``; the tag comes from ``ROCKETMQ_IMAGE_TAG`` when not given."""
    tag = tag or os.environ.get("ROCKETMQ_IMAGE_TAG") or DEFAULT_IMAGE_TAG
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", tag):
        raise ValueError(f"ROCKETMQ_IMAGE_TAG: {tag!r} is not a valid Docker image tag")
    return f"{IMAGE_REPOSITORY}:{tag}"


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
        # keep the container small: a throw-away store
        "mapedFileSizeCommitLog": str(64 * 1024 * 1024),
        "diskMaxUsedSpaceRatio": "95",
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def rocketmq_specs(
    broker_ip: str = "127.0.0.1",
    tag: str | None = None,
    namesrv_host_port: int = NAMESRV_PORT,
    broker_listen_port: int = BROKER_LISTEN_PORT,
) -> tuple[ContainerSpec, ContainerSpec]:
    """Specs of the name-server and broker containers (not started)."""
    image = image_for(tag)
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
            sock.settimeout(timeout)
            sock.connect(url.path)
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


def free_port_pair_base(start: int = BROKER_LISTEN_PORT, host: str = "127.0.0.1") -> int:
    """A listen port p with p-2, p and p+1 all free locally (prefers the default 10911)."""
    candidates = [start] + list(range(20911, 21911, 5))
    for p in candidates:
        if all(_port_free(host, q) for q in (p - 2, p, p + 1)):
            return p
    raise RuntimeError("no free port triple for the broker container")


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


# -- Running the containers (needs Docker) -------------------------------------------


class RunningRocketMQ:
    """A started name server + broker pair; ``restart_broker()`` keeps the store."""

    def __init__(self, network: Any, namesrv: Any, broker: Any, broker_spec: ContainerSpec, addr: str):
        self.network = network
        self.namesrv = namesrv
        self.broker = broker
        self.broker_spec = broker_spec
        self.namesrv_addr = addr

    def _boot_count(self) -> int:
        out, err = self.broker.get_logs()
        text = out.decode(errors="replace") + err.decode(errors="replace")
        return len(re.findall(self.broker_spec.ready_log, text))

    def restart_broker(self) -> None:
        before = self._boot_count()
        self.broker.get_wrapped_container().restart(timeout=10)
        deadline = time.monotonic() + self.broker_spec.startup_timeout
        # nothing to await on a container's log stream: poll with a deadline
        while self._boot_count() <= before:
            if time.monotonic() > deadline:
                raise TimeoutError("broker container did not log 'boot success' after restart")
            time.sleep(0.5)

    def stop(self) -> None:
        # best effort: the Ryuk reaper removes whatever is left
        for c in (self.broker, self.namesrv):
            try:
                c.stop()
            except Exception as exc:
                log.warning("could not remove the %s container: %s", c.image, exc)
        try:
            self.network.remove()
        except Exception as exc:
            log.warning("could not remove the test network: %s", exc)


def build_container(spec: ContainerSpec, network: Any, docker_client_kw: dict[str, Any] | None = None) -> Any:
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
    return c.with_network(network).with_network_aliases(*spec.network_aliases).waiting_for(spec.wait_strategy())


def start_rocketmq(endpoint: str, tag: str | None = None) -> RunningRocketMQ:
    """Start the two containers and wait for their boot logs."""
    from testcontainers.core.network import Network

    ip = docker_host_ip(endpoint)
    listen = free_port_pair_base()
    namesrv_port = NAMESRV_PORT if _port_free("127.0.0.1", NAMESRV_PORT) else _ephemeral_port()
    ns_spec, br_spec = rocketmq_specs(ip, tag, namesrv_port, listen)
    network = Network().create()
    namesrv = build_container(ns_spec, network).start()
    try:
        broker = build_container(br_spec, network).start()
    except BaseException:
        namesrv.stop()
        network.remove()
        raise
    return RunningRocketMQ(network, namesrv, broker, br_spec, f"{ip}:{namesrv_port}")


def _ephemeral_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
