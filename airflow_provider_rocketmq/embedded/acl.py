"""Plain ACL for the embedded broker: 4.9's ``plain_acl.yml`` accounts, checked as the real broker does.

What a 4.9.7 broker with ``aclEnable=true`` does before it processes any request (module ``acl``:
``PlainAccessValidator.parse``, ``PlainPermissionManager.validate`` / ``checkPerm``, ``Permission``,
``RemoteAddressStrategyFactory``, ``AclUtils``), restated here:

1. *Parse.* The request code says which resources it needs: SEND_MESSAGE_V2 PUB on topic ``b`` (SUB on
   ``%RETRY%<a>`` when ``b`` is a retry topic), PULL_MESSAGE SUB on ``topic`` and on
   ``%RETRY%<consumerGroup>``, HEART_BEAT SUB on ``%RETRY%<groupName>`` and every subscribed topic of each
   consumer in the body, UPDATE_CONSUMER_OFFSET SUB on the group and the topic, CONSUMER_SEND_MSG_BACK /
   GET_CONSUMER_LIST_BY_GROUP / UNREGISTER_CLIENT SUB on the group, QUERY_MESSAGE SUB on the topic (`needed_resources`). A group is the
   resource ``%RETRY%<group>``. Every other code (SEND_BATCH_MESSAGE and the offset / admin queries included,
   in 4.9.7) needs no resource, only a valid signature. A header the parse cannot read is an AclException.
2. *Validate.* A remote address matching ``globalWhiteRemoteAddresses`` passes. Otherwise: no ``AccessKey``
   -> "No accessKey is configured"; unknown key -> "No acl config for K"; an address matching the account's
   ``whiteRemoteAddress`` passes without signature; a ``Signature`` other than Base64(HmacSHA1(secretKey,
   values of the extFields sorted by key, ``Signature`` and ``_UNIQUE_KEY_QUERY`` left out, then the body))
   -> "Check signature failed for accessKey=K".
3. *Permissions.* UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG, DELETE_TOPIC_IN_BROKER,
   UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP need ``admin: true``; an admin with no
   ``topicPerms``/``groupPerms`` may do everything; otherwise each needed resource is checked against the
   account's explicit permission, else its ``defaultTopicPerm`` / ``defaultGroupPerm`` (absent or unknown
   strings mean DENY): "No default permission for topic:T" / "group:G" (4.9.7 says "default" in both cases).

A refusal is an AclException thrown in the server's RPC hook, which 4.9's ``NettyRemotingAbstract`` answers
with SYSTEM_ERROR (1) and ``RemotingHelper.exceptionSimpleDesc``: ``<exception>: <message>, <top stack
frame>``. The frame here names the Java method that throws, without a line number (Java prints
``(File.java)`` when it has none): clients should match on the message, never on the frame. Oneway requests
that are refused are dropped without an answer. The 4.9 name server has no ACL.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..client.protocol import fastjson
from ..client.protocol.acl import ACCESS_KEY, SIGNATURE, sign
from ..client.protocol.codes import RequestCode
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
                raise ConfigError("acl", f"reading {p} needs PyYAML (pip install pyyaml); or use .json")
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


# -- the validator ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Owned:
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


class AclValidator:
    """Checks requests against one `AclConfig` (built once; swap the validator to reload)."""

    def __init__(self, config: AclConfig) -> None:
        self.config = config
        self.global_white = [AddressRule(a, f"acl.globalWhiteRemoteAddresses[{i}]")
                             for i, a in enumerate(config.global_white_remote_addresses)]
        self.accounts: dict[str, _Owned] = {}
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
            self.accounts[acc.access_key] = _Owned(
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
        owned = self.accounts.get(str(access_key))
        if owned is None:
            raise AclRefusal(f"No acl config for {access_key}", _VALIDATE)
        if owned.white.match(ip):
            return
        assert ext is not None
        content = {k: str(v) for k, v in ext.items() if k != UNIQUE_KEY_QUERY}
        expected = sign(owned.account.secret_key, content, cmd.body)
        given = ext.get(SIGNATURE)
        if given is None or not hmac.compare_digest(expected.encode(), str(given).encode()):
            raise AclRefusal(f"Check signature failed for accessKey={access_key}", _VALIDATE)
        self._check_perm(cmd.code, needed, owned)

    @staticmethod
    def _check_perm(code: int, needed: dict[str, int], owned: _Owned) -> None:
        if code in ADMIN_CODES and not owned.account.admin:
            raise AclRefusal(f"Need admin permission for request code={code}, but accessKey="
                             f"{owned.account.access_key} is not", _CHECK_PERM)
        if not needed or (owned.perms is None and owned.account.admin):
            return
        for resource in java_hashmap_order(needed):
            is_group = resource.startswith(RETRY_PREFIX)
            if owned.perms is not None and resource in owned.perms:
                have = owned.perms[resource]
            else:
                have = owned.default_group if is_group else owned.default_topic
            if not check_permission(needed[resource], have):
                raise AclRefusal(f"No default permission for {describe_resource(resource)}", _CHECK_PERM)


def needed_resources(cmd: RemotingCommand) -> dict[str, int]:
    """Resource -> permission a request needs (4.9.7 PlainAccessValidator.parse), in insertion order."""
    ext = cmd.ext
    code = cmd.code
    out: dict[str, int] = {}

    def add(resource: str | None, perm: int) -> None:
        if resource is not None:
            out[resource] = perm

    try:
        if code == RequestCode.SEND_MESSAGE:
            topic = ext.get("topic")
            if topic is not None and topic.startswith(RETRY_PREFIX):
                add(_group_resource(ext.get("group")), SUB)  # sic: the v1 header calls it producerGroup
            else:
                add(topic, PUB)
        elif code == RequestCode.SEND_MESSAGE_V2:
            topic = ext.get("b")
            if topic is not None and topic.startswith(RETRY_PREFIX):
                add(_group_resource(ext.get("a")), SUB)
            else:
                add(topic, PUB)
        elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
            add(_group_resource(ext.get("group")), SUB)
        elif code == RequestCode.PULL_MESSAGE:
            add(ext.get("topic"), SUB)
            add(_group_resource(ext.get("consumerGroup")), SUB)
        elif code == RequestCode.QUERY_MESSAGE:
            add(ext.get("topic"), SUB)
        elif code == RequestCode.HEART_BEAT:
            for group, topics in _heartbeat_consumers(cmd.body):
                add(_group_resource(group), SUB)
                for topic in topics:
                    add(topic, SUB)
        elif code == RequestCode.UNREGISTER_CLIENT:
            req_str(cmd, "clientID")
            add(_group_resource(ext.get("consumerGroup")), SUB)
        elif code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            add(_group_resource(req_str(cmd, "consumerGroup")), SUB)
        elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
            # decodeCommandCustomHeader: a number that does not parse is refused, an absent field
            # is not (4.9.7 enforces no @CFNotNull there; the processor then fails on it)
            group, topic = req_str(cmd, "consumerGroup"), req_str(cmd, "topic")
            opt_int(cmd, "queueId", 0)
            opt_int(cmd, "commitOffset", 0)
            add(_group_resource(group), SUB)
            add(topic, SUB)
    except (HeaderError, ProtocolError) as exc:
        raise AclRefusal(str(exc), _PARSE) from None
    return out


def _heartbeat_consumers(body: bytes | None) -> Iterable[tuple[str | None, list[str]]]:
    if body is None:
        raise ProtocolError("")  # HeartbeatData.decode(null): a NullPointerException without message
    data = fastjson.loads(body)
    if not isinstance(data, dict):
        raise ProtocolError("HEART_BEAT body is not a JSON object")
    out = []
    for consumer in data.get("consumerDataSet") or []:
        if not isinstance(consumer, dict):
            raise ProtocolError(f"HEART_BEAT consumer entry is not an object: {consumer!r}")
        group = consumer.get("groupName")
        topics = [s.get("topic") for s in consumer.get("subscriptionDataSet") or [] if isinstance(s, dict)]
        out.append((None if group is None else str(group), [str(t) for t in topics if t is not None]))
    return out


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
