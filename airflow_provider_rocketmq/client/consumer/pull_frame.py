"""Pre-rendered PULL_MESSAGE frames: the hot request of a consumer, built without JSON encoding.

A queue's pull header only changes in five numbers (offset, batch size, flag,
commit offset, subscription version) and the opaque, so the JSON text around
them is rendered once per queue. The result is byte for byte what
``RemotingCommand(PULL_MESSAGE, fields).encode()`` writes for the same fields in
the same order (a test holds the two together); signed (ACL) connections still
go through `RemotingCommand`, because the hook signs the command's fields.
"""

from __future__ import annotations

import struct

from ..protocol.codes import RequestCode
from ..protocol.command import RemotingCommand, json_text

_TWO_INTS = struct.Struct(">iI")


class PullFrame:
    """The constant parts of one queue's pull header (fields in `fields` order)."""

    __slots__ = ("_head", "_tail", "_tail_end", "const")

    def __init__(self, const: dict[str, str]) -> None:
        self.const = const  # consumerGroup, topic, queueId, suspendTimeoutMillis, expressionType, bname
        probe = RemotingCommand(RequestCode.PULL_MESSAGE, {})
        self._head = f'{{"code":{probe.code},"extFields":{{{json_text(const)[1:-1]}'
        # what encode_header writes after extFields for a request without remark
        self._tail = f'}},"flag":{probe.flag},"language":{json_text(probe.language)},"opaque":'
        self._tail_end = f',"serializeTypeCurrentRPC":"JSON","version":{probe.version}}}'

    def fields(self, offset: int, max_nums: int, sys_flag: int, commit: int, sub_version: int,
               subscription: str | None) -> dict[str, str]:
        """The header as a dict (for `RemotingCommand`), in the rendered order."""
        h = dict(self.const)
        h["queueOffset"] = str(offset)
        h["maxMsgNums"] = str(max_nums)
        h["sysFlag"] = str(sys_flag)
        h["commitOffset"] = str(commit)
        h["subVersion"] = str(sub_version)
        if subscription is not None:
            h["subscription"] = subscription
        return h

    def render(self, opaque: int, offset: int, max_nums: int, sys_flag: int, commit: int, sub_version: int,
               subscription: str | None) -> bytes:
        """The complete frame (length prefix included)."""
        text = (f'{self._head},"queueOffset":"{offset}","maxMsgNums":"{max_nums}","sysFlag":"{sys_flag}"'
                f',"commitOffset":"{commit}","subVersion":"{sub_version}"')
        if subscription is not None:
            text += ',"subscription":' + json_text(subscription)
        header = (text + self._tail + str(opaque) + self._tail_end).encode("utf-8")
        return _TWO_INTS.pack(4 + len(header), len(header)) + header
