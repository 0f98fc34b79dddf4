"""`rocketmq-airflow consume`: JSON lines out, summary on stderr, offsets committed, bad input."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

from ..client.consumer.cluster import TestCluster

CLI = [sys.executable, "-m", "airflow_provider_rocketmq.cli"]


def test_consume_prints_json_lines_and_commits(cluster: TestCluster) -> None:
    topic = "CliTopic"
    cluster.create_topic(topic, 2)
    cluster.fill(topic, 8, body=lambda i: b"hello %d" % i if i < 5 else b"\xff\xfe", tags=lambda i: "TagA",
                 per_batch=3)
    proc = subprocess.run(CLI + ["consume", "--namesrv", cluster.namesrv_addr, "--group", "g_cli", "--topic", topic,
                                 "--from", "first", "--max-messages", "6", "--idle-timeout", "20"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(lines) == 6
    texts = sorted(x["body"] for x in lines if x["body_encoding"] == "utf-8")
    binary = [x for x in lines if x["body_encoding"] == "base64"]
    assert texts == [f"hello {i}" for i in range(5)][:len(texts)] and len(texts) + len(binary) == 6
    assert all(base64.b64decode(b["body"]) == b"\xff\xfe" for b in binary)
    first = lines[0]
    assert set(first) >= {"topic", "queue_id", "queue_offset", "msg_id", "tags", "keys", "properties",
                          "reconsume_times", "body", "body_encoding"}
    assert first["tags"] == "TagA" and first["topic"] == topic
    assert "consumed 6 message(s)" in proc.stderr
    # offsets of fully settled pulled batches are committed, never beyond what was printed;
    # a second run prints the rest (from the committed offsets: at-least-once, nothing lost)
    committed = cluster.committed("g_cli", topic)
    printed = {(x["queue_id"], x["queue_offset"]) for x in lines}
    for mq, off in committed.items():
        assert all((mq.queue_id, o) in printed for o in range(off))
    proc = subprocess.run(CLI + ["consume", "--namesrv", cluster.namesrv_addr, "--group", "g_cli", "--topic", topic,
                                 "--idle-timeout", "2"], check=False, capture_output=True, text=True, timeout=60)
    rest = [json.loads(x) for x in proc.stdout.splitlines()]
    assert printed | {(x["queue_id"], x["queue_offset"]) for x in rest} == {(0, i) for i in range(5)} | \
        {(1, i) for i in range(3)}
    assert all(x["queue_offset"] >= committed[next(mq for mq in committed if mq.queue_id == x["queue_id"])]
               for x in rest)


def test_consume_bad_input_is_one_line_error() -> None:
    proc = subprocess.run(CLI + ["consume", "--namesrv", "127.0.0.1:1", "--group", "g", "--topic", "T",
                                 "--max-messages", "-1"], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--max-messages" in proc.stderr
    proc = subprocess.run(CLI + ["consume", "--namesrv", "127.0.0.1:1", "--group", "bad group", "--topic", "T"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "group" in proc.stderr


def _cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(CLI + list(args), check=False, capture_output=True, text=True, timeout=timeout)


def test_issue_14_scenario_against_a_broker_that_loses_overlapping_first_commits() -> None:
    # the issue's commands, against a broker with a real 4.x broker's offset table (OffsetFaults)
    from airflow_provider_rocketmq.embedded import OffsetFaults

    cluster = TestCluster(queues=4)
    try:
        cluster.embedded.set_offset_faults(OffsetFaults(offset_race=0.05))
        ns, topic, group = cluster.namesrv_addr, "CliIssue14", "g_cli_issue14"
        cluster.create_topic(topic, 4)
        assert _cli("produce", "--namesrv", ns, "--topic", topic, "--count", "6", "--tag", "TagA",
                    "--size", "5000").returncode == 0
        assert _cli("produce", "--namesrv", ns, "--topic", topic, "--count", "3", "--tag", "TagC").returncode == 0
        first = _cli("consume", "--namesrv", ns, "--topic", topic, "--group", group, "--from", "first",
                     "--expression", "TagA", "--max-messages", "6", "--idle-timeout", "60", "--json")
        assert first.returncode == 0, first.stderr
        assert len(first.stdout.splitlines()) == 6
        assert json.loads(first.stderr.splitlines()[-1])["offsets_committed"] is True
        again = _cli("consume", "--namesrv", ns, "--topic", topic, "--group", group, "--from", "first",
                     "--expression", "TagA", "--idle-timeout", "3")
        assert again.returncode == 0, again.stderr
        assert again.stdout == ""  # nothing delivered twice
        assert "offsets committed" in again.stderr
    finally:
        cluster.close()


def test_consume_exits_non_zero_naming_the_queues_whose_offsets_were_not_committed(cluster: TestCluster) -> None:
    topic = "CliLost"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 3)
    cluster.embedded.brokers[0].faults.respond(15, 16, "the broker's offsets are read-only")  # UPDATE refused
    proc = _cli("consume", "--namesrv", cluster.namesrv_addr, "--group", "g_cli_lost", "--topic", topic,
                "--from", "first", "--max-messages", "3", "--idle-timeout", "20")
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stdout.splitlines()) == 3
    lines = proc.stderr.strip().splitlines()
    assert "offsets NOT committed" in lines[-2]
    assert lines[-1].startswith("warning: the group's offsets were not committed, these messages will be "
                                "delivered again: CliLost/broker-a/0: offset 3 not acknowledged")
    assert "read-only" in lines[-1]
    assert list(cluster.committed("g_cli_lost", topic).values()) == [0]
    cluster.embedded.clear_faults()
    proc = _cli("consume", "--namesrv", cluster.namesrv_addr, "--group", "g_cli_lost", "--topic", topic,
                "--idle-timeout", "2", "--json")  # the same three again, and this time committed
    assert len(proc.stdout.splitlines()) == 3 and proc.returncode == 0
    summary = json.loads(proc.stderr.splitlines()[-1])
    assert summary["offsets_committed"] is True and "uncommitted" not in summary
