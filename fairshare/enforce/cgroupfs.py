"""What the cgroup v1 and v2 enforcers share: nested cgroups mirroring the share tree.

Layout: ``MOUNT/fairshare/+<group>/+<subgroup>/<lnode>``: a cgroup per active group,
the lnode cgroups inside their group's (fairshare.enforce.mapping.cgroup_path; at
most MAX_GROUP_LEVELS group levels, deeper ones collapsed into their ancestor at the
last level kept, logged once).  The kernel weighs only siblings against each other,
so each cgroup's weight among its siblings is proportional to its e_share among
theirs (mapping.CgroupTree), and the CPU a cgroup leaves unused goes to its siblings
first: a group whose member works interactively still gets its share, where one flat
directory of lnode cgroups handed that member's unused weight to every lnode.  Group
directories start with "+", which `safe_name` never gives, so a group never clashes
with an lnode of the same name and an lnode's directory keeps its `safe_name`.
Processes live only in the lnode cgroups (leaves), never in a group's (cgroup v2's
rule).  When a user moves to another group its lnode cgroup is made at the new place,
its processes moved there, and the old cgroups, empty, removed.  A process is placed by writing its
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
A process moved in from outside brings the CPU it used before, which its counter
never sees: `read_groups` hands each such move out once (GroupReading.moved), and
the collector charges what of it no sample did (fairshare.collect.procfs); the
counters themselves are the kernel's alone, as a restarted daemon reads them.
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
from fairshare.collect.procfs import CLK_TCK, parse_stat, read_bytes
from fairshare.enforce.actions import OsActions
from fairshare.enforce.base import Capabilities, LnodeTarget
from fairshare.enforce.mapping import (
    GROUP_PREFIX,
    MAX_GROUP_LEVELS,
    CgroupTree,
    cgroup_path,
    targets_tree,
)

log = logging.getLogger("shrdaemon")

#: The fair-share parent cgroup's name under the mount point.
PARENT = "fairshare"
#: Counter files kept open (one descriptor per lnode cgroup, read again with pread: one
#: system call instead of open, read and close); past this many they are opened each time.
KEEP_OPEN = 512
#: How many times `teardown` empties a cgroup that is still busy before giving up on it.
REMOVE_TRIES = 5
_NONE: frozenset[int] = frozenset()


def is_group(rel: str) -> bool:
    """Whether the cgroup at `rel` (a path under MOUNT/fairshare) is a group's."""
    return rel.rsplit("/", 1)[-1].startswith(GROUP_PREFIX)


def ancestors(rel: str) -> list[str]:
    """The groups' cgroups above `rel`, nearest first ("a/b/c": ["a/b", "a"])."""
    parts = rel.split("/")
    return ["/".join(parts[:k]) for k in range(len(parts) - 1, 0, -1)]


def existing(parent: Path) -> list[str]:
    """Every cgroup under `parent` (paths relative to it), parents before children."""
    out = []
    for root, dirs, _files in os.walk(parent):
        base = Path(root).relative_to(parent)
        out += [str(base / d) if str(base) != "." else d for d in sorted(dirs)]
    return out


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


def own_cpu(pid: int, proc: str = "/proc") -> tuple[int, float] | None:
    """(start tick, CPU seconds used so far: user + system) of process `pid`; None if
    it is gone."""
    try:
        st = parse_stat(read_bytes(f"{proc}/{pid}/stat"))
    except (OSError, ValueError, IndexError):
        return None
    return st.start, st.ticks / CLK_TCK


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


class CgroupFiles:
    """The cgroup file work `CgroupEnforcer` does with its lock held: make a cgroup and
    write its weight, move a process in, empty and remove a cgroup."""

    actions: OsActions
    parent: Path
    proc: str
    hierarchies: list[tuple[Path, str | None]]
    _placed: dict[int, str]
    _members: dict[int, str]
    _origin: dict[int, tuple[str, ...]]
    _weight: dict[str, tuple]
    _moved: dict[str, set[int]]
    _before: dict[str, list[tuple[int, int, float]]]
    _counters: CounterFiles

    def write_weight(self, cgroup: Path, values: tuple) -> None:
        """Write one cgroup's knob values."""
        raise NotImplementedError

    def prepare_group(self, cgroup: Path) -> None:
        """Whatever a group's cgroup needs before its children can use the cpu controller."""

    def prepare_parent(self) -> None:
        """Whatever the parent needs before children can use the cpu controller."""

    def _forget_gone(self, rel: str) -> None:
        """Forget lnode cgroup `rel`, removed behind this daemon's back (another daemon
        on the machine tore the tree down, or removed what it did not want), and its
        groups' cgroups and the parent if they went too: the next `apply` makes them
        again and moves the lnode's processes back, where it would have written to a
        cgroup that was no more, and counted nothing of them, until they all ended."""
        self._counters.close(rel)
        self._before.pop(rel, None)
        self._weight.pop(rel, None)
        for name in ancestors(rel):
            if not all((m / PARENT / name).is_dir() for m, _ctl in self.hierarchies):
                self._weight.pop(name, None)
        for where in (self._placed, self._members):
            for pid in [p for p, r in where.items() if r == rel]:
                del where[pid]
        if not all((m / PARENT).is_dir() for m, _ctl in self.hierarchies):
            for mount, _ctl in self.hierarchies:
                self.actions.mkdir(mount / PARENT)
            self.prepare_parent()

    def _make(self, name: str, values: tuple) -> None:
        if name not in self._weight:
            for mount, _ctl in self.hierarchies:
                self.actions.mkdir(mount / PARENT / name)
            if is_group(name):
                self.prepare_group(self.parent / name)
        if self._weight.get(name) != values:
            self.write_weight(self.parent / name, values)
            self._weight[name] = values

    def _move(self, pid: int, name: str) -> None:
        """Move `pid` into cgroup `name`.  One that comes from outside our cgroups has
        the CPU it used so far noted (`read_groups` hands it out once, as `moved`): the
        counter never sees it, and the collector charges what no sample did.  Added to
        the counter's readings instead, it was charged a second time when a sample had
        seen the process (an event handled after a sample, a move by `apply`), and a
        restart, whose readings lack it, took the counter as gone backwards."""
        if pid not in self._origin:
            origin = tuple(cgroup_of(pid, ctl, self.proc) for _m, ctl in self.hierarchies)
            if any(o is None for o in origin):
                return
            if not origin[0].startswith(f"/{PARENT}/"):
                self._origin[pid] = origin
                used = own_cpu(pid, self.proc)
                if used is not None:
                    self._before.setdefault(name, []).append((pid, *used))
        try:
            for mount, _ctl in self.hierarchies:
                self.actions.write_file(mount / PARENT / name / "cgroup.procs", str(pid))
            self._placed[pid] = name
            self._moved.setdefault(name, set()).add(pid)
        except OSError as err:
            if err.errno not in (errno.ESRCH, errno.ENOENT):
                log.warning("could not move pid %d into %s: %s", pid, name, err)

    def _remove(self, name: str, into: str | None = None) -> bool:
        """Empty cgroup `name` in every hierarchy (processes into cgroup `into`, else to
        their origin, else the mount root) and remove it; True if it is gone."""
        gone = True
        self._counters.close(name)
        moved = self._before.pop(name, [])
        if moved and into is not None:  # the same lnode's processes, at its new place
            self._before.setdefault(into, []).extend(moved)
        for i, (mount, _ctl) in enumerate(self.hierarchies):
            cg = mount / PARENT / name
            # A process forking while its parent is moved out leaves the child behind
            # (EBUSY): empty the cgroup again, a few times.
            for attempt in range(REMOVE_TRIES):
                self._empty(cg, mount, i, into)
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

    def _empty(self, cg: Path, mount: Path, i: int, into: str | None = None) -> None:
        """Move every process of cgroup `cg` (in hierarchy `i`) into our cgroup `into`,
        else back to its origin, else the mount root."""
        try:
            pids = [int(p) for p in (cg / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            origin = self._origin.get(pid)
            dest = mount / origin[i].lstrip("/") if origin else mount
            if into is not None:
                dest = mount / PARENT / into
            if not (dest / "cgroup.procs").exists():
                dest = mount
            try:
                self.actions.write_file(dest / "cgroup.procs", str(pid))
            except OSError as err:
                if err.errno != errno.ESRCH:
                    log.warning("could not move pid %d back to %s: %s", pid, dest, err)


class CgroupEnforcer(CgroupFiles):
    """Nested cgroups under MOUNT/fairshare, a group's and an lnode's as the share tree
    holds them; subclasses write the weight and read the CPU counter.

    `acct` is the hierarchy whose counter `read_groups` reads (cgroup v1's cpuacct
    mount when it is not the cpu one; None: `mount` itself, or no counter at all
    when the subclass has none there).  Cgroups are known by their path under
    MOUNT/fairshare ("+Physics/u1"; a flat lnode's is its name)."""

    name = "cgroup"
    #: The cgroup v1 controller that places processes (None: cgroup v2).
    controller: str | None = None
    #: The file with the CPU counter, and the controller that keeps it (cgroup v1).
    counter_file = ""
    counter_controller: str | None = None

    # The daemon applies the UDB's nice inside the lnode cgroups.
    capabilities = Capabilities(udb_nice=True, nice_local=True, places=True, counts=True)

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
        # (mount, controller) of each hierarchy the cgroups are made in; the last one
        # keeps the CPU counter.
        self.hierarchies: list[tuple[Path, str | None]] = [(self.mount, self.controller)]
        if acct is not None and Path(acct) != self.mount:
            self.hierarchies.append((Path(acct), self.counter_controller))
        self.counted = acct is not None or self.controller is None
        self._lock = threading.Lock()  # `place` runs on the process-events thread
        self._placed: dict[int, str] = {}  # pid -> lnode cgroup it was put in
        self._origin: dict[int, tuple[str, ...]] = {}  # pid -> its cgroup per hierarchy
        self._weight: dict[str, tuple] = {}  # cgroup -> last knob values written
        self._members: dict[int, str] = {}  # pid -> lnode cgroup, at the last read_groups
        self._fresh: set[str] = set()  # cgroups `place` used since the last read_groups
        self._moved: dict[str, set[int]] = {}  # cgroup -> pids moved in since read_groups
        #: cgroup -> (pid, start tick, CPU s) of the processes moved in from outside since
        #: the last read_groups, with the CPU they had used by then
        self._before: dict[str, list[tuple[int, int, float]]] = {}
        self._counters = CounterFiles()
        self._collapsed = False  # a tree deeper than MAX_GROUP_LEVELS was logged
        self._up = False

    # -- what the versions differ in ----------------------------------------------------

    def tree_weights(self, tree: CgroupTree, e_share: np.ndarray, background: np.ndarray):
        """The knob values of every cgroup of `tree` (one tuple per cgroup)."""
        raise NotImplementedError

    def parse_counter(self, text: bytes) -> float:
        """CPU seconds from the text of the counter file."""
        raise NotImplementedError

    # -- the protocol ----------------------------------------------------------------------

    def setup(self) -> None:
        """Create MOUNT/fairshare, adopting a tree a crashed daemon left: its cgroups are
        reused where the next targets want them and removed where they do not."""
        with self._lock:
            for mount, _ctl in self.hierarchies:
                self.actions.mkdir(mount / PARENT)
            self.prepare_parent()
            for mount, _ctl in self.hierarchies:
                for rel in existing(mount / PARENT):
                    self._weight[rel] = ()  # unknown weight: rewritten if wanted
            self._up = True

    def apply(self, targets: Sequence[LnodeTarget]) -> None:
        """Create missing cgroups (groups first), write changed weights, move processes
        into their lnode's cgroup, and remove the cgroups no target wants (an lnode's
        old cgroup emptied into its new one when its user moved to another group)."""
        if not self._collapsed and any(len(t.groups) > MAX_GROUP_LEVELS for t in targets):
            self._collapsed = True
            log.info(
                "the share tree is deeper than %d group levels: the cgroups of deeper "
                "groups are collapsed into their ancestor at that level",
                MAX_GROUP_LEVELS,
            )
        tree, paths, e_share, background = targets_tree(targets)
        values = self.tree_weights(tree, e_share, background)
        with self._lock:
            wanted = {"/".join(k): v for k, v in zip(tree.keys[1:], values[1:], strict=True)}
            for rel, v in wanted.items():  # breadth first: groups before their children
                self._make(rel, v)
            now = {}  # lnode cgroup name -> where it is now
            for t, path in zip(targets, paths, strict=True):
                rel = "/".join(path)
                now[path[-1]] = rel
                for pid in t.pids:
                    if self._placed.get(pid) != rel and self._members.get(pid) != rel:
                        self._move(pid, rel)
            # A cgroup `place` used since the sample holds a process the sample did not
            # see: it stays (with its groups) until the next cycle decides.
            keep = set(wanted) | {a for f in self._fresh for a in (f, *ancestors(f))}
            gone = sorted((r for r in self._weight if r not in keep), key=lambda r: -r.count("/"))
            for rel in gone:
                moved_to = now.get(rel.rsplit("/", 1)[-1]) if not is_group(rel) else None
                if self._remove(rel, moved_to):
                    del self._weight[rel]
            alive = {pid for t in targets for pid in t.pids}
            # A process `place` put in a cgroup kept for it keeps its origin too.
            for pid in [p for p in self._placed if p not in alive and self._placed[p] not in keep]:
                del self._placed[pid]
                self._origin.pop(pid, None)

    def place(self, pid: int, lnode: str, groups: Sequence[str] = ()) -> None:
        """Move `pid` into `lnode`'s cgroup (below `groups`, its groups' names, top
        first) now, between cycles (a process that has just become the lnode's).  A
        cgroup not yet made is made at the top weight, which the next cycle corrects:
        a newcomer is owed more than it has used."""
        with self._lock:
            if not self._up:
                return
            path = cgroup_path(groups, lnode)
            tree = CgroupTree.of([path])
            top = self.tree_weights(tree, np.ones(tree.index.n), np.zeros(tree.index.n, bool))
            for k in range(1, len(path) + 1):
                rel = "/".join(path[:k])
                self._make(rel, self._weight.get(rel) or top[k])
            rel = "/".join(path)
            self._fresh.add(rel)
            if self._placed.get(pid) != rel:
                self._move(pid, rel)

    def read_groups(self, members: bool = True) -> dict[str, GroupReading]:
        """Each lnode cgroup's CPU counter (CPU seconds of every process that ran in it)
        and the pids in it now (`members` False: only the pids this enforcer moved in
        since the previous call, sparing a read of every cgroup.procs), by the lnode
        cgroup's name (the lnode's `safe_name`); empty when there is no counter or
        nothing is set up.  Groups' cgroups hold no process and are not read."""
        with self._lock:
            self._fresh.clear()
            moved, self._moved = self._moved, {}
            if not (self._up and self.counted):
                return {}
            mount = str(self.hierarchies[-1][0] / PARENT)
            counter, read, parse = self.counter_file, self._counters.read, self.parse_counter
            before = self._before
            out, where, gone = {}, {}, []
            for rel in self._weight:
                if is_group(rel):
                    continue
                try:
                    cpu = parse(read(rel, f"{mount}/{rel}/{counter}"))
                    if members:
                        procs = read_bytes(f"{mount}/{rel}/cgroup.procs").split()
                        pids = frozenset([int(p) for p in procs])
                    else:  # most cycles: nobody was moved in
                        pids = frozenset(moved[rel]) if rel in moved else _NONE
                except (OSError, ValueError):
                    if not os.path.isdir(f"{mount}/{rel}"):  # removed behind our back
                        gone.append(rel)
                    continue
                name = rel.rsplit("/", 1)[-1]
                out[name] = GroupReading(cpu, pids, tuple(before.pop(rel, ())))
                where[name] = rel
            for rel in gone:
                self._forget_gone(rel)
            if members:
                self._members = {pid: where[n] for n, g in out.items() for pid in g.pids}
            else:
                for rel, pids in moved.items():
                    for pid in pids:
                        self._members[pid] = rel
            return out

    def group_of(self, pid: int) -> str:
        """The name of the lnode cgroup `pid` is in as the kernel says (its
        /proc/PID/cgroup, in the hierarchy that counts), "" when in none of ours or gone:
        a process whose parent is gone (an orphan) cannot inherit its parent's."""
        path = cgroup_of(pid, self.hierarchies[-1][1], self.proc)
        if not path or not path.startswith(f"/{PARENT}/"):
            return ""
        name = path.rsplit("/", 1)[-1]
        return "" if name.startswith(GROUP_PREFIX) else name

    def teardown(self) -> None:
        """Move every process in our cgroups back where it came from and remove them,
        children before their groups."""
        with self._lock:
            self._up = False
            rels = set(self._weight)
            for mount, _ctl in self.hierarchies:
                if (mount / PARENT).is_dir():
                    rels |= set(existing(mount / PARENT))
            for rel in sorted(rels, key=lambda r: -r.count("/")):
                self._remove(rel)
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
