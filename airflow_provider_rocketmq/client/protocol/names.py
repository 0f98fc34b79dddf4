"""Resource names on the wire: topic and group validation, namespaces, retry and DLQ topics.

What Java's ``Validators`` and ``NamespaceUtil`` decide; shared by the client, the embedded
broker and the window (no I/O).
"""

from __future__ import annotations

import re

from .errors import ConfigError

NAMESPACE_SEPARATOR = "%"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
DEFAULT_TOPIC = "TBW102"  # the template topic producers route by before a topic exists
# Topics the broker owns; Java's NamespaceUtil never prefixes them.
SYSTEM_TOPICS = frozenset({DEFAULT_TOPIC, "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "OFFSET_MOVED_EVENT",
                           "SELF_TEST_TOPIC", "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC",
                           "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"})
TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_\-]+$")  # Java Validators.VALID_PATTERN_STR
MAX_TOPIC_LEN = 127


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``: where a group's failed messages wait for redelivery."""
    return RETRY_PREFIX + group


def strip_namespace(namespace: str, resource: str) -> str:
    """``resource`` without the ``namespace%`` prefix (retry/DLQ prefixes stay in front)."""
    if not namespace or not resource:
        return resource
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if resource.startswith(prefix):
            return prefix + strip_namespace(namespace, resource[len(prefix):])
    return resource.removeprefix(namespace + NAMESPACE_SEPARATOR)


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``: where a group's messages go after their last retry."""
    return DLQ_PREFIX + group


def check_topic(topic: object, field_name: str = "topic") -> str:
    """A valid topic or group name (Java Validators), else ConfigError naming ``field_name``."""
    if not isinstance(topic, str) or not topic:
        raise ConfigError(field_name, "must be a non-empty string")
    if len(topic) > MAX_TOPIC_LEN:
        raise ConfigError(field_name, f"{topic[:20]!r}... is longer than {MAX_TOPIC_LEN} characters")
    if not TOPIC_RE.match(topic):
        raise ConfigError(field_name, f"{topic!r} may only contain letters, digits, '%', '|', '_' and '-'")
    return topic
