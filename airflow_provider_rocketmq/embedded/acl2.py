"""ACL 2.0 for the embedded broker: users and policies, checked as a 5.3.3 broker with
``authenticationEnabled`` / ``authorizationEnabled`` (the default providers) checks every request, and
managed with the AUTH_* requests ``mqadmin createUser`` / ``createAcl`` / ... send.

* `Acl2Config` / `AuthUser` / `AclEntry`: the users and policies a broker starts with (in memory, as the
  memory providers of the recordings keep them: an ``mqadmin`` change lasts until the broker stops);
* `AuthMetadata`: one broker's users and ACLs; `Acl2Verifier`: the check (a `ports.RequestVerifier`);
* `AuthHandlers`: AUTH_CREATE_USER ... AUTH_LIST_ACL (3001-3010), for super users only.

A refusal is NO_PERMISSION (16) with the message of the real broker's AuthenticationException /
AuthorizationException (client/protocol/acl_refusals.py lists them; docs/embedded.md the rules). What
each request needs is `request_contexts` (DefaultAuthorizationContextBuilder of 5.3.3, as recorded in
tests/data/differential/rocketmq-5.3.3-acl2.json).
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..client.connection import Handler, RemotingProtocol
from ..client.protocol import fastjson
from ..client.protocol.codes import RequestCode, ResponseCode
from ..client.protocol.command import RemotingCommand
from ..client.protocol.errors import ConfigError
from ..client.protocol.names import RETRY_PREFIX
from .acl import signature_matches

SUPER, NORMAL = "Super", "Normal"
ENABLE, DISABLE = "enable", "disable"
ALLOW, DENY = "Allow", "Deny"
ACTIONS = ("All", "Any", "Pub", "Sub", "Create", "Update", "Delete", "Get", "List")
RESOURCE_TYPES = ("Cluster", "Namespace", "Topic", "Group")
DEFAULT_SUPER_USER = ("rocketmq", "12345678")  # what the recorded 5.3.3 broker's initAuthenticationUser was
# the real broker answers its AUTH_* requests with this remark, success or not
NOT_SET = "not set any response code"

AUTH_CREATE_USER, AUTH_UPDATE_USER, AUTH_DELETE_USER, AUTH_GET_USER, AUTH_LIST_USER = 3001, 3002, 3003, 3004, 3005
AUTH_CREATE_ACL, AUTH_UPDATE_ACL, AUTH_DELETE_ACL, AUTH_GET_ACL, AUTH_LIST_ACL = 3006, 3007, 3008, 3009, 3010
_AUTH_WRITES = frozenset({AUTH_CREATE_USER, AUTH_UPDATE_USER, AUTH_DELETE_USER, AUTH_CREATE_ACL, AUTH_UPDATE_ACL,
                          AUTH_DELETE_ACL})
_AUTH_READS = frozenset({AUTH_GET_USER, AUTH_LIST_USER, AUTH_GET_ACL, AUTH_LIST_ACL})


class AuthRefusal(Exception):
    """An authentication or authorization failure; ``str()`` is the remark the client receives."""


def _canonical(name: str, choices: Iterable[str]) -> str | None:
    return next((c for c in choices if c.lower() == name.strip().lower()), None)


# -- resources and policy entries ---------------------------------------------------------------------

@dataclass(frozen=True)
class Resource:
    """``Topic:T`` (literal), ``Topic:pre*`` (prefixed), ``Topic:*`` (any topic), ``*`` (anything)."""

    type: str | None  # None: any type
    name: str | None  # None: any name
    prefixed: bool = False

    @classmethod
    def parse(cls, text: str) -> Resource | None:
        text = text.strip()
        if text == "*":
            return cls(None, None)
        kind, sep, name = text.partition(":")
        rtype = _canonical(kind, RESOURCE_TYPES)
        if not sep or rtype is None or not name:
            return None
        if name == "*":
            return cls(rtype, None)
        if name.endswith("*"):
            return cls(rtype, name[:-1], prefixed=True)
        return cls(rtype, name)

    def __str__(self) -> str:
        if self.type is None:
            return "*"
        return f"{self.type}:{'*' if self.name is None else self.name + ('*' if self.prefixed else '')}"

    def matches(self, rtype: str, name: str) -> bool:
        if self.type is not None and self.type != rtype:
            return False
        if self.name is None:
            return True
        return name.startswith(self.name) if self.prefixed else name == self.name

    def rank(self) -> tuple[int, int]:
        """PolicyEntry ordering: literal before prefixed (longer first) before any name; any type last."""
        if self.type is None:
            return (3, 0)
        if self.name is None:
            return (2, 0)
        return (1, -len(self.name)) if self.prefixed else (0, 0)


@dataclass(frozen=True)
class AclEntry:
    """One policy entry: ``resource`` (``Topic:T``, ``Group:G``, ``Topic:pre*``, ``Topic:*``, ``*``),
    ``actions`` (Pub, Sub, Get, Update, Create, Delete, List, All), ``decision`` (Allow, Deny) and the
    client addresses it applies to (``source_ips``: IPs or CIDRs; empty: any)."""

    resource: str
    actions: tuple[str, ...]
    decision: str = ALLOW
    source_ips: tuple[str, ...] = ()

    def parsed(self) -> Resource:
        res = Resource.parse(self.resource)
        if res is None:
            raise ConfigError("acl.resource", f"{self.resource!r} is not Type:name (Topic, Group, Cluster, Namespace) "
                              "or *")
        return res

    def matches(self, rtype: str, name: str, actions: tuple[str, ...], ip: str) -> bool:
        if not self.parsed().matches(rtype, name):
            return False
        if "All" not in self.actions and not any(a in self.actions for a in actions):
            return False
        return not self.source_ips or any(_ip_in(ip, net) for net in self.source_ips)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"actions": list(self.actions), "decision": self.decision, "resource": self.resource}
        if self.source_ips:
            out["sourceIps"] = list(self.source_ips)
        return out


def _ip_in(ip: str, net: str) -> bool:
    try:
        return ipaddress.ip_address(ip) in ipaddress.ip_network(net.strip(), strict=False)
    except ValueError:
        return False


@dataclass
class AuthUser:
    """A user: ``user_type`` Super (every request allowed) or Normal (its ACL decides), ``status``
    enable or disable."""

    username: str
    password: str = field(repr=False)
    user_type: str = NORMAL
    status: str = ENABLE

    def to_json(self) -> dict[str, Any]:
        return {"password": self.password, "userStatus": self.status, "userType": self.user_type,
                "username": self.username}


@dataclass(frozen=True)
class Acl2Config:
    """What an ACL 2.0 broker starts with: a super user (``initAuthenticationUser``), more users, and
    policies per username."""

    super_user: tuple[str, str] = DEFAULT_SUPER_USER
    users: tuple[AuthUser, ...] = ()
    acls: Mapping[str, tuple[AclEntry, ...]] = field(default_factory=dict)

    @classmethod
    def coerce(cls, value: Acl2Config | Mapping[str, Any] | bool) -> Acl2Config:
        """From itself, ``True`` (the defaults) or a mapping: ``super_user`` ``[name, password]``, ``users``
        (``{"username", "password", "type", "status"}``), ``acls`` (username -> ``[{"resource", "actions",
        "decision", "source_ips"}]``)."""
        if isinstance(value, Acl2Config):
            return value
        if value is True:
            return cls()
        if not isinstance(value, Mapping):
            raise ConfigError("acl2", f"expected an Acl2Config, True or a mapping, got {type(value).__name__}")
        su = value.get("super_user", DEFAULT_SUPER_USER)
        if not isinstance(su, (list, tuple)) or len(su) != 2 or not all(isinstance(x, str) and x for x in su):
            raise ConfigError("acl2.super_user", "must be [username, password]")
        users = tuple(AuthUser(str(u["username"]), str(u["password"]), str(u.get("type", NORMAL)),
                               str(u.get("status", ENABLE))) for u in value.get("users") or [])
        acls = {str(name): tuple(_entry(e, f"acl2.acls.{name}") for e in entries)
                for name, entries in (value.get("acls") or {}).items()}
        return cls((su[0], su[1]), users, acls)


def _entry(e: Mapping[str, Any], where: str) -> AclEntry:
    """One policy entry of a configuration, its action and decision names checked (any case)."""
    actions = []
    for name in e["actions"]:
        action = _canonical(str(name), ACTIONS)
        if action is None:
            raise ConfigError(where, f"unknown action {name!r} (one of {', '.join(ACTIONS)})")
        actions.append(action)
    decision = _canonical(str(e.get("decision", ALLOW)), (ALLOW, DENY))
    if decision is None:
        raise ConfigError(where, f"decision must be Allow or Deny, got {e.get('decision')!r}")
    entry = AclEntry(str(e["resource"]), tuple(actions), decision, tuple(str(ip) for ip in e.get("source_ips") or ()))
    entry.parsed()  # the resource, now
    return entry


def load_acl2(path: str | os.PathLike[str]) -> Acl2Config:
    """An `Acl2Config` from a JSON file (``.json``) or a YAML one (PyYAML), shaped as `Acl2Config.coerce` takes it;
    every user and policy is checked now (a ConfigError naming the file and the entry)."""
    p = Path(path)
    try:
        text = p.read_text("utf-8")
    except OSError as exc:
        raise ConfigError("acl2", f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml  # PyYAML comes with Airflow and the test extra

            data = yaml.safe_load(text)
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError's subclasses say where
        raise ConfigError("acl2", f"{p} is not valid: {' '.join(str(exc).split())}") from None
    except Exception as exc:  # yaml.YAMLError is not a ValueError
        raise ConfigError("acl2", f"{p} is not valid YAML: {' '.join(str(exc).split())}") from None
    try:
        config = Acl2Config.coerce(data or {})
        AuthMetadata(config)
    except (KeyError, TypeError) as exc:
        raise ConfigError("acl2", f"{p}: an entry lacks or mistypes {exc}") from None
    except AuthRefusal as exc:
        raise ConfigError("acl2", f"{p}: {exc}") from None
    return config


class AuthMetadata:
    """One broker's users and ACLs (a real broker keeps its own; ``mqadmin -c`` writes to each)."""

    def __init__(self, config: Acl2Config) -> None:
        name, password = config.super_user
        self.users: dict[str, AuthUser] = {name: AuthUser(name, password, SUPER)}
        self.acls: dict[str, list[AclEntry]] = {}
        for user in config.users:
            self.create_user(replace(user))
        for username, entries in config.acls.items():
            self.create_acl(f"User:{username}", list(entries))

    def create_user(self, user: AuthUser) -> None:
        if user.username in self.users:
            raise AuthRefusal("The user is existed")
        if _canonical(user.user_type, (SUPER, NORMAL)) is None or user.status not in (ENABLE, DISABLE):
            raise ConfigError("acl2.users", f"{user.username}: type must be Super or Normal, status enable or disable")
        self.users[user.username] = user

    def create_acl(self, subject: str, entries: list[AclEntry]) -> None:
        """Add ``entries`` to the subject's ACL; an entry for a resource it lists already replaces it."""
        username = subject.removeprefix("User:")
        if not subject.startswith("User:") or username not in self.users:
            raise AuthRefusal(f"The subject of {subject} is not exist.")
        for e in entries:
            if Resource.parse(e.resource) is None:
                raise AuthRefusal("The resource is null.")
            if not e.actions:
                raise AuthRefusal("The actions is empty.")
            if e.decision not in (ALLOW, DENY):
                raise AuthRefusal("The decision is null or illegal.")
        current = self.acls.setdefault(username, [])
        for e in (replace(e, resource=str(e.parsed())) for e in entries):
            same = next((i for i, old in enumerate(current) if old.resource == e.resource), None)
            if same is None:
                current.append(e)
            else:
                current[same] = e

    def delete_acl(self, subject: str, resource: str | None) -> None:
        username = subject.removeprefix("User:")
        if resource is None:
            self.acls.pop(username, None)
            return
        entries = [e for e in self.acls.get(username, []) if e.resource != resource]
        if entries:
            self.acls[username] = entries
        else:
            self.acls.pop(username, None)

    def acl_json(self, username: str) -> dict[str, Any] | None:
        entries = self.acls.get(username)
        if not entries:
            return None
        return {"policies": [{"entries": [e.to_json() for e in entries], "policyType": "Custom"}],
                "subject": f"User:{username}"}


# -- what each request needs (DefaultAuthorizationContextBuilder) --------------------------------------

Context = tuple[str, str, tuple[str, ...]]  # (resource type, name, actions of which one is needed)
_SUB, _GET, _SUB_GET, _SUB_UPDATE = ("Sub",), ("Get",), ("Sub", "Get"), ("Sub", "Update")


def _send(topic: str | None, group: str | None) -> list[Context]:
    if topic is not None and topic.startswith(RETRY_PREFIX):
        return [("Group", str(group), _SUB)]
    return [("Topic", str(topic), ("Pub",))]


def _topic_then_group(topic: str | None, group: str | None, actions: tuple[str, ...]) -> list[Context]:
    out: list[Context] = [] if str(topic).startswith(RETRY_PREFIX) else [("Topic", str(topic), actions)]
    return [*out, ("Group", str(group), actions)]


def _heartbeat(cmd: RemotingCommand) -> list[Context]:
    data = fastjson.loads(cmd.body or b"")
    if not isinstance(data, dict):
        raise ValueError("HEART_BEAT body is not an object")
    out: list[Context] = []
    for consumer in data.get("consumerDataSet") or []:
        out.append(("Group", str(consumer.get("groupName")), _SUB))
        for sub in consumer.get("subscriptionDataSet") or []:
            topic = str(sub.get("topic"))
            if not topic.startswith(RETRY_PREFIX):
                out.append(("Topic", topic, _SUB))
    return out


def _lock(cmd: RemotingCommand) -> list[Context]:
    """The group, then the topic of every queue to lock or unlock."""
    data = json.loads(cmd.body or b"")
    topics = dict.fromkeys(str(q.get("topic")) for q in data.get("mqSet") or [])
    return [("Group", str(data.get("consumerGroup")), _SUB),
            *(("Topic", t, _SUB) for t in topics if not t.startswith(RETRY_PREFIX))]


_CONTEXTS: dict[int, Callable[[RemotingCommand, dict[str, str]], list[Context]]] = {
    RequestCode.SEND_MESSAGE: lambda cmd, x: _send(x.get("topic"), x.get("group")),
    RequestCode.SEND_MESSAGE_V2: lambda cmd, x: _send(x.get("b"), x.get("a")),
    RequestCode.SEND_BATCH_MESSAGE: lambda cmd, x: _send(x.get("b"), x.get("a")),
    RequestCode.CONSUMER_SEND_MSG_BACK: lambda cmd, x: [("Group", str(x.get("group")), _SUB)],
    RequestCode.PULL_MESSAGE: lambda cmd, x: _topic_then_group(x.get("topic"), x.get("consumerGroup"), _SUB),
    RequestCode.QUERY_MESSAGE: lambda cmd, x: [("Topic", str(x.get("topic")), _SUB_GET)],
    RequestCode.HEART_BEAT: lambda cmd, x: _heartbeat(cmd),
    RequestCode.UNREGISTER_CLIENT: lambda cmd, x: [("Group", str(x.get("consumerGroup")), ("Pub", "Sub"))],
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: lambda cmd, x: [("Group", str(x.get("consumerGroup")), _SUB_GET)],
    RequestCode.QUERY_CONSUMER_OFFSET: lambda cmd, x: _topic_then_group(x.get("topic"), x.get("consumerGroup"),
                                                                        _SUB_GET),
    RequestCode.UPDATE_CONSUMER_OFFSET: lambda cmd, x: _topic_then_group(x.get("topic"), x.get("consumerGroup"),
                                                                         _SUB_UPDATE),
    RequestCode.LOCK_BATCH_MQ: lambda cmd, x: _lock(cmd),
    RequestCode.UNLOCK_BATCH_MQ: lambda cmd, x: _lock(cmd),
    RequestCode.GET_MAX_OFFSET: lambda cmd, x: [("Topic", str(x.get("topic")), _GET)],
    RequestCode.GET_MIN_OFFSET: lambda cmd, x: [("Topic", str(x.get("topic")), _GET)],
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: lambda cmd, x: [("Topic", str(x.get("topic")), _GET)],
    RequestCode.GET_EARLIEST_MSG_STORETIME: lambda cmd, x: [("Topic", str(x.get("topic")), _GET)],
    RequestCode.GET_TOPIC_STATS_INFO: lambda cmd, x: [("Topic", str(x.get("topic")), _GET)],
    RequestCode.GET_CONSUME_STATS: lambda cmd, x: [("Group", str(x.get("consumerGroup")), _GET),
                                                   *([("Topic", x["topic"], _GET)] if x.get("topic") else [])],
    RequestCode.GET_CONSUMER_CONNECTION_LIST: lambda cmd, x: [("Group", str(x.get("consumerGroup")), _GET)],
    RequestCode.UPDATE_AND_CREATE_TOPIC: lambda cmd, x: [("Topic", str(x.get("topic")), ("Create",))],
}


def request_contexts(cmd: RemotingCommand, cluster: str) -> list[Context]:
    """What ``cmd`` needs, in the order the broker checks it (empty: authentication only)."""
    if cmd.code in _AUTH_WRITES:
        return [("Cluster", cluster, ("Update",))]
    if cmd.code in _AUTH_READS:
        return [("Cluster", cluster, _GET)]
    build = _CONTEXTS.get(cmd.code)
    if build is None:
        return []
    try:
        return build(cmd, cmd.ext)
    except (ValueError, TypeError, AttributeError):
        raise AuthRefusal("parse authorization context error") from None


class Acl2Verifier:
    """The ACL 2.0 mode of one broker, as the broker's guard uses it (`ports.RequestVerifier`)."""

    refusal_code = ResponseCode.NO_PERMISSION

    def __init__(self, metadata: AuthMetadata, cluster: str) -> None:
        self.metadata = metadata
        self.cluster = cluster

    def refusal(self, cmd: RemotingCommand, peer: str) -> str | None:
        try:
            self.check(cmd, peer.rsplit(":", 1)[0] if ":" in peer else peer)
        except AuthRefusal as exc:
            return str(exc)
        return None

    def check(self, cmd: RemotingCommand, ip: str) -> None:
        """DefaultAuthenticationHandler, then (Normal users) UserAuthorizationHandler + AclAuthorizationHandler."""
        username = cmd.ext.get("AccessKey")
        if not username:
            raise AuthRefusal("username cannot be null.")
        user = self.metadata.users.get(username)
        if user is None:
            raise AuthRefusal(f"User:{username} is not found.")
        if user.status == DISABLE:
            raise AuthRefusal(f"User:{username} is disabled.")
        if not signature_matches(cmd, user.password):
            raise AuthRefusal("check signature failed.")
        if user.user_type == SUPER:
            return
        entries = self.metadata.acls.get(username, [])
        for rtype, name, actions in request_contexts(cmd, self.cluster):
            matched = sorted((e for e in entries if e.matches(rtype, name, actions, ip)),
                             key=lambda e: e.parsed().rank())
            where = f"User:{username} has no permission to access {rtype}:{name} from {ip}"
            if not matched:
                raise AuthRefusal(f"{where}, no matched policies.")
            if matched[0].decision == DENY:
                raise AuthRefusal(f"{where}, the decision is deny.")


# -- AUTH_* requests (mqadmin createUser, createAcl, ...) ---------------------------------------------

class AuthHandlers:
    """AUTH_CREATE_USER ... AUTH_LIST_ACL on the broker's current ACL 2.0 metadata (the verifier already
    let only super users through); REQUEST_CODE_NOT_SUPPORTED when the broker is not in ACL 2.0 mode."""

    def __init__(self, metadata: Callable[[], AuthMetadata | None]) -> None:
        self.metadata = metadata

    def handlers(self) -> dict[int, Handler]:
        ops: dict[int, Callable[[AuthMetadata, RemotingCommand], bytes | None]] = {
            AUTH_CREATE_USER: self._create_user, AUTH_UPDATE_USER: self._update_user,
            AUTH_DELETE_USER: self._delete_user, AUTH_GET_USER: self._get_user, AUTH_LIST_USER: self._list_users,
            AUTH_CREATE_ACL: self._create_acl, AUTH_UPDATE_ACL: self._create_acl, AUTH_DELETE_ACL: self._delete_acl,
            AUTH_GET_ACL: self._get_acl, AUTH_LIST_ACL: self._list_acls}
        return {code: self._serve(op) for code, op in ops.items()}

    def _serve(self, op: Callable[[AuthMetadata, RemotingCommand], bytes | None]) -> Handler:
        async def handle(conn: RemotingProtocol, cmd: RemotingCommand) -> RemotingCommand:
            meta = self.metadata()
            if meta is None:
                return cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                         remark=f" request type {cmd.code} not supported")
            try:
                body = op(meta, cmd)
            except AuthRefusal as exc:
                return cmd.make_response(ResponseCode.NO_PERMISSION, remark=str(exc))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=f"malformed {cmd.code} request: {exc}")
            return cmd.make_response(ResponseCode.SUCCESS, remark=NOT_SET, body=body)
        return handle

    @staticmethod
    def _body(cmd: RemotingCommand) -> dict[str, Any]:
        if not cmd.body:
            raise ValueError("no body")
        data = json.loads(cmd.body)
        if not isinstance(data, dict):
            raise ValueError("the body is not an object")
        return data

    def _create_user(self, meta: AuthMetadata, cmd: RemotingCommand) -> None:
        data = self._body(cmd)
        username = cmd.ext.get("username") or str(data["username"])
        user_type = _canonical(str(data.get("userType") or NORMAL), (SUPER, NORMAL)) or str(data.get("userType"))
        meta.create_user(AuthUser(username, str(data.get("password") or ""), user_type,
                                  str(data.get("userStatus") or ENABLE).lower()))

    def _update_user(self, meta: AuthMetadata, cmd: RemotingCommand) -> None:
        data = self._body(cmd)
        user = meta.users.get(cmd.ext.get("username") or str(data["username"]))
        if user is None:
            raise AuthRefusal("The user is not exist")
        user.password = str(data.get("password") or user.password)
        user.user_type = str(data.get("userType") or user.user_type)
        user.status = str(data.get("userStatus") or user.status)

    def _delete_user(self, meta: AuthMetadata, cmd: RemotingCommand) -> None:
        meta.users.pop(cmd.ext.get("username", ""), None)

    def _get_user(self, meta: AuthMetadata, cmd: RemotingCommand) -> bytes | None:
        user = meta.users.get(cmd.ext.get("username", ""))
        return None if user is None else _json(user.to_json())

    def _list_users(self, meta: AuthMetadata, cmd: RemotingCommand) -> bytes:
        return _json([u.to_json() for _, u in sorted(meta.users.items())])

    def _create_acl(self, meta: AuthMetadata, cmd: RemotingCommand) -> None:
        data = self._body(cmd)
        entries = []
        for policy in data.get("policies") or []:
            for e in policy.get("entries") or []:
                actions = tuple(a for a in (_canonical(str(x), ACTIONS) for x in e.get("actions") or []) if a)
                decision = _canonical(str(e.get("decision") or ""), (ALLOW, DENY)) or ""
                entries.append(AclEntry(str(e.get("resource") or ""), actions, decision,
                                        tuple(str(ip) for ip in e.get("sourceIps") or ())))
        meta.create_acl(cmd.ext.get("subject") or str(data["subject"]), entries)

    def _delete_acl(self, meta: AuthMetadata, cmd: RemotingCommand) -> None:
        meta.delete_acl(cmd.ext.get("subject", ""), cmd.ext.get("resource"))

    def _get_acl(self, meta: AuthMetadata, cmd: RemotingCommand) -> bytes | None:
        acl = meta.acl_json(cmd.ext.get("subject", "").removeprefix("User:"))
        return None if acl is None else _json(acl)

    def _list_acls(self, meta: AuthMetadata, cmd: RemotingCommand) -> bytes:
        return _json([acl for name in sorted(meta.acls) if (acl := meta.acl_json(name)) is not None])


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
