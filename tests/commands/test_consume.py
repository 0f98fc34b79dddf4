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


def test_max_messages_commits_exactly_what_was_printed_and_the_next_run_continues(cluster: TestCluster) -> None:
    """About 35 messages per queue: more than one pulled batch (32), so the limit falls inside a batch;
    every run prints 10, commits exactly those, and the next run starts right after them."""
    topic, group = "CliExact", "g_cli_exact"
    cluster.create_topic(topic, 2)
    cluster.fill(topic, 70)
    everything = {(m.queue_id, m.queue_offset) for m in cluster.read_all(topic)}
    assert len(everything) == 70 and min(o for _, o in everything) == 0
    printed: list[tuple[int, int]] = []
    for run in range(1, 4):
        proc = _cli("consume", "--namesrv", cluster.namesrv_addr, "--group", group, "--topic", topic,
                    "--from", "first", "--max-messages", "10", "--idle-timeout", "20")
        assert proc.returncode == 0, proc.stderr
        lines = [json.loads(x) for x in proc.stdout.splitlines()]
        got = [(x["queue_id"], x["queue_offset"]) for x in lines]
        assert len(got) == 10 and not set(got) & set(printed), (run, got)  # nothing printed twice
        printed += got
        # per queue, the committed offset is one past the last message printed from it (or where it began)
        committed = {mq.queue_id: off for mq, off in cluster.committed(group, topic).items()}
        for q in range(2):
            mine = sorted(o for qq, o in printed if qq == q)
            assert mine == list(range(len(mine))), (run, q, mine)  # each queue printed in order, no hole
            assert committed.get(q, -1) in ((len(mine),) if mine else (-1, 0)), (run, q, committed)
    rest = _cli("consume", "--namesrv", cluster.namesrv_addr, "--group", group, "--topic", topic,
                "--idle-timeout", "3")
    assert rest.returncode == 0, rest.stderr
    printed += [(x["queue_id"], x["queue_offset"]) for x in map(json.loads, rest.stdout.splitlines())]
    assert sorted(printed) == sorted(everything)  # every message once over the four runs
    # nothing went through the retry topic: no message past the limit was sent back
    assert all(x["reconsume_times"] == 0 for x in map(json.loads, rest.stdout.splitlines()))


def test_a_pull_refused_by_the_acl_ends_consume_at_once_with_exit_2(cluster: TestCluster) -> None:
    """The refusal comes after start (the heartbeat was accepted): consume stops at once - not after its idle
    timeout - exits 2 naming the user, the group and the missing action, and commits nothing it did not print."""
    topic, group = "CliRefused", "g_cli_refused"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 5)
    cluster.embedded.brokers[0].faults.respond(
        11, 16, f"User:app has no permission to access Group:{group} from 127.0.0.1, no matched policies.")
    try:
        proc = _cli("consume", "--namesrv", cluster.namesrv_addr, "--group", group, "--topic", topic,
                    "--from", "first", "--idle-timeout", "120", "--json", timeout=60)
    finally:
        cluster.embedded.clear_faults()
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and f"user app lacks Sub on Group:{group} (PULL_MESSAGE)" in lines[0], proc.stderr
    assert "offsets_committed" not in proc.stderr
    assert set(cluster.committed(group, topic).values()) <= {-1, 0}
