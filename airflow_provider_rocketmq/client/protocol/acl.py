"""ACL request signing (REFERENCE 2.13), applied to every outgoing request.

The broker recomputes the signature over the extFields it receives (minus
``Signature``) and the body, so every field we send must be present before
signing: the hook runs last, just before the frame is encoded.

    content   = values of all extFields except Signature, ordered by key (UTF-16
                order, like Java's TreeMap), UTF-8, concatenated, then the body
    Signature = Base64(HMAC-SHA1(secretKey, content))
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from .command import RemotingCommand

ACCESS_KEY = "AccessKey"
SECURITY_TOKEN = "SecurityToken"
SIGNATURE = "Signature"


def _utf16_key(key: str) -> bytes:
    # Java's String.compareTo orders by UTF-16 code units; Python orders by code
    # point. They differ only for supplementary characters, which this handles.
    return key.encode("utf-16-be")


def sign(secret_key: str, ext_fields: dict[str, str], body: bytes | None) -> str:
    """Signature over ``ext_fields`` (Signature itself excluded) and ``body``."""
    content = "".join(ext_fields[k] for k in sorted(ext_fields, key=_utf16_key) if k != SIGNATURE)
    data = content.encode("utf-8") + (body or b"")
    digest = hmac.new(secret_key.encode("utf-8"), data, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


class AclHook:
    """RPC hook adding AccessKey / [SecurityToken] / Signature to a request."""

    __slots__ = ("_secret_key", "access_key", "security_token")

    def __init__(self, access_key: str, secret_key: str, security_token: str | None = None) -> None:
        self.access_key = access_key
        self._secret_key = secret_key
        self.security_token = security_token

    def __call__(self, cmd: RemotingCommand) -> None:
        ext = dict(cmd.ext)
        ext.pop(SIGNATURE, None)  # a re-sent command is signed afresh
        ext[ACCESS_KEY] = self.access_key
        if self.security_token:
            ext[SECURITY_TOKEN] = self.security_token
        ext[SIGNATURE] = sign(self._secret_key, ext, cmd.body)
        cmd.ext_fields = ext

    def __repr__(self) -> str:
        return f"AclHook(access_key={self.access_key!r})"
