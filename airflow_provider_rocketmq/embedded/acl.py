"""Plain ACL for the embedded broker: 4.9's ``plain_acl.yml`` accounts, checked as a 4.9.7 broker with
``aclEnable=true`` does before it processes any request (docs/embedded.md has the rules and remarks).

* configuration: `AclConfig` / `AclAccount` (plain_acl.yml), `AddressRule` (white-listed addresses);
* the verifier: `AclValidator` (PlainAccessValidator + PlainPermissionManager) - one ACL mode; the broker
  holds any mode as a `ports.RequestVerifier`, and `signature_matches` is the mode-independent signature check;
* `needed_resources`: which topics and groups a request code needs (PlainAccessValidator.parse).

A refusal is the AclException the real broker's RPC hook throws: SYSTEM_ERROR (1) with ``<exception>:
<message>, <top stack frame>``, the frame without a line number (clients match on the message).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..client.protocol import fastjson
from ..client.protocol.acl import ACCESS_KEY, SIGNATURE, sign
from ..client.protocol.codes import RequestCode, ResponseCode
from ..client.protocol.command import RemotingCommand
from ..client.protocol.errors import ConfigError, ProtocolError
from ..client.protocol.message import java_string_hash
from ..client.protocol.names import RETRY_PREFIX
from .headers import HeaderError, opt_int, req_str

# Permission bits (acl/common/Permission.java)
DENY, ANY, PUB, SUB = 1, 2, 4, 8

# Permission.ADMIN_CODE: UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG, DELETE_TOPIC_IN_BROKER,
# UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP
ADMIN_CODES = frozenset({17, 25, 215, 200, 207})

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG, left out of the signed content
MIN_KEY_LENGTH = 6  # AclConstants: access and secret keys must be longer than this
ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
_VALIDATE = "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java)"
_CHECK_PERM = "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java)"
_PARSE = "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java)"

_PERMS = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}


def parse_perm(text: str | None) -> int:
    """Permission.parsePermFromString: PUB, SUB, PUB|SUB, SUB|PUB; anything else (or nothing) is DENY."""
    return _PERMS.get((text or "").strip(), DENY)


def check_permission(needed: int, owned: int) -> bool:
    """Permission.checkPermission."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def _group_resource(group: str | None) -> str | None:
    return None if group is None else RETRY_PREFIX + group


def describe_resource(resource: str) -> str:
    """PlainAccessResource.printStr: ``group:G`` for a retry topic, ``topic:T`` otherwise."""
    if resource.startswith(RETRY_PREFIX):
        return f"group:{resource[len(RETRY_PREFIX):]}"
    return f"topic:{resource}"


# -- remote address rules (RemoteAddressStrategyFactory) --------------------------------------------

class AddressRule:
    """Which client addresses a ``whiteRemoteAddress`` / ``globalWhiteRemoteAddresses`` entry admits."""

    def __init__(self, text: str | None, where: str) -> None:
        self.text = (text or "").strip()
        self._always = self.text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*")
        self._addresses: frozenset[str] = frozenset()
        self._range: tuple[tuple[int, ...], int, int, int] | None = None
        t = self.text
        if not t or self._always:
            return  # blank: admits nobody (BlankRemoteAddressStrategy); "*": everybody
        if t.endswith("}"):  # 192.168.0.{1,2}
            head, _, tail = t.rpartition(".")
            if not tail.startswith("{"):
                raise ConfigError(where, f"{t!r}: only the last part of an address may be a {{a,b}} list")
            self._addresses = frozenset(_address(f"{head}.{p.strip()}", where) for p in tail[1:-1].split(","))
        elif "," in t:
            self._addresses = frozenset(_address(p, where) for p in t.split(",") if p.strip())
        elif "*" in t or "-" in t:
            self._range = _parse_range(t, where)
        else:
            self._addresses = frozenset({_address(t, where)})

    def match(self, ip: str) -> bool:
        if self._always:
            return True
        if self._range is not None:
            head, index, start, end = self._range
            try:
                parts = tuple(int(p) for p in ip.split("."))
            except ValueError:
                return False
            return len(parts) == 4 and parts[:index] == head and start <= parts[index] <= end
        if not self._addresses:
            return False
        try:
            return str(ipaddress.ip_address(ip)) in self._addresses
        except ValueError:
            return False


def _address(text: str, where: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise ConfigError(where, f"{text.strip()!r} is not an IP address") from None


def _parse_range(text: str, where: str) -> tuple[tuple[int, ...], int, int, int]:
    """``192.168.*`` / ``192.168.1.10-20``: the first ``*`` or ``a-b`` part, then only ``*`` parts."""
    parts = [p.strip() for p in text.split(".")]
    if 2 <= len(parts) < 4 and parts[-1] == "*":  # 192.168.*: the missing parts are wildcards too
        parts += ["*"] * (4 - len(parts))
    if len(parts) != 4:
        raise ConfigError(where, f"{text!r} is not an IPv4 pattern (a.b.c.d with * or a-b parts)")
    for index in (1, 2, 3):
        value = parts[index]
        if value == "*":
            start, end = 0, 255
        elif "-" in value:
            low, _, high = value.partition("-")
            if not (low.isdigit() and high.isdigit()) or not int(low) <= int(high) <= 255:
                raise ConfigError(where, f"{text!r}: range {value!r} is not a-b within 0-255")
            start, end = int(low), int(high)
        else:
            continue
        head = parts[:index]
        if not all(p.isdigit() and int(p) <= 255 for p in head) or any(p != "*" for p in parts[index + 1:]):
            raise ConfigError(where, f"{text!r}: parts before the range must be numbers, after it '*'")
        return tuple(int(p) for p in head), index, start, end
    raise ConfigError(where, f"{text!r} is not an IPv4 pattern (a.b.c.d with * or a-b parts)")


# -- configuration -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class AclAccount:
    """One ``accounts`` entry of plain_acl.yml. Permission strings: DENY, PUB, SUB, PUB|SUB."""

    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False
    default_topic_perm: str | None = None  # None (absent) means DENY, as in 4.9
    default_group_perm: str | None = None
    topic_perms: Mapping[str, str] = field(default_factory=dict)  # topic -> permission
    group_perms: Mapping[str, str] = field(default_factory=dict)  # group (without %RETRY%) -> permission
    white_remote_address: str | None = None


@dataclass(frozen=True)
class AclConfig:
    """The accounts and the global white list of remote addresses (plain_acl.yml)."""

    accounts: tuple[AclAccount, ...] = ()
    global_white_remote_addresses: tuple[str, ...] = ()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "acl") -> AclConfig:
        """From plain_acl.yml's structure: ``globalWhiteRemoteAddresses`` and ``accounts`` with
        ``accessKey``, ``secretKey``, ``whiteRemoteAddress``, ``admin``, ``defaultTopicPerm``,
        ``defaultGroupPerm``, ``topicPerms`` / ``groupPerms`` (lists of ``name=PERM``)."""
        if not isinstance(data, Mapping):
            raise ConfigError(source, "must be a mapping with 'accounts' (and 'globalWhiteRemoteAddresses')")
        white = data.get("globalWhiteRemoteAddresses") or []
        if isinstance(white, str) or not isinstance(white, list):
            raise ConfigError(f"{source}.globalWhiteRemoteAddresses", "must be a list of addresses")
        raw_accounts = data.get("accounts") or []
        if not isinstance(raw_accounts, list):
            raise ConfigError(f"{source}.accounts", "must be a list")
        accounts = []
        for i, raw in enumerate(raw_accounts):
            where = f"{source}.accounts[{i}]"
            if not isinstance(raw, Mapping):
                raise ConfigError(where, "must be a mapping")
            accounts.append(AclAccount(
                access_key=_text(raw.get("accessKey")), secret_key=_text(raw.get("secretKey")),
                admin=_flag(raw.get("admin"), f"{where}.admin"),
                default_topic_perm=_opt_text(raw.get("defaultTopicPerm")),
                default_group_perm=_opt_text(raw.get("defaultGroupPerm")),
                topic_perms=_resource_perms(raw.get("topicPerms"), f"{where}.topicPerms"),
                group_perms=_resource_perms(raw.get("groupPerms"), f"{where}.groupPerms"),
                white_remote_address=_opt_text(raw.get("whiteRemoteAddress"))))
        return cls(tuple(accounts), tuple(str(w) for w in white if w is not None))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AclConfig:
        """Read a plain_acl.yml (YAML needs PyYAML) or the same structure as JSON (``.json``)."""
        p = Path(path)
        try:
            text = p.read_text("utf-8")
        except OSError as exc:
            raise ConfigError("acl", f"cannot read {p}: {exc.strerror or exc}") from None
        if p.suffix.lower() == ".json":
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise ConfigError("acl", f"{p} is not valid JSON: {exc}") from None
        else:
            try:
                import yaml
            except ImportError:  # pragma: no cover - PyYAML comes with Airflow and the test extra
                raise ConfigError("acl", f"reading {p} needs PyYAML (pip install pyyaml); or use .json") from None
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise ConfigError("acl", f"{p} is not valid YAML: {' '.join(str(exc).split())}") from None
        return cls.from_mapping(data or {}, source=p.name)

    @classmethod
    def coerce(cls, value: AclConfig | Mapping[str, Any] | str | os.PathLike[str]) -> AclConfig:
        """An AclConfig from itself, a plain_acl.yml-shaped mapping, or a file path."""
        if isinstance(value, AclConfig):
            return value
        if isinstance(value, Mapping):
            return cls.from_mapping(value)
        if isinstance(value, (str, os.PathLike)):
            return cls.load(value)
        raise ConfigError("acl", f"expected an AclConfig, a mapping or a path, got {type(value).__name__}")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _opt_text(value: Any) -> str | None:
    return None if value is None else str(value)


def _flag(value: Any, where: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(where, f"must be true or false, got {value!r}")


def _resource_perms(value: Any, where: str) -> dict[str, str]:
    """Permission.parseResourcePerms: entries ``name=PERM`` (a mapping is accepted too)."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k).strip(): str(v).strip() for k, v in value.items()}
    if isinstance(value, str) or not isinstance(value, list):
        raise ConfigError(where, "must be a list of name=PERM entries")
    out: dict[str, str] = {}
    for entry in value:
        items = [p for p in str(entry).split("=") if p]  # StringUtils.split drops empty tokens
        if len(items) != 2:
            raise ConfigError(where, f"{entry!r} is not name=PERM")
        out[items[0].strip()] = items[1].strip()
    return out


# -- the plain ACL (1.0) verifier --------------------------------------------------------------------

@dataclass(frozen=True)
class _Grants:
    account: AclAccount
    perms: dict[str, int] | None  # resource -> bits; None when the account lists no resource
    default_topic: int
    default_group: int
    white: AddressRule


class AclRefusal(Exception):
    """An AclException of the real broker: ``remark`` is what the client receives."""

    def __init__(self, message: str | None, frame: str) -> None:
        super().__init__(message or "")
        text = f"{ACL_EXCEPTION}: {message}" if message else ACL_EXCEPTION
        self.remark = f"{text}, {frame}"


def signature_matches(cmd: RemotingCommand, secret_key: str) -> bool:
    """The request's ``Signature`` is the client's signing of its extFields and body with ``secret_key``."""
    ext = cmd.ext
    content = {k: str(v) for k, v in ext.items() if k != UNIQUE_KEY_QUERY}
    given = ext.get(SIGNATURE)
    if given is None:
        return False
    return hmac.compare_digest(sign(secret_key, content, cmd.body).encode(), str(given).encode())


class AclValidator:
    """The plain ACL mode: checks requests against one `AclConfig` (built once; swap the validator to
    reload). The broker sees it, like any ACL mode, as a `ports.RequestVerifier`."""

    refusal_code = ResponseCode.SYSTEM_ERROR

    def __init__(self, config: AclConfig) -> None:
        self.config = config
        self.global_white = [AddressRule(a, f"acl.globalWhiteRemoteAddresses[{i}]")
                             for i, a in enumerate(config.global_white_remote_addresses)]
        self.accounts: dict[str, _Grants] = {}
        for i, acc in enumerate(config.accounts):
            where = f"acl.accounts[{i}]"
            # checkPlainAccessConfig; the message names the field only (4.9 prints the secret, we never do)
            if len(acc.access_key) <= MIN_KEY_LENGTH:
                raise ConfigError(f"{where}.accessKey", f"must be longer than {MIN_KEY_LENGTH} characters")
            if len(acc.secret_key) <= MIN_KEY_LENGTH:
                raise ConfigError(f"{where}.secretKey", f"must be longer than {MIN_KEY_LENGTH} characters")
            if acc.access_key in self.accounts:  # 4.9 keeps the first and logs the repeat
                continue
            perms: dict[str, int] = {RETRY_PREFIX + g: parse_perm(p) for g, p in acc.group_perms.items()}
            perms.update({t: parse_perm(p) for t, p in acc.topic_perms.items()})
            self.accounts[acc.access_key] = _Grants(
                acc, perms or None, parse_perm(acc.default_topic_perm), parse_perm(acc.default_group_perm),
                AddressRule(acc.white_remote_address, f"{where}.whiteRemoteAddress"))

    def refusal(self, cmd: RemotingCommand, peer: str) -> str | None:
        """The remark of the SYSTEM_ERROR answer when the request is refused, else None."""
        try:
            self.check(cmd, peer)
        except AclRefusal as exc:
            return exc.remark
        return None

    def check(self, cmd: RemotingCommand, peer: str) -> None:
        """PlainAccessValidator.parse + PlainPermissionManager.validate; raises `AclRefusal`."""
        ip = peer.rsplit(":", 1)[0] if ":" in peer else peer
        ext = cmd.ext_fields
        needed = needed_resources(cmd) if ext is not None else {}  # 4.9 skips the parse without extFields
        if any(rule.match(ip) for rule in self.global_white):
            return
        access_key = ext.get(ACCESS_KEY) if ext else None
        if access_key is None:
            raise AclRefusal("No accessKey is configured", _VALIDATE)
        grants = self.accounts.get(str(access_key))
        if grants is None:
            raise AclRefusal(f"No acl config for {access_key}", _VALIDATE)
        if grants.white.match(ip):
            return
        if not signature_matches(cmd, grants.account.secret_key):
            raise AclRefusal(f"Check signature failed for accessKey={access_key}", _VALIDATE)
        self._check_perm(cmd.code, needed, grants)

    @staticmethod
    def _check_perm(code: int, needed: dict[str, int], grants: _Grants) -> None:
        if code in ADMIN_CODES and not grants.account.admin:
            raise AclRefusal(f"Need admin permission for request code={code}, but accessKey="
                             f"{grants.account.access_key} is not", _CHECK_PERM)
        if not needed or (grants.perms is None and grants.account.admin):
            return
        for resource in java_hashmap_order(needed):
            is_group = resource.startswith(RETRY_PREFIX)
            if grants.perms is not None and resource in grants.perms:
                have = grants.perms[resource]
            else:
                have = grants.default_group if is_group else grants.default_topic
            if not check_permission(needed[resource], have):
                raise AclRefusal(f"No default permission for {describe_resource(resource)}", _CHECK_PERM)


Needs = list[tuple["str | None", int]]  # (resource or None when the header lacks it, permission), in order


def _send_v1(cmd: RemotingCommand) -> Needs:
    topic = cmd.ext.get("topic")
    if topic is not None and topic.startswith(RETRY_PREFIX):
        return [(_group_resource(cmd.ext.get("group")), SUB)]  # sic: the v1 header calls it producerGroup
    return [(topic, PUB)]


def _send_v2(cmd: RemotingCommand) -> Needs:
    topic = cmd.ext.get("b")
    if topic is not None and topic.startswith(RETRY_PREFIX):
        return [(_group_resource(cmd.ext.get("a")), SUB)]
    return [(topic, PUB)]


def _heart_beat(cmd: RemotingCommand) -> Needs:
    """Each consumer's retry group and subscribed topics."""
    if cmd.body is None:
        raise ProtocolError("")  # HeartbeatData.decode(null): a NullPointerException without message
    data = fastjson.loads(cmd.body)
    if not isinstance(data, dict):
        raise ProtocolError("HEART_BEAT body is not a JSON object")
    out: Needs = []
    for consumer in data.get("consumerDataSet") or []:
        if not isinstance(consumer, dict):
            raise ProtocolError(f"HEART_BEAT consumer entry is not an object: {consumer!r}")
        group = consumer.get("groupName")
        out.append((_group_resource(None if group is None else str(group)), SUB))
        topics = [s.get("topic") for s in consumer.get("subscriptionDataSet") or [] if isinstance(s, dict)]
        out += [(str(t), SUB) for t in topics if t is not None]
    return out


def _unregister_client(cmd: RemotingCommand) -> Needs:
    req_str(cmd, "clientID")
    return [(_group_resource(cmd.ext.get("consumerGroup")), SUB)]


def _update_consumer_offset(cmd: RemotingCommand) -> Needs:
    # decodeCommandCustomHeader: a number that does not parse is refused, an absent field
    # is not (4.9.7 enforces no @CFNotNull there; the processor then fails on it)
    group, topic = req_str(cmd, "consumerGroup"), req_str(cmd, "topic")
    opt_int(cmd, "queueId", 0)
    opt_int(cmd, "commitOffset", 0)
    return [(_group_resource(group), SUB), (topic, SUB)]


# PlainAccessValidator.parse of 4.9.7: the request codes that name resources (every other code needs none)
_RESOURCES_OF: dict[int, Callable[[RemotingCommand], Needs]] = {
    RequestCode.SEND_MESSAGE: _send_v1,
    RequestCode.SEND_MESSAGE_V2: _send_v2,
    RequestCode.CONSUMER_SEND_MSG_BACK: lambda cmd: [(_group_resource(cmd.ext.get("group")), SUB)],
    RequestCode.PULL_MESSAGE: lambda cmd: [(cmd.ext.get("topic"), SUB),
                                           (_group_resource(cmd.ext.get("consumerGroup")), SUB)],
    RequestCode.QUERY_MESSAGE: lambda cmd: [(cmd.ext.get("topic"), SUB)],
    RequestCode.HEART_BEAT: _heart_beat,
    RequestCode.UNREGISTER_CLIENT: _unregister_client,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: lambda cmd: [(_group_resource(req_str(cmd, "consumerGroup")), SUB)],
    RequestCode.UPDATE_CONSUMER_OFFSET: _update_consumer_offset,
}


def needed_resources(cmd: RemotingCommand) -> dict[str, int]:
    """Resource -> permission a request needs (4.9.7 PlainAccessValidator.parse), in insertion order."""
    parse = _RESOURCES_OF.get(cmd.code)
    if parse is None:
        return {}
    try:
        needs = parse(cmd)
    except (HeaderError, ProtocolError) as exc:
        raise AclRefusal(str(exc), _PARSE) from None
    return {resource: perm for resource, perm in needs if resource is not None}


def java_hashmap_order(resources: Mapping[str, int]) -> list[str]:
    """The iteration order of a java.util.HashMap holding these keys (put in this order).

    The broker reports the first resource that fails while iterating its HashMap, so with several
    denied resources the remark names the one Java names: buckets by (hash ^ hash >>> 16) & (capacity-1),
    insertion order within a bucket, capacity 16 doubled past a 0.75 load factor.
    """
    capacity = 16
    while len(resources) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(resources, key=bucket)  # stable: equal buckets keep insertion order
