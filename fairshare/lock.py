"""One daemon per UDB and host: an fcntl lock on a file named after both.

The lock file lives in /run/fairshare when root, else in $XDG_RUNTIME_DIR
or /tmp, and holds the pid of the daemon that has it.  The kernel drops the
lock when that process dies, even by kill -9, so a stale file never blocks.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
from pathlib import Path

from udb.errors import UdbError


class AlreadyRunning(UdbError):
    """Another shrdaemon serves this UDB on this host."""


def lock_dir() -> Path:
    """Where lock files go for the calling user."""
    if os.geteuid() == 0:
        return Path("/run/fairshare")
    return Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp")


def lock_path(url: str, host: str | None = None, directory: Path | None = None) -> Path:
    """The lock file for the UDB at `url` on `host` (default: this host)."""
    host = host or socket.gethostname()
    digest = hashlib.sha256(f"{url}\n{host}".encode()).hexdigest()[:16]
    return (directory or lock_dir()) / f"shrdaemon-{digest}.lock"


class DaemonLock:
    """Held while the daemon runs; `acquire` raises AlreadyRunning naming the holder."""

    def __init__(self, url: str, display: str, path: Path | None = None) -> None:
        self.url, self.display = url, display
        self.path = path or lock_path(url)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write our pid into the file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise AlreadyRunning(
                f"UDB {self.display} is already served by pid {holder} (lock {self.path})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock.  The file stays (empty): removing it would let a
        starter that opened it just before take a lock on a file nobody sees."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> DaemonLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
