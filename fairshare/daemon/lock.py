"""One daemon per UDB and host, keyed on the database's identity, not on its spelling.

- SQLite: a lock file beside the database's real file (symlinks resolved), named after
  the file's device and inode and the host, so ``D/./c.sqlite``, ``D//c.sqlite``,
  ``D/sub/../c.sqlite`` and a symlink all find the same lock.  It lives in the
  database's own directory, the one place that root and other users share (SQLite
  writes its -wal and -shm files there too).  The lock is flock(2) on that file, which
  needs only read access, and the file holds the pid of the daemon that has it.  The
  kernel drops the lock when that process dies, even by kill -9, so a stale file never
  blocks.
- PostgreSQL (any other server): ``pg_try_advisory_lock`` inside the database, keyed by
  the host name, held by one connection for the daemon's life.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
from pathlib import Path

from sqlalchemy import Engine, text

from udb.errors import UdbError
from udb.session import sqlite_file


class AlreadyRunning(UdbError):
    """Another shrdaemon serves this UDB on this host."""


def lock_path(url: str, host: str | None = None) -> Path:
    """The lock file of the SQLite UDB at `url` on `host` (default: this host's name):
    beside the database's real file, named after its device, inode and the host."""
    real = Path(os.path.realpath(sqlite_file(url)))
    st = os.stat(real)
    host = host or socket.gethostname()
    digest = hashlib.sha256(f"{st.st_dev}:{st.st_ino}\n{host}".encode()).hexdigest()[:16]
    return real.parent / f".{real.name}.shrdaemon-{digest}.lock"


def advisory_key(host: str) -> int:
    """The PostgreSQL advisory lock key (a signed 64-bit number) for `host`."""
    digest = hashlib.sha256(f"shrdaemon\n{host}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class DaemonLock:
    """Held while the daemon runs; `acquire` raises AlreadyRunning naming the holder.

    `path` forces a lock file (tests); otherwise SQLite UDBs get `lock_path` and other
    databases an advisory lock through `engine`.
    """

    def __init__(
        self,
        url: str,
        display: str,
        path: Path | None = None,
        host: str | None = None,
        engine: Engine | None = None,
    ) -> None:
        self.url, self.display = url, display
        self.host = host or socket.gethostname()
        self.engine = engine
        self.path = path
        if path is None and sqlite_file(url) is not None:
            self.path = lock_path(url, self.host)
        self._fd: int | None = None
        self._conn = None

    @property
    def where(self) -> str:
        """Where the lock is, for the log."""
        if self.path is not None:
            return str(self.path)
        return f"PostgreSQL advisory lock {advisory_key(self.host)} (host {self.host})"

    def acquire(self) -> None:
        """Take the lock (and, for a file, write our pid into it)."""
        if self.path is None:
            self._acquire_advisory()
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except PermissionError:  # another user's lock file: flock needs only read access
            fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise AlreadyRunning(
                f"UDB {self.display} is already served by pid {holder} (lock {self.path})"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # opened read-only: the lock holds all the same
        self._fd = fd

    def _acquire_advisory(self) -> None:
        key = advisory_key(self.host)
        conn = self.engine.connect()
        got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
        conn.commit()
        if not got:
            conn.close()
            raise AlreadyRunning(
                f"UDB {self.display} is already served by a shrdaemon for host {self.host} "
                f"(PostgreSQL advisory lock {key})"
            )
        self._conn = conn

    def release(self) -> None:
        """Drop the lock.  A lock file stays (empty): removing it would let a starter
        that opened it just before take a lock on a file nobody sees."""
        if self._conn is not None:
            self._conn.execute(
                text("SELECT pg_advisory_unlock(:k)"), {"k": advisory_key(self.host)}
            )
            self._conn.commit()
            self._conn.close()
            self._conn = None
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> DaemonLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
