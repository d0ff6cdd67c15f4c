"""Which directories shrdaemon trusts to make its files in (the lock, the socket).

A directory someone else may write is one where they can plant a name before the
daemon uses it (a symbolic link to a file of root's, a lock file they hold, a socket
of their own) or swap one after.  So the directory that holds the UDB (its lock file,
and SQLite's -wal and -shm files) and the one that holds the socket must be owned by
root or by the daemon's own user and writable by nobody else: not by its group, not by
others, sticky bit or not (in a sticky /tmp anyone may still create the name first).
Each directory above it must be owned by root or the daemon's user too, and writable by
nobody else unless sticky (as /tmp is: there others cannot rename what is not theirs),
so the directory cannot be swapped for another either.  man/shrdaemon.8, FILES.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from udb.errors import UdbError


class Untrusted(UdbError):
    """A directory or file the daemon will not make or use its files in."""


def _problem(st: os.stat_result, euid: int, sticky_ok: bool) -> str | None:
    """Why a directory with status `st` may not hold files of a daemon running as
    `euid` (None when it may)."""
    if st.st_uid not in (0, euid):
        return f"owned by uid {st.st_uid}, neither root nor this daemon's uid {euid}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        if sticky_ok and st.st_mode & stat.S_ISVTX:
            return None
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def untrusted_dir(path: Path, euid: int, st: os.stat_result | None = None) -> str | None:
    """Why the directory `path` (symbolic links resolved; `st` its status when already
    taken from an open descriptor) may not hold the files of a daemon running as
    `euid`, naming the directory at fault; None when it may."""
    real = Path(os.path.realpath(path))
    why = _problem(st if st is not None else os.stat(real), euid, sticky_ok=False)
    if why:
        return f"{real}: {why}"
    for above in real.parents:
        why = _problem(os.stat(above), euid, sticky_ok=True)
        if why:
            return f"{above} (above {real}): {why}"
    return None
