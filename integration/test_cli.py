"""The ``rocketmq-airflow`` command line against the broker: produce, consume, lag."""

from __future__ import annotations

import json

from .backends import IntegrationCluster
from .helpers import run_cli


def test_cli_produce_then_consume_with_a_tag_filter(cluster: IntegrationCluster) -> None:
    topic = cluster.new_topic("cli", queues=4)
    group = cluster.new_group("cli")
    ns = cluster.namesrv_addr
    producer_group = cluster.new_group("cliprod")
    sent = run_cli("produce", "--namesrv", ns, "--topic", topic, "--count", "6", "--tag", "TagA",
                   "--property", "color=red", "--size", "5000", "--keys", "k1 k2", "--group", producer_group,
                   "--json")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["sent"] == 6
    other = run_cli("produce", "--namesrv", ns, "--topic", topic, "--count", "3", "--tag", "TagC",
                    "--group", producer_group)
    assert other.returncode == 0, other.stderr

    got = run_cli("consume", "--namesrv", ns, "--topic", topic, "--group", group, "--from", "first",
                  "--expression", "TagA", "--max-messages", "6", "--idle-timeout", "60", "--json")
    assert got.returncode == 0, got.stderr
    lines = [json.loads(line) for line in got.stdout.splitlines() if line.strip()]
    assert len(lines) == 6
    assert {m["tags"] for m in lines} == {"TagA"}
    assert all(m["properties"]["color"] == "red" and m["keys"] == "k1 k2" for m in lines)
    assert len({(m["broker_name"], m["queue_id"], m["queue_offset"]) for m in lines}) == 6
    summary = json.loads(got.stderr.strip().splitlines()[-1])
    # 5000-byte bodies went over the wire compressed and came back whole
    assert summary["messages"] == 6 and summary["bytes"] == 6 * 5000

    # the consumer's progress is on the broker: the same group gets nothing more of TagA, even when
    # asked to start from the first offset (which only applies to a group without committed offsets)
    again = run_cli("consume", "--namesrv", ns, "--topic", topic, "--group", group, "--from", "first",
                    "--expression", "TagA", "--idle-timeout", "3", "--json")
    assert again.returncode == 0, again.stderr
    assert [line for line in again.stdout.splitlines() if line.strip()] == []


def test_cli_rejects_a_bad_namesrv_with_a_one_line_error() -> None:
    proc = run_cli("lag", "--namesrv", "not-an-address", "--group", "g", "--topic", "t", "--json")
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert err and "\n" not in err and "Traceback" not in err, err
    assert "namesrv" in err.lower()
