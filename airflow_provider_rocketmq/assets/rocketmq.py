"""``rocketmq://<name servers or connection id>/<topic>`` asset URIs: sanitizer, factory, OpenLineage.

Registered in the provider info (``asset-uris``), so ``Asset("rocketmq://ns1:9876/orders")``
is validated and normalized by Airflow, and OpenLineage maps such an asset to the dataset
``namespace="rocketmq://ns1:9876", name="orders"`` — the same one the window operator reports
as its input, so lineage and assets name a topic alike.

Normal form: name servers separated by ``;`` (``,`` accepted), blanks dropped, sorted (the
same cluster is the same asset whatever order the list was written in); the path is exactly
one valid topic name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, urlsplit

from airflow_provider_rocketmq.client import ConfigError, check_topic

if TYPE_CHECKING:
    from airflow.sdk import Asset

SCHEME = "rocketmq"


def normalize_netloc(netloc: str) -> str:
    """``"ns2:9876, ns1:9876"`` -> ``"ns1:9876;ns2:9876"``; a connection id stays as it is."""
    parts = sorted({p.strip() for p in netloc.replace(",", ";").split(";") if p.strip()})
    for part in parts:
        host, sep, port = part.rpartition(":")
        if sep and (not host or not port.isdigit() or not 0 < int(port) < 65536):
            raise ValueError(f"rocketmq:// URI: {part!r} is not host:port")
    return ";".join(parts)


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's asset-URI handler: validate and normalize, raising ValueError on a bad URI."""
    if not uri.netloc:
        raise ValueError("rocketmq:// URI must name the name server(s) or a connection id: "
                         "rocketmq://<namesrv-or-conn>/<topic>")
    topic = uri.path.lstrip("/")
    if not topic or "/" in topic:
        raise ValueError(f"rocketmq:// URI must have exactly one topic as its path, got {uri.path!r}")
    try:
        check_topic(topic)
    except ConfigError as exc:
        raise ValueError(f"rocketmq:// URI: {exc}") from None
    return uri._replace(netloc=normalize_netloc(uri.netloc), path=f"/{topic}")


def asset_uri(namesrv_or_conn: str, topic: str) -> str:
    """The normalized URI of a topic (what `create_asset` and the window's lineage use)."""
    return sanitize_uri(urlsplit(f"{SCHEME}://{namesrv_or_conn}/{topic}")).geturl()


def create_asset(*, namesrv: str, topic: str, extra: dict[str, Any] | None = None) -> Asset:
    """Airflow's asset factory for the scheme: ``create_asset(namesrv="ns1:9876", topic="orders")``."""
    from airflow.sdk import Asset

    return Asset(uri=asset_uri(namesrv, topic), extra=extra or {})


def convert_asset_to_openlineage(asset: Any, lineage_context: Any = None) -> Any:
    """An OpenLineage dataset for a rocketmq:// asset: namespace ``rocketmq://<netloc>``, name the topic."""
    from openlineage.client.event_v2 import Dataset

    parts = sanitize_uri(urlsplit(asset.uri))
    return Dataset(namespace=f"{SCHEME}://{parts.netloc}", name=parts.path.lstrip("/"))
