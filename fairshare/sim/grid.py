"""shrsim's grid run: several sites, each the daemon's own cycle on its own machine (seed 001).

`run_grid` takes a loaded grid scenario (fairshare.sim.grid_scenario) and returns a
`GridResult`. Every cycle each site runs as a machine scenario does (fairshare.sim.run's
`Host`: lnodes come and go, the enforcer's weights share its CPUs, that CPU goes through
fairshare.core.steps.advance), its CPU charged at the site's speed (`Consts.speed`).
Every `exchange` seconds, unless the scenario runs on local usage only, the sites
exchange usage as a grid would (fairshare.core.grid): each publishes, per node of its
tree, the decayed usage of the node's subtree there (its lnodes' usage, and the stored
usage of its entries without one, aged to now), and each takes, per node of its own
tree, the sum of what the others published under the same name (`GridState.exchange`),
then updates its grid factors (`update_factors`). That sum is the interface a real
exchange (PostgreSQL logical replication of usage records) fills: see
docs/architecture.md.

What it measures, over the window after the warm-up, the way the paper does (Section
5.1's aggregated utilization): for every entry, its *delivered share*, the CPU its
subtree received over the CPU its parent's received (CPU-seconds times the site's
speed), over the whole grid and at each site, beside its *target*, its shares over its
siblings' (those with work; idle siblings' shares spread as `Consts.idleshare` says).
An entry measured globally (its parent's scope is global) meets its target when its
grid-wide delivered share does; a local one when its share at each site does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from fairshare.core.consts import GLOBALUSAGE
from fairshare.core.grid import GridState, published_usage, remote_usage, targets_and_actuals
from fairshare.core.lnode import WriteBack, aged_usage
from fairshare.core.steps import exchange_grid
from fairshare.sim.grid_scenario import Grid
from fairshare.sim.run import Host, Stored, _span, _write


@dataclass(frozen=True)
class EntryShare:
    """One entry's delivered share against its target (fractions of its parent's).

    scope: "global" when its standing is measured from every site's usage, else
    "local"; target and delivered over the whole grid (a local entry's target: the mean
    of its sites' weighted by its parent's CPU there); `sites`: per site (delivered,
    target), for the sites where its parent received CPU."""

    name: str
    parent: str
    scope: str
    target: float
    delivered: float
    sites: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def deviation_pp(self) -> float:
        """Delivered - target over the grid, in percentage points."""
        return (self.delivered - self.target) * 100.0

    @property
    def worst_site_pp(self) -> float:
        """The largest |delivered - target| at one site, in percentage points."""
        return max((abs(d - t) * 100.0 for d, t in self.sites.values()), default=0.0)


@dataclass
class GridResult:
    """What a grid run measured: every entry's `EntryShare`, in the shared tree's order
    (the first site's preorder, then entries only other sites have)."""

    scenario: str
    usage: str  # "grid" (usage exchanged) or "local"
    window: tuple[float, float]
    cycles: int
    sites: dict[str, float]  # name -> CPUs
    entries: list[EntryShare]

    def entry(self, name: str) -> EntryShare:
        return next(e for e in self.entries if e.name == name)

    def as_json(self) -> dict:
        """The document `shrsim --json` prints for a grid (man/shrsim.1)."""
        return {
            "scenario": self.scenario,
            "usage": self.usage,
            "window": list(self.window),
            "cycles": self.cycles,
            "sites": self.sites,
            "entries": [
                {
                    "name": e.name,
                    "parent": e.parent,
                    "scope": e.scope,
                    "target": e.target,
                    "delivered": e.delivered,
                    "deviation_pp": e.deviation_pp,
                    "sites": {k: {"delivered": d, "target": t} for k, (d, t) in e.sites.items()},
                }
                for e in self.entries
            ],
        }


def run_grid(grid: Grid, steps: Callable[[Iterable[int], int], Iterable[int]] | None = None):
    """Simulate `grid` (see the module docstring); `steps(range, n)` wraps the cycle
    numbers (shrsim's progress bar).  Returns a GridResult."""
    scs = [s.scenario for s in grid.sites]
    first_sc = scs[0]
    nsteps, first = _span(first_sc, None)
    hosts = []
    for s in grid.sites:
        sc = s.scenario
        h = Host(sc, sc.workloads, sc.cpus, sc.enforcer, s.name)
        h.grid = GridState.new(sc.tree.size)
        hosts.append(h)
    stored: list[Stored] = [{} for _ in hosts]
    every = max(1, int(round(grid.exchange / grid.delta)))
    got = [np.zeros(sc.tree.size) for sc in scs]  # CPU-s x speed per node, in the window
    for step in steps(range(nsteps), nsteps) if steps else range(nsteps):
        for h, sc, st in zip(hosts, scs, stored, strict=True):
            if step in h.events:
                written: list[tuple[int, WriteBack]] = []
                h.come_and_go(sc, step, st, written)
                _write(st, written, sc.consts.halflife)
            h.run(sc)
        if grid.exchange_usage and (step + 1) % every == 0:
            _exchange(hosts, scs, stored, (step + 1) * grid.delta)
        if step >= first:
            for g, h, sc in zip(got, hosts, scs, strict=True):
                g += sc.tree.subtree_sum(h.cons.cpu * sc.consts.speed)
    window = (first * grid.delta, nsteps * grid.delta)
    entries = _entries(grid, got)
    usage = "grid" if grid.exchange_usage else "local"
    cpus = {s.name: s.scenario.cpus for s in grid.sites}
    return GridResult(grid.source, usage, window, nsteps, cpus, entries)


def site_usage(h: Host, tree, stored: Stored, now: float, consts) -> dict[str, float]:
    """What one site publishes (fairshare.core.grid.published_usage): its lnodes' usage,
    and its other entries' stored usage aged to now."""
    u = np.where(h.table.active & tree.leaf_mask, h.table.usage, 0.0)
    for n, (us, ext) in stored.items():
        if not h.table.active[n]:
            u[n] = aged_usage(us, ext, now, consts)
    return published_usage(tree, u)


def _exchange(hosts: list[Host], scs, stored: list[Stored], now: float) -> None:
    """Every site takes the others' usage by entry name and updates its grid factors
    (fairshare.core.steps.exchange_grid)."""
    pubs = [
        site_usage(h, sc.tree, st, now, sc.consts)
        for h, sc, st in zip(hosts, scs, stored, strict=True)
    ]
    for i, (h, sc) in enumerate(zip(hosts, scs, strict=True)):
        remote = remote_usage(sc.tree, (p for j, p in enumerate(pubs) if j != i))
        exchange_grid(sc.tree, h.table, h.grid, remote, sc.consts)


def _entries(grid: Grid, got: list[np.ndarray]) -> list[EntryShare]:
    """Every entry that received CPU somewhere: its delivered share and target."""
    by_name: dict[str, dict[str, tuple[float, float, float, bool]]] = {}
    order: list[str] = []
    parents: dict[str, str] = {}
    anywhere = _with_work_anywhere(grid)
    for s, g in zip(grid.sites, got, strict=True):
        tree, consts = s.scenario.tree, s.scenario.consts
        measured = tree.measured_globally(bool(consts.flags & GLOBALUSAGE))
        here = np.array([n in anywhere if measured[i] else False for i, n in enumerate(tree.names)])
        here |= _with_work(s.scenario)
        here = tree.subtree_sum(here.astype(float)) > 0
        here[0] = True
        target, _ = targets_and_actuals(tree, here, np.ones(tree.size), consts.idleshare == "even")
        for node in tree.preorder()[1:].tolist():
            if g[node] <= 0 and not here[node]:
                continue
            name, parent = tree.names[node], int(tree.parent[node])
            if name not in by_name:
                order.append(name)
                by_name[name] = {}
                parents[name] = tree.names[parent]
            by_name[name][s.name] = (g[node], g[parent], target[node], bool(measured[node]))
    return [_entry(name, parents[name], by_name[name]) for name in order]


def _entry(name: str, parent: str, at: dict[str, tuple[float, float, float, bool]]) -> EntryShare:
    mine = sum(v[0] for v in at.values())
    theirs = sum(v[1] for v in at.values())
    weights = np.array([v[1] for v in at.values()])
    targets = np.array([v[2] for v in at.values()])
    glob = any(v[3] for v in at.values())
    if glob:
        target = float(targets.max())  # the same at every site holding the entry's siblings
    else:
        target = float((weights * targets).sum() / weights.sum()) if weights.sum() > 0 else 0.0
    sites = {k: (v[0] / v[1], v[2]) for k, v in at.items() if v[1] > 0}
    delivered = mine / theirs if theirs > 0 else 0.0
    return EntryShare(name, parent, "global" if glob else "local", target, delivered, sites)


def _with_work(sc) -> np.ndarray:
    """The leaves of a site's tree that have a workload wanting CPU there."""
    out = np.zeros(sc.tree.size, dtype=bool)
    for w in sc.workloads:
        if w.demand > 0:
            out[sc.tree.node(w.name)] = True
    return out


def _with_work_anywhere(grid: Grid) -> set[str]:
    """The names of every entry with work at some site (leaves and their groups)."""
    names: set[str] = set()
    for s in grid.sites:
        tree = s.scenario.tree
        busy = tree.subtree_sum(_with_work(s.scenario).astype(float)) > 0
        names |= {tree.names[i] for i in np.flatnonzero(busy)}
    return names
