"""``python -m integration.acl_matrix``: which ``rocketmq-airflow`` commands work with which ACL permissions,
against real brokers (user x command x permission -> outcome).

For each ACL generation whose broker the environment names, the script makes users with the permission
profiles below (ACL 2.0: AUTH_CREATE_USER / AUTH_CREATE_ACL as the super user, what ``mqadmin createUser``
/ ``createAcl`` send; ACL 1.0: UPDATE_AND_CREATE_ACL_CONFIG as an admin account, what ``mqadmin
updateAclConfig`` sends), a topic with messages, then runs every client command as each user (the real
command line, as a subprocess) and prints one markdown table per broker: ``ok`` or what was refused - the
missing action on which resource, and the request the broker refused - with the command's exit status.

  ROCKETMQ_ACL2_NAMESRV + ROCKETMQ_ACL2_ACCESS_KEY / ROCKETMQ_ACL2_SECRET_KEY   ACL 2.0 (5.3+): a super user
  ROCKETMQ_ACL_NAMESRV + ROCKETMQ_ACL_FILE                                      ACL 1.0 (4.x): its plain_acl.yml,
                                                                                 with an admin account

``--out FILE`` also writes the tables there. The users, topic and group get a run-unique suffix; ACL 2.0
users live until the broker restarts (memory providers) or are deleted by hand; ACL 1.0 accounts are
removed at the end (DELETE_ACL_CONFIG).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, Producer
from airflow_provider_rocketmq.window.manifest import QueueRange, WindowManifest, write_manifest
from integration.differential.runner import acl2_super_user, load_accounts
from integration.differential.wire import Conn

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "airflow_provider_rocketmq.cli"]
MESSAGES = 200
QUEUES = 2
AUTH_CREATE_USER, AUTH_CREATE_ACL = 3001, 3006
UPDATE_AND_CREATE_ACL_CONFIG, DELETE_ACL_CONFIG = 50, 51


@dataclass(frozen=True)
class Profile:
    """A user's permission set, as one generation spells it."""

    name: str
    about: str
    acl2: list[tuple[str, list[str], str]] | None = None  # (resource, actions, decision), T and G placeholders
    acl1: dict[str, str] | None = None  # plain_acl.yml account fields, T and G placeholders
    credentials: str = "own"  # own | wrong-secret | unknown-user | none


PROFILES = [
    Profile("full", "ACL 2.0: Topic:T Pub,Sub,Get,Update + Group:G Sub,Get,Update; ACL 1.0: T=PUB|SUB, G=SUB",
            acl2=[("Topic:T", ["Pub", "Sub", "Get", "Update"], "Allow"), ("Group:G", ["Sub", "Get", "Update"], "Allow")],
            acl1={"topicPerms": "T=PUB|SUB", "groupPerms": "G=SUB"}),
    Profile("producer", "Topic:T Pub / T=PUB", acl2=[("Topic:T", ["Pub"], "Allow")], acl1={"topicPerms": "T=PUB"}),
    Profile("sub-only", "Topic:T Sub + Group:G Sub / T=SUB, G=SUB",
            acl2=[("Topic:T", ["Sub"], "Allow"), ("Group:G", ["Sub"], "Allow")],
            acl1={"topicPerms": "T=SUB", "groupPerms": "G=SUB"}),
    Profile("sub+get", "Topic:T Sub,Get + Group:G Sub,Get (no Update) / as sub-only",
            acl2=[("Topic:T", ["Sub", "Get"], "Allow"), ("Group:G", ["Sub", "Get"], "Allow")],
            acl1={"topicPerms": "T=SUB", "groupPerms": "G=SUB"}),
    Profile("no-group", "Topic:T Pub,Sub,Get, nothing on G / T=PUB|SUB, groups DENY",
            acl2=[("Topic:T", ["Pub", "Sub", "Get"], "Allow")], acl1={"topicPerms": "T=PUB|SUB"}),
    Profile("group-denied", "Topic:T All + Group:G Sub,Get,Update Deny / T=PUB|SUB, G=DENY (default SUB)",
            acl2=[("Topic:T", ["All"], "Allow"), ("Group:G", ["Sub", "Get", "Update"], "Deny")],
            acl1={"topicPerms": "T=PUB|SUB", "groupPerms": "G=DENY", "defaultGroupPerm": "SUB"}),
    Profile("wrong-secret", "the full user, a wrong secret", acl2=[], acl1={}, credentials="wrong-secret"),
    Profile("unknown-user", "a user the broker does not know", credentials="unknown-user"),
    Profile("no-credentials", "no ROCKETMQ_ACCESS_KEY / SECRET_KEY", credentials="none"),
]

Argv = Callable[["Run", str], list[str]]
COMMANDS: dict[str, Argv] = {
    "produce": lambda r, u: ["produce", "--topic", r.topic, "--count", "1"],
    "topic route": lambda r, u: ["topic", "route", "--topic", r.topic],
    "topic create": lambda r, u: ["topic", "create", "--topic", r.topic, "--queues", str(QUEUES)],
    "lag": lambda r, u: ["lag", "--group", r.group, "--topic", r.topic],
    "consume": lambda r, u: ["consume", "--group", r.group, "--topic", r.topic, "--from", "first",
                             "--max-messages", "1", "--idle-timeout", "8"],
    "window": lambda r, u: ["window", "--group", r.group, "--topic", r.topic, "--staging", str(r.tmp / f"w-{u}"),
                            "--max-messages", "1", "--assignment-timeout", "20", "--idle-timeout", "20"],
    "window offsets": lambda r, u: ["window", "--group", r.group, "--topic", r.topic, "--handoff", "offsets",
                                    "--staging", str(r.tmp / f"o-{u}"), "--max-messages", "1"],
    "window-commit": lambda r, u: ["window-commit", str(r.commit_manifest(u))],
}


@dataclass
class Run:
    """One broker's matrix: its settings and the run's names."""

    generation: str  # "2.0" | "1.0"
    namesrv: str
    broker_addr: str
    admin: tuple[str, str]
    tmp: Path
    topic: str
    group: str

    def names(self, text: str) -> str:
        return text.replace("Topic:T", f"Topic:{self.topic}").replace("Group:G", f"Group:{self.group}") \
            .replace("T=", f"{self.topic}=").replace("G=", f"{self.group}=")

    def commit_manifest(self, user: str) -> Path:
        """A manifest moving the group one offset past its committed one on queue 0 (nothing consumed)."""
        with Admin(self._config(*self.admin)) as admin:
            mq = min(admin.topic_queues(self.topic), key=lambda q: q.queue_id)
            start = max(admin.committed_offset(self.group, mq), 0)
        path = self.tmp / f"c-{user}"
        write_manifest(WindowManifest(window_id=f"matrix-{user}", topic=self.topic, consumer_group=self.group,
                                      handoff="offsets",
                                      queues=[QueueRange(mq.broker_name, mq.queue_id, start, start + 1, start + 1, 0)]),
                       path / "manifest.json")
        return path

    def _config(self, key: str, secret: str) -> ClientConfig:
        return ClientConfig(namesrv_addr=self.namesrv, access_key=key, secret_key=secret)


# -- users -----------------------------------------------------------------------------------------

def _user_name(run: Run, profile: Profile) -> str:
    return f"m{run.topic[-6:]}_{profile.name.replace('+', '_').replace('-', '_')}"


async def _make_user(run: Run, profile: Profile, conn: Conn) -> tuple[str, str] | None:
    """The credentials the profile's commands run with (None: none at all)."""
    if profile.credentials == "none":
        return None
    if profile.credentials == "unknown-user":
        return (f"nobody_{run.topic[-6:]}", "nobody_secret_1")
    base = PROFILES[0] if profile.credentials == "wrong-secret" else profile
    name, secret = _user_name(run, base), f"{_user_name(run, base)}_secret"
    if profile.credentials == "own":
        if run.generation == "2.0":
            await _ok(conn, AUTH_CREATE_USER, {"username": name}, json.dumps({"username": name, "password": secret}))
            if profile.acl2:
                entries = [{"resource": run.names(r), "actions": a, "decision": d} for r, a, d in profile.acl2]
                body = {"subject": f"User:{name}", "policies": [{"policyType": "CUSTOM", "entries": entries}]}
                await _ok(conn, AUTH_CREATE_ACL, {"subject": f"User:{name}"}, json.dumps(body))
        else:
            fields = {"accessKey": name, "secretKey": secret, "admin": "false", "defaultTopicPerm": "DENY",
                      "defaultGroupPerm": "DENY", **{k: run.names(v) for k, v in (profile.acl1 or {}).items()}}
            await _ok(conn, UPDATE_AND_CREATE_ACL_CONFIG, fields)
    return (name, secret + "_wrong") if profile.credentials == "wrong-secret" else (name, secret)


async def _ok(conn: Conn, code: int, ext: dict[str, Any], body: str | None = None) -> None:
    resp = await conn.call(code, ext, body.encode() if body is not None else None)
    if resp is None or resp.code != 0:
        raise SystemExit(f"setting up users: request {code} answered {resp and resp.code} {resp and resp.remark!r}")


async def _drop_acl1_users(run: Run, conn: Conn) -> None:
    for profile in PROFILES:
        if profile.credentials == "own":
            await conn.call(DELETE_ACL_CONFIG, {"accessKey": _user_name(run, profile)})


# -- commands --------------------------------------------------------------------------------------

_REFUSED = re.compile(r"\(ACL [12]\.0\): (?P<what>.*?)(?: \((?P<request>[A-Z_]+)\))?: (?P<reason>.*)$")


def outcome(run: Run, done: subprocess.CompletedProcess[str]) -> str:
    """One cell: ``ok``, or the refusal (missing action, resource, request), or another failure."""
    def short(text: str) -> str:
        return text.replace(run.topic, "T").replace(run.group, "G")

    if done.returncode == 0:
        return "ok"
    lines = [line for line in done.stderr.splitlines() if "error:" in line or "warning:" in line]
    line = lines[-1] if lines else (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    m = _REFUSED.search(line)
    if m is not None:
        what = m.group("what")
        what = "no credentials" if what.startswith("a request without credentials") else \
            re.sub(r"^(user \S+|the client) ", "", what)
        request = f" ({m.group('request')})" if m.group("request") else ""
        return short(f"exit {done.returncode} - {what}{request}")
    return short(f"exit {done.returncode} - {line[:120]}")


def run_command(run: Run, creds: tuple[str, str] | None, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_") and k != "NAMESRV_ADDR"}
    env["NAMESRV_ADDR"] = run.namesrv
    if creds is not None:
        env["ROCKETMQ_ACCESS_KEY"], env["ROCKETMQ_SECRET_KEY"] = creds
    try:
        return subprocess.run([*CLI, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
                              check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", "error: no answer within 120 s (timeout)")


async def matrix(run: Run) -> list[list[str]]:
    conn = await Conn.open(run.broker_addr, acl=run.admin)
    try:
        users = [(p, await _make_user(run, p, conn)) for p in PROFILES]
    finally:
        await conn.close()
    rows = []
    try:
        for profile, creds in users:
            cells = [outcome(run, await asyncio.to_thread(run_command, run, creds, argv(run, profile.name)))
                     for argv in COMMANDS.values()]
            rows.append([profile.name, *cells])
            print(f"  {profile.name}: done", file=sys.stderr, flush=True)
    finally:
        if run.generation == "1.0":
            conn = await Conn.open(run.broker_addr, acl=run.admin)
            try:
                await _drop_acl1_users(run, conn)
            finally:
                await conn.close()
    return rows


def table(run: Run, version: str, rows: list[list[str]]) -> str:
    head = ["user profile", *COMMANDS]
    out = [f"### ACL {run.generation} - RocketMQ {version} ({run.namesrv}); topic T, group G, "
           f"{MESSAGES} messages", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out += ["", "Profiles: " + "; ".join(f"**{p.name}** {p.about}" for p in PROFILES), ""]
    return "\n".join(out)


# -- setup -----------------------------------------------------------------------------------------

def prepare(run: Run) -> None:
    """Create the run's topic and messages as the admin."""
    cfg = ClientConfig(namesrv_addr=run.namesrv, access_key=run.admin[0], secret_key=run.admin[1])
    with Admin(cfg) as admin:
        admin.create_topic(run.topic, QUEUES)
    with Producer(cfg) as producer:
        for i in range(MESSAGES):
            producer.send(Message(run.topic, b"matrix %d" % i))


async def version_of(run: Run) -> str:
    conn = await Conn.open(run.broker_addr, acl=run.admin)
    try:
        resp = await conn.call(28)  # GET_BROKER_RUNTIME_INFO
    finally:
        await conn.close()
    if resp is None or resp.code != 0 or not resp.body:
        return "?"
    return str(json.loads(resp.body)["table"]["brokerVersionDesc"]).lstrip("V").replace("_", ".")


async def one(generation: str, namesrv: str, admin: tuple[str, str], tmp: Path) -> str:
    from integration.differential.runner import real_target

    target = await real_target(namesrv)
    token = uuid.uuid4().hex[:6]
    (tmp / token).mkdir()
    run = Run(generation, namesrv, target.broker_addr, admin, tmp / token, f"AclMatrix_{token}", f"acl_matrix_{token}")
    await asyncio.to_thread(prepare, run)
    version = await version_of(run)
    print(f"ACL {generation}: RocketMQ {version} at {namesrv}, topic {run.topic}", file=sys.stderr, flush=True)
    rows = await matrix(run)
    return table(run, version, rows)


async def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m integration.acl_matrix", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="", help="also write the tables (markdown) to this file")
    args = ap.parse_args(argv)
    jobs: list[tuple[str, str, tuple[str, str]]] = []
    su = acl2_super_user(os.environ)
    if os.environ.get("ROCKETMQ_ACL2_NAMESRV") and su is not None:
        jobs.append(("2.0", os.environ["ROCKETMQ_ACL2_NAMESRV"].split(";")[0], su))
    acl_file = os.environ.get("ROCKETMQ_ACL_FILE", "")
    if os.environ.get("ROCKETMQ_ACL_NAMESRV") and acl_file:
        admin = next((a for a in load_accounts(acl_file) if a.admin), None)
        if admin is None:
            print(f"error: {acl_file} has no admin account (admin: true)", file=sys.stderr)
            return 2
        jobs.append(("1.0", os.environ["ROCKETMQ_ACL_NAMESRV"].split(";")[0], (admin.access_key, admin.secret_key)))
    if not jobs:
        print("error: name a broker: ROCKETMQ_ACL2_NAMESRV + ROCKETMQ_ACL2_ACCESS_KEY/SECRET_KEY (ACL 2.0) and/or "
              "ROCKETMQ_ACL_NAMESRV + ROCKETMQ_ACL_FILE (ACL 1.0)", file=sys.stderr)
        return 2
    tables = []
    with tempfile.TemporaryDirectory(prefix="acl-matrix-") as tmp:
        for generation, namesrv, creds in jobs:
            tables.append(await one(generation, namesrv, creds, Path(tmp)))
    text = "\n".join(tables)
    print(text)
    if args.out:
        Path(args.out).write_text(text, "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1:])))
