"""A live progress bar on stderr for the command-line tools: `rich` when installed, plain text otherwise.

`rich` comes with Airflow (and with the ``cli`` extra); without it the bar is one status line
redrawn in place. Either way it is drawn only on a terminal: `wanted` says whether stderr is one.
The owner calls `LiveBar.update` at its own pace (a few times a second); nothing here runs per
message. While the bar is up, log records written to stderr through `logging` appear above it.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

_BAR_WIDTH = 24


def wanted(stream: TextIO | None = None) -> bool:
    """Whether a live bar belongs on ``stream`` (default stderr): a terminal, and not ``TERM=dumb``."""
    stream = stream if stream is not None else sys.stderr
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def rich_available() -> bool:
    try:
        import rich.progress  # noqa: F401
    except ImportError:
        return False
    return True


class LiveBar:
    """One bar: ``description``, the bar itself when a total is known, counts, and a detail text.

    ``use_rich`` None picks rich when it can be imported. ``stream`` is where the bar is drawn
    (default stderr; tests pass a recording stream).
    """

    def __init__(self, description: str, *, stream: TextIO | None = None, use_rich: bool | None = None,
                 unit: str = "messages") -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._description = description
        self._unit = unit
        self._rich = rich_available() if use_rich is None else use_rich
        self._lock = threading.Lock()
        self._progress: Any = None
        self._task: Any = None
        self._last_text = ""
        self._handlers: list[tuple[logging.StreamHandler[Any], Any]] = []
        self._started = False

    # -- lifecycle --------------------------------------------------------------------------------
    def __enter__(self) -> LiveBar:
        return self

    def _start(self) -> None:
        """Draw from the first update on (a command that ends before shows nothing)."""
        if self._rich:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn

            console = Console(file=self._stream, force_terminal=True)
            # stdout is never redirected: it carries the command's output (JSON lines, the result)
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(bar_width=_BAR_WIDTH),
                                      TaskProgressColumn(),
                                      MofNCompleteColumn(), TextColumn("{task.fields[detail]}"),
                                      console=console, auto_refresh=False, redirect_stdout=False,
                                      redirect_stderr=False)
            self._progress.start()
            self._task = self._progress.add_task(self._description, total=None, detail="")
            self._route_logging(lambda: _ConsoleStream(console))
        else:
            self._route_logging(lambda: _StatusAwareStream(self))
        self._started = True

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        # handlers first, outside the bar's lock: a record being written holds its handler's lock and
        # then takes the bar's
        for handler, stream in self._handlers:
            handler.setStream(stream)
        self._handlers.clear()
        with self._lock:
            if self._progress is not None:
                self._progress.refresh()
                self._progress.stop()
                self._progress = None
            elif self._last_text:
                self._stream.write("\n")
                self._stream.flush()
                self._last_text = ""

    # -- drawing ----------------------------------------------------------------------------------
    def update(self, completed: int, total: int | None, detail: str = "") -> None:
        if not self._started:
            self._start()
        with self._lock:
            if self._progress is not None:
                # the columns before the detail keep their width; the detail is cut to what is left
                room = self._progress.console.width - len(self._description) - _BAR_WIDTH - 8 \
                    - len(f"{completed}/{total or '?'}") - 2
                if len(detail) > room:
                    detail = detail[:max(room - 1, 0)] + "…"
                self._progress.update(self._task, completed=completed, total=total, detail=detail)
                self._progress.refresh()
            else:
                counts = f"{completed:,}/{total:,} {self._unit} ({completed / total:.0%})" if total \
                    else f"{completed:,} {self._unit}"
                text = " ".join(p for p in (self._description, counts, detail) if p)
                width = shutil.get_terminal_size().columns - 1  # a wrapped line cannot be redrawn in place
                self._last_text = text if len(text) <= width else text[:max(width - 1, 0)] + "…"
                self._redraw()

    def _redraw(self) -> None:
        self._stream.write("\r" + self._last_text + "\x1b[K")
        self._stream.flush()

    def _route_logging(self, make: Callable[[], Any]) -> None:
        """Point the stderr log handlers at a stream that keeps the bar below what they write."""
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) in (
                    sys.stderr, sys.__stderr__, self._stream):
                self._handlers.append((handler, handler.setStream(make())))


class _ConsoleStream:
    """A text stream printing whole lines through rich's console (above the live bar)."""

    def __init__(self, console: Any) -> None:
        self._console = console
        self._buffer = ""

    def write(self, text: str) -> int:
        self._buffer += text
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            self._console.out(line, highlight=False)
        return len(text)

    def flush(self) -> None:
        pass


class _StatusAwareStream:
    """For the plain bar: clear the status line, write, draw the status line again."""

    def __init__(self, bar: LiveBar) -> None:
        self._bar = bar

    def write(self, text: str) -> int:
        with self._bar._lock:
            self._bar._stream.write("\r\x1b[K" + text)
            if text.endswith("\n") and self._bar._last_text:
                self._bar._redraw()
        return len(text)

    def flush(self) -> None:
        self._bar._stream.flush()
