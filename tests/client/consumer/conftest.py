from __future__ import annotations

from collections.abc import Iterator

import pytest

from .cluster import TestCluster


@pytest.fixture
def cluster() -> Iterator[TestCluster]:
    c = TestCluster(queues=8, time_scale=0.01)
    try:
        yield c
    finally:
        c.close()
