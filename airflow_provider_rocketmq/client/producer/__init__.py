"""The producer: one message at a time (`Producer.send`) or pipelined (`send_many`, `SendPipeline`).

`producer` holds the facades and the single-send path, `pipeline` many requests in flight per
broker (it sees its producer through the `ports.SendPort`), `direct_send` the blocking-socket fast
path of a synchronous send, `message_id` the UNIQ_KEY every sent message carries.
"""

from .pipeline import (
    BULK_MAX_BATCH,
    BULK_MAX_IN_FLIGHT,
    MAX_BATCH,
    MAX_IN_FLIGHT,
    PipelineOptions,
    SendAbortedError,
    SendOutcome,
)
from .producer import AsyncProducer, Producer, SendResult

__all__ = ["BULK_MAX_BATCH", "BULK_MAX_IN_FLIGHT", "MAX_BATCH", "MAX_IN_FLIGHT", "AsyncProducer", "PipelineOptions",
           "Producer", "SendAbortedError", "SendOutcome", "SendResult"]
