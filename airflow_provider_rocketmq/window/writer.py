"""Parquet part files written in a background thread while the window is consumed (no Airflow).

The consumer's listener hands each admitted `ColumnBatch` to `StagingWriter.put`. A
writer thread groups them until a row group's worth (``row_group_bytes`` of pulled
data) is waiting, builds the Arrow columns of the whole group at once
(`to_raw_record_batch`: the ``raw`` layout, properties as stored, see window/manifest.py),
adds ``window_id`` and writes one row group. pyarrow releases the
GIL while it encodes and compresses, so this work runs on the second core.

Memory stays bounded whatever the window size: `put` blocks while more than
``queue_bytes`` of pulled data wait for the thread (back-pressure: the consumer's
pull loops then stop on their own flow control), and the thread holds at most one
group plus the row group being encoded. A part file is published (atomically, see
`staging.py`) once it holds ``rows_per_file`` rows or the window ends; `close`
returns the entries the manifest lists.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from airflow_provider_rocketmq.client.protocol.columnar import ColumnBatch, string_column, to_raw_record_batch
from airflow_provider_rocketmq.window.manifest import FileEntry, staged_file_schema
from airflow_provider_rocketmq.window.staging import StagedFile, StagingLocation

log = logging.getLogger(__name__)

_DICTIONARY = ["topic", "broker", "store_host", "window_id"]
_STATISTICS = ["topic", "broker", "queue_id", "queue_offset", "born_timestamp", "store_timestamp", "window_id"]
# offsets and times rise (nearly) monotonically within a queue: deltas encode them in a few bits
# each, for less CPU than plain values plus zstd and a fraction of the bytes
_DELTA = {name: "DELTA_BINARY_PACKED" for name in ("queue_offset", "commit_log_offset", "born_timestamp",
                                                   "store_timestamp")}
_WRITE_BATCH = 1 << 16  # rows per internal write step (pyarrow's 1,024 repeats per-step work 64 times as often)

PART_PREFIX = "part-"
PART_SUFFIX = ".parquet"


def part_name(index: int) -> str:
    return f"{PART_PREFIX}{index:05d}{PART_SUFFIX}"


class WriterError(RuntimeError):
    """The writer thread failed; ``__cause__`` is what it raised."""


class StagingWriter:
    """Writes the window's batches to Parquet part files in a thread of its own."""

    def __init__(self, location: StagingLocation, window_id: str, *, rows_per_file: int = 5_000_000,
                 row_group_bytes: int = 8 << 20, queue_bytes: int = 8 << 20, compression: str = "zstd") -> None:
        self.location = location
        self.window_id = window_id
        self.rows_per_file = rows_per_file
        self.row_group_bytes = row_group_bytes
        self.queue_bytes = queue_bytes
        self.compression = compression
        self.files: list[FileEntry] = []
        self.rows = 0
        self.error: BaseException | None = None
        self._lock = threading.Lock()  # `with` on it is a C-level call, on the Condition a Python one
        self._cond = threading.Condition(self._lock)
        self._pending: list[ColumnBatch] = []
        self._pending_bytes = 0
        # the thread is woken when this much waits (or a put is blocked, or at close), not per
        # batch: a wake-up per pulled batch costs both threads a futex call and a GIL hand-off
        self._wake_bytes = max(1, min(row_group_bytes, queue_bytes) // 2)
        self._blocked = 0  # puts (and `reserve_room` callers) waiting for room
        self._room_waiters: list[Callable[[], None]] = []
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="rocketmq-window-writer", daemon=True)
        self._file: StagedFile | None = None
        self._parquet: Any = None
        self._file_rows = 0

    def start(self) -> StagingWriter:
        self._thread.start()
        return self

    # -- producer side (the consumer's listener) -------------------------------------------------
    def put(self, batch: ColumnBatch) -> None:
        """Queue a batch; blocks while the thread is ``queue_bytes`` behind. Raises `WriterError`
        when the thread failed (nothing more can be staged)."""
        size = batch.raw_bytes
        with self._lock:
            if self._pending_bytes and self._pending_bytes + size > self.queue_bytes and self.error is None:
                self._blocked += 1
                self._cond.notify_all()  # the thread takes what waits, whatever its amount
                try:
                    while self._pending_bytes and self._pending_bytes + size > self.queue_bytes \
                            and self.error is None:
                        self._cond.wait(1.0)
                finally:
                    self._blocked -= 1
            if self.error is not None:
                raise WriterError(f"staging failed: {self.error}") from self.error
            if self._closing:
                raise WriterError("the writer is closed")
            self._pending.append(batch)
            self._pending_bytes += size
            if self._pending_bytes >= self._wake_bytes:
                self._cond.notify_all()

    def reserve_room(self, size: int, wake: Callable[[], None]) -> bool:
        """Whether a batch of ``size`` raw bytes would be queued by `put` without blocking, for a
        caller that must not block (an event loop); if not, ``wake`` is called from the writer's
        thread once there may be room (or the writer failed), and the caller asks again."""
        with self._lock:
            if self.error is not None or self._closing or not self._pending_bytes \
                    or self._pending_bytes + size <= self.queue_bytes:
                return True
            self._room_waiters.append(wake)
            self._blocked += 1
            self._cond.notify_all()  # the thread takes what waits, whatever its amount
            return False

    def _wake_room_waiters(self) -> None:
        """Call (outside the lock) the `reserve_room` callbacks registered so far."""
        with self._lock:
            waiters, self._room_waiters = self._room_waiters, []
            self._blocked -= len(waiters)
        for wake in waiters:
            wake()

    def close(self) -> list[FileEntry]:
        """Write what is queued, publish the last file, stop the thread; the files written, in order."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        if self.error is not None:
            raise WriterError(f"staging failed: {self.error}") from self.error
        return self.files

    def abort(self) -> None:
        """Stop without publishing the file being written (files already published stay)."""
        with self._cond:
            self._closing = True
            if self.error is None:
                self.error = WriterError("aborted")
            self._pending.clear()
            self._pending_bytes = 0
            self._cond.notify_all()
        self._wake_room_waiters()
        if self._thread.is_alive():
            self._thread.join(30)

    # -- the thread --------------------------------------------------------------------------------
    def _run(self) -> None:
        group: list[ColumnBatch] = []
        group_bytes = 0
        try:
            while True:
                took = self._take()
                if took is None:
                    break  # aborted
                taken, size, closing = took
                if self._room_waiters:
                    self._wake_room_waiters()
                group += taken
                group_bytes += size
                if group and (group_bytes >= self.row_group_bytes or closing):
                    self._write_group(group)
                    group, group_bytes = [], 0
                if closing and not group:
                    with self._cond:
                        if self._pending:
                            continue
                    self._finish_file()
                    break
        except BaseException as exc:
            log.error("window staging failed: %s", exc)
            with self._cond:
                self.error = exc
                self._pending.clear()
                self._pending_bytes = 0
                self._cond.notify_all()
        finally:
            self._wake_room_waiters()  # they find the error (or the closed writer) when they ask again
            if self.error is not None:
                self._discard_file()

    def _take(self) -> tuple[list[ColumnBatch], int, bool] | None:
        """Wait until enough waits (or a put is blocked, or the writer closes) and take it all, with its
        size and whether the writer is closing; None once the writer failed or was aborted."""
        with self._cond:
            while not (self._closing or self._pending_bytes >= self._wake_bytes or (self._blocked and self._pending)):
                self._cond.wait()
            if self.error is not None:
                return None
            taken, self._pending = self._pending, []
            size, self._pending_bytes = self._pending_bytes, 0
            if self._blocked:
                self._cond.notify_all()
            return taken, size, self._closing

    def _discard_file(self) -> None:
        """Drop the part file being written (never published)."""
        if self._file is None:
            return
        parquet, self._parquet = self._parquet, None
        if parquet is not None:  # closed into the file about to be discarded: its finaliser would
            try:                 # otherwise write to the closed file
                parquet.close()
            except Exception as exc:
                log.debug("closing the discarded part file's writer: %s", exc)
        self._file.abort()
        self._file = None

    def _write_group(self, group: Sequence[ColumnBatch]) -> None:
        import pyarrow as pa

        rb = to_raw_record_batch(group)
        n = rb.num_rows
        columns = [*rb.columns, string_column(self.window_id, n)]
        table = pa.Table.from_batches([pa.RecordBatch.from_arrays(columns, schema=staged_file_schema())])
        start = 0
        while start < n:
            if self._parquet is None:
                self._open_file()
            take = min(n - start, self.rows_per_file - self._file_rows)
            part = table.slice(start, take)
            self._parquet.write_table(part, row_group_size=take)
            self._file_rows += take
            self.rows += take
            start += take
            if self._file_rows >= self.rows_per_file:
                self._finish_file()

    def _open_file(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        name = part_name(len(self.files))
        self._file = self.location.open_write(name)
        # dictionaries where values repeat, statistics where readers prune on them (offsets, times):
        # a dictionary attempt or min/max over unique ids and bodies costs CPU and buys nothing
        self._parquet = pq.ParquetWriter(pa.PythonFile(self._file, mode="w"), staged_file_schema(),
                                         compression=self.compression, use_dictionary=_DICTIONARY,
                                         write_statistics=_STATISTICS, column_encoding=_DELTA,
                                         write_batch_size=_WRITE_BATCH)
        self._file_rows = 0

    def _finish_file(self) -> None:
        if self._parquet is None or self._file is None:
            return
        self._parquet.close()
        self._parquet = None
        f, self._file = self._file, None
        f.commit()
        self.files.append(FileEntry(path=f.name, rows=self._file_rows, bytes=f.size, sha256=f.sha256))
        log.info("staged %s: %d rows, %d bytes", self.location.url(f.name), self._file_rows, f.size)
