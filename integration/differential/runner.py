"""Running the cases against a broker, and the recordings in tests/data/differential/."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from airflow_provider_rocketmq.client.protocol.codes import RequestCode
from airflow_provider_rocketmq.client.route import ClusterInfo

from . import (  # noqa: F401 - register
    cases_acl,
    cases_admin,
    cases_members,
    cases_namesrv,
    cases_pull,
    cases_send,
)
from .observe import Fields
from .session import CASES, Account, Case, Session, SetupError, Target
from .wire import Conn

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "tests" / "data" / "differential"
CASE_TIMEOUT = 90.0
GET_BROKER_RUNTIME_INFO = 28
EMBEDDED_DELAY_SCALE = 0.1  # the embedded broker's delay levels 10x faster: same answers, sooner

Results = dict[str, dict[str, Fields]]


def load_accounts(path: str | os.PathLike[str]) -> tuple[Account, ...]:
    """The accounts of a plain_acl.yml (or .json) file."""
    text = Path(path).read_text("utf-8")
    if str(path).endswith(".json"):
        data = json.loads(text)
    else:
        import yaml  # PyYAML comes with Airflow

        data = yaml.safe_load(text)
    out = []
    for a in data.get("accounts") or []:
        def perms(key: str, a: dict[str, Any] = a) -> dict[str, str]:
            return dict(p.split("=", 1) for p in a.get(key) or [])
        out.append(Account(str(a["accessKey"]), str(a["secretKey"]), bool(a.get("admin", False)),
                           perms("topicPerms"), perms("groupPerms"), str(a.get("defaultTopicPerm", "DENY")),
                           str(a.get("defaultGroupPerm", "DENY"))))
    return tuple(out)


async def real_target(namesrv: str, accounts: tuple[Account, ...] = (),
                      super_user: tuple[str, str] | None = None) -> Target:
    """The first master of the first cluster the name server knows."""
    conn = await Conn.open(namesrv.split(";")[0])
    try:
        resp = await conn.call(RequestCode.GET_BROKER_CLUSTER_INFO)
    finally:
        await conn.close()
    if resp is None or resp.code != 0:
        raise SetupError(f"name server {namesrv} gave no cluster info: {resp!r}")
    info = ClusterInfo.from_body(resp.body)
    cluster = min(info.cluster_addr_table)
    name, addr = min(info.master_addrs(cluster).items())
    return Target("real", namesrv.split(";")[0], addr, name, cluster, accounts, super_user=super_user)


@asynccontextmanager
async def embedded_target(accounts_file: str | None = None,
                          super_user: tuple[str, str] | None = None) -> AsyncIterator[Target]:
    """An embedded cluster on the running loop, configured like the real brokers the cases expect: plain ACL
    with ``accounts_file``, ACL 2.0 with ``super_user``."""
    from airflow_provider_rocketmq.embedded import Acl2Config, EmbeddedCluster

    acl2 = Acl2Config(super_user=super_user) if super_user is not None else None
    async with EmbeddedCluster(brokers=1, queues=8, time_scale=EMBEDDED_DELAY_SCALE,
                               acl=accounts_file, acl2=acl2) as cluster:
        b = cluster.brokers[0]
        accounts = load_accounts(accounts_file) if accounts_file else ()
        yield Target("embedded", cluster.namesrv_addr, b.addr, b.name, b.cluster, accounts, EMBEDDED_DELAY_SCALE,
                     super_user)


AclRun = tuple[str, str, "str | None", "tuple[str, str] | None"]  # (mode, name server, plain_acl.yml, super user)


def acl_runs(environ: Mapping[str, str]) -> list[AclRun]:
    """The real brokers the environment names: ROCKETMQ_NAMESRV (no ACL), ROCKETMQ_ACL_NAMESRV +
    ROCKETMQ_ACL_FILE (ACL 1.0), ROCKETMQ_ACL2_NAMESRV + ROCKETMQ_ACL2_ACCESS_KEY / _SECRET_KEY (ACL 2.0)."""
    runs: list[AclRun] = []
    plain = environ.get("ROCKETMQ_NAMESRV", "").strip()
    if plain:
        runs.append(("", plain, None, None))
    acl_ns, acl_file = environ.get("ROCKETMQ_ACL_NAMESRV", "").strip(), environ.get("ROCKETMQ_ACL_FILE", "").strip()
    if acl_ns and acl_file:
        runs.append(("plain", acl_ns, acl_file, None))
    su = acl2_super_user(environ)
    acl2_ns = environ.get("ROCKETMQ_ACL2_NAMESRV", "").strip()
    if acl2_ns and su is not None:
        runs.append(("acl2", acl2_ns, None, su))
    return runs


def acl2_super_user(environ: Mapping[str, str]) -> tuple[str, str] | None:
    key, secret = environ.get("ROCKETMQ_ACL2_ACCESS_KEY", ""), environ.get("ROCKETMQ_ACL2_SECRET_KEY", "")
    return (key, secret) if key and secret else None


def select(names: Iterable[str] | None = None, *, acl: str = "") -> list[Case]:
    """The cases of one ACL mode ("", "plain", "acl2"), all or the ``names`` among them."""
    wanted = set(names) if names is not None else None
    return [c for c in CASES.values() if c.acl == acl and (wanted is None or c.name in wanted)]


async def run(target: Target, cases: list[Case]) -> tuple[Results, str]:
    """Every case's observations, and the broker's release ("4.9.7"; "embedded")."""
    token = uuid.uuid4().hex[:6]
    results: Results = {}
    version = await _version(target)
    for c in cases:
        s = Session(target, token, c.name)
        try:
            await asyncio.wait_for(c.fn(s), CASE_TIMEOUT)
        except Exception as exc:
            s.obs["error"] = {"error": f"{type(exc).__name__}: {s.norm.text(str(exc))}"}
        finally:
            await s.close()
        results[c.name] = s.obs
    return results, version


async def _version(target: Target) -> str:
    """GET_BROKER_RUNTIME_INFO's brokerVersionDesc (``V4_9_7`` -> ``4.9.7``)."""
    if target.kind == "embedded":
        return "embedded"
    conn = await Conn.open(target.broker_addr, acl=_admin_key(target))
    try:
        resp = await conn.call(GET_BROKER_RUNTIME_INFO)
    finally:
        await conn.close()
    if resp is None or resp.code != 0 or not resp.body:
        raise SetupError(f"broker {target.broker_addr} did not tell its version: {resp!r}")
    desc = str(json.loads(resp.body)["table"]["brokerVersionDesc"])
    return desc.lstrip("V").replace("_", ".")


def _admin_key(target: Target) -> tuple[str, str] | None:
    if target.super_user is not None:
        return target.super_user
    admin = next((a for a in target.accounts if a.admin), None)
    return (admin.access_key, admin.secret_key) if admin is not None else None


def recording_path(version: str, acl: str = "") -> Path:
    """``rocketmq-4.9.7.json``; ``-acl`` for the plain ACL cases, ``-acl2`` for the ACL 2.0 ones."""
    suffix = {"": "", "plain": "-acl", "acl2": "-acl2"}[acl]
    return RECORDINGS / f"rocketmq-{version}{suffix}.json"


def save(path: Path, results: Results, version: str, date: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"broker": version, "recorded": date, "cases": results}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n", "utf-8")


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return data
