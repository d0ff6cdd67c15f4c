"""The nice enforcer: nice values from e_share, through the autogroup where it is on.

With the kernel's autogroup on (/proc/sys/kernel/sched_autogroup_enabled), the
scheduler first shares the CPU between sessions (autogroups) and only then
between the processes of one session by their nice values, so a per-process
nice cannot move CPU from one user's session to another's.  What this
enforcer can do then is set the nice of a whole autogroup
(/proc/PID/autogroup), which weighs that session against the others:

- an autogroup whose processes all belong to one lnode gets the nice for its
  share of that lnode's e_share (the lnode's e_share times the fraction of
  the lnode's runnable processes it holds);
- an autogroup shared by several lnodes (one login session running processes
  of two users, e.g. through su) cannot be split: its processes get
  per-process nice values, which rank them within the session only, and the
  log says how many such sessions there are;
- a process in no autogroup (init's session: pid 1's, or a container's that
  never made a session of its own) competes one by one with the autogroups,
  so it gets its lnode's per-process nice.

With autogroup off, every process gets the per-process nice of its lnode
(e_share / nrun through the kernel's 1.25-per-step weights), every thread of it (a
nice value is a thread's: setpriority on a pid sets its main thread's only), and nrun
counts threads: the larger of the runnable processes and the lnode's want in CPUs,
the time its threads ran or waited for a CPU (a process of 16 busy threads against
two single-threaded ones took 16 times their weight per thread).  A nice value a
user chose is never lowered, and the UDB's nice of the lnode (LnodeTarget.nice)
is a floor: the value applied is the larger of the enforcer's and the user's
floor (fairshare.enforce.renice.user_floor).

The processes of an lnode that wants more than its fair target (LnodeTarget.light
False: it is using its share) get a long time slice (LONG_SLICE_NS), whatever their
nice; those of a light one (an interactive user) keep the kernel's short default.
Since Linux 6.12 (EEVDF) a running process is protected from wake-up preemption for
its slice, and without a timer of its own the end of that slice is only noticed at
the next tick (4 ms at HZ=250): a light user's process waking among busy ones waited
up to two ticks (p99 8 ms against 4 ms with no daemon, tests/bench/bench_real.py's
latency case), and longer where it had a long slice too.  A waking process whose
slice is shorter than the running one's may preempt it at once (PREEMPT_SHORT), so
the light user's always does; the busy processes' CPU shares, set by weight alone, do
not change.  Older kernels accept and ignore the slice.

`teardown` restores every value this enforcer changed and that nobody has changed
since, and the default slice of every process it gave a long one (and of children
that inherited it).  Every change goes through the
OsActions object the enforcer is given (fairshare.enforce.actions).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fairshare.enforce.actions import OsActions
from fairshare.enforce.base import Capabilities, LnodeTarget, arrays
from fairshare.enforce.mapping import nice_values
from fairshare.enforce.renice import Changed, Renicer, user_floor

log = logging.getLogger("shrdaemon")

AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")

#: The time slice of a process reniced above 0 (ns); the kernel's default is 0.7 ms
#: times 1 + log2(CPUs), up to 8 CPUs (1.4 ms on 2 CPUs, 2.8 ms on 8 or more).
LONG_SLICE_NS = 10_000_000


def autogroup_enabled(switch: Path = AUTOGROUP_SWITCH) -> bool:
    """Whether the kernel groups processes by session for scheduling."""
    try:
        return switch.read_text().strip() == "1"
    except OSError:
        return False


#: read_autogroup's name for the root task group: processes of init's session (pid 1's,
#: or a container's that never called setsid) are in no autogroup, and the kernel shows
#: an empty /proc/PID/autogroup for them.
ROOT_GROUP = ""


def read_autogroup(pid: int, proc: str = "/proc") -> tuple[str, int] | None:
    """(autogroup name, its nice) of `pid`, e.g. ("/autogroup-5", 0), or (ROOT_GROUP, 0)
    for a process in no autogroup; None if the process is gone."""
    try:
        text = Path(f"{proc}/{pid}/autogroup").read_text()
    except OSError:
        return None
    if not text.strip():
        return ROOT_GROUP, 0
    try:
        name, _word, nice = text.split()
        return name, int(nice)
    except ValueError:
        return None


def parent_of(pid: int, proc: str = "/proc") -> int | None:
    """The parent pid of `pid` (field 4 of /proc/PID/stat), None if it is gone."""
    try:
        stat = Path(f"{proc}/{pid}/stat").read_bytes()
        return int(stat[stat.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def read_slice(pid: int | str, proc: str = "/proc") -> int | None:
    """The time slice of `pid` in ns (se.slice in /proc/PID/sched), None if not shown."""
    try:
        with open(f"{proc}/{pid}/sched") as f:
            for line in f:
                if line.startswith("se.slice"):
                    return int(line.split(":")[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class NiceEnforcer:
    """Autogroup nice per single-lnode session, per-process nice elsewhere."""

    name = "nice"
    # The UDB's nice is folded into its own values (the larger of the two).
    capabilities = Capabilities(sets_nice=True)

    def __init__(
        self, actions: OsActions, autogroup: bool | None = None, proc: str = "/proc"
    ) -> None:
        self.autogroup = autogroup_enabled() if autogroup is None else autogroup
        self.proc = proc
        self.actions = actions  # every renice and autogroup write goes through it
        # The per-process nice values it changed; a process first seen at a value it gave
        # its parent inherited it: its original is the parent's.
        self.renicer = Renicer(actions, first_seen=self._inherited)
        self._groups: dict[str, tuple[int, Changed]] = {}  # autogroup -> (a pid, change)
        self._group_of: dict[int, tuple[str, int]] = {}  # pid -> (autogroup, its nice)
        self._mixed_reported = -1

    def setup(self) -> None:
        """Say what this enforcer can do on this kernel."""
        if self.autogroup:
            log.info(
                "nice: autogroup is on, so nice acts per session through /proc/PID/autogroup; "
                "sessions shared by several lnodes get per-process nice, which ranks their "
                "processes only within that session"
            )
        else:
            log.info("nice: autogroup is off; every process gets its lnode's per-process nice")

    def apply(self, targets: Sequence[LnodeTarget]) -> None:
        """Set autogroup or per-process nice values for every target's processes."""
        if not targets:
            return
        e_share, nrun, background = arrays(targets)
        # A nice value weighs one thread: a process of 16 busy threads is 16 of them.
        per_process = nice_values(e_share, arrays(targets, threads=True)[1], background)
        if not self.autogroup:
            for t, n in zip(targets, per_process, strict=True):
                for pid in t.pids:
                    self._renice(pid, int(n), t.nice, t.light)
            return
        self._apply_autogroups(targets, e_share, nrun, background, per_process)

    def _apply_autogroups(self, targets, e_share, nrun, background, per_process) -> None:
        alive = {pid for t in targets for pid in t.pids}
        for pid in [p for p in self._group_of if p not in alive]:
            del self._group_of[pid]
        members: dict[str, list[tuple[int, int]]] = {}  # autogroup -> (pid, target index)
        running: dict[tuple[str, int], int] = {}  # (autogroup, target) -> runnable count
        for i, t in enumerate(targets):
            for pid in t.pids:
                g = self._group_of.get(pid)
                if g is None:
                    g = read_autogroup(pid, self.proc)
                    if g is None:
                        continue
                    self._group_of[pid] = g
                members.setdefault(g[0], []).append((pid, i))
                if pid in t.runnable:
                    running[(g[0], i)] = running.get((g[0], i), 0) + 1
        loose = members.pop(ROOT_GROUP, [])
        owners = {g: {i for _pid, i in held} for g, held in members.items()}
        pure = sorted(g for g, idx in owners.items() if len(idx) == 1)
        mixed = [g for g, idx in owners.items() if len(idx) > 1]
        # The root group's processes compete one by one with the sessions, so sessions
        # and those loose processes share one scale: a session gets its lnode's share
        # for the runnable processes it holds, a loose process its lnode's per-process share.
        pure_owner = [members[g][0][1] for g in pure]
        owner = np.array(pure_owner + [i for _pid, i in loose], dtype=np.int64)
        run = np.array(
            [running.get(key, 0) for key in zip(pure, pure_owner, strict=True)] + [1] * len(loose)
        )
        share = e_share[owner] * np.maximum(run, 1) / np.maximum(nrun[owner], 1)
        nices = nice_values(share, np.ones(len(owner), dtype=np.int64), background[owner])
        for g, n in zip(pure, nices[: len(pure)], strict=True):
            pid, i = members[g][0]
            self._renice_group(g, pid, int(n), targets[i].nice)
        for (pid, i), n in zip(loose, nices[len(pure) :], strict=True):
            self._renice(pid, int(n), targets[i].nice, targets[i].light)
        for g in mixed:
            for pid, i in members[g]:
                self._renice(pid, int(per_process[i]), targets[i].nice, targets[i].light)
        if len(mixed) != self._mixed_reported:
            self._mixed_reported = len(mixed)
            if mixed:
                log.warning(
                    "nice: %d session(s) hold processes of several lnodes; their processes are "
                    "reniced per process, which cannot move CPU between sessions",
                    len(mixed),
                )

    def teardown(self) -> None:
        """Restore every nice value we changed that is still ours, and those of the
        processes forked since by processes we reniced, which inherited our value."""
        self._adopt_unseen_children()
        self.renicer.restore()
        for g, (pid, ch) in self._groups.items():
            now = read_autogroup(pid, self.proc)
            if now is not None and now[0] == g and now[1] == ch.ours:
                self._write_group(pid, ch.original)
        self._groups.clear()
        self._group_of.clear()

    # -- helpers ---------------------------------------------------------------------------

    def _renice(self, pid: int, target: int, udb_nice: int = 0, light: bool = False) -> None:
        self.renicer.renice(pid, target, udb_nice, 0 if light else LONG_SLICE_NS)

    def _adopt_unseen_children(self) -> None:
        """Record, as ours, the descendants of changed processes that no cycle saw: they
        inherited their parent's time slice, and its nice if it is one we gave (one pass
        over /proc, at teardown)."""
        procs = self.renicer.changed
        if not procs:
            return
        children: dict[int, list[int]] = {}
        try:
            names = os.listdir(self.proc)
        except OSError:
            return
        for name in names:
            if name.isdigit() and int(name) not in procs:
                parent = parent_of(int(name), self.proc)
                if parent is not None:
                    children.setdefault(parent, []).append(int(name))
        todo = list(procs)
        while todo:
            pid = todo.pop()
            ch = procs[pid]
            for kid in children.pop(pid, ()):
                try:
                    nice = self.actions.get_nice(kid)
                except OSError:
                    continue
                if nice in ch.given or ch.slice_ns:
                    kid_ch = self._inherited(kid, nice, ch)
                    if kid_ch.given or kid_ch.slice_ns:
                        procs[kid] = kid_ch
                        todo.append(kid)

    def _inherited(self, pid: int, current: int, parent: Changed | None = None) -> Changed:
        """What `pid`, first seen at nice `current`, had before this enforcer: a child
        forked after we changed its parent (`parent`, else looked up) holds our time
        slice if its parent's is ours and the kernel shows it, and its parent's original
        nice if it holds a value we gave."""
        if parent is None:
            parent = self.renicer.changed.get(parent_of(pid, self.proc) or 0)
        if parent is None:
            return Changed(original=current, ours=current)
        given = current in parent.given
        ours = parent.slice_ns and read_slice(pid, self.proc) == parent.slice_ns
        return Changed(
            original=parent.original if given else current,
            ours=current,
            given={current} if given else set(),
            slice_ns=parent.slice_ns if ours else 0,
        )

    def _renice_group(self, group: str, pid: int, target: int, udb_nice: int = 0) -> None:
        now = read_autogroup(pid, self.proc)
        if now is None or now[0] != group:
            return
        held = self._groups.get(group)
        ch = held[1] if held else None
        if ch is None or now[1] != ch.ours:
            ch = Changed(original=now[1], ours=now[1])
        value = max(target, user_floor(ch.original, udb_nice))
        if value != now[1] and not self._write_group(pid, value):
            return
        ch.ours = value
        self._groups[group] = (pid, ch)

    def _write_group(self, pid: int, nice: int) -> bool:
        try:
            self.actions.write_file(Path(f"{self.proc}/{pid}/autogroup"), str(nice))
            return True
        except OSError as err:
            log.warning("nice: could not set autogroup nice of pid %d: %s", pid, err)
            return False
