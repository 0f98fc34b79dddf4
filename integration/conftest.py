"""The ``cluster`` fixture: one running RocketMQ for the whole integration session.

See ``backends.py`` for the selection order (ROCKETMQ_NAMESRV, Docker, ROCKETMQ_EMBEDDED=1,
otherwise skip with the reason spelled out) and docs/integration.md for how to run it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .backends import (
    BackendChoice,
    BackendConfigError,
    IntegrationCluster,
    choose_backend_from_environment,
    start_cluster,
)

_choice: BackendChoice | None = None


def _backend_choice() -> BackendChoice:
    global _choice
    if _choice is None:
        _choice = choose_backend_from_environment()
    return _choice


def pytest_report_header(config: pytest.Config) -> str:
    try:
        choice = _backend_choice()
    except BackendConfigError as exc:
        return f"rocketmq integration backend: invalid environment: {exc}"
    if choice.kind == "skip":
        return f"rocketmq integration backend: none ({choice.detail})"
    control = " (broker kill/start commands set)" if choice.control is not None else ""
    return f"rocketmq integration backend: {choice.kind} {choice.detail}{control}".rstrip()


@pytest.fixture(scope="session")
def cluster() -> Iterator[IntegrationCluster]:
    """A running cluster: ``namesrv_addr``, ``admin``, ``new_topic()``, ``new_group()``,
    ``producer()``, ``restart_broker()`` when ``can_restart``."""
    try:
        choice = _backend_choice()
    except BackendConfigError as exc:
        problem = str(exc)
    else:
        problem = ""
    if problem:  # failed outside the except block: no "during handling" chain in the report
        pytest.fail(problem, pytrace=False)
    if choice.kind == "skip":
        pytest.skip(choice.detail)
    running = start_cluster(choice)
    try:
        yield running
    finally:
        running.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from .test_differential import SUMMARY

    if SUMMARY:
        terminalreporter.section("differential check")
        for line in SUMMARY:
            terminalreporter.write_line(line)


@pytest.fixture
def restartable(cluster: IntegrationCluster) -> IntegrationCluster:
    """The cluster, when its backend can restart the broker (embedded, testcontainers)."""
    if not cluster.can_restart:
        how = (" (set ROCKETMQ_BROKER_KILL_CMD and ROCKETMQ_BROKER_START_CMD to let the suite kill -9 and "
               "restart it)" if cluster.kind == "existing" else "")
        pytest.skip(f"the {cluster.kind} backend cannot restart its broker{how}")
    return cluster
