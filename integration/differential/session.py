"""Scripted cases: a registry, and the `Session` a case talks to its broker through.

A case is ``async def case(s: Session) -> None`` registered with ``@case("area.what")``. It names
its topics and groups with ``s.name(...)`` (unique per run, normalised away in observations),
prepares state with ``s.setup(...)`` (expected to succeed, not compared) and records every answer it
wants compared with ``s.step(label, ...)``; ``s.note(label, **values)`` records derived facts.
The same script runs against both brokers, so everything it sends is the same on both.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_rocketmq.client.protocol.command import RemotingCommand

from .observe import Fields, Normalizer, observe
from .wire import Conn


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str
    admin: bool
    topic_perms: dict[str, str] = field(default_factory=dict)
    group_perms: dict[str, str] = field(default_factory=dict)
    default_topic_perm: str = "DENY"
    default_group_perm: str = "DENY"


@dataclass(frozen=True)
class Target:
    """One broker (its name server and its first master) the cases run against."""

    kind: str  # "real" | "embedded"
    namesrv: str
    broker_addr: str
    broker_name: str
    cluster: str
    accounts: tuple[Account, ...] = ()  # ACL 1.0 mode: the accounts of its plain_acl.yml
    delay_scale: float = 1.0  # how much faster than real time its delay levels run
    super_user: tuple[str, str] | None = None  # ACL 2.0 mode: the super user the cases sign with


class SetupError(AssertionError):
    """A preparation request did not succeed: the case cannot go on."""


CaseFn = Callable[["Session"], Awaitable[None]]


@dataclass(frozen=True)
class Case:
    name: str
    fn: CaseFn
    acl: str  # "" (no ACL), "plain" (ACL 1.0, plain_acl.yml) or "acl2" (ACL 2.0 users and policies)


CASES: dict[str, Case] = {}
ACL_MODES = ("", "plain", "acl2")


def case(name: str, *, acl: str = "") -> Callable[[CaseFn], CaseFn]:
    assert acl in ACL_MODES, acl
    def register(fn: CaseFn) -> CaseFn:
        assert name not in CASES, name
        CASES[name] = Case(name, fn, acl)
        return fn
    return register


class Session:
    """One case's view of a target."""

    def __init__(self, target: Target, token: str, case_name: str) -> None:
        self.target = target
        self.case_name = case_name
        self.prefix = f"DF{token}_{case_name.replace('.', '_')}"
        self.obs: dict[str, Fields] = {}
        self._conns: list[Conn] = []
        self.norm = Normalizer({f"DF{token}": "DF", target.broker_addr: "{broker}",
                                target.namesrv: "{namesrv}"})

    # -- names and connections --------------------------------------------------------------
    def name(self, what: str) -> str:
        return f"{self.prefix}_{what}"

    async def broker(self, *, acl: Account | None = None) -> Conn:
        return await self._open(self.target.broker_addr, acl)

    async def namesrv(self) -> Conn:
        return await self._open(self.target.namesrv, None)

    async def _open(self, addr: str, acl: Account | None) -> Conn:
        conn = await Conn.open(addr, acl=(acl.access_key, acl.secret_key) if acl is not None else None)
        self._conns.append(conn)
        return conn

    async def close(self) -> None:
        for c in self._conns:
            await c.close()
        self._conns.clear()

    # -- requests ---------------------------------------------------------------------------
    async def step(self, label: str, conn: Conn, code: int, ext: dict[str, Any] | None = None,
                   body: bytes | None = None, *, timeout: float = 10.0, vary: Iterable[str] = (),
                   view: Any = None, **kw: Any) -> RemotingCommand | None:
        """Send a request and record its answer under ``label``."""
        resp = await conn.call(code, ext, body, timeout=timeout, **kw)
        self.record(label, observe(code, resp, self.norm, vary=vary, view=view))
        return resp

    async def setup(self, conn: Conn, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
                    *, expect: int = 0, timeout: float = 10.0, expect_any: bool = False) -> RemotingCommand:
        """A preparation request; anything but ``expect`` (``expect_any``: no answer) ends the case."""
        resp = await conn.call(code, ext, body, timeout=timeout)
        if resp is None or (resp.code != expect and not expect_any):
            got = "no answer" if resp is None else f"{resp.code} {resp.remark!r}"
            raise SetupError(f"setup request {code} {ext}: expected {expect}, got {got}")
        return resp

    def record(self, label: str, fields: Fields) -> None:
        assert label not in self.obs, f"{self.case_name}: step {label!r} recorded twice"
        self.obs[label] = fields

    def note(self, label: str, **values: Any) -> None:
        """Record facts the case derived (counts, what arrived)."""
        self.record(label, {k: self.norm.value(v) for k, v in values.items()})

    def observe_inbound(self, label: str, cmd: RemotingCommand | None, *, view: Any = None) -> None:
        """Record a broker-initiated request (its code, ext fields and body) like an answer."""
        if cmd is None:
            self.record(label, {"inbound": "none"})
            return
        fields = observe(cmd.code, cmd, self.norm, view=view)
        fields["inbound.code"] = cmd.code
        fields["inbound.oneway"] = cmd.is_oneway
        self.record(label, fields)

    async def wait_until(self, what: str, predicate: Callable[[], Awaitable[Any]], timeout: float = 20.0,
                         interval: float = 0.1) -> Any:
        """Poll ``predicate`` (broker state nothing can be awaited on) until truthy."""
        deadline = time.monotonic() + timeout
        while True:
            value = await predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise SetupError(f"timed out after {timeout:.0f} s waiting for {what}")
            await asyncio.sleep(interval)

    async def max_offset(self, conn: Conn, topic: str, queue_id: int) -> int:
        resp = await self.setup(conn, 30, {"topic": topic, "queueId": queue_id})
        return int(resp.ext.get("offset", "-1"))

    async def settled(self, conn: Conn, topic: str, queue_id: int, count: int, timeout: float = 20.0) -> None:
        """Wait until the queue's max offset reached ``count`` (a real broker indexes a stored
        message into its consume queue a moment after answering the send)."""
        async def enough() -> bool:
            return await self.max_offset(conn, topic, queue_id) >= count
        await self.wait_until(f"{count} messages in {topic}:{queue_id}", enough, timeout)
