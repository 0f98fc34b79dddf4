"""Subscriptions: expression parsing, heartbeat JSON and exact tag re-filtering.

REFERENCE 2.10: ``"tagA || tagB"`` splits on ``||``; each tag's Java
``String.hashCode`` goes into ``codeSet`` (the broker filters on these hashes),
and the client re-checks the exact tag string because hashes collide.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..protocol.errors import ConfigError
from ..protocol.message import java_string_hash

SUB_ALL = "*"


@dataclass
class SubscriptionData:
    """One topic's subscription as the broker registers it from heartbeats."""

    topic: str
    sub_string: str = SUB_ALL
    tags_set: frozenset[str] = frozenset()
    code_set: tuple[int, ...] = ()
    sub_version: int = field(default_factory=lambda: int(time.time() * 1000))
    expression_type: str = "TAG"
    tags_order: tuple[str, ...] = ()  # tags in expression order, for a Java-identical JSON

    @property
    def match_all(self) -> bool:
        return not self.tags_set

    def to_json(self) -> dict[str, Any]:
        return {"classFilterMode": False, "codeSet": list(self.code_set), "expressionType": self.expression_type,
                "subString": self.sub_string, "subVersion": self.sub_version, "tagsSet": list(self.tags_order),
                "topic": self.topic}


def build_subscription(topic: str, expression: str | None, expression_type: str = "TAG") -> SubscriptionData:
    """Parse a TAG expression (``*``, ``a``, ``a || b``) like Java FilterAPI."""
    if not isinstance(topic, str) or not topic.strip():
        raise ConfigError("topic", "must be a non-empty topic name")
    if expression_type not in ("TAG", "SQL92"):
        raise ConfigError("expression_type", f"must be TAG or SQL92, got {expression_type!r}")
    if expression_type == "SQL92":
        if not expression:
            raise ConfigError("expression", "an SQL92 expression must not be empty")
        return SubscriptionData(topic, expression, expression_type="SQL92")
    if expression is None or not expression.strip() or expression.strip() == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL)
    tags: list[str] = []
    for part in expression.split("||"):
        tag = part.strip()
        if tag and tag not in tags:
            tags.append(tag)
    if not tags:
        raise ConfigError("expression", f"{expression!r} names no tag")
    return SubscriptionData(topic, expression, frozenset(tags), tuple(java_string_hash(t) for t in tags),
                            tags_order=tuple(tags))
