"""Typed errors of the RocketMQ client.

One root (`RocketMQError`); `BrokerError` carries the broker's response code and
remark, with one subclass per code family built from a table, so callers can
``except TopicNotExistError`` or look at ``err.retriable``.
"""

from __future__ import annotations

import re
from typing import ClassVar


class RocketMQError(Exception):
    """Root of every error raised by this package."""

    retriable: ClassVar[bool] = False


class ConfigError(RocketMQError, ValueError):
    """Invalid configuration value; ``field`` names the offending knob."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class ProtocolError(RocketMQError):
    """Bytes on the wire that do not form a valid remoting frame or body."""


class FrameTooLargeError(ProtocolError):
    """A frame announced a length above the 16 MiB limit."""


class MessageDecodeError(ProtocolError):
    """A stored-message record (pull body, send body) is malformed or corrupt."""


class CompressionUnavailableError(MessageDecodeError):
    """A message body uses LZ4/ZSTD but the Python package is not installed."""


class ConnectionClosedError(RocketMQError):
    """The connection closed before a response arrived (or was closed by us)."""

    retriable = True


class RequestTimeoutError(RocketMQError):
    """No response within the request's deadline."""

    retriable = True


class RouteNotFoundError(RocketMQError):
    """No name server knows the topic (or every name server failed)."""


class ClientStateError(RocketMQError):
    """An operation that the client's current state does not allow."""


class BrokerError(RocketMQError):
    """A response whose code is not SUCCESS."""

    code: int

    def __init__(self, code: int, remark: str | None = None, *, addr: str | None = None) -> None:
        self.code = code
        self.remark = remark or ""
        self.addr = addr
        where = f" from {addr}" if addr else ""
        super().__init__(f"broker error {code}{where}: {self.remark}".rstrip(": "))


class SystemError_(BrokerError):  # trailing underscore: does not shadow the builtin SystemError
    retriable = True


ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
# exceptionSimpleDesc appends ", <top stack frame>" to the exception text
_JAVA_FRAME = re.compile(r", [\w.$<>]+\([^()]*\)$")


class AclDeniedError(SystemError_):
    """The broker's ACL refused the request: no or unknown access key, wrong signature, or no permission.

    A 4.x broker answers SYSTEM_ERROR (1) with the AclException as remark; ``reason`` is its message
    (e.g. ``No default permission for group:g``), ``remark`` the full text. Not retriable: the same
    credentials get the same answer.
    """

    retriable = False

    def __init__(self, code: int, remark: str | None = None, *, addr: str | None = None) -> None:
        super().__init__(code, remark, addr=addr)
        text = self.remark.removeprefix(ACL_EXCEPTION).removeprefix(":").strip()
        self.reason = _JAVA_FRAME.sub("", text) or "access denied"
        where = f" {addr}" if addr else ""
        self.args = (f"access denied by broker{where} (ACL): {self.reason}",)


class SystemBusyError(BrokerError):
    retriable = True


class RequestCodeNotSupportedError(BrokerError):
    pass


class ServiceNotAvailableError(BrokerError):
    retriable = True


class NoPermissionError(BrokerError):
    pass


class TopicNotExistError(BrokerError):
    pass


class SubscriptionError(BrokerError):
    pass


class ConsumerNotOnlineError(BrokerError):
    pass


class FlowControlError(BrokerError):
    retriable = True


class FlushTimeoutError(BrokerError):
    retriable = True


_CODE_TABLE: dict[int, type[BrokerError]] = {
    1: SystemError_,
    2: SystemBusyError,
    3: RequestCodeNotSupportedError,
    10: FlushTimeoutError,
    11: FlushTimeoutError,
    12: FlushTimeoutError,
    14: ServiceNotAvailableError,
    16: NoPermissionError,
    17: TopicNotExistError,
    23: SubscriptionError,
    24: SubscriptionError,
    25: SubscriptionError,
    26: SubscriptionError,
    206: ConsumerNotOnlineError,
    215: FlowControlError,
}


def broker_error(code: int, remark: str | None = None, *, addr: str | None = None) -> BrokerError:
    """Build the typed error for a response code (unknown codes give plain BrokerError)."""
    if remark and remark.startswith(ACL_EXCEPTION):
        return AclDeniedError(code, remark, addr=addr)
    return _CODE_TABLE.get(code, BrokerError)(code, remark, addr=addr)
