"""Airflow connection fields -> client configuration keyword arguments.

The `rocketmq` connection type maps onto `ClientConfig`:

=================  ===========================================================
connection field   meaning
=================  ===========================================================
host               name server(s): ``host``, ``host:port`` or a ``;``/``,``
                   separated list of ``host:port``
port               default port for hosts given without one (9876 if unset)
login / password   ACL access key / secret key (both or neither)
extra.namesrv      name server list (alternative to host; wins when both set)
extra.namespace    resource namespace (``namespace%topic``)
extra.tls          use TLS (bool, or "true"/"false")
extra.request_timeout  per-request timeout in seconds (> 0)
extra.security_token   optional STS token sent with ACL signatures
extra.client_options   dict of further ClientConfig/ConsumerConfig knobs
=================  ===========================================================

Kept free of Airflow imports so it is tested without a metadata database and
so that the `window` CLI command could share it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from airflow_provider_rocketmq.client import ConfigError, parse_namesrv

DEFAULT_NAMESRV_PORT = 9876

# extras understood at top level; "extra__rocketmq__<name>" (the pre-3.x UI form) is accepted too
KNOWN_EXTRAS = ("namesrv", "namespace", "tls", "request_timeout", "security_token", "client_options")
_LEGACY_PREFIX = "extra__rocketmq__"
# knobs that have their own connection field and may not be smuggled in through client_options
_RESERVED_OPTIONS = frozenset({"namesrv_addr", "access_key", "secret_key", "security_token"})


def _parse_bool(field: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "0", "no", "off", ""):
        return False
    raise ConfigError(field, f"expected a boolean (true/false), got {value!r}")


def _parse_timeout(field: str, value: Any) -> float:
    try:
        timeout = float(value)
    except (TypeError, ValueError):
        raise ConfigError(field, f"expected a number of seconds, got {value!r}") from None
    if not timeout > 0 or timeout == float("inf"):
        raise ConfigError(field, f"must be a positive number of seconds, got {value!r}")
    return timeout


def _parse_port(field: str, value: Any) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ConfigError(field, f"expected a port number, got {value!r}") from None
    if not 0 < port < 65536:
        raise ConfigError(field, f"port out of range 1-65535: {port}")
    return port


def parse_namesrv_field(field: str, text: Any, default_port: int | None = None) -> str:
    """Normalise a name-server list to ``host:port;host:port``, adding ``default_port`` to bare hosts.

    Validation of each entry is the client's (`client.config.parse_namesrv`); only the
    Airflow-specific "port in its own field" convenience lives here.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(field, "no name server given (expected host:port[;host:port...])")
    port = default_port or DEFAULT_NAMESRV_PORT
    items = [item.strip() for item in text.replace(",", ";").split(";") if item.strip()]
    # a bare host has no ':' (or is a bracketed IPv6 literal without a port)
    with_ports = [f"{item}:{port}" if ":" not in item or item.endswith("]") else item for item in items]
    return ";".join(parse_namesrv(";".join(with_ports), field))


def _normalise_extras(extra: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in extra.items():
        name = key.removeprefix(_LEGACY_PREFIX)
        if name not in KNOWN_EXTRAS:
            raise ConfigError(
                f"extra.{key}", f"unknown connection option; expected one of {', '.join(KNOWN_EXTRAS)}"
            )
        # the UI stores empty optional fields as "" or None: treat them as unset
        if value is None or value == "":
            continue
        out[name] = value
    return out


def client_config_kwargs(
    *,
    host: str | None,
    port: int | None,
    login: str | None,
    password: str | None,
    extra: Mapping[str, Any] | None,
    allowed_options: frozenset[str] | None = None,
) -> dict[str, Any]:
    """Validate connection fields and return keyword arguments for ``ClientConfig``/``ConsumerConfig``.

    ``allowed_options`` are the config field names ``client_options`` may set (``None``: accept
    any, the config class validates). Raises ``ConfigError`` naming the offending field.
    """
    if extra is not None and not isinstance(extra, Mapping):
        raise ConfigError("extra", "must be a JSON object")
    extras = _normalise_extras(extra or {})
    # Airflow types Connection.port as int, but a form or a URI can leave an empty string
    default_port = _parse_port("port", port) if port is not None and str(port) != "" else None

    kwargs: dict[str, Any] = {}
    if "namesrv" in extras:
        kwargs["namesrv_addr"] = parse_namesrv_field("extra.namesrv", extras["namesrv"], default_port)
    else:
        kwargs["namesrv_addr"] = parse_namesrv_field("host", host, default_port)
    kwargs.update(_credentials(login, password, extras))
    if "namespace" in extras:
        namespace = extras["namespace"]
        if not isinstance(namespace, str) or "%" in namespace or any(c.isspace() for c in namespace):
            raise ConfigError("extra.namespace", f"invalid namespace {namespace!r}")
        kwargs["namespace"] = namespace
    if "tls" in extras:
        kwargs["use_tls"] = _parse_bool("extra.tls", extras["tls"])
    if "request_timeout" in extras:
        kwargs["request_timeout"] = _parse_timeout("extra.request_timeout", extras["request_timeout"])
    for name, value in _client_options(extras.get("client_options", {})).items():
        field = f"extra.client_options.{name}"
        if name in _RESERVED_OPTIONS:
            raise ConfigError(field, "set this through its own connection field")
        if allowed_options is not None and name not in allowed_options:
            raise ConfigError(field, "unknown client option")
        if name in kwargs:
            raise ConfigError(field, "already set by a connection field")
        kwargs[name] = value
    return kwargs


def _credentials(login: str | None, password: str | None, extras: Mapping[str, Any]) -> dict[str, Any]:
    """ACL access key, secret key and STS token: both keys or neither, a token only with them."""
    if bool(login) != bool(password):
        missing = "password (secret key)" if login else "login (access key)"
        raise ConfigError(missing, "ACL needs both access key (login) and secret key (password)")
    out: dict[str, Any] = {"access_key": login, "secret_key": password} if login else {}
    if "security_token" in extras:
        if not login:
            raise ConfigError("extra.security_token", "needs an access key (login) and secret key (password)")
        out["security_token"] = str(extras["security_token"])
    return out


def _client_options(options: Any) -> Mapping[str, Any]:
    """``extra.client_options``: a mapping, or its JSON text."""
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except ValueError as exc:
            raise ConfigError("extra.client_options", f"not valid JSON: {exc}") from None
    if not isinstance(options, Mapping):
        raise ConfigError("extra.client_options", "must be a JSON object of client settings")
    return options


def config_field_names(config_cls: type) -> frozenset[str]:
    """The init field names of a config dataclass (what ``client_options`` may set)."""
    return frozenset(f.name for f in dataclasses.fields(config_cls) if f.init)
