"""MessageQueue: (topic, broker name, queue id), ordered as Java's compareTo."""

from __future__ import annotations

from typing import Any, NamedTuple

from .errors import ProtocolError


class MessageQueue(NamedTuple):
    """Immutable, hashable, and sorted by (topic, broker_name, queue_id) like Java."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:  # Java MessageQueue.toString, used as the consistent-hash key
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"

    def to_json(self) -> dict[str, Any]:
        """fastjson field order (alphabetical)."""
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    # fastjson writers use these to emit the inline-object map key form
    def __fastjson_key__(self) -> dict[str, Any]:
        return self.to_json()

    def __fastjson__(self) -> dict[str, Any]:
        return self.to_json()

    @classmethod
    def from_json(cls, obj: Any) -> MessageQueue:
        if not isinstance(obj, dict):
            raise ProtocolError(f"MessageQueue is not an object: {obj!r}")
        try:
            return cls(str(obj["topic"]), str(obj["brokerName"]), int(obj["queueId"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"MessageQueue object lacks a valid field: {exc}: {obj!r}") from None
