"""A grid of sites enforcing one hierarchical policy (seed 001, Elmroth and Gardfjall; pure).

Each entry has a usage *scope* (the UDB's `scope`, `ShareTree.scope`): the usage it
divides its share by among its children and everything below them.

- **local**: this site's usage.  The entry's children are scheduled toward their share
  of this site, from what they used here.
- **global**: the usage of every site of the grid.  The children are scheduled toward
  their share of the aggregate capacity, from what they used anywhere (the paper's
  usage source that points at grid-wide usage data, on a VO's mounted subpolicy).

An entry's own standing among its siblings is measured as its parent divides
(`ShareTree.measured_globally`): the paper's rule that an entry's usage is taken "using
the usage data source of the parent".  So a site gives VO-A 30% of *this* site (VO-A
competes with its local siblings by what it used here) and VO-A's projects divide VO-A's
part of the grid by what they used everywhere.  A scope is inherited down the tree; the
root's is global under GLOBALUSAGE (every entry global) and local otherwise.

What the other sites used comes in as one array (`GridState.exchange`): per node of
this site's tree, the decayed usage (charge units, as this site charges) of the node's
subtree at every other site, summed over the sites, as of the exchange.  A group's value
may exceed the sum of its children's (members this site does not have).  Between
exchanges it decays with the node's half-life, as this site's own usage does.  The
daemon fills it from the usage records it pulls from its peers (fairshare.daemon.grid),
the simulator from its other sites (fairshare.sim.grid).  It is the only place the
other sites' usage enters the cycle: a user's own usage (the lnode table's) is this
site's alone, so nothing is counted twice.

Why usage alone does not meet a global target.  On one machine the Kay-Lauder split
(m^2 / usage among the siblings that want CPU) settles where every sibling's usage is in
proportion to its share.  Across sites it does not: take VO-A's projects P-A1, P-A2 and
P-A3 (50, 30, 20) where P-A2 and P-A3 run on only three of six sites (the paper's
Figures 11 and 12).  Sites 4-6 give P-A1 all of VO-A, half of VO-A's grid capacity, so
P-A1's target is met only if sites 1-3 give it nothing; m^2 / usage never gives nothing,
and settles at P-A2 20% and P-A3 13% instead of 30% and 20%.  As with GLOBALUSAGE's
hosts (fairshare.core.site), something must remember how far each entry is from its
target: an integral term, the *grid factor*.  At each exchange, for every node measured
globally that wants CPU here, its factor is multiplied by (target / actual) ** GAIN
(bounded per exchange), target being its share of its parent (idle siblings' shares
spread as `Consts.idleshare` says) and actual its part of its siblings' grid-wide
usage; the factors of a sibling set are then scaled so the largest is 1.  The split
uses usage / factor, so a node behind its target is favoured until it is not.  Where
the target can be met its fixed point is actual = target; where it cannot (P-A1 above
its share from sites 4-6 alone), the factor falls to its bound and the entry gets
next to nothing here, which is what the paper's strict priority order does.

A *pooled* node (`ShareTree.pooled`; the paper's local resource projects, Slurm's
FairShare=parent): its members are not ranked against each other.  The node competes
with its siblings as any node does; below it the split ignores usage (each member's
part is in proportion to its shares among those that want CPU), and in the deviation
tuples (fairshare.core.deviation) the members take the node's standing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from fairshare.core.consts import GLOBALUSAGE, Consts
from fairshare.core.index import TreeIndex
from fairshare.core.split import machine_shares
from fairshare.core.tree import ShareTree, tree_index

#: The exponent of target / actual in one exchange's update of a grid factor.
GAIN = 1.0
#: One exchange changes a grid factor by at most this ratio (either way).
STEP_BOUND = 2.0
#: Grid factors stay within [FACTOR_FLOOR, 1] (the largest of a sibling set is 1).
FACTOR_FLOOR = 1e-3
#: Another site's usage of a node counts it present above this part of its parent's.
PRESENT_PART = 1e-6
#: Usage below this (charge units) counts as this, so nothing divides by 0.
_FLOOR = 1e-9


@dataclass
class GridState:
    """One site's grid state over its tree's nodes: `remote`, the other sites' decayed
    usage of each node's subtree (charge units, aged since the last exchange), and
    `factor`, each node's grid factor (1: no correction)."""

    remote: np.ndarray
    factor: np.ndarray

    @classmethod
    def new(cls, n: int) -> GridState:
        """The state of a site that has heard from no other site."""
        return cls(np.zeros(n), np.ones(n))

    def age(self, k: float | np.ndarray) -> None:
        """Decay the other sites' usage over one cycle (`k`: the cycle's decay factor,
        one number or one per node; fairshare.core.cycle.node_decay), in place."""
        self.remote *= k

    def exchange(self, remote: np.ndarray) -> None:
        """Take the other sites' usage as of now (per node, charge units), in place."""
        self.remote = np.maximum(np.asarray(remote, dtype=float), 0.0).copy()


@dataclass(frozen=True)
class GridView:
    """What the cycle needs of the grid, over the tree's nodes: `measured`, nodes whose
    standing is measured from every site's usage; `pooled_below`, nodes inside a pooled
    subtree (below a pooled node); `remote` and `factor` from the site's `GridState`
    (None: no other site heard from)."""

    measured: np.ndarray
    pooled_below: np.ndarray
    remote: np.ndarray | None = None
    factor: np.ndarray | None = None

    def split_inputs(
        self, idx: TreeIndex, m: np.ndarray, sub_usage: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(m, usage) the split works from (new arrays; fractions of the machine, charge
        units).  Where measured globally: the usage is the subtree's here (`sub_usage`)
        plus the other sites', and each node's part of its parent's m_share is weighed
        by its grid factor (the set's total kept), so its due share here, and the
        edge-effect bound with it, move toward what the grid needs of this site.
        Inside a pooled subtree the usage is the (new) m_share, so the split there goes
        by shares alone (m^2 / m = m)."""
        out_m, out_u = m, sub_usage.astype(float, copy=True)
        if self.remote is not None:
            out_u = np.where(self.measured, sub_usage + self.remote, out_u)
            frac = _of_parent(idx, m)
            weighed = np.where(self.measured, frac * self.factor, frac)
            total, now = idx.sibling_sum(frac), idx.sibling_sum(weighed)
            frac = np.divide(weighed * total, now, out=frac, where=self.measured & (now > 0))
            frac[0] = 1.0
            out_m = idx.down_product(frac, float(m[0]))
        if self.pooled_below.any():
            out_u = np.where(self.pooled_below, np.maximum(out_m, _FLOOR), out_u)
        return out_m, out_u

    def adjustable(self, groups: np.ndarray) -> np.ndarray:
        """The `groups` ADJGROUPS may adjust (fairshare.core.cycle.group_adjustment):
        not those measured globally, whose share here is meant to differ from their due
        share here, nor those inside a pooled subtree."""
        skip = self.pooled_below if self.remote is None else self.pooled_below | self.measured
        return groups & ~skip

    def keep_raise(self, raise_: np.ndarray) -> np.ndarray:
        """The edge effects' usage raise (fairshare.core.cycle.raise_usage) without the
        nodes measured globally or pooled: their split is not by their usage here, so
        their usage here is not raised for it."""
        skip = self.pooled_below if self.remote is None else self.pooled_below | self.measured
        return np.where(skip, 1.0, raise_)


def pooled_below(tree: ShareTree) -> np.ndarray:
    """Per node, whether some ancestor of it is pooled (its members not ranked)."""
    out = np.zeros(tree.size, dtype=bool)
    if tree.pooled is None:
        return out
    for nodes in tree.levels[1:]:
        p = tree.parent[nodes]
        out[nodes] = out[p] | tree.pooled[p]
    return out


def grid_view(tree: ShareTree, consts: Consts, state: GridState | None = None) -> GridView | None:
    """The cycle's `GridView` of `tree` under `consts` (GLOBALUSAGE: every entry global)
    with the site's `state`; None when it changes nothing (no other site heard from and
    nothing pooled), so a site without a grid runs the cycle as before."""
    pooled = pooled_below(tree)
    has_remote = state is not None and bool(state.remote.any())
    if not has_remote and not pooled.any():
        return None
    measured = tree.measured_globally(bool(consts.flags & GLOBALUSAGE))
    if has_remote and measured.any():
        return GridView(measured, pooled, state.remote, state.factor)
    return GridView(measured, pooled) if pooled.any() else None


def grid_usage(
    tree: ShareTree, usage: np.ndarray, remote: np.ndarray | None, measured: np.ndarray
) -> np.ndarray:
    """Each node's usage as its standing is measured (charge units): `usage` (per node,
    groups the sums of their leaves here) plus `remote` where `measured` globally."""
    if remote is None:
        return usage.astype(float, copy=True)
    return np.where(measured, usage + remote, usage)


def present_nodes(tree: ShareTree, active: np.ndarray, measured: np.ndarray, remote) -> np.ndarray:
    """The nodes that count in their sibling sets: `active` here (the lnodes, or those
    wanting CPU), or measured globally and with usage at the other sites above
    PRESENT_PART of their parent's there (an lnode that never ran, at its usage floor,
    does not count); with their ancestors."""
    mine = active & tree.leaf_mask
    if remote is not None:
        idx = tree_index(tree)
        mine = mine | (measured & (remote > PRESENT_PART * remote[idx.parent0]))
    out = tree_index(tree).subtree_sum(mine.astype(float)) > 0
    out[0] = True
    return out


def targets_and_actuals(
    tree: ShareTree, present: np.ndarray, usage: np.ndarray, even: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(target, actual) per node, as fractions of the parent: the target its shares
    over its present siblings' (idle siblings' shares spread as `even` says,
    fairshare.core.split), the actual its `usage` over its present siblings' (0 where
    they have none).  The root's are 1."""
    idx = tree_index(tree)
    m = machine_shares(idx, tree.shares, present, even)
    target = _of_parent(idx, m)
    u = np.where(present, usage, 0.0)
    sib = idx.sibling_sum(u)
    actual = np.divide(u, sib, out=np.zeros(idx.n), where=sib > 0)
    target[0] = actual[0] = 1.0
    return target, actual


def _of_parent(idx: TreeIndex, m: np.ndarray) -> np.ndarray:
    mp = m[idx.parent0]
    return np.divide(m, mp, out=np.zeros(idx.n), where=mp > 0)


def update_factors(
    tree: ShareTree,
    state: GridState,
    usage: np.ndarray,
    active: np.ndarray,
    demand: np.ndarray,
    consts: Consts,
) -> None:
    """After an exchange: each node measured globally that wants CPU here has its grid
    factor multiplied by (target / actual) ** GAIN, bounded by STEP_BOUND (see the module
    docstring); each sibling set's factors are then scaled so the largest is 1 and
    kept above FACTOR_FLOOR.  `usage` is this site's per node (the lnode table's),
    `active`, `demand` its lnodes and those that want CPU.  In place."""
    measured = tree.measured_globally(bool(consts.flags & GLOBALUSAGE))
    present = present_nodes(tree, active & demand, measured, state.remote)
    g = grid_usage(tree, usage, state.remote, measured)
    target, actual = targets_and_actuals(tree, present, g, consts.idleshare == "even")
    mine = measured & active & demand & present
    ratio = np.divide(target, actual, out=np.full(tree.size, STEP_BOUND), where=actual > 0)
    step = np.clip(ratio**GAIN, 1 / STEP_BOUND, STEP_BOUND)
    factor = np.where(mine, state.factor * step, state.factor)
    idx = tree_index(tree)
    top = np.zeros(idx.n)
    np.maximum.at(top, idx.parent0[1:], np.where(mine, factor, 0.0)[1:])
    scale = top[idx.parent0]
    factor = np.where(mine & (scale > 0), factor / np.where(scale > 0, scale, 1.0), factor)
    state.factor = np.clip(factor, FACTOR_FLOOR, 1.0)


def published_usage(tree: ShareTree, leaf_usage: np.ndarray) -> dict[str, float]:
    """What a site publishes for the others: per entry name, the decayed usage of its
    subtree at this site (charge units), from each leaf's (`leaf_usage`, per node)."""
    sums = tree_index(tree).subtree_sum(np.where(tree.leaf_mask, leaf_usage, 0.0))
    return dict(zip(tree.names[1:], sums[1:].tolist(), strict=True))


def remote_usage(tree: ShareTree, others: Iterable[Mapping[str, float]]) -> np.ndarray:
    """The array `GridState.exchange` takes: per node of `tree`, the sum over the other
    sites' publications (`published_usage`) of the usage under the node's entry name
    (0 where no site has it; the root's 0)."""
    out = np.zeros(tree.size)
    for pub in others:
        out[1:] += np.array([pub.get(n, 0.0) for n in tree.names[1:]], dtype=float)
    return out
