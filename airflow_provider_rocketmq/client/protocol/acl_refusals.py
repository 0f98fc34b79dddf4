"""Which broker answers are ACL refusals, and what a refused request needed (sans-IO, no imports of the codec).

Two ACL generations answer differently:

* **ACL 1.0** (4.x ``plain_acl.yml``, ``aclEnable=true``): SYSTEM_ERROR (1) whose remark is the
  ``AclException`` text, ``<exception>: <message>, <top stack frame>``.
* **ACL 2.0** (5.3+, ``authenticationEnabled`` / ``authorizationEnabled``): NO_PERMISSION (16) with the
  exception message alone - ``username cannot be null.``, ``User:u is not found.``, ``User:u is
  disabled.``, ``check signature failed.``, ``User:u has no permission to access Group:g from 1.2.3.4,
  no matched policies.`` (or ``..., the decision is deny.``).

Code 16 is also NO_PERMISSION for reasons that have nothing to do with ACL: a topic or broker that is
not writable or readable (``the topic[T] sending message is forbidden``, ``the broker[b] pulling
message is forbidden``), a group whose consumption is disabled (``subscription group no permission,
g``). Those remarks are not the ACL's and stay `NoPermissionError` (an operator's switch, usually
temporary). The remarks above were recorded from real 4.9.7 and 5.3.3 brokers
(tests/data/differential/).

A refusal names the user and, for authorization, the resource; the action it lacked is not in the
remark, so `needed_actions` tells it from the request code (the tables follow what the brokers were
seen to demand, docs/acl.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
NO_PERMISSION = 16
# exceptionSimpleDesc appends ", <top stack frame>" to the exception text
_JAVA_FRAME = re.compile(r", [\w.$<>]+\([^()]*\)$")

AUTHENTICATION = "authentication"
AUTHORIZATION = "authorization"

# ACL 2.0 (5.x) remarks; the user and resource groups are what the message names
_ACL2: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^User:(?P<user>.*) has no permission to access (?P<resource>[A-Za-z]+:.*) from \S*, "
                r"(?P<detail>.*)$", re.S), AUTHORIZATION),
    (re.compile(r"^username cannot be null\.?$"), AUTHENTICATION),
    (re.compile(r"^User:(?P<user>.*) is not found\.?$"), AUTHENTICATION),
    (re.compile(r"^User:(?P<user>.*) not found\.?$"), AUTHORIZATION),
    (re.compile(r"^User:(?P<user>.*) is disabled\.?$"), AUTHENTICATION),
    (re.compile(r"^check signature failed\.?$"), AUTHENTICATION),
    (re.compile(r"^parse authorization context error"), AUTHORIZATION),
    (re.compile(r"^The authentication\w* is not configured"), AUTHENTICATION),
    (re.compile(r"^The authorization\w* is not configured"), AUTHORIZATION),
]
# ACL 1.0 (4.x) AclException messages
_ACL1: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^No default permission for (?P<kind>topic|group):(?P<name>.*)$", re.S), AUTHORIZATION),
    (re.compile(r"^Need admin permission for request code=\d+, but accessKey=(?P<user>.*) is not$"), AUTHORIZATION),
    (re.compile(r"^Check signature failed for accessKey=(?P<user>.*)$"), AUTHENTICATION),
    (re.compile(r"^No acl config for (?P<user>.*)$"), AUTHENTICATION),
]

# Request codes the refusal messages name (RequestCode values; the codec's codes module has them all)
SEND_MESSAGE, PULL_MESSAGE, QUERY_MESSAGE, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET = 10, 11, 12, 14, 15
UPDATE_AND_CREATE_TOPIC, SEARCH_OFFSET_BY_TIMESTAMP, GET_MAX_OFFSET, GET_MIN_OFFSET = 17, 29, 30, 31
GET_EARLIEST_MSG_STORETIME, HEART_BEAT, UNREGISTER_CLIENT, CONSUMER_SEND_MSG_BACK = 32, 34, 35, 36
GET_CONSUMER_LIST_BY_GROUP, LOCK_BATCH_MQ, UNLOCK_BATCH_MQ = 38, 41, 42
GET_TOPIC_STATS_INFO, GET_CONSUMER_CONNECTION_LIST, GET_CONSUME_STATS = 202, 203, 208
SEND_MESSAGE_V2, SEND_BATCH_MESSAGE = 310, 320
ADMIN_CODES_ACL1 = frozenset({17, 25, 215, 200, 207})

# ACL 2.0: request code -> resource type -> the actions of which the user needs one
ACL2_ACTIONS: dict[int, dict[str, tuple[str, ...]]] = {
    SEND_MESSAGE: {"Topic": ("Pub",), "Group": ("Sub",)},  # Group: a send to %RETRY%<group>
    SEND_MESSAGE_V2: {"Topic": ("Pub",), "Group": ("Sub",)},
    SEND_BATCH_MESSAGE: {"Topic": ("Pub",), "Group": ("Sub",)},
    PULL_MESSAGE: {"Topic": ("Sub",), "Group": ("Sub",)},
    QUERY_MESSAGE: {"Topic": ("Sub", "Get")},
    HEART_BEAT: {"Topic": ("Sub",), "Group": ("Sub",)},
    UNREGISTER_CLIENT: {"Group": ("Pub", "Sub")},
    CONSUMER_SEND_MSG_BACK: {"Group": ("Sub",)},
    GET_CONSUMER_LIST_BY_GROUP: {"Group": ("Sub", "Get")},
    QUERY_CONSUMER_OFFSET: {"Topic": ("Sub", "Get"), "Group": ("Sub", "Get")},
    UPDATE_CONSUMER_OFFSET: {"Topic": ("Sub", "Update"), "Group": ("Sub", "Update")},
    LOCK_BATCH_MQ: {"Topic": ("Sub",), "Group": ("Sub",)},
    UNLOCK_BATCH_MQ: {"Topic": ("Sub",), "Group": ("Sub",)},
    GET_MAX_OFFSET: {"Topic": ("Get",)},
    GET_MIN_OFFSET: {"Topic": ("Get",)},
    SEARCH_OFFSET_BY_TIMESTAMP: {"Topic": ("Get",)},
    GET_EARLIEST_MSG_STORETIME: {"Topic": ("Get",)},
    GET_TOPIC_STATS_INFO: {"Topic": ("Get",)},
    GET_CONSUME_STATS: {"Topic": ("Get",), "Group": ("Get",)},
    GET_CONSUMER_CONNECTION_LIST: {"Group": ("Get",)},
    UPDATE_AND_CREATE_TOPIC: {"Topic": ("Create",)},
}
_SENDS = frozenset({SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE})
# ACL 1.0 needs PUB on a topic to send to it, SUB on a group (%RETRY%<group>) for everything, SUB on a
# topic for everything else it checks
_REQUEST_NAMES = {
    SEND_MESSAGE: "SEND_MESSAGE", SEND_MESSAGE_V2: "SEND_MESSAGE_V2", SEND_BATCH_MESSAGE: "SEND_BATCH_MESSAGE",
    PULL_MESSAGE: "PULL_MESSAGE", QUERY_MESSAGE: "QUERY_MESSAGE", HEART_BEAT: "HEART_BEAT",
    UNREGISTER_CLIENT: "UNREGISTER_CLIENT", CONSUMER_SEND_MSG_BACK: "CONSUMER_SEND_MSG_BACK",
    GET_CONSUMER_LIST_BY_GROUP: "GET_CONSUMER_LIST_BY_GROUP", QUERY_CONSUMER_OFFSET: "QUERY_CONSUMER_OFFSET",
    UPDATE_CONSUMER_OFFSET: "UPDATE_CONSUMER_OFFSET", LOCK_BATCH_MQ: "LOCK_BATCH_MQ",
    UNLOCK_BATCH_MQ: "UNLOCK_BATCH_MQ", GET_MAX_OFFSET: "GET_MAX_OFFSET", GET_MIN_OFFSET: "GET_MIN_OFFSET",
    SEARCH_OFFSET_BY_TIMESTAMP: "SEARCH_OFFSET_BY_TIMESTAMP", GET_EARLIEST_MSG_STORETIME: "GET_EARLIEST_MSG_STORETIME",
    GET_TOPIC_STATS_INFO: "GET_TOPIC_STATS_INFO", GET_CONSUME_STATS: "GET_CONSUME_STATS",
    GET_CONSUMER_CONNECTION_LIST: "GET_CONSUMER_CONNECTION_LIST", UPDATE_AND_CREATE_TOPIC: "UPDATE_AND_CREATE_TOPIC",
}


@dataclass(frozen=True)
class Refusal:
    """What an ACL refusal says: ``acl`` "1.0" or "2.0", ``kind`` authentication or authorization, the
    broker's ``reason`` (no Java stack frame), the ``user`` and ``resource`` (``Topic:T`` / ``Group:G``)
    when the broker names them."""

    acl: str
    kind: str
    reason: str
    user: str | None = None
    resource: str | None = None


def parse_refusal(code: int, remark: str | None) -> Refusal | None:
    """The ACL refusal an answer is, or None when it is not one (any other error, or a code-16 NO_PERMISSION
    of a topic, broker or group that is switched off)."""
    text = (remark or "").strip()
    if text.startswith(ACL_EXCEPTION):
        return _acl1(_JAVA_FRAME.sub("", text.removeprefix(ACL_EXCEPTION).removeprefix(":").strip()))
    if code != NO_PERMISSION:
        return None
    for pattern, kind in _ACL2:
        m = pattern.match(text)
        if m is not None:
            groups = m.groupdict()
            return Refusal("2.0", kind, text, groups.get("user"), groups.get("resource"))
    return None


def _acl1(reason: str) -> Refusal:
    for pattern, kind in _ACL1:
        m = pattern.match(reason)
        if m is None:
            continue
        groups = m.groupdict()
        resource = f"{groups['kind'].capitalize()}:{groups['name']}" if "kind" in groups else None
        return Refusal("1.0", kind, reason, groups.get("user"), resource)
    return Refusal("1.0", AUTHENTICATION if "accessKey" in reason else AUTHORIZATION, reason or "access denied")


def request_name(code: int | None) -> str | None:
    """``PULL_MESSAGE`` for 11, ``request 9999`` for a code without a name here, None for None."""
    if code is None:
        return None
    return _REQUEST_NAMES.get(code, f"request {code}")


def needed_actions(acl: str, code: int | None, resource: str | None) -> tuple[str, ...]:
    """The actions (ACL 2.0: Pub, Sub, Get, Update, Create; 1.0: PUB, SUB, admin) of which one was missing
    on ``resource`` for request ``code``; empty when the tables do not say."""
    if code is None:
        return ()
    if acl == "1.0":
        if code in ADMIN_CODES_ACL1 and resource is None:
            return ("admin",)
        if resource is None:
            return ()
        return ("PUB",) if code in _SENDS and resource.startswith("Topic:") else ("SUB",)
    if resource is None:
        return ()
    kind = resource.split(":", 1)[0]
    return ACL2_ACTIONS.get(code, {}).get(kind, ())


__all__ = ["ACL2_ACTIONS", "ACL_EXCEPTION", "AUTHENTICATION", "AUTHORIZATION", "Refusal", "needed_actions",
           "parse_refusal", "request_name"]
