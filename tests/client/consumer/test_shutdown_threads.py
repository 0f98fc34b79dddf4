"""A listener stuck past shutdown never keeps the interpreter alive: every consume thread is a
daemon (an Airflow task or the CLI must exit once the consumer has shut down)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from .cluster import TestCluster

CHILD = textwrap.dedent("""
    import sys, threading
    from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus, OrderlyStatus
    from airflow_provider_rocketmq.client.consumer.push import PushConsumer
    namesrv, group, topic, orderly = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "orderly"
    entered = threading.Event()
    def listener(msgs, ctx):
        entered.set()
        threading.Event().wait()  # stuck for good
        return OrderlyStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS
    c = PushConsumer(group, namesrv_addr=namesrv, consume_from_where="first", rebalance_interval=0.5,
                     consume_thread_min=2, consume_thread_max=2, lock_interval=0.5)
    c.subscribe(topic)
    c.register_listener(listener, orderly=orderly)
    c.start()
    assert entered.wait(20), "the listener was never called"
    c.shutdown(timeout=0.2)
    print("shut down", flush=True)
""")


@pytest.mark.parametrize("mode", ["orderly", "concurrent"])
def test_the_process_exits_after_shutdown_with_a_stuck_listener(cluster: TestCluster, mode: str) -> None:
    topic, group = f"StuckExit_{mode}", f"g_stuck_exit_{mode}"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 1)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, cluster.namesrv_addr, group, topic, mode],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        out, _ = proc.communicate(timeout=25)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the process did not exit after shutdown (output {out!r})")
    assert "shut down" in out and proc.returncode == 0
