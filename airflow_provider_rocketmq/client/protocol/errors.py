"""Typed errors of the RocketMQ client.

One root (`RocketMQError`); `BrokerError` carries the broker's response code and
remark, with one subclass per code family built from a table, so callers can
``except TopicNotExistError`` or look at ``err.retriable``.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from .acl_refusals import AUTHENTICATION, AUTHORIZATION, Refusal, needed_actions, parse_refusal, request_name


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


class RequestLike(Protocol):
    """What `broker_error` reads of the refused request (a `command.RemotingCommand`)."""

    code: int
    ext_fields: dict[str, str] | None


class RefusedRequest:
    """A `RequestLike` for answers whose request object is not at hand (pulls on the fast path, sends)."""

    __slots__ = ("code", "ext_fields")

    def __init__(self, code: int, access_key: str | None = None) -> None:
        self.code = code
        self.ext_fields: dict[str, str] | None = {"AccessKey": access_key} if access_key else None


class AclDeniedError(BrokerError):
    """The broker's ACL refused the request: no, unknown or disabled user, wrong signature, or no permission.

    ``acl`` is ``"1.0"`` (4.x plain ACL: SYSTEM_ERROR with the AclException as remark) or ``"2.0"``
    (5.3+: NO_PERMISSION with the authentication or authorization message); ``kind`` says which of the
    two failed. ``reason`` is the broker's message, ``remark`` its full text; ``user``, ``resource``
    (``Topic:T`` / ``Group:G``), ``actions`` (one of which was missing) and ``request`` (the request
    code's name) say what was refused, as far as the broker and the request tell. Not retriable: the
    same credentials get the same answer until an operator changes the ACL.
    """

    retriable = False

    def __init__(self, code: int, remark: str | None = None, *, addr: str | None = None,
                 request: RequestLike | None = None, refusal: Refusal | None = None) -> None:
        super().__init__(code, remark, addr=addr)
        refusal = refusal or parse_refusal(code, remark) or Refusal("1.0", AUTHORIZATION, "access denied")
        self.acl = refusal.acl
        self.kind = refusal.kind
        self.reason = refusal.reason
        self.resource = refusal.resource
        self.request_code = request.code if request is not None else None
        self.request = request_name(self.request_code)
        sent_key = (request.ext_fields or {}).get("AccessKey") if request is not None else None
        self.user = refusal.user or sent_key
        self.actions = needed_actions(refusal.acl, self.request_code, refusal.resource)
        self.args = (self.describe(),)

    def describe(self) -> str:
        """One line: who was refused what, where, and the broker's own words."""
        where = f" {self.addr}" if self.addr else ""
        anonymous = self.reason.startswith(("username cannot be null", "No accessKey is configured"))
        who = "a request without credentials" if anonymous else f"user {self.user}" if self.user else "the client"
        if self.kind == AUTHENTICATION:
            what = f"{who} was refused" if anonymous else f"{who} was not authenticated"
        elif self.resource and self.actions:
            what = f"{who} lacks {' or '.join(self.actions)} on {self.resource}"
        elif self.resource:
            what = f"{who} has no permission on {self.resource}"
        elif self.actions:
            what = f"{who} lacks the {' or '.join(self.actions)} permission"
        else:
            what = f"{who} was refused"
        request = f" ({self.request})" if self.request else ""
        return f"access denied by broker{where} (ACL {self.acl}): {what}{request}: {self.reason}"


class SystemBusyError(BrokerError):
    retriable = True


class RequestCodeNotSupportedError(BrokerError):
    pass


class ServiceNotAvailableError(BrokerError):
    retriable = True


class NoPermissionError(BrokerError):
    """NO_PERMISSION (16) that is not the ACL's: the topic or broker is not writable / readable, or the
    group may not consume (an operator's switch, usually temporary; see `acl_refusals`)."""


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


def broker_error(code: int, remark: str | None = None, *, addr: str | None = None,
                 request: RequestLike | None = None) -> BrokerError:
    """Build the typed error for a response code (unknown codes give plain BrokerError); an ACL refusal
    (either generation, see `acl_refusals`) is an `AclDeniedError` naming what ``request`` needed."""
    refusal = parse_refusal(code, remark)
    if refusal is not None:
        return AclDeniedError(code, remark, addr=addr, request=request, refusal=refusal)
    return _CODE_TABLE.get(code, BrokerError)(code, remark, addr=addr)
