"""The embedded broker's shape: `broker.py` is its one composition root, and the request services
see the broker only through `ports.BrokerContext` (read from the source, like tests/test_structure.py)."""

from __future__ import annotations

from tests.test_structure import PKG, import_graph

EMBEDDED = f"{PKG}.embedded"
SERVICES = {f"{EMBEDDED}.{name}" for name in ("pull", "send", "client_handlers", "admin_handlers", "schedule")}


def test_only_the_cluster_and_the_entry_points_import_the_broker() -> None:
    graph = import_graph()
    importers = sorted(m for m, deps in graph.items() if f"{EMBEDDED}.broker" in deps)
    assert importers == [EMBEDDED, f"{EMBEDDED}.backlog", f"{EMBEDDED}.cluster"]


def test_a_request_service_imports_no_other_service() -> None:
    graph = import_graph()
    assert {s: sorted(graph[s] & SERVICES) for s in SERVICES if graph[s] & SERVICES} == {}


def test_the_services_are_built_from_the_context_alone() -> None:
    from airflow_provider_rocketmq.embedded import EmbeddedBroker

    broker = EmbeddedBroker()
    services = (broker.pull, broker.send_handlers, broker.client_handlers, broker.admin_handlers, broker.schedule)
    for service in services:
        assert broker not in vars(service).values(), f"{type(service).__name__} holds the broker"
