"""The ``rocketmq-airflow`` commands against a broker with ACL 2.0 (5.x users and policies), as subprocesses.

One ``rocketmq-airflow broker --acl2-file`` serves the module. The issue's two silent failures are errors
now: a user without permission on the group gets exit 2 from ``window`` (not ``"messages": 0`` while
messages wait), a wrong secret gets exit 2 from ``consume`` (not ``"offsets_committed": true`` after the
idle timeout); each error line names the user, the resource and the missing action, and nothing is
staged or committed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_rocketmq.client import Admin, ClientConfig

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "airflow_provider_rocketmq.cli"]
TOPIC = "Acl2Cli"
ROOT = {"ROCKETMQ_ACCESS_KEY": "cli_root", "ROCKETMQ_SECRET_KEY": "cli_root_secret"}
READER = {"ROCKETMQ_ACCESS_KEY": "reader", "ROCKETMQ_SECRET_KEY": "reader_secret"}
NOGROUP = {"ROCKETMQ_ACCESS_KEY": "nogroup", "ROCKETMQ_SECRET_KEY": "nogroup_secret"}
WRONG = {"ROCKETMQ_ACCESS_KEY": "reader", "ROCKETMQ_SECRET_KEY": "not_the_secret"}
ACL2 = {
    "super_user": ["cli_root", "cli_root_secret"],
    "users": [{"username": "reader", "password": "reader_secret"},
              {"username": "nogroup", "password": "nogroup_secret"}],
    "acls": {"reader": [{"resource": f"Topic:{TOPIC}", "actions": ["Sub", "Get"]},
                        {"resource": "Group:cli_readers", "actions": ["Sub", "Get", "Update"]},
                        {"resource": "Group:cli_window", "actions": ["Sub", "Get", "Update"]}],
             "nogroup": [{"resource": f"Topic:{TOPIC}", "actions": ["Pub", "Sub", "Get"]}]},
}


class Broker:
    def __init__(self, namesrv: str, tmp: Path) -> None:
        self.namesrv, self.tmp = namesrv, tmp

    def run(self, creds: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_") and k != "NAMESRV_ADDR"}
        return subprocess.run([*CLI, *argv], cwd=REPO, env={**env, "NAMESRV_ADDR": self.namesrv, **creds},
                              capture_output=True, text=True, timeout=120, check=False)

    def lag(self, group: str) -> int:
        with Admin(ClientConfig(namesrv_addr=self.namesrv, access_key="cli_root",
                                secret_key="cli_root_secret")) as admin:
            return admin.lag(group, TOPIC).total_lag


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("acl2_cli")
    (tmp / "acl2.json").write_text(json.dumps(ACL2), encoding="utf-8")
    proc = subprocess.Popen([*CLI, "broker", "--port", "0", "--queues", "2", "--acl2-file", str(tmp / "acl2.json")],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        assert first.startswith("namesrv="), first
        proc.stdout.readline()  # broker-a=...
        b = Broker(first.split("=", 1)[1], tmp)
        assert b.run(ROOT, "topic", "create", "--topic", TOPIC, "--queues", "2").returncode == 0
        assert b.run(ROOT, "produce", "--topic", TOPIC, "--count", "100").returncode == 0
        yield b
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_window_without_group_permission_fails_instead_of_staging_nothing(broker: Broker) -> None:
    staging = broker.tmp / "w-nogroup"
    done = broker.run(NOGROUP, "window", "--group", "cli_window", "--topic", TOPIC, "--staging", str(staging),
                      "--json")
    line = _error(done)
    assert "user nogroup lacks Sub on Group:cli_window (HEART_BEAT)" in line, line
    assert "ACL 2.0" in line and "no matched policies" in line
    assert not (staging / "manifest.json").exists()
    assert broker.lag("cli_window") == 100  # nothing committed


def test_consume_with_a_wrong_secret_fails_and_commits_nothing(broker: Broker) -> None:
    done = broker.run(WRONG, "consume", "--group", "cli_readers", "--topic", TOPIC, "--from", "first",
                      "--idle-timeout", "5", "--json")
    line = _error(done)
    assert "user reader was not authenticated" in line and "check signature failed." in line, line
    assert "offsets_committed" not in done.stderr
    assert broker.lag("cli_readers") == 100


def test_consume_without_group_permission_names_user_group_and_action(broker: Broker) -> None:
    done = broker.run(NOGROUP, "consume", "--group", "cli_readers", "--topic", TOPIC, "--from", "first",
                      "--idle-timeout", "5")
    assert "user nogroup lacks Sub on Group:cli_readers" in _error(done)


def test_produce_without_pub_names_the_topic_and_action(broker: Broker) -> None:
    done = broker.run(READER, "produce", "--topic", TOPIC, "--count", "1")
    assert f"user reader lacks Pub on Topic:{TOPIC} (SEND_MESSAGE_V2)" in _error(done)


def test_a_permitted_user_consumes_and_windows(broker: Broker) -> None:
    done = broker.run(READER, "consume", "--group", "cli_readers", "--topic", TOPIC, "--from", "first",
                      "--max-messages", "30", "--idle-timeout", "20", "--json")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 30 and json.loads(done.stderr.splitlines()[-1])["offsets_committed"]
    assert broker.lag("cli_readers") == 70
    staging = broker.tmp / "w-reader"
    done = broker.run(READER, "window", "--group", "cli_window", "--topic", TOPIC, "--staging", str(staging),
                      "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["messages"] == 100 and broker.lag("cli_window") == 0
    done = broker.run(READER, "lag", "--group", "cli_readers", "--topic", TOPIC, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["total_lag"] == 70, done.stderr
