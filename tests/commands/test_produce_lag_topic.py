"""``rocketmq-airflow`` produce / lag / topic against the embedded broker, and bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_rocketmq.cli import build_parser, main
from airflow_provider_rocketmq.client.admin import Admin
from airflow_provider_rocketmq.client.config import ClientConfig
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.commands.produce import make_body
from airflow_provider_rocketmq.embedded import EmbeddedCluster


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_produce_batches_by_default_as_the_operator(embedded_cluster: EmbeddedCluster,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    ns = embedded_cluster.namesrv_addr
    assert _run(capsys, "topic", "create", "--topic", "CliDefaults", "--queues", "2", "--namesrv", ns)[0] == 0
    code, out, _ = _run(capsys, "produce", "--topic", "CliDefaults", "--count", "256", "--namesrv", ns, "--json")
    summary = json.loads(out)
    # up to 32 messages of one queue per request, each with its own result
    assert code == 0 and summary["sent"] == 256 and summary["requests"] <= 256 // 16
    code, out, _ = _run(capsys, "produce", "--topic", "CliDefaults", "--count", "10", "--batch", "1", "--namesrv", ns,
                        "--json")
    assert code == 0 and json.loads(out)["requests"] == 10  # one request per message when asked
    assert len(embedded_cluster.messages("CliDefaults")) == 266


def test_topic_create_produce_and_lag(embedded_cluster: EmbeddedCluster,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    ns = embedded_cluster.namesrv_addr
    code, out, _ = _run(capsys, "topic", "create", "--topic", "CliT", "--queues", "3", "--namesrv", ns, "--json")
    assert code == 0 and json.loads(out) == {"topic": "CliT", "queues": 3, "brokers": ["broker-a"]}

    # one message per request: round robin over the queues (a batch goes to one queue)
    code, out, _ = _run(capsys, "produce", "--topic", "CliT", "--count", "7", "--size", "64", "--tag", "TagA",
                        "--keys", "k1 k2", "--property", "color=red", "--property", "note=值",
                        "--batch", "1", "--namesrv", ns, "--json")
    summary = json.loads(out)
    assert code == 0 and summary["sent"] == 7 and sum(summary["queues"].values()) == 7
    assert set(summary["queues"]) == {"broker-a:0", "broker-a:1", "broker-a:2"}
    stored = embedded_cluster.messages("CliT")
    assert sorted(m.body for m in stored) == sorted(make_body(i, 64) for i in range(7))
    assert all(len(m.body) == 64 and m.tags == "TagA" and m.keys == "k1 k2" for m in stored)
    assert all(m.properties["color"] == "red" and m.properties["note"] == "值" for m in stored)
    assert {summary["first_msg_id"], summary["last_msg_id"]} <= {m.msg_id for m in stored}

    code, out, _ = _run(capsys, "produce", "--topic", "CliT", "--count", "5", "--batch", "2", "--namesrv", ns,
                        "--json")
    assert code == 0 and json.loads(out)["requests"] == 3  # 2 + 2 + 1

    # lag of a group that never consumed: every message is pending
    code, out, _ = _run(capsys, "lag", "--group", "cli_group", "--topic", "CliT", "--namesrv", ns, "--json")
    lag = json.loads(out)
    assert code == 0 and lag["total_lag"] == 12
    assert {(q["broker"], q["queue_id"]) for q in lag["queues"]} == {("broker-a", i) for i in range(3)}
    assert all(set(q) >= {"broker", "queue_id", "broker_offset", "consumer_offset", "lag"}
               for q in lag["queues"])

    # commit some offsets, the figures follow
    with Admin(ClientConfig(namesrv_addr=ns)) as admin:
        hw = admin.high_water_marks("CliT")
        q0 = MessageQueue("CliT", "broker-a", 0)
        admin.update_consumer_offset("cli_group", q0, hw[q0])
    code, out, _ = _run(capsys, "lag", "--group", "cli_group", "--topic", "CliT", "--namesrv", ns, "--json")
    assert json.loads(out)["total_lag"] == 12 - hw[q0]
    code, out, _ = _run(capsys, "lag", "--group", "cli_group", "--topic", "CliT", "--namesrv", ns)
    assert code == 0 and f"Diff Total: {12 - hw[q0]}" in out and "#Broker Offset" in out


def test_produce_with_a_key_keeps_the_order_and_a_refused_message_exits_2(
        embedded_cluster: EmbeddedCluster, capsys: pytest.CaptureFixture[str]) -> None:
    ns = embedded_cluster.namesrv_addr
    code, out, _ = _run(capsys, "produce", "--topic", "CliKey", "--count", "300", "--key", "order-7", "--batch", "16",
                        "--max-in-flight", "4", "--namesrv", ns, "--json")
    summary = json.loads(out)
    assert code == 0 and summary["sent"] == 300 and len(summary["queues"]) == 1
    assert 300 / 16 <= summary["requests"] < 300
    stored = sorted(embedded_cluster.messages("CliKey"), key=lambda m: m.queue_offset)
    assert [m.body for m in stored] == [make_body(i, 0) for i in range(300)]  # one queue, in order

    embedded_cluster.brokers[0].settings.max_message_size = 100
    code, out, err = _run(capsys, "produce", "--topic", "CliKey", "--count", "3", "--size", "101", "--namesrv", ns,
                          "--json")
    assert code == 2 and out == "" and err.startswith("error: broker error 13") and err.count("\n") == 1
    sent, failed, not_sent = map(int, re.search(r"\((\d+) message\(s\) sent before it, (\d+) failed, (\d+) not sent\)",
                                                err).groups())  # type: ignore[union-attr]
    assert sent == 0 and failed >= 1 and failed + not_sent == 3
    assert len(embedded_cluster.messages("CliKey")) == 300


def test_namesrv_from_environment(embedded_cluster: EmbeddedCluster, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAMESRV_ADDR", embedded_cluster.namesrv_addr)
    code, out, _ = _run(capsys, "produce", "--topic", "EnvT", "--count", "2")
    assert code == 0 and "sent 2 message(s) to EnvT" in out
    assert len(embedded_cluster.messages("EnvT")) == 2


@pytest.mark.parametrize("argv,needle", [
    (["produce", "--topic", "T", "--count", "0"], "--count"),
    (["produce", "--topic", "T", "--property", "novalue"], "--property"),
    (["produce", "--topic", "bad topic!"], "topic"),
    (["produce", "--topic", "T", "--namesrv", "nonsense"], "namesrv"),
    (["topic", "create", "--topic", "T", "--queues", "0"], "--queues"),
    (["lag"], "--group"),
    (["produce", "--topic", "T", "--count", "x"], "invalid int"),
    (["produce", "--topic", "T", "--max-in-flight", "0"], "--max-in-flight"),
    (["produce", "--topic", "T", "--max-in-flight", "4097"], "--max-in-flight"),
    (["produce", "--topic", "T", "--batch", "1025"], "--batch"),
])
def test_bad_input_is_one_line_error_exit_2(argv: list[str], needle: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    if "--namesrv" not in argv:
        argv = [*argv, "--namesrv", "127.0.0.1:1"]  # never reached: input is checked first
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse-level errors exit from parse_args
        code = int(exc.code or 0)
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]


def test_unreachable_namesrv_subprocess_exit_2() -> None:
    env = dict(os.environ, NAMESRV_ADDR="127.0.0.1:1")
    proc = subprocess.run([sys.executable, "-m", "airflow_provider_rocketmq.cli", "lag", "--group", "g",
                           "--topic", "T"], capture_output=True, text=True, timeout=60, env=env, check=False,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: no name server reachable")
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_every_command_has_common_options() -> None:
    parser = build_parser()
    for argv in (["produce", "--topic", "T"], ["lag", "--group", "g"], ["topic", "create", "--topic", "T"]):
        args = parser.parse_args([*argv, "--namesrv", "a:1;b:2", "--json"])
        assert args.namesrv == "a:1;b:2" and args.json is True
