"""commands/terminal.py: the live bar of the command-line tools, drawn into a recording terminal stream."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator

import pytest

from airflow_provider_rocketmq.commands.terminal import LiveBar, wanted
from airflow_provider_rocketmq.window.progress import format_bytes, format_seconds

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def stderr_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Terminal, logging.StreamHandler[Terminal]]]:
    """A root log handler writing to a terminal, as `rocketmq-airflow -v` sets one up on stderr."""
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    handler = logging.StreamHandler(term)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.INFO)
    yield term, handler
    root.removeHandler(handler)
    root.setLevel(old_level)


def test_the_bar_is_wanted_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm")
    assert wanted(Terminal()) and not wanted(io.StringIO())
    monkeypatch.setenv("TERM", "dumb")
    assert not wanted(Terminal())


def test_rich_bar_shows_counts_and_detail_and_logs_above_it(
        stderr_log: tuple[Terminal, logging.StreamHandler[Terminal]]) -> None:
    term, handler = stderr_log
    with LiveBar("window T", stream=term, use_rich=True) as bar:
        bar.update(10, 40, "1.0 KiB; 5 msg/s")
        assert handler.stream is not term  # records go through the bar's console meanwhile
        logging.getLogger("x").info("a log record")
        bar.update(40, 40, "4.0 KiB; 9 msg/s")
    assert handler.stream is term
    text = ANSI.sub("", term.getvalue())
    assert "INFO a log record\n" in text
    assert re.search(r"window T \S+ +25% 10/40 1\.0 KiB; 5 msg/s", text)
    last = text.replace("\r", "\n").strip().splitlines()[-1]
    assert re.fullmatch(r"window T \S+ +100% 40/40 4\.0 KiB; 9 msg/s\s*", last), last


def test_plain_bar_redraws_one_line_and_keeps_it_below_log_records(
        stderr_log: tuple[Terminal, logging.StreamHandler[Terminal]], monkeypatch: pytest.MonkeyPatch) -> None:
    term, handler = stderr_log
    monkeypatch.setenv("COLUMNS", "60")
    with LiveBar("consume T", stream=term, use_rich=False) as bar:
        bar.update(3, None, "30 B; 3 msg/s")
        logging.getLogger("x").info("between")
        bar.update(1500, 2000, "long detail " * 10)
    assert handler.stream is term
    assert term.getvalue() == (
        "\rconsume T 3 messages 30 B; 3 msg/s\x1b[K"
        "\r\x1b[KINFO between\n\rconsume T 3 messages 30 B; 3 msg/s\x1b[K"
        "\rconsume T 1,500/2,000 messages (75%) long detail long deta…\x1b[K\n")
    assert len("consume T 1,500/2,000 messages (75%) long detail long deta…") == 59  # COLUMNS - 1


def test_a_bar_never_updated_draws_nothing() -> None:
    term = Terminal()
    with LiveBar("window T", stream=term, use_rich=True):
        pass
    with LiveBar("window T", stream=term, use_rich=False):
        pass
    assert term.getvalue() == ""


def test_units() -> None:
    assert [format_bytes(n) for n in (0, 1023, 1536, 5 << 20, 3 << 30)] == \
        ["0 B", "1023 B", "1.5 KiB", "5.0 MiB", "3.0 GiB"]
    assert [format_seconds(s) for s in (None, 0.4, 59.6, 95, 3600 + 125)] == \
        ["unknown", "0 s", "1 min 00 s", "1 min 35 s", "1 h 02 min"]
