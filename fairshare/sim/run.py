"""shrsim's run: the daemon's own steps (fairshare.core.steps) on the simulated machine.

`run_scenario` takes a loaded scenario (fairshare.sim.scenario) and returns what it
measured (fairshare.sim.record.SimResult).  Each cycle of `delta` simulated seconds, on
each host:

1. where workloads start or stop, lnodes come and go as in the daemon: a leaf that got
   processes is activated with its stored usage aged to now
   (fairshare.core.steps.activate_stored), a leaf whose processes have all gone is released
   (fairshare.core.lnode.release) and its increment added to the stored usage
   (fairshare.core.lnode.add_usage, as fairshare.store.published adds it to the UDB); the table is
   then re-planned at once (fairshare.core.steps.advance over 0 s) so newcomers have an
   e_share before the machine runs;
2. the enforcer's weights from the last cycle's e_share decide how the machine shares
   its CPUs for `delta` seconds (fairshare.sim.machine, the enforcers' own mappings);
3. that CPU, as each lnode's charges, goes through fairshare.core.steps.advance.

Beside it the run works out the fair target each cycle: the hierarchical max-min
allocation of the host's CPUs (fairshare.core.maxmin) for the demand its live
processes have then (`procs x min(demand, 1)` per workload, summed per lnode; a
background or zero-share lnode's too), with the idle-share rule of the constants.
It changes only where processes start or stop, so it is worked out there.

A site (a scenario's `hosts` table) runs every host so; every write-back interval
each adds what its lnodes accrued to the shared stored usage and, with GLOBALUSAGE,
takes the site-wide usage and updates its site factors (fairshare.core.steps.refresh_site)
from a view of the other hosts built as fairshare.store.published builds it from the UDB.

Why not run fairshare.daemon.daemon.Daemon itself, as `shrdaemon --simulate` does
(fairshare.sim.daemon)?  Speed: the daemon's cycle reads the constants and publishes
the lnode table through the UDB and reports every process of every workload (3.5 ms
of CPU a cycle on the site of tests/bench/bench_shrsim.py with 17 lnodes active,
measured in November 2026: some 9 minutes for its week), while that week's 151,200
cycles have to run in under 60 s (under 400 us a cycle).  So the run keeps
the stored usage in memory, charges each lnode the CPU the machine gave it (no
per-process samples), and calls the daemon's table steps directly.  Where it still
differs from the daemon: an lnode is released as soon as its processes have gone
(the daemon keeps it until the next write-back); newcomers are planned at once (the
daemon's get their e_share at its next cycle); CPU is charged as CPU seconds (the
daemon grades a niced process's ticks, fairshare.core.nicetables); on one machine
GLOBALUSAGE has no other host and no site factors are applied.

`run_scenario(sc, consts=...)` runs one scenario under other constants (e.g. another
policy): comparing policies is a loop over it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable

import numpy as np

from fairshare.core.consts import GLOBALUSAGE, Consts
from fairshare.core.cycle import Consumption
from fairshare.core.grid import GridState
from fairshare.core.lnode import WriteBack, accrued, add_usage, aged_usage, new_table, release
from fairshare.core.maxmin import maxmin_allocation
from fairshare.core.site import SiteState, SiteView
from fairshare.core.split import machine_shares
from fairshare.core.steps import activate_stored, advance, refresh_site
from fairshare.core.tree import ShareTree, tree_index
from fairshare.enforce.mapping import NICE_TO_WEIGHT, CgroupTree, cgroup2_tree_weights, cgroup_path
from fairshare.enforce.renice import user_floor
from fairshare.sim.machine import (
    ENFORCERS,
    SimMachine,
    Workload,
    cgroup_tree_share,
    enforcer_weights,
    workload_weights,
)
from fairshare.sim.record import Recorder, SimResult
from fairshare.sim.scenario import Scenario

#: The stored usage of the entries, as the UDB holds it: node -> (shusage, shextime).
Stored = dict[int, tuple[float, float]]


def workload_nice(sc: Scenario, workloads: list[Workload], enforcer: str) -> np.ndarray:
    """The nice each workload's processes run at: its own, raised to its lnode's UDB nice
    as the daemon applies it (fairshare.enforce.renice.user_floor) unless `enforcer` is
    none, which changes nothing."""
    return np.array(
        [
            w.nice
            if enforcer == "none"
            else user_floor(w.nice, sc.nice.get(sc.tree.node(w.name), 0))
            for w in workloads
        ],
        dtype=np.int64,
    )


def fair_cpus(sc: Scenario, lnodes: np.ndarray, want: np.ndarray, cpus: float) -> np.ndarray:
    """The fair target of `lnodes` (tree nodes, distinct) when they want `want` CPUs
    each on `cpus` CPUs: the hierarchical max-min allocation over the scenario's share
    tree (fairshare.core.maxmin; with idleshare even, Elmroth and Gardfjall's rule), in
    CPUs per lnode."""
    tree = sc.tree
    demand = np.zeros(tree.size)
    demand[lnodes] = want
    even = sc.consts.idleshare == "even"
    return maxmin_allocation(tree.index, tree.shares, demand, cpus, even=even)[lnodes]


class Host:
    """One simulated machine running the daemon's steps: its workloads as arrays (a
    workload's column is its lnode's index in `lnodes`), its lnode table and, on a host
    of a site, its GLOBALUSAGE state."""

    def __init__(
        self,
        sc: Scenario,
        workloads: list[Workload],
        cpus: float,
        enforcer: str,
        name: str = "",
        site: bool = False,
    ) -> None:
        tree, d = sc.tree, sc.delta
        self.name, self.cpus, self.enforcer = name, cpus, enforcer
        self.lnodes = sorted({tree.node(w.name) for w in workloads})
        self.arr = np.array(self.lnodes, dtype=np.int64)
        self.col = np.array(
            [self.lnodes.index(tree.node(w.name)) for w in workloads], dtype=np.int64
        )
        self.procs = np.array([w.procs for w in workloads], dtype=float)
        self.runnable = np.array([w.procs if w.demand > 0 else 0 for w in workloads], dtype=float)
        self.demand = np.array([w.demand for w in workloads])
        self.nice = workload_nice(sc, workloads, enforcer)
        self.start = np.array([math.ceil(w.start / d - 1e-9) for w in workloads], dtype=np.int64)
        self.stop = np.array([math.ceil(w.stop / d - 1e-9) for w in workloads], dtype=np.int64)
        self.events = set(self.start.tolist()) | set(self.stop.tolist())
        self.machine = SimMachine(cpus)
        self.table = new_table(tree)
        self.cons = Consumption.zeros(tree.size)  # its cpu: CPU s per node, last cycle
        self.cons.cpus, self.cons.want = cpus, np.zeros(tree.size)  # want: CPU s, last cycle
        self.site = SiteState.new(tree.size) if site else None
        self.grid: GridState | None = None  # a site of a grid: fairshare.sim.grid sets it
        nl = len(self.lnodes)
        self.present = np.zeros(nl, dtype=bool)
        self.nrun = np.zeros(nl)
        self.count = self.cap = self.run_w = np.zeros(len(workloads))
        self.cpu_l = np.zeros(nl)  # CPU s per lnode over the last cycle
        self.want_l = np.zeros(nl)  # CPUs each lnode's live processes want
        self.fair_l = np.zeros(nl)  # CPUs the fair target gives each lnode
        if enforcer == "cgroup":
            self._nest(tree)

    def _nest(self, tree: ShareTree) -> None:
        """The nested cgroups the cgroup enforcers make for this host's lnodes
        (fairshare.enforce.mapping.cgroup_path): `cg` their tree, `cg_node` the share
        tree's node of each cgroup, `cg_leaf` each workload's lnode cgroup and
        `cg_lnode` each lnode's."""
        paths, node_of = [], {(): 0}
        for n in self.lnodes:
            chain = tree.ancestors(n)[-2::-1]  # groups above n, top first
            path = cgroup_path([tree.names[g] for g in chain], tree.names[n])
            paths.append(path)
            node_of[path] = n
            for k, g in enumerate(chain[: len(path) - 1]):
                node_of.setdefault(path[: k + 1], g)
        self.cg = CgroupTree.of(paths)
        self.cg_node = np.array([node_of[k] for k in self.cg.keys], dtype=np.int64)
        self.cg_lnode = np.array([self.cg.position[p] for p in paths], dtype=np.int64)
        self.cg_leaf = self.cg_lnode[self.col]

    def come_and_go(self, sc: Scenario, step: int, stored: Stored, written: list) -> None:
        """At cycle `step`, processes start or stop: lnodes are activated from `stored`
        or released (their increments appended to `written`), then re-planned."""
        now = step * sc.delta
        running = (self.start <= step) & (step < self.stop)
        self.count = self.procs * running
        self.run_w = self.runnable * running
        self.cap = self.count * np.minimum(self.demand, 1.0)
        nl = len(self.lnodes)
        refs = np.bincount(self.col, weights=self.count, minlength=nl)
        self.nrun = np.bincount(self.col, weights=self.run_w, minlength=nl)
        self.want_l = np.bincount(self.col, weights=self.cap, minlength=nl)
        self.fair_l = fair_cpus(sc, self.arr, self.want_l, self.cpus)
        here = refs > 0
        for j in np.flatnonzero(here & ~self.present).tolist():
            u, ext = stored.get(self.lnodes[j], (0.0, 0.0))
            activate_stored(self.table, self.lnodes[j], u, ext, now, sc.consts)
        for j in np.flatnonzero(self.present & ~here).tolist():
            written.append((self.lnodes[j], release(self.table, self.lnodes[j], now)))
        self.cons.nrun[self.arr] = self.nrun
        self.cons.refs[self.arr] = refs
        self.cons.want[self.arr] = np.bincount(self.col, weights=self.cap, minlength=nl) * sc.delta
        if (here != self.present).any():
            # Re-plan at once (no time passes) so newcomers have an e_share.
            self.present = here
            self.cons.cpu[self.arr] = 0.0
            self.table, _ = advance(
                sc.tree, self.table, self.cons, sc.consts, 0.0, self.site, grid=self.grid
            )

    def run(self, sc: Scenario) -> None:
        """One cycle: the machine runs `delta` s by the enforcer's weights, and that CPU
        goes through the daemon's cycle."""
        if self.enforcer == "cgroup":
            got = self._nested_share()
        else:
            e_now = self.table.flat[self.arr]  # 0 for lnodes without processes
            background = self.table.background[self.arr]
            w, idle = enforcer_weights(self.enforcer, e_now, background, self.nrun)
            weight, w_idle = workload_weights(
                self.enforcer, w, idle, self.nrun, self.col, self.count, self.run_w, self.nice
            )
            got = self.machine.share(self.count, self.cap, weight, w_idle)
        self.cpu_l = np.bincount(self.col, weights=got, minlength=len(self.lnodes)) * sc.delta
        self.cons.cpu[self.arr] = self.cpu_l
        self.table, _ = advance(
            sc.tree, self.table, self.cons, sc.consts, sc.delta, self.site, grid=self.grid
        )

    def _nested_share(self) -> np.ndarray:
        """CPUs per workload under the nested cgroups, weighted from the table's e_share
        among the cgroups that exist (those of lnodes with processes, and their groups)."""
        made = np.zeros(self.cg.index.n)
        made[self.cg_lnode] = self.present
        made = self.cg.index.subtree_sum(made) > 0
        e = np.where(made, self.table.e_share[self.cg_node], 0.0)
        w = cgroup2_tree_weights(self.cg, e, self.table.background[self.cg_node])
        own = NICE_TO_WEIGHT[self.nice + 20] * self.run_w
        idle = self.table.background[self.arr][self.col]
        return cgroup_tree_share(
            self.cpus, self.cg, w, self.cg_leaf, self.count, self.cap, own, idle
        )

    def accrued(self, tree: ShareTree, now: float) -> list[tuple[int, WriteBack]]:
        """A write-back: what every active leaf accrued, as of `now` (s)."""
        leaves = np.flatnonzero(self.table.active & tree.leaf_mask).tolist()
        return [(n, accrued(self.table, n, now)) for n in leaves]


def _span(sc: Scenario, window: float | None) -> tuple[int, int]:
    """(cycles in the run, the first cycle measured): the last `window` s, else all
    after the warm-up."""
    nsteps = max(1, math.ceil(sc.duration / sc.delta - 1e-9))
    if window is None:
        return nsteps, min(int(round(sc.warmup / sc.delta)), nsteps - 1)
    return nsteps, max(0, nsteps - max(1, int(round(window / sc.delta))))


def _write(stored: Stored, written: list[tuple[int, WriteBack]], halflife: float) -> None:
    """Add the increments `written` to the stored usage, as fairshare.store.published does."""
    for n, wb in written:
        u, ext = stored.get(n, (0.0, 0.0))
        u, ext = add_usage(u, ext, wb.shusage, wb.shextime, halflife)
        stored[n] = (float(u), float(ext))


def run_scenario(
    sc: Scenario,
    enforcer: str | None = None,
    window: float | None = None,
    steps: Callable[[Iterable[int], int], Iterable[int]] | None = None,
    consts: Consts | None = None,
) -> SimResult:
    """Simulate `sc` with `enforcer` (default the scenario's) and measure the window.

    The window is the last `window` seconds, default everything after the warm-up.
    `consts` replace the scenario's constants.  As in shrdaemon, NOSCHED or NOSHARE
    (Consts.scheduling) leaves the machine to plain Linux: the enforcer is none.
    Each workload runs at its own nice, raised to its lnode's UDB nice as the daemon
    does (fairshare.enforce.renice.user_floor) unless the enforcer is none.
    `steps(range, n)`, if given, wraps the cycle numbers (shrsim's progress bar).
    """
    if consts is not None:
        sc = dataclasses.replace(sc, consts=consts)
    enforcer = (enforcer or sc.enforcer) if sc.consts.scheduling else "none"
    if enforcer not in ENFORCERS:
        raise ValueError(f"enforcer must be one of {ENFORCERS}, not {enforcer!r}")
    if sc.hosts:
        return run_site(sc, enforcer, window)
    nsteps, first = _span(sc, window)
    host = Host(sc, sc.workloads, sc.cpus, enforcer)
    rec = Recorder(sc.tree, host.lnodes, nsteps, first)
    stored: Stored = dict(sc.shusage)
    for step in steps(range(nsteps), nsteps) if steps else range(nsteps):
        if step in host.events:
            written: list[tuple[int, WriteBack]] = []
            host.come_and_go(sc, step, stored, written)
            _write(stored, written, sc.consts.halflife)
        m_now, e_now = host.table.m_share, host.table.e_share[host.arr]
        host.run(sc)
        rec.add(step, sc.delta, m_now, e_now, host.cpu_l, host.fair_l * sc.delta)
    return rec.result(sc.source, sc.cpus, sc.delta, sc.tree, enforcer)


# -- a site: several hosts, one UDB ------------------------------------------------------


def _view_of(tree: ShareTree, others: list[Host], usage: np.ndarray, delta: float) -> SiteView:
    """The SiteView one host reads: what the `others` publish, `usage` the stored one."""
    leaf = tree.leaf_mask
    active = np.zeros(tree.size, dtype=bool)
    demand = np.zeros(tree.size, dtype=bool)
    hosts = np.zeros(tree.size, dtype=np.int64)
    rate = np.zeros(tree.size)
    want = np.zeros(tree.size)
    for h in others:
        active |= h.table.active & leaf
        wants = h.table.active & h.table.demand & leaf
        demand |= wants
        hosts += wants
        rate += h.cons.cpu / delta
        want += h.table.want * (h.table.active & leaf)
    view = SiteView(active, demand, hosts, rate, usage * active, want)
    view.host_cpus = {h.name: h.cpus for h in others}
    return view


def _refresh_sites(sc: Scenario, hosts: list[Host], stored: Stored, now: float) -> None:
    """GLOBALUSAGE at a write-back: every host takes the site-wide usage and a view of
    the others, and updates its site factors."""
    tree = sc.tree
    usage = np.zeros(tree.size)
    for n, (u, ext) in stored.items():
        usage[n] = aged_usage(u, ext, now, sc.consts)
    views = [_view_of(tree, [o for o in hosts if o is not h], usage, sc.delta) for h in hosts]
    for h, view in zip(hosts, views, strict=True):
        refresh_site(tree, h.table, h.site, view, usage, sc.consts, h.cpus)


def _site_fair(sc: Scenario, hosts: list[Host], lnodes: np.ndarray, cpus: float) -> np.ndarray:
    """The site's fair target, CPUs per lnode of `lnodes`: the max-min allocation of
    all the site's `cpus` for what every host's live processes want, as if the site
    were one machine (the target GLOBALUSAGE steers toward).  It ignores that a process
    runs only on its own host's CPUs, so where the hosts' loads do not balance no
    placement may reach it."""
    want = np.zeros(sc.tree.size)
    for h in hosts:
        want[h.arr] += h.want_l
    return fair_cpus(sc, lnodes, want[lnodes], cpus)


def run_site(sc: Scenario, enforcer: str, window: float | None = None) -> SimResult:
    """Simulate the site scenario `sc` (a `hosts` table): each host runs the daemon's
    steps on its own machine and workloads; every write-back interval each adds what
    its lnodes accrued to the shared stored usage (increments, as fairshare.store.published does)
    and, with GLOBALUSAGE, refreshes its site view and site factors.

    The result measures the site as one machine: entitled is the mean site-wide m_share
    (over the lnodes active on any host), fair the max-min target of all the site's
    CPUs for the demand of all hosts (`_site_fair`), delivered the CPU received on all
    hosts over the CPU delivered to all lnodes; `hosts` holds each host's own
    measurement (its fair target that of its own CPUs and demand).
    """
    tree, consts, delta = sc.tree, sc.consts, sc.delta
    nsteps, first = _span(sc, window)
    hosts = [
        Host(sc, [w for w in sc.workloads if w.host == name], cpus, enforcer, name, site=True)
        for name, cpus in sc.hosts.items()
    ]
    lnodes = sorted({tree.node(w.name) for w in sc.workloads})
    arr = np.array(lnodes, dtype=np.int64)
    site_rec = Recorder(tree, lnodes, nsteps, first)
    host_recs = [Recorder(tree, h.lnodes, nsteps, first) for h in hosts]
    stored: Stored = dict(sc.shusage)
    every = max(1, int(round(consts.writeback / delta))) if consts.writeback > 0 else 1
    idx = tree_index(tree)
    total_cpus = sum(sc.hosts.values())
    fair_site = np.zeros(len(lnodes))
    for step in range(nsteps):
        m_now = [h.table.m_share.copy() for h in hosts]
        e_now = [h.table.e_share[h.arr] for h in hosts]
        e_all = [h.table.e_share[arr] for h in hosts]
        written: list[tuple[int, WriteBack]] = []
        if any(step in h.events for h in hosts):
            for h in hosts:
                if step in h.events:
                    h.come_and_go(sc, step, stored, written)
            fair_site = _site_fair(sc, hosts, arr, total_cpus)
        for h in hosts:
            h.run(sc)
        now = (step + 1) * delta
        if (step + 1) % every == 0:
            written += [w for h in hosts for w in h.accrued(tree, now)]
        _write(stored, written, consts.halflife)
        if (step + 1) % every == 0 and consts.flags & GLOBALUSAGE:
            _refresh_sites(sc, hosts, stored, now)
        # The site's entitlement: machine shares over the lnodes active on any host.
        leaves = np.zeros(tree.size, dtype=bool)
        for h in hosts:
            leaves |= h.table.active & tree.leaf_mask & (tree.shares > 0)
        m_site = machine_shares(idx, tree.shares, idx.subtree_sum(leaves) > 0)
        cpu_site = sum(h.cons.cpu for h in hosts)
        e_site = sum(e * h.cpus for e, h in zip(e_all, hosts, strict=True)) / total_cpus
        site_rec.add(step, delta, m_site, e_site, cpu_site[arr], fair_site * delta)
        for rec, h, m, e in zip(host_recs, hosts, m_now, e_now, strict=True):
            rec.add(step, delta, m, e, h.cpu_l, h.fair_l * delta)
    result = site_rec.result(sc.source, sc.cpus, delta, tree, enforcer)
    result.hosts = {
        h.name: rec.result(sc.source, h.cpus, delta, tree, enforcer)
        for h, rec in zip(hosts, host_recs, strict=True)
        if h.lnodes
    }
    return result
