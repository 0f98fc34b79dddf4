"""Every ``rocketmq-airflow`` client command against a broker in ACL mode, as subprocesses.

One ``rocketmq-airflow broker --acl-file plain_acl.yml`` serves the module. Each command runs with good
credentials (it works), a wrong secret and no credentials (exit 2, one ``error:`` line with the broker's
reason, nothing produced or committed), and with credentials the broker refuses for the resource.
Credentials come only from ROCKETMQ_ACCESS_KEY / ROCKETMQ_SECRET_KEY and never show in the output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from airflow_provider_rocketmq.cli import _leaf_parsers, build_parser
from airflow_provider_rocketmq.client import ClientConfig
from airflow_provider_rocketmq.client.admin import Admin
from airflow_provider_rocketmq.client.protocol.errors import RouteNotFoundError
from airflow_provider_rocketmq.window.manifest import QueueRange, WindowManifest, write_manifest

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "airflow_provider_rocketmq.cli"]
TOPIC = "AclCli"
ADMIN = {"ROCKETMQ_ACCESS_KEY": "cli_admin", "ROCKETMQ_SECRET_KEY": "cli_admin_secret"}
USER = {"ROCKETMQ_ACCESS_KEY": "cli_user", "ROCKETMQ_SECRET_KEY": "cli_user_secret"}
WRONG = {"ROCKETMQ_ACCESS_KEY": "cli_user", "ROCKETMQ_SECRET_KEY": "not_the_secret_42"}
REASONS = {"wrong": "Check signature failed for accessKey=cli_user", "missing": "No accessKey is configured"}
PLAIN_ACL = f"""\
globalWhiteRemoteAddresses:
accounts:
- accessKey: cli_admin
  secretKey: cli_admin_secret
  admin: true
- accessKey: cli_user
  secretKey: cli_user_secret
  admin: false
  defaultTopicPerm: DENY
  defaultGroupPerm: DENY
  topicPerms:
  - {TOPIC}=PUB|SUB
  groupPerms:
  - cli_readers=SUB
  - cli_window=SUB
"""


class Broker:
    def __init__(self, namesrv: str, tmp: Path) -> None:
        self.namesrv = namesrv
        self.tmp = tmp

    def env(self, creds: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_") and k != "NAMESRV_ADDR"}
        return {**env, "NAMESRV_ADDR": self.namesrv, **creds}

    def run(self, creds: dict[str, str], *argv: str, verbose: bool = True) -> subprocess.CompletedProcess[str]:
        """The command with ``-v`` (INFO logs on stderr, where a leaked secret would show) by default."""
        return subprocess.run([*CLI, *(["-v"] if verbose else []), *argv], cwd=REPO, env=self.env(creds),
                              capture_output=True, text=True, timeout=90, check=False)

    def admin(self) -> Admin:
        return Admin(ClientConfig(namesrv_addr=self.namesrv, access_key=ADMIN["ROCKETMQ_ACCESS_KEY"],
                                  secret_key=ADMIN["ROCKETMQ_SECRET_KEY"]))

    def stored(self) -> int:
        with self.admin() as admin:
            return sum(admin.high_water_marks(TOPIC).values())

    def lag(self, group: str) -> dict[str, object]:
        with self.admin() as admin:
            return admin.lag(group, TOPIC).to_dict()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("acl_cli")
    acl_file = tmp / "plain_acl.yml"
    acl_file.write_text(PLAIN_ACL, encoding="utf-8")
    proc = subprocess.Popen([*CLI, "broker", "--port", "0", "--queues", "2", "--acl-file", str(acl_file)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        assert first.startswith("namesrv="), first
        proc.stdout.readline()  # broker-a=...
        b = Broker(first.split("=", 1)[1], tmp)
        made = b.run(ADMIN, "topic", "create", "--topic", TOPIC, "--queues", "2")
        assert made.returncode == 0, made.stderr
        yield b
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _one_error_line(done: subprocess.CompletedProcess[str], verbose: bool = True) -> str:
    """The error line of a failed command: its only stderr line, or the only ``error:`` one after -v logs."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    errors = [line for line in lines if "error:" in line] if verbose else lines
    assert len(errors) == 1 and "error: " in errors[0], done.stderr
    return errors[0]


def _no_secret(done: subprocess.CompletedProcess[str]) -> None:
    for secret in ("cli_user_secret", "cli_admin_secret", WRONG["ROCKETMQ_SECRET_KEY"]):
        assert secret not in done.stdout and secret not in done.stderr


COMMANDS = {
    "produce": ["produce", "--topic", TOPIC, "--count", "3"],
    "lag": ["lag", "--group", "cli_readers", "--topic", TOPIC],
    "topic create": ["topic", "create", "--topic", TOPIC, "--queues", "2"],
    "topic route": ["topic", "route", "--topic", TOPIC],
    "consume": ["consume", "--group", "cli_fresh", "--topic", TOPIC, "--from", "first", "--max-messages", "1",
                "--idle-timeout", "5"],
    "window": ["window", "--group", "cli_fresh", "--topic", TOPIC, "--max-duration", "5"],
    "window-commit": ["window-commit"],  # + a manifest of cli_fresh's offsets (_argv)
}
SERVER_COMMANDS = {"broker"}  # the embedded broker itself takes --acl-file, not client credentials
LOCAL_COMMANDS = {"spark-package"}  # builds a zip; never talks to a broker


def _manifest(broker: Broker, group: str, end: int = 1) -> str:
    """A valid offsets manifest moving ``group`` to ``end`` on both queues (no broker involved)."""
    path = broker.tmp / f"m-{group}-{os.urandom(4).hex()}"
    write_manifest(WindowManifest(window_id="acl", topic=TOPIC, consumer_group=group, handoff="offsets",
                                  queues=[QueueRange("broker-a", q, 0, end, end, 0) for q in range(2)]),
                   path / "manifest.json")
    return str(path)


def _argv(name: str, broker: Broker) -> list[str]:
    argv = list(COMMANDS[name])
    if name == "window":
        return [*argv, "--staging", str(broker.tmp / f"w-{os.urandom(4).hex()}")]
    if name == "window-commit":
        return [*argv, _manifest(broker, "cli_fresh")]
    return argv


def test_every_client_command_is_in_the_matrix() -> None:
    prefix = "rocketmq-airflow "
    leaves = {p.prog.removeprefix(prefix) for p in _leaf_parsers(build_parser())}
    assert leaves - SERVER_COMMANDS - LOCAL_COMMANDS == set(COMMANDS), \
        "a command was added or removed: cover it here with good, wrong and missing credentials"


def test_wrong_and_missing_credentials_are_refused_by_every_command(broker: Broker) -> None:
    stored = broker.stored()
    runs = [(name, variant) for name in COMMANDS for variant in ("wrong", "missing")]
    # the wrong secret with -v (a leak would show in the INFO logs); no credentials without: one line only
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda nv: broker.run(WRONG if nv[1] == "wrong" else {}, *_argv(nv[0], broker),
                                                      verbose=nv[1] == "wrong"), runs))
    for (name, variant), done in zip(runs, results, strict=True):
        line = _one_error_line(done, verbose=variant == "wrong")
        assert REASONS[variant] in line and "access denied by broker" in line, (name, variant, line)
        assert "offsets committed" not in done.stderr and done.stdout == "", (name, variant)
        _no_secret(done)
    assert broker.stored() == stored  # nothing produced
    assert all(q["consumer_offset"] <= 0 for q in broker.lag("cli_fresh")["queues"])  # nothing committed
    assert not list(broker.tmp.glob("w-*/manifest.json"))  # no window staged


def test_credentials_from_the_environment_only(broker: Broker) -> None:
    half = {"ROCKETMQ_ACCESS_KEY": "cli_user"}
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda name: broker.run(half, *_argv(name, broker), verbose=False), COMMANDS))
    for name, done in zip(COMMANDS, results, strict=True):
        line = _one_error_line(done, verbose=False)
        assert "ROCKETMQ_SECRET_KEY" in line and "ROCKETMQ_ACCESS_KEY" in line, (name, line)
    for name in ("produce", "consume"):  # no command takes credentials as options
        done = broker.run({}, *COMMANDS[name], "--secret-key", "x")
        assert done.returncode == 2 and "unrecognized arguments" in done.stderr


def test_good_credentials_work_and_denied_resources_are_reported(broker: Broker) -> None:
    before = broker.stored()
    done = broker.run(USER, "produce", "--topic", TOPIC, "--count", "5", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sent"] == 5 and broker.stored() == before + 5
    _no_secret(done)

    done = broker.run(USER, "topic", "route", "--topic", TOPIC, "--json")
    assert done.returncode == 0 and len(json.loads(done.stdout)["queues"]) == 2, done.stderr
    done = broker.run(USER, "lag", "--group", "cli_readers", "--topic", TOPIC, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["total_lag"] == before + 5, done.stderr

    done = broker.run(USER, "consume", "--group", "cli_readers", "--topic", TOPIC, "--from", "first",
                      "--max-messages", str(before + 5), "--idle-timeout", "20")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == before + 5 and "offsets committed" in done.stderr
    assert broker.lag("cli_readers")["total_lag"] == 0

    staging = broker.tmp / "w-good"
    done = broker.run(USER, "window", "--group", "cli_window", "--topic", TOPIC, "--staging", str(staging),
                      "--max-duration", "30", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["messages"] == before + 5 and sum(result["committed"].values()) == before + 5
    assert (staging / "manifest.json").is_file() and broker.lag("cli_window")["total_lag"] == 0
    _no_secret(done)

    refusals = {
        "No default permission for topic:AclElsewhere": ["produce", "--topic", "AclElsewhere"],
        "Need admin permission for request code=17, but accessKey=cli_user is not":
            ["topic", "create", "--topic", "AclNew"],
        "No default permission for group:cli_denied": ["consume", "--group", "cli_denied", "--topic", TOPIC,
                                                      "--from", "first", "--idle-timeout", "5"],
    }
    window_staging = broker.tmp / "w-denied"
    refusals["No default permission for group:cli_denied "] = [
        "window", "--group", "cli_denied", "--topic", TOPIC, "--staging", str(window_staging),
        "--max-duration", "5"]
    refusals["No default permission for group:cli_denied  "] = ["window-commit", _manifest(broker, "cli_denied")]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda argv: broker.run(USER, *argv, verbose=False), refusals.values()))
    for reason, done in zip(refusals, results, strict=True):
        line = _one_error_line(done, verbose=False)
        assert reason.strip() in line, (reason, line)
        assert "offsets committed" not in done.stderr and done.stdout == ""
        _no_secret(done)
    assert broker.stored() == before + 5
    with broker.admin() as admin, pytest.raises(RouteNotFoundError):
        admin.high_water_marks("AclElsewhere")  # the refused send did not auto-create the topic
    assert all(q["consumer_offset"] <= 0 for q in broker.lag("cli_denied")["queues"])
    assert not (window_staging / "manifest.json").exists()

    # the offsets hand-off: a manifest of ranges, nothing consumed, then window-commit after the "load"
    assert broker.run(USER, "produce", "--topic", TOPIC, "--count", "4").returncode == 0
    ranges = broker.tmp / "w-offsets"
    done = broker.run(USER, "window", "--group", "cli_window", "--topic", TOPIC, "--staging", str(ranges),
                      "--handoff", "offsets", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["messages"] == 4, done.stderr
    assert broker.lag("cli_window")["total_lag"] == 4
    done = broker.run(USER, "window-commit", str(ranges))
    assert done.returncode == 0 and "committed" in done.stdout, done.stderr
    assert broker.lag("cli_window")["total_lag"] == 0
    _no_secret(done)
