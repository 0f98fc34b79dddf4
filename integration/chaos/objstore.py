"""The object store of a chaos run: moto's S3 server in a subprocess, reached through the fault proxy.

The flow (windows staged on S3, loads into S3 or an Iceberg warehouse on S3, commits reading S3
manifests) gets the proxy's endpoint; the checker reads the server directly, past the proxy.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.s3_server import MotoS3

from .s3proxy import S3FaultProxy

KEY = SECRET = "testing"  # moto accepts any credentials


class ObjectStore:
    """moto on a free port with the fault proxy in front; ``start()`` / ``stop()``."""

    def __init__(self, seed: int, log_path: str | None = None) -> None:
        self.moto = MotoS3(log_path=log_path, own_session=True)
        self.port = self.moto.port
        self.direct = self.moto.endpoint
        self.proxy = S3FaultProxy(("127.0.0.1", self.port), seed)
        self.bucket = f"chaos-{uuid.uuid4().hex[:12]}"
        self.direct_fs().call_s3("create_bucket", Bucket=self.bucket)

    # what the flow uses: the proxy
    def options(self) -> dict[str, Any]:
        return {"key": KEY, "secret": SECRET, "endpoint_url": self.proxy.endpoint,
                "client_kwargs": {"region_name": "us-east-1"}}

    def options_json(self) -> str:
        return json.dumps(self.options())

    def iceberg_properties(self) -> dict[str, str]:
        return {"s3.endpoint": self.proxy.endpoint, "s3.access-key-id": KEY, "s3.secret-access-key": SECRET,
                "s3.region": "us-east-1"}

    # what the checker uses: the server itself
    def direct_options(self) -> dict[str, Any]:
        return {"key": KEY, "secret": SECRET, "endpoint_url": self.direct,
                "client_kwargs": {"region_name": "us-east-1"}, "skip_instance_cache": True}

    def direct_fs(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(**self.direct_options())

    def url(self, *parts: str) -> str:
        return "s3://" + "/".join([self.bucket, *parts])

    def stop(self) -> None:
        proxy = getattr(self, "proxy", None)
        if proxy is not None:
            proxy.close()
        self.moto.stop()
