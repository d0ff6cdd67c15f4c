"""What the daemon does to processes: one object, the real OS or the simulated machine.

Everything shrdaemon changes on a machine goes through one `OsActions` object chosen
at start-up: signals (CPU quotas), nice values (the nice enforcer, the UDB's nice
field), cgroup and /proc files (the cgroup enforcers, autogroup nice).  `RealOs`
wraps os.kill, setpriority and file writes; the simulator's actions
(fairshare.sim.machine.SimOs) act on the simulated machine and import nothing that
reaches the real one, so `shrdaemon --simulate` cannot signal or renice a real
process whatever the daemon's code does.  Reading /proc and cgroup files stays with
the collectors and enforcers: reading changes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol


class OsActions(Protocol):
    """The changes the daemon can make to a machine (each raises OSError on failure;
    ProcessLookupError when the process is gone)."""

    #: "real" or "simulated"
    name: str

    def signal(self, pid: int, sig: int) -> None:
        """Send signal `sig` to process `pid`."""
        ...

    def get_nice(self, pid: int) -> int:
        """The nice value (-20..19) of process `pid`."""
        ...

    def set_nice(self, pid: int, nice: int) -> None:
        """Set the nice value of process `pid`."""
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


class RealOs:
    """The real machine: os.kill, getpriority/setpriority, file writes."""

    name = "real"

    def signal(self, pid: int, sig: int) -> None:
        """os.kill(pid, sig)."""
        os.kill(pid, sig)

    def get_nice(self, pid: int) -> int:
        """getpriority(PRIO_PROCESS, pid)."""
        return os.getpriority(os.PRIO_PROCESS, pid)

    def set_nice(self, pid: int, nice: int) -> None:
        """setpriority(PRIO_PROCESS, pid, nice)."""
        os.setpriority(os.PRIO_PROCESS, pid, nice)

    def write_file(self, path: Path, text: str) -> None:
        """Path(path).write_text(text)."""
        Path(path).write_text(text)

    def mkdir(self, path: Path) -> None:
        """Path(path).mkdir(exist_ok=True)."""
        Path(path).mkdir(exist_ok=True)

    def rmdir(self, path: Path) -> None:
        """Path(path).rmdir()."""
        Path(path).rmdir()


#: The one real machine; enforcers built without an explicit OsActions act on it.
REAL_OS = RealOs()
