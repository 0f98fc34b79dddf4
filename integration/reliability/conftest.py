"""Options, fixtures and the figure summary of the reliability checks (see __init__.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

import pytest

from ..backends import BackendConfigError, ContainerCluster, session_backend
from .harness import FIGURES, Broker


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--reliability-full", action="store_true", default=False,
                     help="run the reliability checks with the issue's sizes (minutes each)")


T = TypeVar("T")


@dataclass(frozen=True)
class Mode:
    full: bool

    def pick(self, quick: T, full: T) -> T:
        """The quick-mode value (CI) or the full-mode one (the issue's sizes)."""
        return full if self.full else quick


@pytest.fixture(scope="session")
def mode(request: pytest.FixtureRequest) -> Mode:
    return Mode(bool(request.config.getoption("--reliability-full")) or os.environ.get("RELIABILITY_FULL") == "1")


@pytest.fixture(scope="session")
def suite_containers(request: pytest.FixtureRequest) -> ContainerCluster | None:
    """The integration suite's broker containers when testcontainers is its backend, else None."""
    try:
        kind = session_backend().kind
    except BackendConfigError:
        kind = ""  # the cluster fixture reports it; these checks fall back to their own broker
    if kind != "testcontainers":
        return None
    cluster = request.getfixturevalue("cluster")
    assert isinstance(cluster, ContainerCluster)
    return cluster


@pytest.fixture(scope="session")
def broker(mode: Mode, suite_containers: ContainerCluster | None) -> Iterator[Broker]:
    """ROCKETMQ_NAMESRV, the suite's broker container (testcontainers), or an embedded broker
    process the suite owns; the suite can kill the latter two."""
    b = Broker.from_environment(lock_expiry=60.0 if mode.full else 6.0, container=suite_containers)
    try:
        yield b
    finally:
        b.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("reliability figures")
        for line in FIGURES:
            terminalreporter.write_line(line)
