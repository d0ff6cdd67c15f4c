"""What the daemon owes the UDB, kept in a local file while the UDB cannot take it.

When a write-back or a checkpoint fails (the server is down, the disk is full, the
database is read-only), the daemon writes everything it owes to its spool file: the
increments it kept (merged per uid) and, at a checkpoint, every active lnode's
unwritten increment, with the lnode cgroups' counters they cover (the write-back that
takes them stores those counters, so a restart charges the counters' growth from
there: fairshare.daemon.writeback.resume_counters).  So a stop, or a crash, during an
outage loses nothing but what accrued since the last spool (at most a checkpoint
interval, as without an outage), and where cgroups count, not even that.

Each spool has a serial that grows with every save.  The write-back that takes what
the spool holds records the serial in the same transaction
(fairshare.store.fence.mark_spooled), then the file is removed; a daemon that starts
with a spool file left writes it back unless the UDB already recorded its serial
(`LnodeStore.replay`), and removes it.  Applied exactly once, whichever way the
daemon stopped.

The file is JSON, written to a temporary name, synced and renamed over the old one,
in a directory only the daemon's user (or root) can write (fairshare.daemon.trust); a
file not owned by the daemon's user, or writable by others, is never read.  Its
default place is `default_spool` (man/shrdaemon.8, FILES).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fairshare.core.lnode import WriteBack
from fairshare.daemon.trust import untrusted_dir
from fairshare.store.published import Counters

log = logging.getLogger("shrdaemon")

#: Say that the spool cannot be written at most once per this many seconds.
SPOOL_LOG_EVERY = 60.0


def default_spool(url: str, host: str, euid: int | None = None) -> Path:
    """The spool file of the daemon of `host` on the UDB at `url`: under
    /var/lib/fairshare for root, else $XDG_STATE_HOME/fairshare (~/.local/state),
    named after the host and a digest of the URL, so no two UDBs share one."""
    euid = os.geteuid() if euid is None else euid
    if euid == 0:
        base = Path("/var/lib/fairshare")
    else:
        state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        base = Path(state) / "fairshare"
    digest = hashlib.sha256(f"{url}\n{host}".encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in host)
    return base / f"shrdaemon-{safe}-{digest}.spool"


@dataclass
class Spool:
    """The spool file at `path` (None: no spool) of `host`.  `serial`: the serial of the
    file on disk (0: none)."""

    path: Path | None
    host: str
    serial: int = 0
    monotonic: Callable[[], float] = time.monotonic
    _logged: float = field(default=-1e18, repr=False)

    def save(self, owed: dict[int, WriteBack], counters: Counters | None = None) -> bool:
        """Write `owed` (by uid) as the spool, with the lnode cgroups' `counters` it
        covers (fairshare.daemon.writeback.follow_counters), replacing the last one;
        False (logged once a minute) when it cannot be written."""
        if self.path is None:
            return False
        serial = max(time.time_ns(), self.serial + 1)
        data = {
            "host": self.host,
            "serial": serial,
            "owed": [[uid, *_fields(wb)] for uid, wb in sorted(owed.items())],
        }
        if counters is not None:
            data["counters"] = dataclasses.asdict(counters)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            _sync_dir(self.path.parent)
        except OSError as err:
            self._say(f"cannot write the spool {self.path}: {err.strerror}")
            return False
        self.serial = serial
        return True

    def load(self) -> tuple[int, list[tuple[int, WriteBack]], Counters | None] | None:
        """(serial, what it owes by uid, the counters it covers or None) of the spool
        file left on disk, or None when there is none (or it is not one the daemon
        trusts: said in the log)."""
        if self.path is None:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as err:
            log.error("spool %s: cannot open it: %s; not replayed", self.path, err.strerror)
            return None
        with os.fdopen(fd) as f:
            why = _distrust(self.path, os.fstat(f.fileno()))
            if why:
                log.error("spool %s: %s; not replayed", self.path, why)
                return None
            try:
                data = json.load(f)
                owed = [(int(r[0]), WriteBack(*map(float, r[1:5]))) for r in data["owed"]]
                serial, host = int(data["serial"]), str(data["host"])
                counters = _counters(data.get("counters"))
            except (ValueError, KeyError, TypeError, IndexError) as err:
                log.error("spool %s: not a spool file (%s); not replayed", self.path, err)
                return None
        if host != self.host:
            log.error("spool %s: host %s's, not %s's; not replayed", self.path, host, self.host)
            return None
        self.serial = serial
        return serial, owed, counters

    def remove(self) -> None:
        """Remove the spool file (its increments are in the UDB)."""
        if self.path is not None and self.serial:
            try:
                self.path.unlink(missing_ok=True)
            except OSError as err:  # its serial is recorded: a start will not apply it again
                log.warning("cannot remove the spool %s: %s", self.path, err.strerror)
        self.serial = 0

    def _say(self, line: str) -> None:
        now = self.monotonic()
        if now - self._logged >= SPOOL_LOG_EVERY:
            self._logged = now
            log.error("%s", line)


def _counters(data: dict | None) -> Counters | None:
    """The counters a spool file stored (ValueError, KeyError or TypeError if damaged)."""
    if data is None:
        return None
    cpu = {str(name): float(v) for name, v in data["cpu"].items()}
    return Counters(cpu, float(data["boot"]), float(data["time"]))


def _fields(wb: WriteBack) -> list[float]:
    return [wb.shusage, wb.shextime, wb.charge, wb.cpu_seconds]


def _distrust(path: Path, st: os.stat_result) -> str | None:
    """Why the spool file with status `st` is not to be trusted (None: it is)."""
    euid = os.geteuid()
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        return "not a regular file with one link"
    if st.st_uid != euid:
        return f"owned by uid {st.st_uid}, not this daemon's uid {euid}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return untrusted_dir(path.parent, euid)


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
