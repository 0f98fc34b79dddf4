"""Client-wide configuration shared by producers, admins and consumers.

Mirrors the knobs of Java's ``ClientConfig`` that matter on the wire (REFERENCE
1.2): name-server list, client id parts, namespace, ACL credentials, TLS and the
default RPC timeout. `validate()` turns bad values into `ConfigError` naming the
field, so a typo in an Airflow connection surfaces as one clear line.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .protocol.errors import ConfigError
from .protocol.names import DLQ_PREFIX, NAMESPACE_SEPARATOR, RETRY_PREFIX, SYSTEM_TOPICS, strip_namespace

DEFAULT_NAMESRV = "127.0.0.1:9876"
_SECRET_FIELDS = frozenset({"secret_key", "security_token"})
_ADDR_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+):(\d{1,5})$")
_NAME_RE = re.compile(r"^[%|a-zA-Z0-9_\-.#@:]+$")


def detect_client_ip() -> str:
    """The machine's outward-facing IPv4 address (like Java's RemotingUtil.getLocalAddress).

    A UDP ``connect`` sends no packet; it only asks the kernel which source
    address it would use, which works without any network being reachable.
    """
    for probe in ("192.0.2.1", "10.255.255.255"):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((probe, 9))
                ip = str(s.getsockname()[0])
                if ip and not ip.startswith("0."):
                    return ip
        except OSError:
            continue
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def parse_namesrv(addr: str, field_name: str = "namesrv_addr") -> list[str]:
    """Split ``host:port;host:port`` into a list, validating every entry."""
    if not isinstance(addr, str) or not addr.strip():
        raise ConfigError(field_name, "must name at least one host:port")
    out: list[str] = []
    for part in addr.replace(",", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        m = _ADDR_RE.match(part)
        if m is None or not 0 < int(m.group(2)) < 65536:
            raise ConfigError(field_name, f"{part!r} is not host:port")
        out.append(part)
    if not out:
        raise ConfigError(field_name, "must name at least one host:port")
    return out


@dataclass
class ClientConfig:
    """Connection settings of one client (namesrv list, identity, ACL, namespace, TLS)."""

    namesrv_addr: str = DEFAULT_NAMESRV
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    security_token: str | None = field(default=None, repr=False)
    namespace: str = ""
    use_tls: bool = False
    request_timeout: float = 3.0
    instance_name: str = "DEFAULT"
    unit_name: str = ""
    client_ip: str = field(default_factory=detect_client_ip)

    def validate(self) -> ClientConfig:
        """Raise `ConfigError` naming the first bad field; returns self for chaining."""
        parse_namesrv(self.namesrv_addr)
        if (self.access_key is None) != (self.secret_key is None) or self.access_key == "" \
                or self.secret_key == "":
            raise ConfigError("access_key" if not self.access_key else "secret_key",
                              "ACL needs both access_key and secret_key (non-empty)")
        if self.security_token is not None and not self.access_key:
            raise ConfigError("security_token", "needs access_key and secret_key")
        if not isinstance(self.use_tls, bool):
            raise ConfigError("use_tls", f"must be a boolean, got {self.use_tls!r}")
        if isinstance(self.request_timeout, bool) or not isinstance(self.request_timeout, (int, float)) \
                or not 0 < self.request_timeout <= 600:
            raise ConfigError("request_timeout", f"must be a number of seconds in (0, 600], "
                                                 f"got {self.request_timeout!r}")
        for name in ("instance_name", "namespace", "unit_name"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise ConfigError(name, f"must be a string, got {value!r}")
            if value and not _NAME_RE.match(value):
                raise ConfigError(name, f"{value!r} contains characters RocketMQ does not allow")
        if not self.instance_name:
            raise ConfigError("instance_name", "must not be empty")
        if NAMESPACE_SEPARATOR in self.namespace:
            raise ConfigError("namespace", f"must not contain {NAMESPACE_SEPARATOR!r}")
        if not isinstance(self.client_ip, str) or not self.client_ip:
            raise ConfigError("client_ip", "must be a non-empty string")
        return self

    # -- identity ----------------------------------------------------------
    def client_id(self) -> str:
        """``ip@instance[@unit]`` like Java's buildMQClientId."""
        cid = f"{self.client_ip}@{self.instance_name}"
        return f"{cid}@{self.unit_name}" if self.unit_name else cid

    def namesrv_list(self) -> list[str]:
        return parse_namesrv(self.namesrv_addr)

    @property
    def acl_enabled(self) -> bool:
        return bool(self.access_key and self.secret_key)

    # -- namespace ---------------------------------------------------------
    def with_namespace(self, resource: str) -> str:
        """``ns%resource`` (retry/DLQ topics keep their prefix in front); idempotent."""
        ns = self.namespace
        if not ns or not resource or resource in SYSTEM_TOPICS:
            return resource
        for prefix in (RETRY_PREFIX, DLQ_PREFIX):
            if resource.startswith(prefix):
                inner = resource[len(prefix):]
                return prefix + self.with_namespace(inner)
        if resource.startswith(ns + NAMESPACE_SEPARATOR):
            return resource
        return f"{ns}{NAMESPACE_SEPARATOR}{resource}"

    def without_namespace(self, resource: str) -> str:
        """Inverse of `with_namespace` (what users see in results)."""
        return strip_namespace(self.namespace, resource)

    def copy(self, **changes: object) -> ClientConfig:
        """A copy with some fields replaced (dataclasses.replace, kept for subclasses)."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        values.update(changes)
        return type(self)(**values)

    def __repr__(self) -> str:  # secrets never printed, even by subclasses' dataclass repr
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                          if f.name not in _SECRET_FIELDS)
        return f"{type(self).__name__}({shown})"


ENV_ACCESS_KEY = "ROCKETMQ_ACCESS_KEY"
ENV_SECRET_KEY = "ROCKETMQ_SECRET_KEY"
ENV_SECURITY_TOKEN = "ROCKETMQ_SECURITY_TOKEN"
ENV_NAMESPACE = "ROCKETMQ_NAMESPACE"


def env_client_options(namesrv: str | None = None,
                       environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The connection settings every command-line tool takes from its environment.

    ``namesrv`` (a ``--namesrv`` value) else ``$NAMESRV_ADDR`` else 127.0.0.1:9876; ACL credentials from
    ``ROCKETMQ_ACCESS_KEY`` / ``ROCKETMQ_SECRET_KEY`` (both or neither) and the optional
    ``ROCKETMQ_SECURITY_TOKEN``; the namespace from ``ROCKETMQ_NAMESPACE``. Empty variables count as
    unset. Credentials never come from the command line (``ps`` would show them) and errors name the
    variable, never its value. Returns `ClientConfig` / `ConsumerConfig` keyword arguments.
    """
    env = os.environ if environ is None else environ
    access_key = env.get(ENV_ACCESS_KEY) or None
    secret_key = env.get(ENV_SECRET_KEY) or None
    token = env.get(ENV_SECURITY_TOKEN) or None
    if bool(access_key) != bool(secret_key):
        missing, given = (ENV_SECRET_KEY, ENV_ACCESS_KEY) if access_key else (ENV_ACCESS_KEY, ENV_SECRET_KEY)
        raise ConfigError(missing, f"is not set but {given} is; ACL needs both (or neither)")
    if token and not access_key:
        raise ConfigError(ENV_SECURITY_TOKEN, f"needs {ENV_ACCESS_KEY} and {ENV_SECRET_KEY}")
    return {"namesrv_addr": namesrv or env.get("NAMESRV_ADDR") or DEFAULT_NAMESRV,
            "access_key": access_key, "secret_key": secret_key, "security_token": token,
            "namespace": env.get(ENV_NAMESPACE, "")}
