"""The simulator as a collector: `shrdaemon --simulate` runs the daemon's own loop on
fairshare.sim.SimMachine instead of the real machine.

`SimWorld` holds the simulated machine, the scenario's workloads, the clock and
the weights the enforcer last set.  Each workload's processes get fixed fake
pids and the uid of the lnode they run for (a user's uid, or in Share by
Account an account's number, which the daemon's `account_of` hook maps
directly).  When the daemon samples, the machine first runs for the simulated
seconds since the previous sample with the weights of the last `apply`
(fairshare.enforce.sim.SimEnforcer), using the same weight models as shrsim.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from fairshare.collect import ProcessSample, Sample
from fairshare.enforce.base import safe_name
from fairshare.sim import SimMachine, Workload, enforcer_weights
from fairshare.tree import ShareTree

#: Fake pids start here: workload i's k-th process is PID_BASE + 1000 * i + k.
PID_BASE = 1_000_000


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
    weight: dict[str, tuple[float, bool]] = field(default_factory=dict)  # lnode -> (w, idle)
    names: list[str] = field(default_factory=list)  # per workload: its lnode's name

    def pids(self, i: int) -> list[int]:
        """The fake pids of workload `i`'s processes."""
        return [PID_BASE + 1000 * i + k for k in range(self.workloads[i].procs)]

    def running(self, t: float) -> np.ndarray:
        """Which workloads run at simulated second `t`."""
        return np.array([w.start <= t < w.stop for w in self.workloads], dtype=bool)

    def set_weights(
        self, names: list[str], e_share: np.ndarray, background: np.ndarray, nrun: np.ndarray
    ) -> None:
        """Record the per-process weight and idle class of each lnode (the enforcer's job)."""
        w, idle = enforcer_weights(self.model, e_share, background, nrun)
        self.weight = {n: (float(a), bool(b)) for n, a, b in zip(names, w, idle, strict=True)}

    def run(self, start: float, seconds: float) -> np.ndarray:
        """CPU seconds each workload's processes got (total per workload) over
        `seconds` from simulated second `start`."""
        n = len(self.workloads)
        if seconds <= 0 or n == 0:
            return np.zeros(n)
        on = self.running(start)
        count = np.array([w.procs if on[i] else 0 for i, w in enumerate(self.workloads)])
        demand = np.array([w.demand for w in self.workloads])
        default = (1.0, False) if self.model != "nice" else (1024.0, False)
        ws = [self.weight.get(name, default) for name in self.names]
        weight = np.array([x[0] for x in ws])
        idle = np.array([x[1] for x in ws], dtype=bool)
        return self.machine.run(count, weight, demand, idle) * seconds


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
            if not on[i] and got[i] == 0:
                continue
            per = got[i] / wl.procs
            for pid in w.pids(i):
                procs.append(
                    ProcessSample(
                        pid=pid,
                        create_time=w.clock.epoch + wl.start,
                        uid=w.uids[i],
                        cpu=per,
                        runnable=bool(on[i] and wl.demand > 0),
                        group=group,
                    )
                )
        idle = max(w.machine.cpus * elapsed - float(got.sum()), 0.0)
        return Sample(
            time=w.clock.time(), elapsed=elapsed, processes=procs, idle=idle, groups=groups
        )


def world_for(
    tree: ShareTree, workloads: list[Workload], cpus: float, model: str, clock: SimClock
) -> SimWorld:
    """A SimWorld running `workloads` (lnode names of `tree`) on `cpus` CPUs."""
    uids = [int(tree.ids[tree.node(wl.name)]) for wl in workloads]
    return SimWorld(
        machine=SimMachine(cpus),
        clock=clock,
        workloads=workloads,
        uids=uids,
        model=model,
        names=[wl.name for wl in workloads],
    )
