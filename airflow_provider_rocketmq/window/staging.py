"""Where a window is staged: a local directory or a URL (``s3://``, ``gs://``, ``file://``...).

A window directory holds Parquet part files and, written last, ``manifest.json``.
Both kinds of location give the same two guarantees the window relies on:

- a file appears under its final name only complete: locally it is written to a
  temp name, fsynced, renamed and the directory fsynced; on an object store (S3,
  GCS, Azure) an object becomes visible only when its upload completes, and an
  upload that fails is aborted, never completed;
- every file's SHA-256 and size are known without reading it back (hashed while
  written), and can be verified by reading it.

Remote locations go through fsspec (``s3fs`` for ``s3://``, ``gcsfs`` for ``gs://``);
no Airflow import here: the operator passes the URL and storage options down.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_provider_rocketmq.client.protocol.errors import ConfigError

_CHUNK = 1 << 20
# object stores: an object appears atomically when its (multipart) upload completes
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "oss", "r2"})


def is_url(location: str | os.PathLike[str]) -> bool:
    text = os.fspath(location)
    return "://" in text and not text.startswith("file://")


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync a directory so a rename inside it survives a crash (no-op where unsupported)."""
    try:
        fd = os.open(os.fspath(directory), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(fd)


def make_dirs_durably(path: Path) -> None:
    """``mkdir -p`` that also fsyncs the parent of every directory it creates: the files' own fsyncs
    do not cover the directory's entry in its parent (with ``after_staging`` the offsets are
    committed right after staging, so the entry must survive a crash)."""
    created = []
    p = path
    while not p.exists():
        created.append(p)
        p = p.parent
    path.mkdir(parents=True, exist_ok=True)
    for d in reversed(created):
        fsync_dir(d.parent)


class StagingLocation:
    """One window directory, local or remote; file names are relative to it (no sub-directories)."""

    def __init__(self, location: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> None:
        text = os.fspath(location)
        if not text or not text.strip():
            raise ConfigError("staging_path", "must be a non-empty path or URL")
        self.storage_options = dict(storage_options or {})
        if text.startswith("file://"):
            text = text[len("file://"):] or "/"
        self.local = not is_url(text)
        if self.local:
            self.path = Path(text)
            self.location = str(self.path)
            self._fs: Any = None
            self._root = ""
            self.protocol = "file"
        else:
            try:
                import fsspec
            except ImportError:  # pragma: no cover - fsspec comes with the airflow extra
                raise ConfigError("staging_path", f"{text}: staging on a URL needs fsspec") from None
            try:
                fs, root = fsspec.core.url_to_fs(text, **self.storage_options)
            except (ImportError, ValueError) as exc:
                raise ConfigError("staging_path", f"{text}: {exc}") from None
            self._fs = fs
            self._root = root.rstrip("/")
            self.protocol = text.split("://", 1)[0]
            self.location = text.rstrip("/")
            self.path = Path(self._root)  # for messages only

    def __repr__(self) -> str:
        return f"StagingLocation({self.location!r})"

    # -- names -------------------------------------------------------------------------------------
    def url(self, name: str) -> str:
        """Where ``name`` lives: a local path or a full URL."""
        if self.local:
            return str(self.path / name)
        return f"{self.location}/{name}"

    def _full(self, name: str) -> str:
        return posixpath.join(self._root, name)

    # -- queries -----------------------------------------------------------------------------------
    def exists(self, name: str) -> bool:
        if self.local:
            return (self.path / name).exists()
        return bool(self._fs.exists(self._full(name)))

    def names(self) -> list[str]:
        """The files directly in the window directory (none when it does not exist)."""
        if self.local:
            if not self.path.is_dir():
                return []
            return sorted(p.name for p in self.path.iterdir() if p.is_file())
        try:
            entries = self._fs.ls(self._root, detail=True, refresh=True)
        except FileNotFoundError:
            return []
        return sorted(posixpath.basename(e["name"].rstrip("/")) for e in entries if e.get("type") == "file")

    def size(self, name: str) -> int:
        if self.local:
            return (self.path / name).stat().st_size
        self._fs.invalidate_cache(self._full(name))
        return int(self._fs.size(self._full(name)))

    def read_bytes(self, name: str) -> bytes:
        if self.local:
            return (self.path / name).read_bytes()
        return bytes(self._fs.cat_file(self._full(name)))

    def open_read(self, name: str) -> Any:
        if self.local:
            return open(self.path / name, "rb")
        return self._fs.open(self._full(name), "rb")

    def sha256(self, name: str) -> str:
        """Hex SHA-256 of a file's content, read in 1 MiB chunks."""
        h = hashlib.sha256()
        with self.open_read(name) as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
        return h.hexdigest()

    # -- changes -----------------------------------------------------------------------------------
    def make_dirs(self) -> None:
        if self.local:
            make_dirs_durably(self.path)
        elif self.protocol not in _OBJECT_STORES:
            self._fs.makedirs(self._root, exist_ok=True)

    def remove(self, name: str) -> None:
        if self.local:
            with contextlib.suppress(FileNotFoundError):
                (self.path / name).unlink()
            return
        with contextlib.suppress(FileNotFoundError):
            self._fs.rm_file(self._full(name))

    def open_write(self, name: str) -> StagedFile:
        """A file that appears under ``name`` only once `StagedFile.commit` succeeded."""
        return StagedFile(self, name)

    def write_bytes(self, name: str, data: bytes) -> StagedFile:
        f = self.open_write(name)
        try:
            f.write(data)
            f.commit()
        except BaseException:
            f.abort()
            raise
        return f


class StagedFile:
    """A binary sink (``write``/``tell``/``flush``) hashed while written; ``commit`` publishes it
    atomically (see the module docstring), ``abort`` leaves nothing under the final name."""

    def __init__(self, location: StagingLocation, name: str) -> None:
        self.location = location
        self.name = name
        self._hash = hashlib.sha256()
        self._size = 0
        self._tmp: str | None = None
        self.closed = False
        if location.local:
            location.path.mkdir(parents=True, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=location.path)
            self._fh: Any = os.fdopen(fd, "wb")
        else:
            full = location._full(name)
            if location.protocol not in _OBJECT_STORES:  # e.g. sftp, memory: write aside, then move
                self._tmp = location._full(f".{name}.{os.urandom(6).hex()}.tmp")
                full = self._tmp
            self._fh = location._fs.open(full, "wb")

    # the file protocol pyarrow writes through
    def write(self, data: Any) -> int:
        view = memoryview(data)
        self._fh.write(view)
        self._hash.update(view)
        self._size += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self._size

    def flush(self) -> None:
        pass  # buffered until commit: a remote upload must not complete before commit()

    def close(self) -> None:
        pass  # a sink's owner (pyarrow) may close it; only commit() publishes the file

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    @property
    def size(self) -> int:
        return self._size

    def commit(self) -> None:
        """Make the file durable and visible under its final name."""
        if self.closed:
            return
        loc = self.location
        if loc.local:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self.closed = True
            assert self._tmp is not None
            os.replace(self._tmp, loc.path / self.name)
            fsync_dir(loc.path)
            return
        self._fh.close()  # completes the upload
        self.closed = True
        if self._tmp is not None:
            loc._fs.mv(self._tmp, loc._full(self.name))

    def abort(self) -> None:
        """Forget the file: nothing appears under its final name (a remote upload is aborted)."""
        if self.closed:
            return
        self.closed = True
        loc = self.location
        try:
            if loc.local:
                self._fh.close()
            else:
                discard = getattr(self._fh, "discard", None)
                if discard is not None:
                    discard()  # aborts a multipart upload instead of completing it
                    # marked closed, or the file's finaliser would close() it: that completes the upload
                    self._fh.closed = True
                else:  # pragma: no cover - every fsspec buffered file has discard()
                    self._fh.close()
        finally:
            if self._tmp is not None:
                try:
                    if loc.local:
                        os.unlink(self._tmp)
                    else:
                        loc._fs.rm_file(self._tmp)
                except (FileNotFoundError, OSError):
                    pass
