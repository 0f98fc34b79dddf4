"""Topic naming rules of the embedded broker (TopicValidator): the client's pattern, Java's remarks,
and the system topics a client may not send to."""

from __future__ import annotations

from ..client.protocol.names import MAX_TOPIC_LEN, TOPIC_RE

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC: delayed messages wait here
NOT_ALLOWED_SEND_TOPICS = frozenset({SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"})


def validate_topic(topic: str) -> str | None:
    """TopicValidator.validateTopic: the remark for a bad name, or None."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if not TOPIC_RE.match(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"  # 4.9.7
    if len(topic) > MAX_TOPIC_LEN:
        return "The specified topic is longer than topic max length."
    return None
