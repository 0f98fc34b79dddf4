from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..client.consumer.cluster import TestCluster


@pytest.fixture
def cluster() -> Iterator[TestCluster]:
    """The consumer tests' embedded cluster (8 queues, broker timers 100x faster), for the consume command."""
    c = TestCluster(queues=8, time_scale=0.01)
    try:
        yield c
    finally:
        c.close()
