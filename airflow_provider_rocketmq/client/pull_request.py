"""PULL_MESSAGE requests, for every reader of a queue (the push consumer, the Spark range reader).

A queue's pull header only changes in five numbers (offset, batch size, flag,
commit offset, subscription version) and the opaque, so `PullFrame` renders the
JSON text around them once per queue: byte for byte what
``RemotingCommand(PULL_MESSAGE, fields).encode()`` writes for the same fields in
the same order (a test holds the two together). `PullFrame.start` is the one way
a pull is sent: the rendered frame, or the command itself on a connection with a
signing (ACL) hook, which signs the command's fields.
"""

from __future__ import annotations

import asyncio
import struct

from .connection import RemotingProtocol, next_opaque
from .protocol.codes import RequestCode
from .protocol.command import RemotingCommand, json_text

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

    def start(self, conn: RemotingProtocol, offset: int, max_nums: int, sys_flag: int, sub_version: int,
              subscription: str | None) -> tuple[int, asyncio.Future[RemotingCommand]]:
        """Send one pull of this queue on ``conn`` (commit offset 0): its opaque and the future of its
        answer, with no timer attached; the caller calls ``conn.forget(opaque)`` once it stops waiting."""
        if conn.rpc_hook is None:
            opaque = next_opaque()
            return opaque, conn.start_encoded(opaque, self.render(opaque, offset, max_nums, sys_flag, 0, sub_version,
                                                                  subscription))
        cmd = RemotingCommand(RequestCode.PULL_MESSAGE, self.fields(offset, max_nums, sys_flag, 0, sub_version,
                                                                    subscription))
        fut = conn.start_request(cmd)  # sets the opaque, then the hook signs: read it only afterwards
        return cmd.opaque, fut
