"""The ``cluster`` fixture: one running RocketMQ for the whole integration session.

See ``backends.py`` for the selection (ROCKETMQ_NAMESRV, ROCKETMQ_DOCKER=1, ROCKETMQ_EMBEDDED=1; without
any, Docker when an engine answers; otherwise skip with the reason spelled out) and docs/integration.md
for how to run it. The backend is printed at the start and in the summary at any verbosity (``-q``
hides pytest's own report header).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from .backends import (
    BackendConfigError,
    IntegrationCluster,
    session_backend,
    start_cluster,
)

_started: list[IntegrationCluster] = []  # the running cluster, for the summary line


def _backend_line() -> str:
    try:
        return session_backend().describe()
    except BackendConfigError as exc:
        return f"rocketmq integration backend: invalid environment: {exc}"


def pytest_report_header(config: pytest.Config) -> str:
    return _backend_line()


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and reporter.verbosity < 0:  # the report header is not shown then
        reporter.write_line(_backend_line())


def _say(config: pytest.Config, line: str) -> None:
    """Print ``line`` now, past pytest's output capture (a fixture's output is otherwise only
    shown when its test fails)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line, flush=True)
        return
    with capture.global_and_fixture_disabled():
        # under -q the progress dots leave the line open and ensure_newline() does not see them
        if reporter.verbosity < 0 and getattr(getattr(reporter, "_tw", None), "width_of_current_line", 0):
            reporter.write("\n")
        reporter.write_line(line)


class _TerminateAsInterrupt:
    """SIGTERM ends the session through pytest's own exit path, so fixtures are torn down (the
    containers removed) as after Ctrl-C; Python's default would end the process on the spot."""

    def __init__(self) -> None:
        self.previous: Any = None
        self.closing = False  # set while the backend is removed: let that finish, the session is ending

    def install(self) -> None:
        self.previous = signal.signal(signal.SIGTERM, self._handle)

    def uninstall(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            self.previous = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.closing:
            return
        self.closing = True
        pytest.exit("SIGTERM: stopping; the integration backend removes what it started", returncode=128 + signum)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[IntegrationCluster]:
    """A running cluster: ``namesrv_addr``, ``admin``, ``new_topic()``, ``new_group()``,
    ``producer()``, ``restart_broker()`` when ``can_restart``."""
    try:
        choice = session_backend()
    except BackendConfigError as exc:
        problem = str(exc)
    else:
        problem = ""
    if problem:  # failed outside the except block: no "during handling" chain in the report
        pytest.fail(problem, pytrace=False)
    if choice.kind == "skip":
        pytest.skip(choice.detail)
    on_term = _TerminateAsInterrupt()
    if choice.kind == "testcontainers":
        on_term.install()
    try:
        running = start_cluster(choice)
        for notice in getattr(running, "notices", ()):
            _say(request.config, notice)
        _started.append(running)
        try:
            yield running
        finally:
            on_term.closing = True
            running.close()
    finally:
        on_term.uninstall()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from .test_differential import SUMMARY

    if SUMMARY:
        terminalreporter.section("differential check")
        for line in SUMMARY:
            terminalreporter.write_line(line)
    if _started:  # only when a test used the broker; the header line said it for the others
        terminalreporter.write_line(_backend_line())


@pytest.fixture
def restartable(cluster: IntegrationCluster) -> IntegrationCluster:
    """The cluster, when its backend can restart the broker (embedded, testcontainers)."""
    if not cluster.can_restart:
        how = (" (set ROCKETMQ_BROKER_KILL_CMD and ROCKETMQ_BROKER_START_CMD to let the suite kill -9 and "
               "restart it)" if cluster.kind == "existing" else "")
        pytest.skip(f"the {cluster.kind} backend cannot restart its broker{how}")
    return cluster
