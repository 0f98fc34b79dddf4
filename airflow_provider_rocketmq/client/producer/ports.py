"""The send port: what a `SendPipeline` uses of its producer (`AsyncProducer` implements it).

The pipeline holds this view, never the producer itself, so `pipeline` does not import `producer`:
imports point one way (`producer` -> `pipeline` -> `ports`), as in client/consumer/ports.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from ..mqclient import MQClient
from ..protocol.command import RemotingCommand
from ..protocol.queue import MessageQueue
from ..protocol.send_wire import SendFrameRenderer, SendResult


class SendPort(Protocol):
    """A producer's settings, its client, its queue choice and one attempt of one request."""

    client: MQClient
    group: str  # as given (the client's namespace is applied by the user of the port)
    renderer: SendFrameRenderer  # SEND_MESSAGE_V2 frames of this producer's group
    compress_over: int
    max_message_size: int
    retry_times: int  # attempts after the first, for requests the broker certainly did not store
    rotation: Iterator[int]  # the round robin over a topic's queues, shared with the producer's own sends

    @property
    def attempt_timeout(self) -> float:
        """How long one attempt waits for its answer (connect included)."""
        ...

    async def publish_queues(self, topic: str, refresh: bool = False) -> list[MessageQueue]:
        """The writable queues of ``topic`` (see `AsyncProducer.publish_queues`)."""
        ...

    def pick_queue(self, queues: list[MessageQueue], avoid_broker: str | None) -> MessageQueue:
        """The next queue of the round robin, on another broker than ``avoid_broker`` when there is one."""
        ...

    async def send_request(self, mq: MessageQueue, cmd: RemotingCommand, uniq: str) -> SendResult:
        """One attempt of ``cmd`` to ``mq``'s master; `NotSentError` when the broker certainly did not
        store it (a refused or timed-out connect, a retriable answer)."""
        ...


__all__ = ["SendPort"]
