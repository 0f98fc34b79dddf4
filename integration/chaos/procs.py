"""Processes of the flow, and faults that act on them for real: kill -9, SIGSTOP / SIGCONT.

Each step runs as its own process group (``start_new_session``), so a kill reaches the whole of
it (spark-submit's JVM, its Python driver and Python workers). A fault counts only when it is
verified: the process was alive (not a zombie, not already stopped) right before the signal,
and afterwards it died by SIGKILL (return code -9) or its threads show state ``T`` (stopped).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def proc_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (R, S, D, T, Z...); None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2]


def children_of(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc, parents before children)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent[int(entry)] = int(text[text.rindex(")") + 2:].split()[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        kids = sorted(c for c, pp in parent.items() if pp == p)
        out.extend(kids)
        todo.extend(kids)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class Injection:
    """What a process fault did, as observed (``verified`` only if it really happened)."""

    kind: str
    verified: bool
    detail: str
    at: float = field(default_factory=time.time)
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "verified": self.verified, "detail": self.detail, "at": self.at, **self.data}


class Step:
    """One process of the flow: output captured line by line, phases awaited, signals verified."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], *, cwd: str | None = None,
                 log_dir: Path | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.started = time.monotonic()
        self.lines: list[tuple[float, str, str]] = []  # (seconds since start, stream, text)
        self._cond = threading.Condition()
        self._log = open(log_dir / f"{name}.log", "w", encoding="utf-8") if log_dir else None  # noqa: SIM115
        if self._log:
            self._log.write("$ " + " ".join(self.argv) + "\n")
            self._log.flush()
        self.proc = subprocess.Popen(self.argv, env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.pid = self.proc.pid
        self.stopped_for = 0.0
        self.stopped_at: float | None = None
        self.ended: float | None = None  # when both output streams closed (the process group ended)
        self._eof: dict[str, float] = {}
        self._readers = [threading.Thread(target=self._read, args=(s, n), daemon=True)
                         for s, n in ((self.proc.stdout, "out"), (self.proc.stderr, "err"))]
        for t in self._readers:
            t.start()

    def _read(self, stream: Any, which: str) -> None:
        for raw in iter(stream.readline, b""):
            text = raw.decode(errors="replace").rstrip("\n")
            with self._cond:
                self.lines.append((time.monotonic() - self.started, which, text))
                if self._log and not self._log.closed:
                    self._log.write(f"[{which} {self.lines[-1][0]:7.2f}] {text}\n")
                    self._log.flush()
                self._cond.notify_all()
        stream.close()
        with self._cond:
            self._eof[which] = time.monotonic()
            if len(self._eof) == 2:
                self.ended = max(self._eof.values())

    # -- output ------------------------------------------------------------------------------------
    @property
    def stdout(self) -> str:
        with self._cond:
            return "\n".join(t for _, w, t in self.lines if w == "out")

    @property
    def output(self) -> str:
        with self._cond:
            return "\n".join(t for _, _, t in self.lines)

    def wait_for_line(self, pattern: str, timeout: float) -> bool:
        """Wait until a line matches ``pattern`` (True), the process ends or ``timeout`` passes (False)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            seen = 0
            while True:
                for _, _, text in self.lines[seen:]:
                    if rx.search(text):
                        return True
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    return any(rx.search(t) for _, _, t in self.lines[seen:])
                self._cond.wait(min(left, 0.2))

    def wait(self, timeout: float) -> int | None:
        """The return code, or None when the process is still running after ``timeout``."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        for t in self._readers:
            t.join(5)
        with self._cond:  # a reader still holding a pipe (a grandchild) must not write to a closed log
            self._close_log(rc)
        return rc

    def _close_log(self, rc: int) -> None:
        if self._log and not self._log.closed:
            self._log.write(f"$ exit {rc} after {time.monotonic() - self.started:.2f} s\n")
            self._log.close()

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def group_pids(self) -> list[int]:
        return [self.pid, *children_of(self.pid)]

    def find(self, needle: str) -> int | None:
        """The first Python process of the group running the script ``needle`` (e.g. the Spark driver:
        not the JVM, whose arguments name the script too)."""
        for p in self.group_pids():
            argv = cmdline(p).split()
            if argv and Path(argv[0]).name.startswith("python") and any(a.endswith(needle) for a in argv[1:3]):
                return p
        return None

    # -- faults ------------------------------------------------------------------------------------
    def kill9(self, kind: str, *, need: str | None = None, grace: float = 30.0) -> Injection:
        """kill -9 of the whole process group; verified when the process (and ``need``, a command
        line fragment, e.g. the Spark driver's script) was alive before and died by SIGKILL."""
        if self.proc.poll() is not None:
            return Injection(kind, False, f"{self.name} had already exited ({self.proc.returncode})")
        pids = self.group_pids()
        states = {p: proc_state(p) for p in pids}
        target = self.find(need) if need else self.pid
        if target is None:
            return Injection(kind, False, f"{self.name}: no process matching {need!r} yet (group {pids})")
        if states.get(target) in (None, "Z", "T") or states.get(self.pid) in (None, "Z"):
            return Injection(kind, False, f"{self.name}: pid {target} not running (state {states.get(target)})")
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            return Injection(kind, False, f"{self.name}: process group gone before the signal")
        rc = self.wait(grace)
        gone = [p for p in pids if proc_state(p) in (None, "Z")]
        ok = rc == -signal.SIGKILL and target in gone
        return Injection(kind, ok, f"{self.name}: kill -9 of group {self.pid} at {time.monotonic() - self.started:.2f} s "
                         f"(target pid {target} state {states.get(target)}); exit {rc}",
                         data={"elapsed_s": round(time.monotonic() - self.started, 3), "exit": rc,
                               "target": cmdline(target)[:120] if target in states else ""})

    def stop(self, kind: str, *, need: str | None = None) -> Injection:
        """SIGSTOP of the whole group; verified when every live process of it shows state T."""
        if self.proc.poll() is not None:
            return Injection(kind, False, f"{self.name} had already exited ({self.proc.returncode})")
        target = self.find(need) if need else self.pid
        if target is None:
            return Injection(kind, False, f"{self.name}: no process matching {need!r} yet")
        os.killpg(self.pid, signal.SIGSTOP)
        self.stopped_at = time.monotonic()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            states = {p: proc_state(p) for p in self.group_pids()}
            live = {p: s for p, s in states.items() if s not in (None, "Z")}
            if live and all(s == "T" for s in live.values()) and target in live:
                return Injection(kind, True, f"{self.name}: SIGSTOP of group {self.pid} at "
                                 f"{time.monotonic() - self.started:.2f} s ({len(live)} processes stopped)",
                                 data={"elapsed_s": round(time.monotonic() - self.started, 3)})
            time.sleep(0.05)
        return Injection(kind, False, f"{self.name}: processes not all stopped: {states}")

    def cont(self) -> float:
        """SIGCONT of the group; returns how long it was stopped."""
        os.killpg(self.pid, signal.SIGCONT)
        self.stopped_for = time.monotonic() - (self.stopped_at or time.monotonic())
        return self.stopped_for

    def terminate_group(self) -> None:
        """Stop whatever is left of the group (cleanup after a run, never a fault)."""
        try:
            os.killpg(self.pid, signal.SIGCONT)
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.wait(10)


def after(step: Step, trigger: str, delay: float, action: Callable[[], Injection], patterns: Mapping[str, str],
          timeout: float, need: str | None = None) -> threading.Thread:
    """Run ``action`` ``delay`` seconds after ``trigger`` in a thread: "start" (with ``need``: once the
    group runs the Python script ``need``, e.g. the Spark driver, which the JVM starts seconds after
    spark-submit) or a key of ``patterns`` (a line the process prints). The action itself checks
    that the process is still there to be hit."""
    def run() -> None:
        result: Injection | None = None
        if trigger != "start":
            if not step.wait_for_line(patterns[trigger], timeout):
                result = Injection("", False, f"{step.name}: {trigger!r} never came")
        elif need is not None:
            deadline = time.monotonic() + timeout
            while step.find(need) is None and step.returncode is None and time.monotonic() < deadline:
                time.sleep(0.1)
        if result is None:
            time.sleep(delay)
            result = action()
        holder.append(result)

    holder: list[Injection] = []
    t = threading.Thread(target=run, daemon=True, name=f"fault-{step.name}")
    t.result = holder  # type: ignore[attr-defined]  # read by the caller after join()
    t.start()
    return t
