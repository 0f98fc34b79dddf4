"""Reading request headers on the broker side, with Java's error texts.

Java decodes a custom header into a typed object and answers SYSTEM_ERROR when
a required (``@CFNotNull``) field is absent or a number does not parse; these
helpers raise `HeaderError` carrying that remark so the handler can answer it.
"""

from __future__ import annotations

from ..client.protocol.command import RemotingCommand

FAQ_SUFFIX = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

# SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE one-letter header fields -> SendMessageRequestHeader names.
V2_FIELDS = {
    "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
    "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
    "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName",
}


# Header fields Java declares as int/Integer; the rest of the numbers are long.
INT32_FIELDS = frozenset({
    "queueId", "sysFlag", "flag", "reconsumeTimes", "maxReconsumeTimes", "maxMsgNums", "defaultTopicQueueNums",
    "delayLevel", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag",
})


class HeaderError(ValueError):
    """A request header field is missing or malformed; ``str()`` is the remark to answer."""


def req_str(cmd: RemotingCommand, name: str) -> str:
    value = cmd.ext.get(name)
    if value is None:
        raise HeaderError(f"the custom field <{name}> is null")
    return value


def opt_str(cmd: RemotingCommand, name: str, default: str | None = None) -> str | None:
    return cmd.ext.get(name, default)


def req_int(cmd: RemotingCommand, name: str) -> int:
    return _to_int(name, req_str(cmd, name))


def opt_int(cmd: RemotingCommand, name: str, default: int) -> int:
    value = cmd.ext.get(name)
    return default if value is None or value == "" or value == "null" else _to_int(name, value)


def opt_bool(cmd: RemotingCommand, name: str, default: bool = False) -> bool:
    value = cmd.ext.get(name)
    return default if value is None else value.strip().lower() == "true"


def _to_int(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise HeaderError(f"the custom field <{name}> is not a number: {value!r}") from None
    bits = 32 if name in INT32_FIELDS else 64
    if not -(1 << (bits - 1)) <= number < (1 << (bits - 1)):
        raise HeaderError(f"the custom field <{name}> is out of the int{bits} range: {value}")
    return number


def send_header(cmd: RemotingCommand) -> dict[str, str]:
    """SEND_MESSAGE header fields by their long names, whichever form the request used."""
    ext = cmd.ext
    if cmd.code in (310, 320):
        return {V2_FIELDS.get(k, k): v for k, v in ext.items()}
    return dict(ext)
