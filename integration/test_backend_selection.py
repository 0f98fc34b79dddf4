"""Which backend the suite picks, and what the user sees when none is available."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from integration.backends import (
    DOCKER_OFF_REASON,
    NO_BACKEND_REASON,
    BackendConfigError,
    BrokerControl,
    choose_backend,
)

REPO = Path(__file__).resolve().parent.parent


def _never(endpoint: str) -> bool:
    return False


def _always(endpoint: str) -> bool:
    return True


def _probe_recorder(answer: bool) -> tuple[list[str], Callable[[str], bool]]:
    probed: list[str] = []

    def probe(endpoint: str) -> bool:
        probed.append(endpoint)
        return answer

    return probed, probe


def test_existing_broker_is_used_without_probing_docker() -> None:
    probed, probe = _probe_recorder(True)
    choice = choose_backend({"ROCKETMQ_NAMESRV": "10.0.0.1:9876;10.0.0.2:9876", "ROCKETMQ_EMBEDDED": "0"}, probe)
    assert (choice.kind, choice.detail, choice.how) == ("existing", "10.0.0.1:9876;10.0.0.2:9876", "ROCKETMQ_NAMESRV")
    assert probed == []


def test_docker_is_detected_when_nothing_explicit_is_set() -> None:
    probed, probe = _probe_recorder(True)
    choice = choose_backend({"DOCKER_HOST": "tcp://127.0.0.1:2375"}, probe)
    assert (choice.kind, choice.detail, choice.image) == ("testcontainers", "tcp://127.0.0.1:2375",
                                                          "apache/rocketmq:4.9.7")
    assert choice.how == "a Docker engine answered"
    assert probed == ["tcp://127.0.0.1:2375"]


def test_explicit_embedded_wins_over_a_detected_engine() -> None:
    """What scripts/test.sh relies on: ROCKETMQ_EMBEDDED=1 on a machine where Docker answers."""
    probed, probe = _probe_recorder(True)
    choice = choose_backend({"ROCKETMQ_EMBEDDED": "1"}, probe)
    assert (choice.kind, choice.how) == ("embedded", "ROCKETMQ_EMBEDDED=1")
    assert probed == []  # the engine is not even asked


def test_explicit_docker_chooses_testcontainers() -> None:
    probed, probe = _probe_recorder(True)
    choice = choose_backend({"ROCKETMQ_DOCKER": "1", "ROCKETMQ_IMAGE": "registry.example.com:5000/mq/rocketmq",
                             "ROCKETMQ_IMAGE_TAG": "5.3.3"}, probe)
    assert (choice.kind, choice.how) == ("testcontainers", "ROCKETMQ_DOCKER=1")
    assert choice.image == "registry.example.com:5000/mq/rocketmq:5.3.3"
    assert "testcontainers registry.example.com:5000/mq/rocketmq:5.3.3 via unix://" in choice.describe()
    assert probed == ["unix:///var/run/docker.sock"]  # asked only to fail early when it does not answer


def test_explicit_docker_without_an_engine_fails_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(BackendConfigError, match=r"ROCKETMQ_DOCKER=1: no Docker engine answers GET /_ping at "
                                                 r"unix:///nowhere/docker.sock"):
        choose_backend({"ROCKETMQ_DOCKER": "1", "DOCKER_HOST": "unix:///nowhere/docker.sock"}, _never)


@pytest.mark.parametrize("env, named", [
    ({"ROCKETMQ_NAMESRV": "127.0.0.1:9876", "ROCKETMQ_EMBEDDED": "1"}, "ROCKETMQ_NAMESRV and ROCKETMQ_EMBEDDED=1"),
    ({"ROCKETMQ_NAMESRV": "127.0.0.1:9876", "ROCKETMQ_DOCKER": "1"}, "ROCKETMQ_NAMESRV and ROCKETMQ_DOCKER=1"),
    ({"ROCKETMQ_DOCKER": "1", "ROCKETMQ_EMBEDDED": "1"}, "ROCKETMQ_DOCKER=1 and ROCKETMQ_EMBEDDED=1"),
    ({"ROCKETMQ_NAMESRV": "h:1", "ROCKETMQ_DOCKER": "1", "ROCKETMQ_EMBEDDED": "1"},
     "ROCKETMQ_NAMESRV, ROCKETMQ_DOCKER=1 and ROCKETMQ_EMBEDDED=1 all"),
])
def test_two_explicit_choices_are_refused_naming_both(env: dict[str, str], named: str) -> None:
    named = named if named.endswith(" all") else f"{named} both"
    with pytest.raises(BackendConfigError, match=f"^{named} choose the integration backend"):
        choose_backend(env, _always)


def test_docker_can_be_opted_out_of() -> None:
    probed, probe = _probe_recorder(True)
    assert choose_backend({"ROCKETMQ_DOCKER": "0", "ROCKETMQ_EMBEDDED": "1"}, probe).kind == "embedded"
    choice = choose_backend({"ROCKETMQ_DOCKER": "0"}, probe)
    assert (choice.kind, choice.detail) == ("skip", DOCKER_OFF_REASON)
    assert choose_backend({"ROCKETMQ_DOCKER": "0", "ROCKETMQ_NAMESRV": "127.0.0.1:9876"}, probe).kind == "existing"
    assert probed == []
    with pytest.raises(BackendConfigError, match="ROCKETMQ_DOCKER"):
        choose_backend({"ROCKETMQ_DOCKER": "no"}, probe)


def test_skip_reason_is_spelled_out() -> None:
    choice = choose_backend({}, _never)
    assert choice.kind == "skip"
    assert choice.detail == NO_BACKEND_REASON
    assert "no Docker engine" in choice.detail
    assert choose_backend({"ROCKETMQ_EMBEDDED": "0"}, _never).kind == "skip"


@pytest.mark.parametrize("var, value", [("ROCKETMQ_IMAGE", "apache/rocketmq:5.3.3"),
                                        ("ROCKETMQ_IMAGE", "Apache/RocketMQ"),
                                        ("ROCKETMQ_IMAGE_TAG", "5.3.3; rm -rf /")])
def test_bad_image_fails_the_choice_naming_the_variable(var: str, value: str) -> None:
    for env in ({var: value}, {var: value, "ROCKETMQ_DOCKER": "1"}):
        with pytest.raises(BackendConfigError, match=f"^{var}: "):
            choose_backend(env, _always)


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
    # -q hides pytest's report header: the backend line is printed anyway, first
    assert proc.stdout.startswith(f"rocketmq integration backend: none ({NO_BACKEND_REASON})\n"), out


class _PingCounter:
    """A stand-in Docker engine on 127.0.0.1 that answers every request like GET /_ping, and
    counts them (a real engine would be asked to start containers next; this one cannot)."""

    def __init__(self) -> None:
        self.pings = 0
        self._srv = socket.socket()
        self._srv.bind(("127.0.0.1", 0))
        self._srv.listen(8)
        self.endpoint = f"tcp://127.0.0.1:{self._srv.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                self.pings += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")

    def close(self) -> None:
        self._srv.close()


@pytest.fixture
def engine_answering() -> Iterator[_PingCounter]:
    engine = _PingCounter()
    try:
        yield engine
    finally:
        engine.close()


def test_explicit_embedded_is_used_and_named_with_an_engine_answering(tmp_path: Path,
                                                                      engine_answering: _PingCounter) -> None:
    proc = _run_suite_file(tmp_path, ROCKETMQ_EMBEDDED="1", DOCKER_HOST=engine_answering.endpoint)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and re.search(r"\b1 passed\b", out), out
    line = "rocketmq integration backend: embedded [ROCKETMQ_EMBEDDED=1]"
    lines = proc.stdout.splitlines()
    assert lines[0] == line, out  # at the start, under -q
    assert line in lines[1:], out  # and in the summary, once a test used the broker
    assert engine_answering.pings == 0


def test_script_keeps_the_embedded_broker_with_an_engine_answering(tmp_path: Path,
                                                                   engine_answering: _PingCounter) -> None:
    """scripts/test.sh, as CI and the README run it, on a machine where a Docker engine answers;
    a path argument runs that path only."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROCKETMQ_NAMESRV", "ROCKETMQ_EMBEDDED", "ROCKETMQ_DOCKER", "ROCKETMQ_COMPAT")}
    env["DOCKER_HOST"] = engine_answering.endpoint
    proc = subprocess.run(["bash", "scripts/test.sh", "integration/test_roundtrip.py"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "rocketmq integration backend: embedded [ROCKETMQ_EMBEDDED=1]" in proc.stdout.splitlines(), out
    assert re.search(r"^1 passed\b", proc.stdout, re.MULTILINE), out  # tests/ was not run as well
    assert engine_answering.pings == 0


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

