"""The testcontainers backend on a real Docker engine: a pytest run of its own starts the broker
containers, then fails, or is interrupted (SIGINT / SIGTERM) while a test runs or while the
containers start; afterwards no container or network carrying that run's labels is left, with or
without Ryuk.

Runs when testcontainers is the session's backend (so a Docker engine answers); skipped, saying
so, with any other backend: ``bash scripts/test.sh`` must not depend on what runs on the machine."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .backends import BackendConfigError, session_backend
from .containers import HOST_LABEL, PID_LABEL, SUITE_LABEL, docker_client_for, docker_endpoint, image_for

REPO = Path(__file__).resolve().parent.parent
ENDPOINT = docker_endpoint()

pytestmark = pytest.mark.slow

PROBE = textwrap.dedent('''
    import os
    import time
    from pathlib import Path


    def test_probe(cluster):
        Path(os.environ["PROBE_READY"]).write_text(cluster.namesrv_addr)
        if os.environ["PROBE_MODE"] == "fail":
            raise AssertionError("the probe fails on purpose")
        time.sleep(600)  # until the test that started this run interrupts it
''')


@pytest.fixture(scope="module")
def docker() -> Iterator[Any]:
    """A docker SDK client, when testcontainers is the session's backend."""
    try:
        choice = session_backend()
    except BackendConfigError as exc:
        pytest.fail(str(exc), pytrace=False)
    if choice.kind != "testcontainers":
        pytest.skip(f"checks the testcontainers backend; this session's is "
                    f"{'none' if choice.kind == 'skip' else choice.kind} "
                    f"(ROCKETMQ_DOCKER=1, or no other backend set and a Docker engine answering)")
    client = docker_client_for(ENDPOINT)
    try:
        yield client
    finally:
        client.close()


def _ryuk_image_present(client: Any) -> bool:
    from docker.errors import ImageNotFound
    from testcontainers.core.config import testcontainers_config as tc

    try:
        client.images.get(tc.hub_image_name_prefix + tc.ryuk_image)
    except ImageNotFound:
        return False
    return True


def _owned_by(client: Any, pid: int) -> tuple[list[Any], list[Any]]:
    labels = {"label": [SUITE_LABEL, f"{PID_LABEL}={pid}", f"{HOST_LABEL}={socket.gethostname()}"]}
    return client.containers.list(all=True, filters=labels), client.networks.list(filters=labels)


def _start_probe(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], Path, Path]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    ready, out = tmp_path / "ready", tmp_path / "out.txt"
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROCKETMQ_NAMESRV", "ROCKETMQ_EMBEDDED", "TESTCONTAINERS_RYUK_DISABLED")}
    env.update(ROCKETMQ_DOCKER="1", PROBE_MODE=mode, PROBE_READY=str(ready),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")])))
    with out.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "integration.conftest",
             "--rootdir", str(tmp_path), "--timeout", "900", str(tmp_path / "test_probe.py")],
            cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, text=True)
    return proc, ready, out


def _await(predicate: Any, proc: subprocess.Popen[str], out: Path, what: str, timeout: float = 240) -> None:
    # another process's file and the engine's state: nothing to await but by looking
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the probe run ended (rc {proc.returncode}) before {what}:\n{out.read_text()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"timed out waiting for {what}:\n{out.read_text()}")
        time.sleep(0.1)


def _assert_nothing_left(client: Any, proc: subprocess.Popen[str], out: Path) -> str:
    rc = proc.wait(180)
    text = out.read_text()
    containers, networks = _owned_by(client, proc.pid)
    left = [c.name for c in containers] + [n.name for n in networks]
    for c in containers:  # leave the engine clean even when the check fails
        c.remove(force=True, v=True)
    for n in networks:
        n.remove()
    assert not left, f"left behind by the probe run (rc {rc}): {left}\n{text}"
    return text


def _assert_ryuk_notice(client: Any, text: str) -> None:
    notices = [line for line in text.splitlines() if line.startswith("testcontainers: Ryuk off")]
    if _ryuk_image_present(client):
        assert notices == [], text
    else:
        assert len(notices) == 1, text


def test_a_failed_run_removes_its_containers_and_earlier_leftovers(docker: Any, tmp_path: Path) -> None:
    # what a run killed outright (SIGKILL: no teardown, no atexit) would have left: its pid is gone
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = {SUITE_LABEL: "stale-run", PID_LABEL: str(gone.pid), HOST_LABEL: socket.gethostname()}
    docker.networks.create(f"it-stale-{gone.pid}", labels=stale)
    docker.containers.create(image_for(), ["true"], labels=stale)
    proc, ready, out = _start_probe(tmp_path, "fail")
    text = _assert_nothing_left(docker, proc, out)
    assert proc.returncode == 1 and "the probe fails on purpose" in text, text
    assert ready.exists(), text
    assert f"rocketmq integration backend: testcontainers {image_for()} via {ENDPOINT} [ROCKETMQ_DOCKER=1]" in text
    _assert_ryuk_notice(docker, text)
    assert "testcontainers: removed 1 container(s) and 1 network(s) left by 1 earlier run(s)" in text, text
    leftovers = docker.containers.list(all=True, filters={"label": f"{SUITE_LABEL}=stale-run"})
    assert leftovers == [] and docker.networks.list(filters={"label": f"{SUITE_LABEL}=stale-run"}) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_test_removes_its_containers(docker: Any, tmp_path: Path, sig: signal.Signals) -> None:
    proc, ready, out = _start_probe(tmp_path, "wait")
    _await(ready.exists, proc, out, "the probe test to run with the broker up")
    containers, networks = _owned_by(docker, proc.pid)
    assert len(containers) == 2 and len(networks) == 1, (containers, networks)
    proc.send_signal(sig)
    text = _assert_nothing_left(docker, proc, out)
    assert proc.returncode != 0, text
    _assert_ryuk_notice(docker, text)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_start_removes_what_was_created(docker: Any, tmp_path: Path, sig: signal.Signals) -> None:
    proc, ready, out = _start_probe(tmp_path, "wait")
    _await(lambda: _owned_by(docker, proc.pid)[0], proc, out, "the first container of the probe run")
    proc.send_signal(sig)
    text = _assert_nothing_left(docker, proc, out)
    assert not ready.exists(), f"the interrupt landed after the start:\n{text}"
    assert proc.returncode != 0, text
