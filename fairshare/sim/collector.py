"""The simulator as a collector: `shrdaemon --simulate` runs the daemon's own loop on
the simulated machine (fairshare.sim.machine.SimWorld) instead of the real one.

When the daemon samples, the machine first runs for the simulated seconds since the
previous sample with the weights of the last `apply` (fairshare.sim.enforcer.SimEnforcer),
using the same weight models as shrsim; each workload's processes are then reported
with their fake pids and the uid of the lnode they run for (a user's uid, or in Share
by Account an account's number, which the daemon's `account_of` hook maps directly).
"""

from __future__ import annotations

import numpy as np

from fairshare.collect import ProcessSample, Sample
from fairshare.enforce.base import safe_name
from fairshare.sim.machine import SimWorld


class SimCollector:
    """Samples the simulated machine: runs it since the last sample, reports per process.

    Under the cgroup model each lnode's CPU also comes as its cgroup's counter
    (`Sample.groups`, keyed like the real cgroup enforcers' directories), with its
    processes marked as counted there, as the real collector reports them."""

    def __init__(self, world: SimWorld) -> None:
        self.world = world
        self._last: float | None = None

    def sample(
        self, io: bool = True, syscalls: bool = True, mem: bool = True, placed: bool = False
    ) -> Sample:
        """The workloads' processes with the CPU the machine gave them since the last call."""
        w = self.world
        now = w.clock.now
        elapsed = 0.0 if self._last is None else now - self._last
        n = len(w.workloads)
        got = w.run(self._last, elapsed) if self._last is not None else np.zeros(n)
        ran = w.running(self._last) if self._last is not None else np.zeros(n, dtype=bool)
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
            want = min(wl.demand, 1.0) * elapsed if ran[i] else 0.0
            for pid in pids:
                procs.append(
                    ProcessSample(
                        pid=pid,
                        create_time=w.clock.epoch + wl.start,
                        uid=w.uids[i],
                        cpu=per,
                        want=want,
                        runnable=bool(on[i] and wl.demand > 0),
                        group=group,
                        nice=w.nice_of(i),
                    )
                )
        idle = max(w.machine.cpus * elapsed - float(got.sum()), 0.0)
        return Sample(
            time=w.clock.time(), elapsed=elapsed, processes=procs, idle=idle, groups=groups
        )
