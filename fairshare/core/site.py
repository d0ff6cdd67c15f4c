"""GLOBALUSAGE: many hosts, one UDB, fair to every lnode across the whole site (pure).

Every host's daemon writes what its lnodes accrued into the UDB as increments every
write-back interval (fairshare.core.lnode.accrued, fairshare.store.published.write_back), so an
entry's shusage is the site-wide decayed usage of that user or account, give or take
one interval.  With the GLOBALUSAGE flag each host's daemon, every cycle, also

1. takes the site-wide usage as its lnodes' usage (`refresh_usage`: the stored usage
   aged to now, plus what the other hosts accrued and have not written yet, plus what
   it accrued itself since it last wrote);
2. reads what the other live hosts are doing (a `SiteView`: which lnodes are active
   and want CPU there, on how many hosts, and how much CPU they receive there).

Both come from the site's per-cycle exchange (fairshare.store.exchange), so the view
is about one cycle old.  At every write-back interval (its *refresh*) it

3. works out, as the seed's Grid-wide fair share asks (Elmroth and Gardfjall), what
   each lnode is due *of the site*, and nudges its own enforcement toward it
   (`update_factors`): the integral controller keeps the interval's timescale, over
   which what each host delivered is measured.  (The simulator, fairshare.sim.run,
   does 1 to 3 at each write-back from its in-memory store.)

Why summing usage is not enough.  With usage summed over hosts, each host still
splits its own CPUs by m^2 / usage among the lnodes it runs.  Take two 2-CPU hosts,
x only on a, y only on b, z on both, equal shares: at the fixed point the site
usages, hence the weights on each host, are equal only if every lnode gets the same
on each host it runs on, so x gets 1 CPU, z 1 + 1, y 1: Kay-Lauder's own feedback
(m^2 / usage with usage proportional to what was delivered) settles at
x = y = 2 / (1 + 1/sqrt 2) = 1.17 CPUs and z = 1.66 (29%, 29%, 41% of the site)
instead of a third each.  No weight that is a function of shares and usage alone can
do better: at the target all three have equal usage and shares, yet host a must give
x twice what it gives z.  Something must remember how far each lnode is from its
site-wide target: an integral term.

The method.  At each refresh a host computes

- the *site-wide effective share* E of every lnode: the very same Kay-Lauder
  arithmetic as one host's cycle (fairshare.core.cycle: machine shares over the
  lnodes active anywhere on the site, then m^2 / usage with edge effects and limits),
  on the site-wide usage, as if the site were one machine.  On one machine, delivering
  E every cycle makes the site-wide usage feedback converge to the machine shares;
- its target T in CPU s per s: E x C, C being the CPU the site delivered to lnodes
  over the interval, what an lnode does not want (its wants here and on the other
  hosts: fairshare.core.delivery) going to its siblings first (`site_target`:
  hierarchical max-min, weighted by E), and the gap T - D to what the lnode received
  site-wide (D: here over the interval, plus what the other hosts publish);
- a local target t = d + (T - D) / n: each of the n hosts where the lnode wants CPU
  closes its part of the gap, so hosts that refresh at the same moment close it once
  together instead of n times over (which would oscillate);
- a *site factor* per lnode, multiplied by t / d (bounded per refresh): an integral
  controller whose fixed point is d = t, that is D = T for every lnode.

Every cycle the host's effective shares (its own cycle's m^2 / usage on the site-wide
usage) are multiplied by the site factors and renormalised (`apply_factors`), so
between refreshes the host stays responsive, and over refreshes the factors settle
where the site delivers what the site-wide cycle asks for.  In the example above host
a ends with x's factor twice z's, and each lnode receives 1.33 CPUs.  An lnode that
runs only on this host and is alone in its group gets what the host's own cycle
gives it.  Without GLOBALUSAGE no factor is applied and each host is fair on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fairshare.core.consts import ADJGROUPS, Consts
from fairshare.core.cycle import USAGE_FLOOR, apply_sharemin, limshare_band, near_future_shares
from fairshare.core.grid import GridState
from fairshare.core.lnode import LnodeTable
from fairshare.core.maxmin import maxmin_allocation
from fairshare.core.split import machine_shares
from fairshare.core.tree import Kind, ShareTree, tree_index

#: One refresh changes a site factor by at most this ratio (either way).
STEP_BOUND = 4.0
#: Site factors stay within [1 / FACTOR_BOUND, FACTOR_BOUND].
FACTOR_BOUND = 1000.0


@dataclass
class SiteView:
    """What the other live hosts publish, over the tree's nodes (leaves; 0 elsewhere).

    active: the lnode exists on another host; demand: it wants CPU there; hosts: on how
    many other hosts it wants CPU; rate: CPU s per s it receives there; usage: its
    site-wide usage as stored in the UDB, aged to the refresh, plus what the other
    hosts accrued and have not stored yet (charge units); want: the CPUs it would use
    there unconstrained (fairshare.core.delivery; a host that did not publish it counts
    what the lnode receives there).  `host_cpus` maps each other live host to its CPUs;
    `time`: when the oldest of the other hosts' figures were taken (epoch s; None: no
    other host), which says how old the view is.
    """

    active: np.ndarray
    demand: np.ndarray
    hosts: np.ndarray
    rate: np.ndarray
    usage: np.ndarray
    want: np.ndarray | None = None
    host_cpus: dict[str, float] = field(default_factory=dict)
    time: float | None = None

    def __post_init__(self) -> None:
        if self.want is None:
            self.want = self.rate.copy()

    @classmethod
    def empty(cls, n: int) -> SiteView:
        """A view with no other host."""
        z = np.zeros(n)
        return cls(z.astype(bool), z.astype(bool), z.astype(np.int64), z.copy(), z.copy())


@dataclass
class SiteState:
    """One host's GLOBALUSAGE state: `factor` per node (1 = no correction), the CPU s
    each leaf received here since the last refresh (`cpu`) over `elapsed` seconds, and
    the last `view` of the other hosts; `grid`, the host's site's view of the other sites
    of a grid (fairshare.core.grid: their usage, the grid factors)."""

    factor: np.ndarray
    cpu: np.ndarray
    elapsed: float
    view: SiteView
    grid: GridState | None = None

    @classmethod
    def new(cls, n: int) -> SiteState:
        return cls(np.ones(n), np.zeros(n), 0.0, SiteView.empty(n), GridState.new(n))

    def add(self, cpu: np.ndarray, elapsed: float) -> None:
        """Count one cycle: CPU s per node received here over `elapsed` seconds."""
        self.cpu += cpu
        self.elapsed += elapsed


def refresh_usage(table: LnodeTable, nodes: np.ndarray, site_usage: np.ndarray) -> None:
    """Give the leaves `nodes` their site-wide usage (in place): the stored usage
    `site_usage` (per node, aged to now, charge units) plus what they accrued here and
    did not write yet; that stored usage becomes their `stored`."""
    owed = np.maximum(table.usage[nodes] - table.stored[nodes], 0.0)
    table.stored[nodes] = site_usage[nodes]
    table.usage[nodes] = np.maximum(site_usage[nodes] + owed, USAGE_FLOOR)


def _consumers(tree: ShareTree) -> np.ndarray:
    return tree.leaf_mask & (tree.kinds != Kind.IDLE) & (tree.shares > 0)


def site_e_share(tree: ShareTree, table: LnodeTable, view: SiteView, consts: Consts):
    """(site-wide m_share, site-wide effective share) per node, as fractions of the site.

    The cycle's own arithmetic (machine shares over the lnodes active here or on another
    host, sharemin, then m^2 / usage, split group by group with ADJGROUPS or flat
    without, with edge effects and LIMSHARE) on the site-wide usage: this host's usage
    for its lnodes, the view's for the others.
    """
    idx = tree_index(tree)
    consumers = _consumers(tree)
    here = table.active & consumers
    leaves = (here | view.active) & consumers
    active = idx.subtree_sum(leaves) > 0
    active[0] = True
    even = consts.idleshare == "even"
    m = machine_shares(idx, tree.shares, active, even)
    m = apply_sharemin(idx, m, leaves, consts.sharemin)
    usage = np.where(here, table.usage, np.where(view.active, view.usage, 0.0))
    usage = np.where(leaves, np.maximum(usage, USAGE_FLOOR), 0.0)
    wants = leaves & ((here & table.demand) | view.demand) & (usage < consts.maxusage)
    sub_usage, demand = idx.subtree_sum(np.array((usage, wants)))
    _floor, limit = limshare_band(consts)
    flat = not consts.flags & ADJGROUPS
    sh = near_future_shares(idx, m, sub_usage, active, demand > 0, limit, flat=flat, even=even)
    e = sh.e_share
    return m, np.where(wants | ~tree.leaf_mask, e, 0.0) * active


def update_factors(
    tree: ShareTree, table: LnodeTable, state: SiteState, consts: Consts, cpus: float
) -> np.ndarray:
    """The site factors after a refresh (a new array; see the module docstring).

    `state` holds what this host delivered since the last refresh and the view of the
    others; `cpus` is this host's CPU count (no lnode is asked for more than its
    runnable processes can use here).  Leaves that received nothing here keep their
    factor.  The state's counters restart.
    """
    factor = state.factor.copy()
    view = state.view
    if state.elapsed > 0:
        consumers = _consumers(tree)
        d = np.where(consumers, state.cpu / state.elapsed, 0.0)
        _m, e = site_e_share(tree, table, view, consts)
        rate = np.where(consumers, view.rate, 0.0)
        delivered = d + rate
        total = float(delivered.sum())
        mine = consumers & table.active & table.demand & (d > 0)
        if total > 0 and mine.any():
            target = site_target(tree, table, view, e, total)
            hosts = 1 + view.hosts * view.demand
            local = d + (target - delivered) / hosts
            cap = np.minimum(np.maximum(table.nrun, 1), cpus)
            local = np.clip(local, d / STEP_BOUND, np.maximum(cap, d))
            ratio = np.divide(local, d, out=np.ones_like(d), where=mine)
            factor = np.where(mine, factor * np.clip(ratio, 1 / STEP_BOUND, STEP_BOUND), factor)
            factor = np.clip(factor, 1 / FACTOR_BOUND, FACTOR_BOUND)
    state.cpu = np.zeros_like(state.cpu)
    state.elapsed = 0.0
    return factor


def site_target(
    tree: ShareTree,
    table: LnodeTable,
    view: SiteView,
    e: np.ndarray,
    total: float,
) -> np.ndarray:
    """What each lnode should receive of the site (CPU s per s): the site-wide effective
    shares `e` of the `total` CPU the site delivered, what an lnode does not want going
    to its siblings first (hierarchical max-min over its wants here and on the other
    hosts, fairshare.core.maxmin)."""
    consumers = _consumers(tree)
    want = np.where(consumers & table.active, table.want, 0.0) + np.where(consumers, view.want, 0.0)
    return maxmin_allocation(tree_index(tree), np.maximum(e, 0.0), want, total)


def apply_factors(tree: ShareTree, table: LnodeTable, factor: np.ndarray) -> np.ndarray:
    """This host's effective shares with the site factors applied (a new array).

    The demanding leaves' e_share times their factor, renormalised to what they had
    together; an active leaf that wants no CPU is scaled alike (what it would get if
    it started); groups become the sum of their demanding leaves.
    """
    idx = tree_index(tree)
    e = table.e_share
    leaves = tree.leaf_mask & table.active
    want = leaves & table.demand & (e > 0)
    if not want.any():
        return e.copy()
    weighted = e * factor
    scale = float(e[want].sum()) / float(weighted[want].sum())
    out = np.where(leaves, weighted * scale, e)
    groups = idx.subtree_sum(out * want)
    has = idx.subtree_sum(want) > 0
    return np.where(~tree.leaf_mask & has, groups, out)


@dataclass(frozen=True)
class SiteLnode:
    """One lnode as the whole site sees it (shrview --site, shrinfo).

    usage: site-wide decayed usage (charge units): for a leaf, its entry's stored
    shusage aged to now plus what every host still owes it (published usage - stored);
    for a group or the root, the sum of its leaves'.  nrun: runnable processes on all
    hosts.  cpus: per host, the CPU s per s it received there in that host's last cycle.
    `level` and `parent` (the parent's key, None for the root) place it in the tree;
    `key` is (kind, uid).
    """

    key: tuple[str, int]
    name: str
    uid: int
    kind: str
    level: int
    parent: tuple[str, int] | None
    shares: float
    usage: float
    nrun: int
    cpus: dict[str, float]

    @property
    def hosts(self) -> list[str]:
        """The hosts where it has an lnode, by name."""
        return sorted(self.cpus)


@dataclass(frozen=True)
class SiteHost:
    """A host that published a table: its CPUs (None if not published), whether its daemon
    still runs (its header says so), and the time of its last cycle (epoch s)."""

    name: str
    cpus: float | None
    running: bool
    time: float
