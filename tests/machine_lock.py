"""One real-machine test at a time on this host, whichever pytest run it belongs to.

The system tier's tests use fixed test uids (61001, 61002, 62001...), the fair-share
cgroup and the CPU itself, so two runs of the suite at once (CI jobs, several people
as root on one box) would measure each other.  `machine_lock()` is an fcntl lock on
a file in /tmp that every system test holds while it runs (tests/conftest.py), and
the benchmarks on the real machine (tests/bench) too.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = "/tmp/fairshare-real-machine-tests.lock"
#: Where a cgroup enforcer makes its `fairshare` tree (v1 cpu and cpuacct, v2).
CGROUP_MOUNTS = (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup"))


#: The lock's descriptor and how many `machine_lock()` blocks of this process hold it.
#: POSIX record locks belong to the process and closing any descriptor of the file
#: drops them, so a nested block (the system tier's fixture around a test that takes
#: the lock too) reuses the one descriptor and only the outermost block closes it.
_held: list = [None, 0]


@contextmanager
def machine_lock() -> Iterator[None]:
    """Hold the host-wide real-machine test lock (waits for any other holder).  Nested
    blocks in one process share the outermost's hold."""
    if _held[1]:
        _held[1] += 1
        try:
            yield
        finally:
            _held[1] -= 1
        return
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        _held[:] = [fd, 1]
        yield
    finally:
        _held[:] = [None, 0]
        os.close(fd)


def runs_shrdaemon(cmd: list[str]) -> bool:
    """Whether command line `cmd` runs shrdaemon: the script itself, or Python running
    it (its script or `-m fairshare.cli.shrdaemon`); not a command that only names it
    (`grep shrdaemon`, `tail shrdaemon.log`)."""
    if not cmd:
        return False
    exe = os.path.basename(cmd[0])
    if exe == "shrdaemon":
        return True
    if not exe.startswith("python"):
        return False
    return any(os.path.basename(part) == "shrdaemon" or part == "fairshare.cli.shrdaemon"
               for part in cmd[1:])  # fmt: skip


def other_daemons() -> list[str]:
    """Every shrdaemon process on this host that may enforce (not those started with
    --enforcer none or --simulate), as "pid command line"."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if not runs_shrdaemon(cmd):
            continue
        if "--simulate" in cmd or " ".join(cmd).find("--enforcer none") >= 0:
            continue
        found.append(f"{p.info['pid']} {' '.join(cmd)}")
    return found


def skip_if_a_daemon_runs() -> None:
    """Skip the calling test if a shrdaemon already enforces on this host: it would
    renice or move the test's processes and falsify what the test measures."""
    import pytest

    running = other_daemons()
    if running:
        pytest.skip(f"a shrdaemon is already running on this host ({running[0]}); stop it first")


def remove_fairshare_cgroups() -> None:
    """Remove the fair-share cgroups a failed daemon left (their processes go to the
    root cgroup)."""
    for mount in CGROUP_MOUNTS:
        top = mount / "fairshare"
        if not top.is_dir():
            continue
        # Deepest first: the enforcers nest the share tree (+GROUP/LNODE).
        for here, _dirs, _files in os.walk(top, topdown=False):
            cg = Path(here)
            try:
                pids = (cg / "cgroup.procs").read_text().split()
            except OSError:
                continue  # removed through another mount of the same hierarchy
            for pid in pids:
                try:
                    (mount / "cgroup.procs").write_text(pid)
                except OSError:
                    pass
            try:
                cg.rmdir()
            except OSError:  # still in use (a live daemon's): left to its owner
                pass


def cpu_by_uid(uids: set[int]) -> dict[int, float]:
    """CPU seconds of each uid as the kernel counts it: utime + stime + cutime + cstime
    of all its processes (zombies too), so it grows by every reaped child's CPU however
    short it lived."""
    tick = os.sysconf("SC_CLK_TCK")
    out = dict.fromkeys(uids, 0.0)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{name}").st_uid
            if uid not in out:
                continue
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        rest = stat[stat.rindex(b")") + 2 :].split()
        out[uid] += sum(int(x) for x in rest[11:15]) / tick
    return out
