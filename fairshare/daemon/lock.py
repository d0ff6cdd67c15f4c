"""One daemon per UDB and host, keyed on the database's identity, not on its names.

- SQLite: a lock file in the directory of the database's real file (symbolic links
  resolved), named after the file's device and inode and the host and nothing else
  (``.shrdaemon-HASH.lock``), so ``D/./c.sqlite``, ``D//c.sqlite``,
  ``D/sub/../c.sqlite`` and a symbolic link all find the same lock.  A file with a
  second hard link is refused (udb.session.refuse_hard_links): its other name would
  find a lock of its own in another directory, and SQLite a WAL of its own.  The lock
  lives in the database's own directory, the one place that root and other users
  share (SQLite writes its -wal and -shm files there too).  The lock is flock(2) on
  that file, which needs only read access, and the file holds the pid of the daemon
  that has it.  The kernel drops the lock when that process dies, even by kill -9, so a
  stale file never blocks.
- Nothing there is taken on trust: the directory must be one only root or the
  daemon's user can write (fairshare.daemon.trust); the lock file is opened relative
  to the directory's descriptor without following a symbolic link, and must be a
  regular file with one link, owned by the daemon's user (or by root, when it is a
  root daemon that holds it: then another user's daemon is told so); what it holds is
  only ever read as a pid, a number.
- PostgreSQL (any other server): ``pg_try_advisory_lock`` inside the database, keyed by
  the host name, held by one connection for the daemon's life.  A server restart (or a
  lost connection) drops it without a word, so the daemon asks `check` before every
  cycle's writes: the lock's connection still answers (HELD), or it was lost and is
  taken again on a new one (RETAKEN: the daemon then claims its host's generation
  again, fairshare.store.fence), or another daemon has it now (LOST: this one stops
  writing and says so), or the server cannot be reached (UNREACHABLE: nothing can be
  written anyway, and the fencing token refuses a write that slips through).
"""

from __future__ import annotations

import enum
import errno
import fcntl
import hashlib
import logging
import os
import re
import socket
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from fairshare.daemon.outage import UdbCalls
from fairshare.daemon.trust import Untrusted, untrusted_dir
from fairshare.store.fence import Fenced
from udb.errors import UdbError
from udb.session import refuse_hard_links, sqlite_file

if TYPE_CHECKING:
    from fairshare.store.published import LnodeStore

#: How the lock file is opened: never through a symbolic link, never blocking (a FIFO).
_OPEN = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


class AlreadyRunning(UdbError):
    """Another shrdaemon serves this UDB on this host."""


class LockState(enum.Enum):
    """What `DaemonLock.check` found."""

    HELD = "held"  # still ours
    RETAKEN = "retaken"  # lost with its connection, and taken again
    LOST = "lost"  # another daemon holds it now
    UNREACHABLE = "unreachable"  # the database cannot be reached to tell


def lock_path(url: str, host: str | None = None) -> Path:
    """The lock file of the SQLite UDB at `url` on `host` (default: this host's name):
    beside the database's real file, named after its device, inode and the host only.
    UnusableUdb when the file has more than one hard link."""
    real = Path(os.path.realpath(sqlite_file(url)))
    st = os.stat(real)
    refuse_hard_links(real, st)
    host = host or socket.gethostname()
    digest = hashlib.sha256(f"{st.st_dev}:{st.st_ino}\n{host}".encode()).hexdigest()[:16]
    return real.parent / f".shrdaemon-{digest}.lock"


def holder_pid(fd: int) -> str:
    """The pid the lock file open on `fd` holds, as digits, or "?" when it holds
    anything else (whatever is there is never repeated)."""
    found = re.fullmatch(rb"\s*([0-9]{1,10})\s*", os.pread(fd, 32, 0))
    return str(int(found[1])) if found else "?"


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
        """Take the lock (and, for a file, write our pid into it).  AlreadyRunning when
        a daemon holds it; Untrusted when the directory or the lock file is not one the
        daemon can trust (fairshare.daemon.trust)."""
        if self.path is None:
            self._acquire_advisory()
            return
        euid = os.geteuid()
        fd = self._open(euid)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                raise Untrusted(
                    f"lock {self.path}: not a regular file with one link: refused (remove it)"
                )
            if st.st_uid not in (0, euid):
                raise Untrusted(
                    f"lock {self.path}: owned by uid {st.st_uid}, neither root nor this "
                    f"daemon's uid {euid}: refused (remove it)"
                )
            self._take(fd)
            if st.st_uid != euid:  # root's, and no root daemon holds it: root's to take
                raise Untrusted(
                    f"lock {self.path}: owned by root, not by this daemon's uid {euid}: "
                    f"refused (run shrdaemon as root, or remove it)"
                )
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # our own file, opened read-only (mode 0444): the lock holds all the same
        self._fd = fd

    def _open(self, euid: int) -> int:
        """The lock file, opened (made if missing) in its directory once that is trusted."""
        directory = self.path.parent
        try:
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            raise Untrusted(f"lock {self.path}: cannot open {directory}: {err.strerror}") from None
        try:
            why = untrusted_dir(directory, euid, os.fstat(dir_fd))
            if why:
                raise Untrusted(
                    f"UDB directory {why}: whoever can write there can plant the lock file "
                    "or SQLite's -wal file: refused (keep the UDB where only root or the "
                    "daemon's user can write)"
                )
            try:
                return os.open(self.path.name, os.O_RDWR | os.O_CREAT | _OPEN, 0o644, dir_fd=dir_fd)
            except PermissionError:  # another user's lock file: flock needs only read access
                return os.open(self.path.name, os.O_RDONLY | _OPEN, dir_fd=dir_fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise Untrusted(
                    f"lock {self.path}: is a symbolic link: not followed, refused (remove it)"
                ) from None
            raise Untrusted(f"lock {self.path}: cannot open it: {err.strerror}") from None
        finally:
            os.close(dir_fd)

    def _take(self, fd: int) -> None:
        """flock the open lock file; AlreadyRunning naming the holder's pid if held."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise AlreadyRunning(
                f"UDB {self.display} is already served by pid {holder_pid(fd)} (lock {self.path})"
            ) from None

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

    def check(self) -> LockState:
        """Whether the lock is still held, taking it again when its connection was lost
        (a PostgreSQL restart drops advisory locks).  A lock file is held until the
        process exits: always HELD."""
        if self.path is not None:
            return LockState.HELD
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT 1"))
                self._conn.commit()
                return LockState.HELD
            except DBAPIError:
                self._drop_connection()
        try:
            conn = self.engine.connect()
        except DBAPIError:
            return LockState.UNREACHABLE
        try:
            key = advisory_key(self.host)
            got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
            conn.commit()
        except DBAPIError:
            conn.invalidate()
            conn.close()
            return LockState.UNREACHABLE
        if not got:
            conn.close()
            return LockState.LOST
        self._conn = conn
        return LockState.RETAKEN

    def _drop_connection(self) -> None:
        """Forget the lock's connection, which no longer answers (never back to the pool)."""
        try:
            self._conn.invalidate()
            self._conn.close()
        except DBAPIError:
            pass
        self._conn = None

    def release(self) -> None:
        """Drop the lock.  A lock file stays (empty): removing it would let a starter
        that opened it just before take a lock on a file nobody sees."""
        if self._conn is not None:
            try:
                self._conn.execute(
                    text("SELECT pg_advisory_unlock(:k)"), {"k": advisory_key(self.host)}
                )
                self._conn.commit()
                self._conn.close()
            except DBAPIError:  # the server went away: so did the lock
                self._drop_connection()
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


class HostLock(Protocol):
    """The host's lock as the loop sees it (`DaemonLock`)."""

    def check(self) -> LockState:
        """Whether it is still held, taken again when its connection was lost."""
        ...


def keep_lock(lock: HostLock, udb: UdbCalls, store: LnodeStore) -> None:
    """Before a cycle's writes: make sure `lock` is still this daemon's.  Taken again
    when its connection was lost, and the host's generation with it (refused, through
    `udb`, when another daemon claimed the host meanwhile); when another daemon holds
    it, `udb` is told to stop writing (UdbCalls.refuse)."""
    if udb.fenced is not None:
        return
    state = lock.check()
    if state is LockState.RETAKEN:
        generation = udb.call("take the host's lock again", store.claim, True)
        if generation is not None:
            logging.getLogger("shrdaemon").warning(
                "host %s: the lock was lost with its database connection and taken again "
                "(generation %d)",
                store.host,
                generation,
            )
    elif state is LockState.LOST:
        lost = Fenced(f"host {store.host}'s lock is held by another shrdaemon")
        udb.refuse("take the host's lock again", lost)
