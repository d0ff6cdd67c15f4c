"""What the cgroup v1 and v2 enforcers share: a flat directory of lnode cgroups.

Layout: ``MOUNT/fairshare/<lnode>``, every lnode cgroup a sibling under one
parent, so their weights compete directly with each other (the kernel only
weighs siblings against each other).  A process is placed by writing its
pid to the lnode cgroup's ``cgroup.procs`` (the whole thread group moves);
the cgroup it came from is remembered so that `teardown` can put it back.
Children inherit their parent's cgroup, so once a session's shell is placed,
everything it starts runs in the lnode cgroup from its first instruction.
Writes are made only when something changed, so a steady cycle costs no
system calls beyond the new processes.

The kernel counts the CPU of every process that ever ran in a cgroup, however
short-lived: cgroup v2 in ``cpu.stat`` (usage_usec), cgroup v1 in the cpuacct
controller's ``cpuacct.usage`` (ns).  Where cgroup v1 mounts cpuacct apart from
cpu, the lnode cgroups are made in both hierarchies and processes placed in
both; `read_groups` gives the daemon's collector these counters.  `place` puts
one new process in its lnode's cgroup between cycles (fairshare.enforce.events).
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fairshare.collect import GroupReading
from fairshare.collect.procfs import read_bytes
from fairshare.enforce.actions import OsActions
from fairshare.enforce.base import Capabilities, LnodeTarget, arrays, safe_name

log = logging.getLogger("shrdaemon")

#: The fair-share parent cgroup's name under the mount point.
PARENT = "fairshare"
#: Counter files kept open (one descriptor per lnode cgroup, read again with pread: one
#: system call instead of open, read and close); past this many they are opened each time.
KEEP_OPEN = 512
#: How many times `teardown` empties a cgroup that is still busy before giving up on it.
REMOVE_TRIES = 5
_NONE: frozenset[int] = frozenset()


def parent_weight(nice0: int, cpus: int | None = None) -> int:
    """The weight of MOUNT/fairshare among the root's children: `nice0` (the weight of
    one nice-0 process) per CPU.  At the kernel's default (one nice-0 process in all)
    the users' whole load weighed half a process on each of 2 CPUs against every
    process left in the root (system daemons, shrdaemon itself): a light user's process
    waking behind one of those waited for the fair-share group's turn there first."""
    return nice0 * (cpus or os.cpu_count() or 1)


def cgroup_of(pid: int, controller: str | None, proc: str = "/proc") -> str | None:
    """The path (relative to its mount) of the cgroup `pid` is in: in the cgroup v1
    hierarchy of `controller`, or the cgroup v2 one when `controller` is None; None
    if the process is gone."""
    try:
        text = Path(f"{proc}/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        hid, controllers, path = line.split(":", 2)
        if controller is None and hid == "0" and controllers == "":
            return path
        if controller is not None and controller in controllers.split(","):
            return path
    return None


class CounterFiles:
    """The lnode cgroups' counter files, kept open (up to KEEP_OPEN): a read at offset 0
    (pread) makes the kernel print the file afresh, one system call instead of open,
    read and close."""

    def __init__(self) -> None:
        self._fd: dict[str, int] = {}  # cgroup name -> its open counter file

    def read(self, name: str, path: str) -> bytes:
        """The text of cgroup `name`'s counter file at `path`.  A descriptor gone stale
        (the cgroup was removed and made again) is reopened once."""
        fd = self._fd.get(name)
        if fd is not None:
            try:
                return os.pread(fd, 4096, 0)
            except OSError:
                self.close(name)
        if len(self._fd) >= KEEP_OPEN:
            return read_bytes(path)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._fd[name] = fd
        return os.pread(fd, 4096, 0)

    def close(self, name: str) -> None:
        """Close cgroup `name`'s counter file (before the cgroup is removed)."""
        fd = self._fd.pop(name, None)
        if fd is not None:
            os.close(fd)

    def close_all(self) -> None:
        """Close every counter file."""
        for name in list(self._fd):
            self.close(name)


class CgroupEnforcer:
    """One cgroup per active lnode under MOUNT/fairshare; subclasses write the weight
    and read the CPU counter.

    `acct` is the hierarchy whose counter `read_groups` reads (cgroup v1's cpuacct
    mount when it is not the cpu one; None: `mount` itself, or no counter at all
    when the subclass has none there)."""

    name = "cgroup"
    #: The cgroup v1 controller that places processes (None: cgroup v2).
    controller: str | None = None
    #: The file with the CPU counter, and the controller that keeps it (cgroup v1).
    counter_file = ""
    counter_controller: str | None = None

    # The daemon applies the UDB's nice inside the lnode cgroups.
    capabilities = Capabilities(udb_nice=True, places=True, counts=True)

    def __init__(
        self,
        mount: Path,
        actions: OsActions,
        proc: str = "/proc",
        acct: Path | None = None,
    ) -> None:
        self.actions = actions  # every write and mkdir/rmdir goes through it
        self.mount = Path(mount)
        self.parent = self.mount / PARENT
        self.proc = proc
        # (mount, controller) of each hierarchy the lnode cgroups are made in; the last
        # one keeps the CPU counter.
        self.hierarchies: list[tuple[Path, str | None]] = [(self.mount, self.controller)]
        if acct is not None and Path(acct) != self.mount:
            self.hierarchies.append((Path(acct), self.counter_controller))
        self.counted = acct is not None or self.controller is None
        self._lock = threading.Lock()  # `place` runs on the process-events thread
        self._placed: dict[int, str] = {}  # pid -> lnode cgroup name it was put in
        self._origin: dict[int, tuple[str, ...]] = {}  # pid -> its cgroup per hierarchy
        self._weight: dict[str, tuple] = {}  # cgroup name -> last knob values written
        self._members: dict[int, str] = {}  # pid -> lnode cgroup, at the last read_groups
        self._fresh: set[str] = set()  # cgroups `place` used since the last read_groups
        self._moved: dict[str, set[int]] = {}  # cgroup -> pids moved in since read_groups
        self._counters = CounterFiles()
        self._up = False

    # -- what the versions differ in ----------------------------------------------------

    def weights(self, e_share: np.ndarray, background: np.ndarray) -> list[tuple]:
        """The knob values for each lnode (one tuple per lnode)."""
        raise NotImplementedError

    def write_weight(self, cgroup: Path, values: tuple) -> None:
        """Write one lnode's knob values into its cgroup."""
        raise NotImplementedError

    def parse_counter(self, text: bytes) -> float:
        """CPU seconds from the text of the counter file."""
        raise NotImplementedError

    def prepare_parent(self) -> None:
        """Whatever the parent needs before children can use the cpu controller."""

    # -- the protocol ----------------------------------------------------------------------

    def setup(self) -> None:
        """Create MOUNT/fairshare, adopting one a crashed daemon left: its lnode cgroups
        are reused when their lnodes are active and removed when they are not."""
        with self._lock:
            for mount, _ctl in self.hierarchies:
                self.actions.mkdir(mount / PARENT)
            self.prepare_parent()
            for mount, _ctl in self.hierarchies:
                for d in (mount / PARENT).iterdir():
                    if d.is_dir():
                        self._weight[d.name] = ()  # unknown weight: rewritten if wanted
            self._up = True

    def apply(self, targets: Sequence[LnodeTarget]) -> None:
        """Create missing lnode cgroups, write changed weights, move new processes in,
        and remove the cgroups of lnodes that are no longer targets."""
        e_share, _nrun, background = arrays(targets)
        values = self.weights(e_share, background) if targets else []
        with self._lock:
            wanted = set()
            for t, v in zip(targets, values, strict=True):
                name = safe_name(t.name)
                wanted.add(name)
                self._make(name, v)
                for pid in t.pids:
                    if self._placed.get(pid) != name and self._members.get(pid) != name:
                        self._move(pid, name)
            # A cgroup `place` used since the sample holds a process the sample did not
            # see: it stays until the next cycle decides.
            for name in [n for n in self._weight if n not in wanted and n not in self._fresh]:
                if self._remove(name):
                    del self._weight[name]
            alive = {pid for t in targets for pid in t.pids}
            for pid in [p for p in self._placed if p not in alive]:
                del self._placed[pid]
                self._origin.pop(pid, None)

    def place(self, pid: int, lnode: str) -> None:
        """Move `pid` into `lnode`'s cgroup now, between cycles (a process that has just
        become the lnode's).  A cgroup not yet made is made at the top weight, which the
        next cycle corrects: a newcomer is owed more than it has used."""
        with self._lock:
            if not self._up:
                return
            name = safe_name(lnode)
            top = self.weights(np.ones(1), np.zeros(1, dtype=bool))[0]
            self._make(name, self._weight.get(name) or top)
            self._fresh.add(name)
            if self._placed.get(pid) != name:
                self._move(pid, name)

    def read_groups(self, members: bool = True) -> dict[str, GroupReading]:
        """Each lnode cgroup's CPU counter (CPU seconds of every process that ran in it)
        and the pids in it now (`members` False: only the pids this enforcer moved in
        since the previous call, sparing a read of every cgroup.procs); empty when
        there is no counter or nothing is set up."""
        with self._lock:
            self._fresh.clear()
            moved, self._moved = self._moved, {}
            if not (self._up and self.counted):
                return {}
            mount = str(self.hierarchies[-1][0] / PARENT)
            counter, read, parse = self.counter_file, self._counters.read, self.parse_counter
            out = {}
            for name in self._weight:
                try:
                    cpu = parse(read(name, f"{mount}/{name}/{counter}"))
                    if members:
                        procs = read_bytes(f"{mount}/{name}/cgroup.procs").split()
                        pids = frozenset([int(p) for p in procs])
                    else:  # most cycles: nobody was moved in
                        pids = frozenset(moved[name]) if name in moved else _NONE
                except (OSError, ValueError):
                    continue
                out[name] = GroupReading(cpu, pids)
            if members:
                self._members = {pid: name for name, g in out.items() for pid in g.pids}
            else:
                for name, pids in moved.items():
                    for pid in pids:
                        self._members[pid] = name
            return out

    def teardown(self) -> None:
        """Move every process in our cgroups back where it came from and remove them."""
        with self._lock:
            self._up = False
            names = set(self._weight)
            for mount, _ctl in self.hierarchies:
                if (mount / PARENT).is_dir():
                    names |= {d.name for d in (mount / PARENT).iterdir() if d.is_dir()}
            for name in names:
                self._remove(name)
            for mount, _ctl in self.hierarchies:
                try:
                    self.actions.rmdir(mount / PARENT)
                except FileNotFoundError:
                    pass
                except OSError as err:
                    log.warning("could not remove %s: %s", mount / PARENT, err)
            self._placed.clear()
            self._origin.clear()
            self._weight.clear()
            self._members.clear()
            self._counters.close_all()

    # -- helpers (called with the lock held) -----------------------------------------------

    def _make(self, name: str, values: tuple) -> None:
        if name not in self._weight:
            for mount, _ctl in self.hierarchies:
                self.actions.mkdir(mount / PARENT / name)
        if self._weight.get(name) != values:
            self.write_weight(self.parent / name, values)
            self._weight[name] = values

    def _move(self, pid: int, name: str) -> None:
        if pid not in self._origin:
            origin = tuple(cgroup_of(pid, ctl, self.proc) for _m, ctl in self.hierarchies)
            if any(o is None for o in origin):
                return
            if not origin[0].startswith(f"/{PARENT}/"):
                self._origin[pid] = origin
        try:
            for mount, _ctl in self.hierarchies:
                self.actions.write_file(mount / PARENT / name / "cgroup.procs", str(pid))
            self._placed[pid] = name
            self._moved.setdefault(name, set()).add(pid)
        except OSError as err:
            if err.errno not in (errno.ESRCH, errno.ENOENT):
                log.warning("could not move pid %d into %s: %s", pid, name, err)

    def _remove(self, name: str) -> bool:
        """Empty lnode cgroup `name` in every hierarchy (processes to their origin, else
        the mount root) and remove it; True if it is gone."""
        gone = True
        self._counters.close(name)
        for i, (mount, _ctl) in enumerate(self.hierarchies):
            cg = mount / PARENT / name
            # A process forking while its parent is moved out leaves the child behind
            # (EBUSY): empty the cgroup again, a few times.
            for attempt in range(REMOVE_TRIES):
                self._empty(cg, mount, i)
                try:
                    self.actions.rmdir(cg)
                    break
                except FileNotFoundError:
                    break
                except OSError as err:
                    if err.errno == errno.EBUSY and attempt + 1 < REMOVE_TRIES:
                        continue
                    if err.errno != errno.EBUSY:
                        log.warning("could not remove %s: %s", cg, err)
                    gone = False
                    break
        return gone

    def _empty(self, cg: Path, mount: Path, i: int) -> None:
        """Move every process of cgroup `cg` (in hierarchy `i`) back to its origin, else
        the mount root."""
        try:
            pids = [int(p) for p in (cg / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            origin = self._origin.get(pid)
            dest = mount / origin[i].lstrip("/") if origin else mount
            if not (dest / "cgroup.procs").exists():
                dest = mount
            try:
                self.actions.write_file(dest / "cgroup.procs", str(pid))
            except OSError as err:
                if err.errno != errno.ESRCH:
                    log.warning("could not move pid %d back to %s: %s", pid, dest, err)
