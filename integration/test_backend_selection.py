"""Which backend the suite picks, and what the user sees when none is available."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from integration.backends import NO_BACKEND_REASON, BackendConfigError, BrokerControl, choose_backend

REPO = Path(__file__).resolve().parent.parent


def _never(endpoint: str) -> bool:
    return False


def _always(endpoint: str) -> bool:
    return True


def test_existing_broker_wins_over_docker_and_embedded() -> None:
    choice = choose_backend({"ROCKETMQ_NAMESRV": "10.0.0.1:9876;10.0.0.2:9876", "ROCKETMQ_EMBEDDED": "1"}, _always)
    assert (choice.kind, choice.detail) == ("existing", "10.0.0.1:9876;10.0.0.2:9876")


def test_docker_is_used_when_it_answers() -> None:
    probed: list[str] = []

    def probe(endpoint: str) -> bool:
        probed.append(endpoint)
        return True

    choice = choose_backend({"DOCKER_HOST": "tcp://127.0.0.1:2375", "ROCKETMQ_EMBEDDED": "1"}, probe)
    assert (choice.kind, choice.detail) == ("testcontainers", "tcp://127.0.0.1:2375")
    assert probed == ["tcp://127.0.0.1:2375"]


def test_embedded_when_requested_and_no_docker() -> None:
    assert choose_backend({"ROCKETMQ_EMBEDDED": "1"}, _never).kind == "embedded"


def test_docker_can_be_opted_out_of() -> None:
    probed: list[str] = []

    def probe(endpoint: str) -> bool:
        probed.append(endpoint)
        return True

    assert choose_backend({"ROCKETMQ_DOCKER": "0", "ROCKETMQ_EMBEDDED": "1"}, probe).kind == "embedded"
    assert probed == []
    with pytest.raises(BackendConfigError, match="ROCKETMQ_DOCKER"):
        choose_backend({"ROCKETMQ_DOCKER": "no"}, probe)


def test_skip_reason_is_spelled_out() -> None:
    choice = choose_backend({}, _never)
    assert choice.kind == "skip"
    assert choice.detail == NO_BACKEND_REASON
    assert "no Docker engine" in choice.detail
    assert choose_backend({"ROCKETMQ_EMBEDDED": "0"}, _never).kind == "skip"


@pytest.mark.parametrize("value", ["localhost", "127.0.0.1:", ":9876", "127.0.0.1:9876;", "a b:1"])
def test_bad_namesrv_names_the_variable(value: str) -> None:
    with pytest.raises(BackendConfigError, match="ROCKETMQ_NAMESRV"):
        choose_backend({"ROCKETMQ_NAMESRV": value}, _never)


def test_bad_embedded_flag_names_the_variable() -> None:
    with pytest.raises(BackendConfigError, match="ROCKETMQ_EMBEDDED"):
        choose_backend({"ROCKETMQ_EMBEDDED": "yes"}, _never)


def test_embedded_faults_are_validated_and_carried() -> None:
    choice = choose_backend({"ROCKETMQ_EMBEDDED": "1", "ROCKETMQ_EMBEDDED_FAULTS": "offset-race,pull-commit-delay=0.1"},
                            _never)
    assert (choice.kind, choice.faults) == ("embedded", "offset-race,pull-commit-delay=0.1")
    assert "faults=offset-race" in choice.detail  # shown in the report header
    with pytest.raises(BackendConfigError, match="ROCKETMQ_EMBEDDED_FAULTS: unknown fault 'sometimes'"):
        choose_backend({"ROCKETMQ_EMBEDDED": "1", "ROCKETMQ_EMBEDDED_FAULTS": "sometimes"}, _never)


def _run_suite_file(tmp_path: Path, **env_changes: str) -> subprocess.CompletedProcess[str]:
    """Run one broker-needing test file in a subprocess with a controlled backend environment."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROCKETMQ_NAMESRV", "ROCKETMQ_EMBEDDED", "ROCKETMQ_DOCKER", "TESTCONTAINERS_HOST_OVERRIDE")}
    env["DOCKER_HOST"] = f"unix://{tmp_path}/no-docker.sock"
    env.update(env_changes)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         str(REPO / "integration" / "test_roundtrip.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def test_suite_without_any_backend_reports_skipped(tmp_path: Path) -> None:
    """End to end: a broker-needing test file is skipped, not failed, with the reason shown."""
    proc = _run_suite_file(tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert re.search(r"\b1 skipped\b", out) and not re.search(r"\b\d+ (failed|errors?)\b", out), out
    assert NO_BACKEND_REASON in out, out


def test_suite_with_a_malformed_namesrv_fails_naming_the_variable(tmp_path: Path) -> None:
    proc = _run_suite_file(tmp_path, ROCKETMQ_NAMESRV="localhost")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "ROCKETMQ_NAMESRV: 'localhost' is not host:port" in out, out
    assert "Traceback" not in out and "During handling" not in out, out


def test_broker_control_needs_both_commands() -> None:
    ns = {"ROCKETMQ_NAMESRV": "127.0.0.1:9876"}
    assert choose_backend(ns, _never).control is None
    both = choose_backend({**ns, "ROCKETMQ_BROKER_KILL_CMD": "k", "ROCKETMQ_BROKER_START_CMD": "s"}, _never)
    assert both.control == BrokerControl("127.0.0.1:9876", "k", "s")
    with pytest.raises(BackendConfigError, match="ROCKETMQ_BROKER_START_CMD: must be set too"):
        choose_backend({**ns, "ROCKETMQ_BROKER_KILL_CMD": "k"}, _never)
    with pytest.raises(BackendConfigError, match="ROCKETMQ_BROKER_KILL_CMD: must be set too"):
        choose_backend({**ns, "ROCKETMQ_BROKER_START_CMD": "s"}, _never)


def test_broker_control_kills_and_restarts_a_broker_process(tmp_path: Path) -> None:
    """The commands run as a user would give them: a broker process (the embedded one, with its
    store on disk) killed with -9 and started again; what it stored survives."""
    from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, Producer
    from integration.reliability.harness import free_port

    np_, bp = free_port(), free_port()
    pid = tmp_path / "broker.pid"
    start = (f"{sys.executable} -m airflow_provider_rocketmq.embedded --port {np_} --broker-port {bp} "
             f"--data-dir {tmp_path / 'store'} > {tmp_path / 'broker.log'} 2>&1 & echo $! > {pid}")
    control = BrokerControl(f"127.0.0.1:{np_}", f"kill -9 $(cat {pid})", start, timeout=60)
    try:
        control.start([f"127.0.0.1:{bp}"])
        cfg = ClientConfig(namesrv_addr=control.namesrv)
        with Producer(cfg, "ctl_pg") as producer:
            producer.send(Message("Ctl", b"kept"))
        killed_at = time.time()
        back = control.restart()
        assert back > killed_at
        with Admin(cfg) as admin:
            assert sum(admin.high_water_marks("Ctl").values()) == 1
        with pytest.raises(AssertionError, match="ROCKETMQ_BROKER_KILL_CMD exited 1: gone"):
            BrokerControl(control.namesrv, "echo gone; exit 1", "true").kill()
    finally:
        if pid.exists():
            subprocess.run(["sh", "-c", f"kill -9 $(cat {pid}) 2>/dev/null"], check=False)
    nobody = f"127.0.0.1:{free_port()}"
    with pytest.raises(AssertionError, match="ROCKETMQ_BROKER_START_CMD exited 3"):
        BrokerControl(nobody, "true", "echo no broker here; exit 3", timeout=10).start([nobody])

