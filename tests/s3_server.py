"""A real S3 API on 127.0.0.1 for tests: moto's server in a subprocess, reached through s3fs.

moto (5.2) honours ``If-None-Match: *`` on PutObject and CompleteMultipartUpload (412
PreconditionFailed, which s3fs raises as FileExistsError), as S3 does. ``MotoS3(
ignore_if_none_match=True)`` runs the same server behind a filter that drops that header:
a stand-in for an S3-compatible store that ignores conditional writes (run as
``python s3_server.py PORT --ignore-if-none-match``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoS3:
    """``moto.server`` on a free port; ``storage_options`` are what fsspec/s3fs need to reach it."""

    def __init__(self, *, ignore_if_none_match: bool = False, log_path: str | None = None,
                 own_session: bool = False) -> None:
        """``log_path``: the server's output goes there (else nowhere); ``own_session``: the server
        runs in a session of its own (a signal to the caller's process group does not reach it)."""
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}
        cmd = ([sys.executable, __file__, str(self.port), "--ignore-if-none-match"] if ignore_if_none_match
               else [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)])
        log = open(log_path, "wb") if log_path else None  # noqa: SIM115 - closed once the child has it
        self.proc = subprocess.Popen(cmd, stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=own_session)
        if log is not None:
            log.close()  # the child holds its own descriptor
        deadline = time.monotonic() + 120  # a loaded CI machine starts Python slowly
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        self.storage_options: dict[str, Any] = {
            "key": "testing", "secret": "testing", "endpoint_url": self.endpoint,
            "client_kwargs": {"region_name": "us-east-1"}, "skip_instance_cache": True,
        }

    def filesystem(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(**self.storage_options)

    def new_bucket(self, prefix: str = "rmq") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.filesystem().call_s3("create_bucket", Bucket=name)
        return name

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _serve_ignoring_if_none_match(port: int) -> None:
    """moto's S3 app behind a WSGI filter that drops If-None-Match from every request."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    os.environ["MOTO_PORT"] = str(port)
    app = DomainDispatcherApplication(create_backend_app)

    def ignoring(environ: dict[str, Any], start_response: Any) -> Any:
        environ.pop("HTTP_IF_NONE_MATCH", None)
        return app(environ, start_response)

    run_simple("127.0.0.1", port, ignoring, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    _serve_ignoring_if_none_match(int(sys.argv[1]))
