"""Topic naming rules and the reserved names of the embedded broker (TopicValidator, MixAll)."""

from __future__ import annotations

import re

from .schedule import SCHEDULE_TOPIC

DEFAULT_TOPIC = "TBW102"  # the template topic producers route by before a topic exists
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
TOPIC_MAX_LEN = 127
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
NOT_ALLOWED_SEND_TOPICS = frozenset({SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"})


def validate_topic(topic: str) -> str | None:
    """TopicValidator.validateTopic: the remark for a bad name, or None."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if not _TOPIC_RE.match(topic):
        return f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_MAX_LEN:
        return "The specified topic is longer than topic max length."
    return None
