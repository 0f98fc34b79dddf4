"""The embedded broker the benches run in a process of their own (so client CPU is measured alone).

It is `airflow_provider_rocketmq.embedded.backlog`: a name server and a broker with ``topic`` on
``queues`` queues, optionally holding a backlog written straight into its store.
"""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_broker(topic: str, messages: int = 0, size: int = 100,
                 queues: int = 8) -> tuple[subprocess.Popen[str], str]:
    """Start it; returns the process and the name server address once it serves."""
    proc = subprocess.Popen([sys.executable, "-m", "airflow_provider_rocketmq.embedded.backlog", "--topic", topic,
                             "--messages", str(messages), "--size", str(size), "--queues", str(queues)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("namesrv="):
        proc.kill()
        raise RuntimeError(f"embedded broker did not start: {line!r}")
    return proc, line.split("=", 1)[1]
