"""The simulator as a collector: `shrdaemon --simulate` runs the daemon's own loop on
fairshare.sim.SimMachine instead of the real machine.

`SimWorld` holds the simulated machine, the scenario's workloads, the clock and
the weights the enforcer last set.  Each workload's processes get fixed fake
pids and the uid of the lnode they run for (a user's uid, or in Share by
Account an account's number, which the daemon's `account_of` hook maps
directly).  When the daemon samples, the machine first runs for the simulated
seconds since the previous sample with the weights of the last `apply`
(fairshare.enforce.sim.SimEnforcer), using the same weight models as shrsim.

`SimOs` is the simulated machine's OsActions (fairshare.actions): signals and nice
values act on the world's processes (SIGKILL, SIGTERM, SIGINT, SIGHUP and SIGQUIT
stop one; a simulated program takes SIGXCPU as the quota warning and keeps running),
and there are no files to write.  Nothing here reaches the real OS.  A workload's
processes share one nice value: renicing one of them renices the workload.
A workload that runs to the scenario's end is still running at its last instant, so
the table published at the end shows the workload as it ran.
"""

from __future__ import annotations

import errno
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fairshare.collect import ProcessSample, Sample
from fairshare.enforce.base import safe_name
from fairshare.sim import SimMachine, Workload, enforcer_weights, workload_weights
from fairshare.tree import ShareTree

#: Fake pids start here: workload i's k-th process is PID_BASE + 1000 * i + k.  Above
#: Linux's largest pid_max (2**22), so no real process could ever have one of them.
PID_BASE = 5_000_000
#: Signals that stop a simulated process (their default action, never caught).
STOPPING_SIGNALS = frozenset(
    {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
)


class SimClock:
    """Simulated seconds: `sleep` advances the clock at once; nothing really waits."""

    def __init__(self, epoch: float) -> None:
        self.epoch = epoch  # the wall-clock time simulated second 0 stands for
        self.now = 0.0  # simulated seconds since the start

    def time(self) -> float:
        return self.epoch + self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float, wake: threading.Event) -> None:
        if not wake.is_set():
            self.now += max(seconds, 0.0)


@dataclass
class SimWorld:
    """The simulated machine, its workloads and the weights the enforcer set."""

    machine: SimMachine
    clock: SimClock
    workloads: list[Workload]
    uids: list[int]  # per workload: the uid its processes run as
    model: str = "cgroup"  # weight model: "cgroup", "nice" or "none"
    # lnode -> (per-process weight, idle class, runnable processes) the enforcer set
    weight: dict[str, tuple[float, bool, int]] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)  # per workload: its lnode's name
    end: float = float("inf")  # the scenario's last second: its workloads still run then
    killed: set[int] = field(default_factory=set)  # pids stopped by a signal
    nice: dict[int, int] = field(default_factory=dict)  # workload -> nice, if reniced
    signals: list[tuple[int, int]] = field(default_factory=list)  # (pid, signal) received

    def pids(self, i: int) -> list[int]:
        """The fake pids of workload `i`'s processes that are still alive."""
        every = (PID_BASE + 1000 * i + k for k in range(self.workloads[i].procs))
        return [p for p in every if p not in self.killed]

    def workload_of(self, pid: int) -> int:
        """The workload of live process `pid`; ProcessLookupError if there is none."""
        i, k = divmod(pid - PID_BASE, 1000)
        if not (0 <= i < len(self.workloads) and 0 <= k < self.workloads[i].procs):
            raise ProcessLookupError(errno.ESRCH, "no such simulated process", pid)
        if pid in self.killed or not self.running(self.clock.now)[i]:
            raise ProcessLookupError(errno.ESRCH, "no such simulated process", pid)
        return i

    def nice_of(self, i: int) -> int:
        """The nice value workload `i`'s processes run at."""
        return self.nice.get(i, self.workloads[i].nice)

    def running(self, t: float) -> np.ndarray:
        """Which workloads run at simulated second `t` (one that runs to the scenario's
        end is still running at its last instant)."""
        return np.array(
            [w.start <= t < w.stop or (w.start <= t <= self.end <= w.stop) for w in self.workloads],
            dtype=bool,
        )

    def set_weights(
        self, names: list[str], e_share: np.ndarray, background: np.ndarray, nrun: np.ndarray
    ) -> None:
        """Record the per-process weight and idle class of each lnode (the enforcer's job)."""
        w, idle = enforcer_weights(self.model, e_share, background, nrun)
        self.weight = {
            n: (float(a), bool(b), int(r)) for n, a, b, r in zip(names, w, idle, nrun, strict=True)
        }

    def run(self, start: float, seconds: float) -> np.ndarray:
        """CPU seconds each workload's processes got (total per workload) over
        `seconds` from simulated second `start`."""
        n = len(self.workloads)
        if seconds <= 0 or n == 0:
            return np.zeros(n)
        on = self.running(start)
        count = np.array([len(self.pids(i)) if on[i] else 0 for i in range(n)], dtype=float)
        demand = np.array([w.demand for w in self.workloads])
        runnable = count * (demand > 0)
        nice = np.array([self.nice_of(i) for i in range(n)], dtype=np.int64)
        lnodes = sorted(set(self.names))
        col = np.array([lnodes.index(name) for name in self.names], dtype=np.int64)
        # An lnode the enforcer set no weight for runs as on plain Linux.
        plain = "none" if self.model != "nice" else "nice"
        top = (88761.0, False, 0)  # nice model: no enforcer nice, only the processes' own
        default = top if self.model == "nice" else (1.0, False, 0)
        ws = [self.weight.get(name, default) for name in lnodes]
        set_ = np.array([name in self.weight for name in lnodes], dtype=bool)
        w_l = np.array([x[0] for x in ws])
        idle_l = np.array([x[1] for x in ws], dtype=bool)
        nrun_l = np.array([x[2] for x in ws], dtype=float)
        weight, idle = workload_weights(self.model, w_l, idle_l, nrun_l, col, count, runnable, nice)
        if not set_.all():
            plain_w, _ = workload_weights(plain, w_l, idle_l, nrun_l, col, count, runnable, nice)
            weight = np.where(set_[col], weight, plain_w)
        cap = count * np.minimum(demand, 1.0)
        return self.machine.share(count, cap, weight, idle) * seconds


class SimCollector:
    """Samples the simulated machine: runs it since the last sample, reports per process.

    Under the cgroup model each lnode's CPU also comes as its cgroup's counter
    (`Sample.groups`, keyed like the real cgroup enforcers' directories), with its
    processes marked as counted there, as the real collector reports them."""

    def __init__(self, world: SimWorld) -> None:
        self.world = world
        self._last: float | None = None

    def sample(self, io: bool = True, syscalls: bool = True, mem: bool = True) -> Sample:
        """The workloads' processes with the CPU the machine gave them since the last call."""
        w = self.world
        now = w.clock.now
        elapsed = 0.0 if self._last is None else now - self._last
        got = w.run(self._last, elapsed) if self._last is not None else np.zeros(len(w.workloads))
        self._last = now
        on = w.running(now)
        procs: list[ProcessSample] = []
        groups: dict[str, float] = {}
        counted = w.model == "cgroup"
        for i, wl in enumerate(w.workloads):
            group = safe_name(w.names[i]) if counted else ""
            if counted:
                groups[group] = groups.get(group, 0.0) + float(got[i])
            pids = w.pids(i)
            if not pids or (not on[i] and got[i] == 0):
                continue
            per = got[i] / len(pids)
            for pid in pids:
                procs.append(
                    ProcessSample(
                        pid=pid,
                        create_time=w.clock.epoch + wl.start,
                        uid=w.uids[i],
                        cpu=per,
                        runnable=bool(on[i] and wl.demand > 0),
                        group=group,
                        nice=w.nice_of(i),
                    )
                )
        idle = max(w.machine.cpus * elapsed - float(got.sum()), 0.0)
        return Sample(
            time=w.clock.time(), elapsed=elapsed, processes=procs, idle=idle, groups=groups
        )


def world_for(
    tree: ShareTree,
    workloads: list[Workload],
    cpus: float,
    model: str,
    clock: SimClock,
    end: float = float("inf"),
) -> SimWorld:
    """A SimWorld running `workloads` (lnode names of `tree`) on `cpus` CPUs until
    simulated second `end` (the scenario's duration)."""
    uids = [int(tree.ids[tree.node(wl.name)]) for wl in workloads]
    return SimWorld(
        machine=SimMachine(cpus),
        clock=clock,
        workloads=workloads,
        uids=uids,
        model=model,
        names=[wl.name for wl in workloads],
        end=end,
    )


class SimOs:
    """The simulated machine's OsActions: every change lands in `world`, none on the
    real OS (see the module docstring)."""

    name = "simulated"

    def __init__(self, world: SimWorld) -> None:
        self.world = world

    def signal(self, pid: int, sig: int) -> None:
        """Deliver `sig` to simulated process `pid`: the stopping signals stop it."""
        self.world.workload_of(pid)
        self.world.signals.append((pid, int(sig)))
        if sig in STOPPING_SIGNALS:
            self.world.killed.add(pid)

    def get_nice(self, pid: int) -> int:
        """The nice of simulated process `pid`."""
        return self.world.nice_of(self.world.workload_of(pid))

    def set_nice(self, pid: int, nice: int) -> None:
        """Set the nice of `pid`'s workload (its processes share one nice)."""
        self.world.nice[self.world.workload_of(pid)] = int(nice)

    def write_file(self, path: Path, text: str) -> None:
        """The simulated machine has no kernel files: always fails."""
        raise OSError(errno.EROFS, "the simulated machine has no kernel files", str(path))

    def mkdir(self, path: Path) -> None:
        """Always fails (no files)."""
        raise OSError(errno.EROFS, "the simulated machine has no kernel files", str(path))

    def rmdir(self, path: Path) -> None:
        """Always fails (no files)."""
        raise OSError(errno.EROFS, "the simulated machine has no kernel files", str(path))
