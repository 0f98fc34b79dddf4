"""``rocketmq-airflow broker`` with ``produce`` and ``lag`` from a shell, as separate processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "airflow_provider_rocketmq.cli"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.timeout(120)
def test_broker_produce_lag_from_a_shell(tmp_path: Path) -> None:
    broker = subprocess.Popen([*CLI, "broker", "--port", "0", "--queues", "4", "--data-dir", str(tmp_path)],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert broker.stdout is not None
        first = broker.stdout.readline().strip()
        assert first.startswith("namesrv=127.0.0.1:"), (first, broker.stderr.read() if broker.stderr else "")
        namesrv = first.split("=", 1)[1]
        assert broker.stdout.readline().startswith("broker-a=127.0.0.1:")

        produced = _cli("produce", "--topic", "ShellT", "--count", "10", "--tag", "TagA", "--namesrv", namesrv,
                        "--json")
        assert produced.returncode == 0, produced.stderr
        assert json.loads(produced.stdout)["sent"] == 10

        lag = _cli("lag", "--group", "shell_group", "--topic", "ShellT", "--namesrv", namesrv, "--json")
        assert lag.returncode == 0, lag.stderr
        report = json.loads(lag.stdout)
        assert report["total_lag"] == 10
        assert sum(q["broker_offset"] for q in report["queues"]) == 10

        bad = _cli("lag", "--group", "g", "--topic", "ShellT", "--namesrv", "127.0.0.1:1")
        assert bad.returncode != 0 and bad.stderr.startswith("error:") and len(bad.stderr.splitlines()) == 1
    finally:
        broker.send_signal(signal.SIGINT)
        try:
            _, err = broker.communicate(timeout=15)  # waits, and closes the pipes
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.communicate()
            raise
    assert broker.returncode == 0, err


def test_broker_command_rejects_bad_options() -> None:
    for args, needle in ((["--queues", "0"], "--queues"), (["--port", "70000"], "--port"),
                         (["--brokers", "0"], "--brokers")):
        done = _cli("broker", *args)
        assert done.returncode == 2
        assert done.stderr.startswith("error:") and needle in done.stderr and len(done.stderr.splitlines()) == 1


def test_unusable_data_dir_is_reported_as_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from airflow_provider_rocketmq.commands.broker import main

    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert main(["--port", "0", "--data-dir", str(not_a_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --data-dir: cannot keep the store in") and len(err.splitlines()) == 1
