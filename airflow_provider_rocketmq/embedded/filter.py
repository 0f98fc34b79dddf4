"""Subscriptions as the broker sees them, and tag filtering by tagsCode.

A heartbeat carries each subscription's ``codeSet`` (Java ``String.hashCode`` of
every tag); the broker filters a consume queue by comparing each entry's stored
tagsCode with that set and never looks at tag strings (REFERENCE 2.6/2.10).
A pull with sysFlag 0x4 carries the expression instead, and the broker builds
the code set itself (FilterAPI.build).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..client.protocol.message import java_string_hash

SUB_ALL = "*"


class SubscriptionParseError(ValueError):
    """The expression (or its type) cannot be turned into a tag subscription."""


@dataclass
class SubscriptionData:
    """One topic subscription of a consumer group (SubscriptionData.java)."""

    topic: str
    sub_string: str = SUB_ALL
    tags: list[str] = field(default_factory=list)
    codes: set[int] = field(default_factory=set)
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @property
    def match_all(self) -> bool:
        return not self.sub_string or self.sub_string.strip() == SUB_ALL

    def matches(self, tags_code: int) -> bool:
        return self.match_all or tags_code in self.codes

    @classmethod
    def build(cls, topic: str, expression: str | None, expression_type: str | None = "TAG",
              sub_version: int | None = None) -> SubscriptionData:
        """Parse ``"TagA || TagB"`` (or ``*``) like FilterAPI.build."""
        etype = expression_type or "TAG"
        if etype != "TAG":
            raise SubscriptionParseError(f"The broker does not support consumer to filter message by {etype}")
        expr = (expression or "").strip()
        version = sub_version if sub_version is not None else int(time.time() * 1000)
        if not expr or expr == SUB_ALL:
            return cls(topic, SUB_ALL, sub_version=version)
        tags = [t.strip() for t in expr.split("||") if t.strip()]
        if not tags:
            raise SubscriptionParseError(f"subscription expression {expression!r} holds no tag")
        return cls(topic, expr, tags, {java_string_hash(t) for t in tags}, version)

    @classmethod
    def from_json(cls, obj: Any) -> SubscriptionData:
        """From a heartbeat's subscriptionDataSet entry; the code set is taken as sent."""
        if not isinstance(obj, dict) or not isinstance(obj.get("topic"), str):
            raise SubscriptionParseError(f"subscription entry lacks a topic: {obj!r}")
        try:
            codes = {int(c) for c in obj.get("codeSet") or []}
            return cls(obj["topic"], str(obj.get("subString") or SUB_ALL),
                       [str(t) for t in obj.get("tagsSet") or []], codes,
                       int(obj.get("subVersion") or 0), str(obj.get("expressionType") or "TAG"),
                       bool(obj.get("classFilterMode", False)))
        except (TypeError, ValueError) as exc:
            raise SubscriptionParseError(f"subscription entry for {obj.get('topic')!r} is malformed: {exc}") \
                from None

    def to_json(self) -> dict[str, Any]:
        """fastjson field order (alphabetical), as in GET_CONSUMER_CONNECTION_LIST."""
        return {"classFilterMode": self.class_filter_mode, "codeSet": sorted(self.codes),
                "expressionType": self.expression_type, "subString": self.sub_string,
                "subVersion": self.sub_version, "tagsSet": list(self.tags), "topic": self.topic}
