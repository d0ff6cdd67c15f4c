"""What the daemon does to processes: one object, the real OS or the simulated machine.

Everything shrdaemon changes on a machine goes through one `OsActions` object chosen
at start-up: signals (CPU quotas), nice values (the nice enforcer, the UDB's nice
field), time slices (the nice enforcer), cgroup and /proc files (the cgroup enforcers,
autogroup nice).  `RealOs` wraps os.kill, setpriority, sched_setattr and file writes;
the simulator's actions (fairshare.sim.machine.SimOs) act on the simulated machine and
import nothing that reaches the real one, so `shrdaemon --simulate` cannot signal or
renice a real process whatever the daemon's code does.  Reading /proc and cgroup files stays with
the collectors and enforcers: reading changes nothing.  The one read here is the one an
action needs first: `same_process` asks the machine when a pid's process started, so a
pid taken from a sample cycles old (fairshare.collect keeps readings between its full
samples) and given since to another process is neither signalled nor reniced.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import stat
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import psutil

#: Two start times (epoch s) this close are one process's: the kernel counts starts in
#: clock ticks (10 ms), and a pid is reused only after its process has gone.
START_SLACK = 0.005


class OsActions(Protocol):
    """The changes the daemon can make to a machine (each raises OSError on failure;
    ProcessLookupError when the process is gone)."""

    #: "real" or "simulated"
    name: str

    def signal(self, pid: int, sig: int) -> None:
        """Send signal `sig` to process `pid`."""
        ...

    def started(self, pid: int) -> float | None:
        """When process `pid` started (epoch s, as fairshare.collect.ProcessSample's
        `create_time`), None when this machine cannot tell (a test's)."""
        ...

    def tell(self, pids: Sequence[int], text: str) -> list[str]:
        """Write the line `text` on the terminals of processes `pids` (each terminal
        once, only one that belongs to its process's user, as write(1) and wall(1) reach
        a user); returns the terminals written to."""
        ...

    def get_nice(self, pid: int) -> int:
        """The nice value (-20..19) of process `pid`."""
        ...

    def set_nice(self, pid: int, nice: int) -> None:
        """Set the nice value of process `pid`."""
        ...

    def set_slice(self, pid: int, nice: int, slice_ns: int) -> None:
        """Give process `pid` the time slice `slice_ns` (0: the kernel's default) at nice
        `nice`, keeping its scheduling policy."""
        ...

    def write_file(self, path: Path, text: str) -> None:
        """Write `text` to a kernel file (cgroup knob, cgroup.procs, /proc/PID/autogroup)."""
        ...

    def mkdir(self, path: Path) -> None:
        """Create directory `path` (a cgroup); no error if it exists."""
        ...

    def rmdir(self, path: Path) -> None:
        """Remove the empty directory `path` (a cgroup)."""
        ...


def _threads(pid: int) -> list[int]:
    """The thread ids of process `pid`, its own first (just `pid` if /proc lists none)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid]
    except (OSError, ValueError):
        tids = []
    return [pid, *tids]


class RealOs:
    """The real machine: os.kill, getpriority/setpriority, file writes."""

    name = "real"

    def signal(self, pid: int, sig: int) -> None:
        """os.kill(pid, sig)."""
        os.kill(pid, sig)

    def started(self, pid: int) -> float:
        """psutil's create_time: the start tick in /proc/PID/stat after the boot time,
        the collector's own arithmetic."""
        try:
            return psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            raise ProcessLookupError(errno.ESRCH, "no such process", pid) from None

    def tell(self, pids: Sequence[int], text: str) -> list[str]:
        """`text` on the controlling terminals of `pids` (psutil's, from /proc/PID/stat's
        tty_nr), each written once if it is a character device owned by the process's
        real uid; a terminal that would block or fails is passed over."""
        ttys: dict[str, int] = {}
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                tty, uid = proc.terminal(), proc.uids().real
            except psutil.Error:
                continue
            if tty:
                ttys.setdefault(tty, uid)
        return [tty for tty, uid in ttys.items() if write_tty(Path(tty), uid, text)]

    def get_nice(self, pid: int) -> int:
        """getpriority(PRIO_PROCESS, pid)."""
        return os.getpriority(os.PRIO_PROCESS, pid)

    def set_nice(self, pid: int, nice: int) -> None:
        """setpriority(PRIO_PROCESS, tid, nice) for every thread of process `pid`: on
        Linux a nice value is a thread's, and setpriority(pid) sets its main thread's."""
        for tid in _threads(pid):
            try:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
            except ProcessLookupError:
                if tid == pid:
                    raise

    def set_slice(self, pid: int, nice: int, slice_ns: int) -> None:
        """sched_setattr(pid, {nice, sched_runtime=slice_ns}, SCHED_FLAG_KEEP_POLICY).

        Since Linux 6.12 a SCHED_OTHER task's sched_runtime is its EEVDF slice (the kernel
        clamps it to 0.1..100 ms); older kernels accept and ignore it.  OSError(ENOSYS)
        where the architecture's system call number is unknown here."""
        number = SCHED_SETATTR.get(platform.machine())
        if number is None:
            raise OSError(errno.ENOSYS, f"sched_setattr: unknown on {platform.machine()}")
        attr = ctypes.create_string_buffer(
            struct.pack("=IIQiIQQQII", 56, 0, SCHED_FLAG_KEEP_POLICY, nice, 0, slice_ns, 0, 0, 0, 0)
        )
        for tid in _threads(pid):  # every thread's, as set_nice
            if _libc().syscall(number, tid, attr, 0) != 0:
                err = ctypes.get_errno()
                if tid == pid or err != errno.ESRCH:
                    raise OSError(err, f"sched_setattr({tid}): {os.strerror(err)}")

    def write_file(self, path: Path, text: str) -> None:
        """Path(path).write_text(text)."""
        Path(path).write_text(text)

    def mkdir(self, path: Path) -> None:
        """Path(path).mkdir(exist_ok=True)."""
        Path(path).mkdir(exist_ok=True)

    def rmdir(self, path: Path) -> None:
        """Path(path).rmdir()."""
        Path(path).rmdir()


def write_tty(path: Path, uid: int, text: str) -> bool:
    """Write `text` as a line of its own on terminal `path` (opened without becoming
    anyone's controlling terminal and without blocking), if it is a character device
    owned by `uid`; whether it was written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISCHR(st.st_mode) or st.st_uid != uid:
            return False
        os.write(fd, f"\r\n\a{text}\r\n".encode(errors="replace"))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def same_process(actions: OsActions, pid: int, started: float | None) -> bool:
    """Whether `pid` is still the process that started at `started` (epoch s; None:
    unknown, taken as yes) on `actions`' machine, not a later one given its number."""
    if started is None:
        return True
    try:
        now = actions.started(pid)
    except ProcessLookupError:
        return False
    return now is None or abs(now - started) < START_SLACK


#: sched_setattr(2)'s system call number by `platform.machine()` (Python has no wrapper).
SCHED_SETATTR = {
    "x86_64": 314,
    "aarch64": 274,
    "riscv64": 274,
    "ppc64le": 355,
    "ppc64": 355,
    "s390x": 345,
    "i686": 351,
    "armv7l": 380,
}
#: sched_attr.sched_flags: keep the task's policy (SCHED_OTHER, BATCH or IDLE).
SCHED_FLAG_KEEP_POLICY = 0x08


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, loaded once."""
    return ctypes.CDLL(None, use_errno=True)


#: The real machine, for whoever means to change it; no enforcer acts on it unless
#: given it (`actions` is a required argument of every enforcer).
REAL_OS = RealOs()
