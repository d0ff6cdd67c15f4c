"""The simulated machine: N CPUs shared by weight, its processes, clock and OS actions.

`SimMachine` shares CPU among runnable processes in proportion to their weights,
each process using at most one CPU (and at most its `demand`); processes of the
idle class run only on CPU the others leave.  The weights come from the same
mappings the daemon's enforcers use (fairshare.enforce.mapping):

- "cgroup": cgroup v2 as the cgroup enforcers nest it (fairshare.enforce.mapping): a
  cgroup per group and per lnode, MOUNT/fairshare/+<group>/<lnode>, each weighted among
  its siblings by `cgroup2_tree_weights`.  The CPUs are split among sibling cgroups by
  weight down the tree, each cgroup capped at what its processes can use, what one
  leaves going to its siblings first (`cgroup_tree_share`: hierarchical water-filling,
  fairshare.core.maxmin.maxmin_allocation with the weights as shares); inside an lnode
  cgroup its processes share by their nice weights.  Background lnodes are cpu.idle
  cgroups (idle class): they run only on what the tree leaves.
- "slices": systemd's user slices, one cgroup per lnode side by side (systemd owns the
  tree, so nothing nests): each weighted by `cgroup2_weights` of its flat share
  (fairshare.core.delivery), its processes sharing it by nice weight.
- "nice": each process weighs NICE_TO_WEIGHT[nice + 20] with nice from `nice_values` of
  its lnode's flat share (background lnodes get nice 19, as the nice enforcer sets them).

The flat models ("slices", "nice") are driven by the flat shares the cycle works out
so that side by side the lnodes get what nested cgroups would give them.
- "none": weight 1 per process (Linux without fair share).

A `Workload` is `procs` identical processes of one lnode.  `SimWorld` is the machine
running a scenario's workloads as processes the daemon can see (fixed fake pids, the
uid of the lnode they run for), with the weights its enforcer last set; `SimClock` is
its clock (sleeping advances it at once) and `SimOs` its OsActions (fairshare.enforce.actions):
signals and nice values act on the world's processes (a simulated program handles no
signal: every signal whose Linux default ends a process, SIGXCPU included, stops one;
SIGURG, SIGWINCH and the like leave it running), messages to its terminals are kept in
`SimWorld.messages`, and there are no files to write.  Nothing here reaches the real OS.  A
workload's processes share one nice value: renicing one of them renices the workload.
A workload that runs to the scenario's end is still running at its last instant, so
the table published at the end shows the workload as it ran.

This is the bottom of the simulator: the simulated collector (fairshare.sim.collector)
and enforcer (fairshare.sim.enforcer) import it, and it imports neither them nor the
scenario loader (fairshare.sim.scenario) nor the runs (fairshare.sim.run).
"""

from __future__ import annotations

import errno
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fairshare.core.maxmin import maxmin_allocation
from fairshare.enforce.mapping import (
    NICE_TO_WEIGHT,
    CgroupTree,
    cgroup2_tree_weights,
    cgroup2_weights,
    nice_values,
    targets_tree,
)

if TYPE_CHECKING:
    from fairshare.core.tree import ShareTree
    from fairshare.enforce.base import LnodeTarget

ENFORCERS = ("cgroup", "slices", "nice", "none")  # the keys of WEIGHT_MODELS


def water_fill(capacity: float, weight: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """CPUs per entry: `capacity` shared in proportion to `weight`, no entry above `cap`.

    What a capped entry cannot use goes to the others (max-min fair by weight).
    Entries with weight 0 get nothing.  Returns CPUs per entry (sums to at most
    `capacity`).
    """
    out = np.zeros(len(weight))
    pos = (weight > 0) & (cap > 0)
    if capacity <= 0 or not pos.any():
        return out
    w, c = weight[pos], cap[pos]
    if c.sum() <= capacity:
        out[pos] = c
        return out
    share = w * (capacity / w.sum())
    if (share <= c).all():  # nobody capped: the common case
        out[pos] = share
        return out
    ratio = c / w
    order = np.argsort(ratio)
    rs, ws, cs = ratio[order], w[order], c[order]
    # lam[j]: the CPUs per unit weight if the j entries with the smallest ratio are capped.
    lam = (capacity - np.concatenate(([0.0], np.cumsum(cs)[:-1]))) / (
        ws.sum() - np.concatenate(([0.0], np.cumsum(ws)[:-1]))
    )
    j = int(np.argmax(rs >= lam))
    out[pos] = np.minimum(c, lam[j] * w)
    return out


@dataclass
class SimMachine:
    """N CPUs shared by weight; each process at most one CPU; idle class on leftovers.

    Processes come in groups of identical processes (one group per workload):
    `count` processes, each of weight `weight`, each using at most `demand` CPUs
    (<= 1), `idle` for the idle class.
    """

    cpus: float

    def run(
        self, count: np.ndarray, weight: np.ndarray, demand: np.ndarray, idle: np.ndarray
    ) -> np.ndarray:
        """CPUs each group's processes receive in total (group order; 0 for count 0).

        Normal processes share the CPUs by weight, capped at min(1, demand) each;
        idle-class processes share what is left the same way.
        """
        count = np.asarray(count, dtype=float)
        cap = count * np.minimum(np.asarray(demand, dtype=float), 1.0)
        weight = count * np.asarray(weight, dtype=float)
        return self.share(count, cap, weight, np.asarray(idle, dtype=bool))

    def share(
        self, count: np.ndarray, cap: np.ndarray, weight: np.ndarray, idle: np.ndarray
    ) -> np.ndarray:
        """`run` with each group's totals given: `cap` (CPUs its processes can use in all)
        and `weight` (the sum of its processes' weights); `idle` a boolean array."""
        if not idle.any():
            return water_fill(self.cpus, weight, cap)
        got = water_fill(self.cpus, np.where(idle, 0.0, weight), np.where(idle, 0.0, cap))
        left = self.cpus - got.sum()
        if left > 1e-12:
            # cpu.idle cgroups still share by weight among themselves: equal per process.
            got += water_fill(left, np.where(idle, count, 0.0), np.where(idle, cap, 0.0))
        return got


def cgroup_tree_share(
    cpus: float,
    tree: CgroupTree,
    weight: np.ndarray,
    leaf: np.ndarray,
    count: np.ndarray,
    cap: np.ndarray,
    nice_weight: np.ndarray,
    idle: np.ndarray,
) -> np.ndarray:
    """CPUs each workload receives under nested cgroups (the "cgroup" model).

    `weight`: every cgroup of `tree`'s weight among its siblings; per workload, `leaf`
    its lnode cgroup (a position in `tree`), `count` its processes, `cap` the CPUs
    they can use in all, `nice_weight` the sum of its runnable processes' nice weights
    and `idle` its lnode's idle class.  The normal cgroups share the CPUs down the tree by weight,
    each capped at its processes' caps, what one leaves going to its siblings first
    (maxmin_allocation); inside an lnode cgroup its workloads share by nice weight; the
    idle-class workloads share what is left, equally per process as flat cgroups do.
    """
    idle = np.asarray(idle, dtype=bool)
    n = tree.index.n
    normal_cap = np.where(idle, 0.0, cap)
    leaf_cap = np.bincount(leaf, weights=normal_cap, minlength=n)
    alloc = maxmin_allocation(tree.index, np.asarray(weight, dtype=float), leaf_cap, cpus)
    got = np.zeros(len(leaf))
    busy = normal_cap > 0
    many = np.bincount(leaf[busy], minlength=n) > 1
    one = busy & ~many[leaf]
    got[one] = alloc[leaf[one]]
    for cg in np.flatnonzero(many).tolist():
        sel = busy & (leaf == cg)
        got[sel] = water_fill(alloc[cg], nice_weight[sel], normal_cap[sel])
    left = cpus - float(alloc[0])
    if idle.any() and left > 1e-12:
        got += water_fill(left, np.where(idle, count, 0.0), np.where(idle, cap, 0.0))
    return got


def cgroup_model(e_share, background, nrun) -> tuple[np.ndarray, np.ndarray]:
    """Flat cgroups, one per lnode (systemd's user slices; the cgroup model's lnodes
    outside the nested tree): its cpu.weight split over its runnable processes;
    background lnodes are cpu.idle cgroups.  Returns (per-process weight, idle class)."""
    w = cgroup2_weights(e_share, background).astype(float)
    return w / np.maximum(nrun, 1), np.asarray(background, dtype=bool)


def nice_model(e_share, background, nrun) -> tuple[np.ndarray, np.ndarray]:
    """Nice values: each process weighs NICE_TO_WEIGHT[nice + 20] (background: nice 19,
    still in the normal class).  Returns (per-process weight, idle class)."""
    nice = nice_values(e_share, nrun, background)
    return NICE_TO_WEIGHT[nice + 20].astype(float), np.zeros(len(nice), dtype=bool)


def none_model(e_share, background, nrun) -> tuple[np.ndarray, np.ndarray]:
    """Linux without fair share: every process weighs 1.  Returns (weight, idle class)."""
    n = len(e_share)
    return np.ones(n), np.zeros(n, dtype=bool)


#: The weight model of each enforcer the simulator knows.
WEIGHT_MODELS = {
    "cgroup": cgroup_model,
    "slices": cgroup_model,
    "nice": nice_model,
    "none": none_model,
}


def enforcer_weights(
    enforcer: str,
    e_share: np.ndarray,
    background: np.ndarray,
    nrun: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(per-process weight, idle class) per lnode for `enforcer` (see WEIGHT_MODELS).

    `e_share`, `background` and `nrun` are over the lnodes that have processes.
    """
    model = WEIGHT_MODELS.get(enforcer)
    if model is None:
        raise ValueError(f"enforcer must be one of {ENFORCERS}, not {enforcer!r}")
    return model(e_share, background, nrun)


def workload_weights(
    enforcer: str,
    w_lnode: np.ndarray,
    idle_lnode: np.ndarray,
    nrun_lnode: np.ndarray,
    col: np.ndarray,
    count: np.ndarray,
    runnable: np.ndarray,
    nice: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(total weight, idle class) of each workload's `count` processes at nice `nice`.

    `w_lnode`, `idle_lnode`, `nrun_lnode` are `enforcer_weights`' per-process weight,
    idle class and runnable count per lnode; `col` is each workload's lnode, `runnable`
    how many of its processes are runnable.  A process's own nice (the one it was
    started with, or the UDB's the daemon applied) acts as on Linux: under "nice" the
    process runs at the larger of the enforcer's nice and its own (the smaller weight);
    under "cgroup" and "slices" it splits its lnode's cgroup weight with the lnode's other runnable
    processes by nice weight; under "none" it weighs NICE_TO_WEIGHT[nice] / 1024.
    """
    own = NICE_TO_WEIGHT[np.asarray(nice, dtype=np.int64) + 20].astype(float)
    w = np.asarray(w_lnode, dtype=float)[col]
    if enforcer == "nice":
        per = np.minimum(w, own)
    elif enforcer in ("cgroup", "slices"):
        total_w = w * np.maximum(np.asarray(nrun_lnode, dtype=float)[col], 1.0)
        lnode_nw = np.bincount(col, weights=runnable * own, minlength=len(w_lnode))[col]
        per = np.where(lnode_nw > 0, total_w * own / np.where(lnode_nw > 0, lnode_nw, 1.0), w)
    else:
        per = w * own / NICE_TO_WEIGHT[20]
    return count * per, np.asarray(idle_lnode, dtype=bool)[col]


@dataclass(frozen=True)
class Workload:
    """`procs` processes of lnode `name` from `start` to `stop` (s), each wanting `demand`
    CPUs (1 = CPU-bound, 0 = attached but never runnable), started at nice `nice`."""

    name: str
    procs: int
    start: float
    stop: float
    demand: float = 1.0
    host: str = ""  # in a site scenario, the host it runs on
    nice: int = 0


#: Fake pids start here: workload i's k-th process is PID_BASE + 1000 * i + k.  Above
#: Linux's largest pid_max (2**22), so no real process could ever have one of them.
PID_BASE = 5_000_000
#: Signals that stop a simulated process (their default action, never caught).
#: The signals whose Linux default action is to ignore them or to stop (not end) the
#: process (signal(7)); a simulated program handles no signal, so every other signal
#: ends it, SIGXCPU included (it was the quota warning once, and killed the jobs).
NOT_ENDING_SIGNALS = frozenset(
    {signal.SIGCHLD, signal.SIGCONT, signal.SIGURG, signal.SIGWINCH}
    | {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}
)
STOPPING_SIGNALS = frozenset(s for s in signal.Signals if s not in NOT_ENDING_SIGNALS)


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
    messages: list[tuple[tuple[int, ...], str]] = field(default_factory=list)  # (pids, text)
    # cgroup model: lnode -> its cgroup path, and every cgroup's weight among its siblings
    paths: dict[str, tuple[str, ...]] = field(default_factory=dict)
    cg_weight: dict[tuple[str, ...], float] = field(default_factory=dict)

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

    def set_tree(self, targets: Sequence[LnodeTarget]) -> None:
        """Record the nested cgroups of `targets` and their weights (the cgroup model:
        fairshare.enforce.mapping.targets_tree, as the cgroup enforcers make them)."""
        tree, paths, e, bg = targets_tree(targets)
        w = cgroup2_tree_weights(tree, e, bg)
        self.paths = {t.name: p for t, p in zip(targets, paths, strict=True)}
        self.cg_weight = dict(zip(tree.keys, w.astype(float).tolist(), strict=True))

    def _run_nested(self, count, cap, runnable, nice) -> np.ndarray:
        """CPUs per workload under the nested cgroups last set (`cgroup_tree_share`); an
        lnode with none runs beside the fair-share tree at weight 1 per process."""
        names = self.names
        plain = {n: ("=" + n,) for n in names if n not in self.paths}
        paths = [self.paths.get(n) or plain[n] for n in names]
        tree = CgroupTree.of(paths)
        w = np.array([self.cg_weight.get(k, 1.0) for k in tree.keys])
        leaf = np.array([tree.position[p] for p in paths], dtype=np.int64)
        for n, p in plain.items():
            w[tree.position[p]] = sum(c for c, m in zip(count, names, strict=True) if m == n)
        own = NICE_TO_WEIGHT[nice + 20] * runnable
        idle = np.array([self.weight.get(n, (0, False, 0))[1] for n in names], dtype=bool)
        return cgroup_tree_share(self.machine.cpus, tree, w, leaf, count, cap, own, idle)

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
        if self.model == "cgroup" and self.paths:
            cap = count * np.minimum(demand, 1.0)
            return self._run_nested(count, cap, runnable, nice) * seconds
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

    def tell(self, pids: Sequence[int], text: str) -> list[str]:
        """Keep `text` as written to the terminal of simulated processes `pids` (one
        terminal, "sim")."""
        for pid in pids:
            self.world.workload_of(pid)
        self.world.messages.append((tuple(pids), text))
        return ["sim"]

    def started(self, pid: int) -> float:
        """When simulated process `pid` started: its workload's start (epoch s), as the
        simulator's collector (fairshare.sim.collector) reports it."""
        return self.world.clock.epoch + self.world.workloads[self.world.workload_of(pid)].start

    def get_nice(self, pid: int) -> int:
        """The nice of simulated process `pid`."""
        return self.world.nice_of(self.world.workload_of(pid))

    def set_nice(self, pid: int, nice: int) -> None:
        """Set the nice of `pid`'s workload (its processes share one nice)."""
        self.world.nice[self.world.workload_of(pid)] = int(nice)

    def set_slice(self, pid: int, nice: int, slice_ns: int) -> None:
        """Set the nice of `pid`'s workload; the simulated machine shares CPU by weight
        alone, so it has no time slices to change."""
        self.set_nice(pid, nice)

    def write_file(self, path: Path, text: str) -> None:
        """The simulated machine has no kernel files: always fails."""
        raise OSError(errno.EROFS, "the simulated machine has no kernel files", str(path))

    def mkdir(self, path: Path) -> None:
        """Always fails (no files)."""
        raise OSError(errno.EROFS, "the simulated machine has no kernel files", str(path))

    def rmdir(self, path: Path) -> None:
        """Always fails (no files)."""
        raise OSError(errno.EROFS, "the simulated machine has no kernel files", str(path))
