"""What `rocketmq-airflow window` and `consume` show: a live bar when stderr is a terminal (a real pty
here), and exactly their former output when piped or with --json."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_provider_rocketmq.client import ClientConfig, Message, Producer
from airflow_provider_rocketmq.embedded import EmbeddedCluster

CLI = [sys.executable, "-m", "airflow_provider_rocketmq.cli"]
TOPIC = "BarT"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> EmbeddedCluster:
    c = embedded_cluster_factory(brokers=1, queues=2)
    c.create_topic(TOPIC, 2)
    with Producer(ClientConfig(namesrv_addr=c.namesrv_addr), group="bar_p") as producer:
        for mq in producer.publish_queues(TOPIC):
            producer.send_batch([Message(TOPIC, b"y" * 20) for _ in range(15)], queue=mq)
    return c


def run_with_terminal_stderr(argv: list[str], *, extra_env: dict[str, str] | None = None,
                             ) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal and stdout on a pipe; return (code, stdout, terminal)."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "160", **(extra_env or {})}
    proc = subprocess.Popen(CLI + argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:  # the pty's buffer is small: read while the command runs
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO once the child closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stdout, _ = proc.communicate(timeout=120)
    reader.join(30)
    os.close(master)
    return proc.returncode, stdout.decode(), b"".join(chunks).decode(errors="replace")


def screen(terminal: str) -> list[str]:
    """The terminal's text without colours, one entry per redraw."""
    return [s for s in ANSI.sub("", terminal).replace("\r\n", "\n").replace("\r", "\n").split("\n") if s.strip()]


def piped(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(CLI + argv, capture_output=True, text=True, timeout=120, check=False,
                          stdin=subprocess.DEVNULL, env={**os.environ, "TERM": "xterm"})


def window_argv(cluster: EmbeddedCluster, staging: Path, group: str) -> list[str]:
    return ["window", "--namesrv", cluster.namesrv_addr, "--group", group, "--topic", TOPIC,
            "--staging", str(staging)]


def test_window_on_a_terminal_draws_a_bar_and_keeps_stdout(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    code, out, terminal = run_with_terminal_stderr(window_argv(cluster, tmp_path / "w", "bar_g1"))
    assert code == 0, terminal
    assert re.fullmatch(r"window \S+: 30 messages, 600 bytes -> \S+manifest\.json\n", out), out
    final = screen(terminal)[-1]
    assert final.startswith(f"window {TOPIC} ") and " 100% 30/30 600 B; " in final, terminal
    assert "msg/s; ETA " in final


def test_window_piped_or_json_prints_what_it_printed_before(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    plain = piped(window_argv(cluster, tmp_path / "w1", "bar_g2"))
    assert plain.returncode == 0 and plain.stderr == "", plain.stderr
    assert re.fullmatch(r"window \S+: 30 messages, 600 bytes -> \S+manifest\.json\n", plain.stdout)
    # --json on a terminal: no bar, stdout one JSON object
    code, out, terminal = run_with_terminal_stderr(window_argv(cluster, tmp_path / "w2", "bar_g3") + ["--json"])
    assert code == 0 and terminal == "", terminal
    result = json.loads(out)
    assert set(result) == {"manifest", "messages", "bytes", "window_id", "reused", "committed", "handoff"}
    assert (result["messages"], result["bytes"]) == (30, 600)
    assert out.count("\n") == 1


def test_window_progress_interval_must_not_be_negative(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    bad = piped(window_argv(cluster, tmp_path / "w", "bar_g4") + ["--progress-interval", "-1"])
    assert bad.returncode == 2 and bad.stdout == ""
    assert "--progress-interval" in bad.stderr and len(bad.stderr.splitlines()) == 1
    assert not (tmp_path / "w").exists()


def test_consume_to_a_file_on_a_terminal_draws_a_bar(cluster: EmbeddedCluster) -> None:
    argv = ["consume", "--namesrv", cluster.namesrv_addr, "--group", "bar_c1", "--topic", TOPIC,
            "--from", "first", "--max-messages", "30", "--idle-timeout", "20"]
    code, out, terminal = run_with_terminal_stderr(argv)
    assert code == 0, terminal
    lines = [json.loads(x) for x in out.splitlines()]
    assert len(lines) == 30 and {x["body"] for x in lines} == {"y" * 20}  # stdout: JSON lines only
    shown = screen(terminal)
    assert any(s.startswith(f"consume {TOPIC} ") and " 100% 30/30 600 B; " in s for s in shown), terminal
    assert shown[-1].startswith("consumed 30 message(s) (600 bytes)")  # the summary, after the bar


def test_consume_with_json_on_a_terminal_shows_no_bar(cluster: EmbeddedCluster) -> None:
    argv = ["consume", "--namesrv", cluster.namesrv_addr, "--group", "bar_c2", "--topic", TOPIC,
            "--from", "first", "--max-messages", "30", "--idle-timeout", "20", "--json"]
    code, out, terminal = run_with_terminal_stderr(argv)
    assert code == 0, terminal
    assert len(out.splitlines()) == 30
    summary = json.loads(terminal.replace("\r\n", "\n"))  # the only thing on stderr: the JSON summary
    assert summary["messages"] == 30 and summary["offsets_committed"] is True


def test_without_rich_the_bar_is_a_plain_status_line(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    hidden = tmp_path / "no_rich" / "rich"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("rich is hidden in this test")\n')
    code, out, terminal = run_with_terminal_stderr(
        window_argv(cluster, tmp_path / "w", "bar_g5"),
        extra_env={"PYTHONPATH": os.pathsep.join([str(hidden.parent), *sys.path])})
    assert code == 0, terminal
    assert re.fullmatch(r"window \S+: 30 messages, 600 bytes -> \S+manifest\.json\n", out), out
    assert "\x1b[?25l" not in terminal  # rich hides the cursor; the plain line does not
    final = screen(terminal)[-1]
    assert final.startswith(f"window {TOPIC} 30/30 messages (100%) 600 B; "), terminal


def test_window_progress_lines_only_with_verbose_logging(caplog: pytest.LogCaptureFixture) -> None:
    import argparse
    import logging

    from airflow_provider_rocketmq.commands import window as window_cli

    args = argparse.Namespace(progress_interval=7.0, json=True, topic="t")
    spec = argparse.Namespace(max_messages=None)
    for level, interval in ((logging.ERROR, 0.0), (logging.INFO, 7.0)):  # the CLI's default, then -v
        caplog.set_level(level)
        with window_cli._progress(args, spec) as progress:
            assert progress.interval == interval
    progress._emit("12 of 40 messages staged")
    assert [r.getMessage() for r in caplog.records] == ["window progress: 12 of 40 messages staged"]
