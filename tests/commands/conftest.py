"""The command tests share the consumer tests' broker fixture (`cluster`)."""

from tests.client.consumer.conftest import cluster

__all__ = ["cluster"]
