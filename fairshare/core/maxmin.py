"""The fair target: the hierarchical max-min allocation of the machine for a given demand.

What a fair hierarchical scheduler must deliver, in steady state with steady demands
(pure numpy, no loop over nodes):

- the machine's CPUs are split among the root's children by shares, each child's part
  among its own children by shares, and so on down to the leaves;
- a node that wants less than its part keeps what it wants; the rest goes to its
  siblings first, in proportion to their shares (with `even`, Elmroth and Gardfjall's
  rule: the idle siblings' shares are spread evenly over the siblings that want CPU),
  and only when the whole subtree is satisfied does it go up to the parent's siblings;
- a node with zero shares (Idle) gets only what its siblings with shares leave.

A node's demand is the sum of its leaves' demands (CPUs: a process uses at most one).
Usage history moves a user away from this target for a while after its demand
changes; over a window much longer than the half-life every policy must deliver it.
The daemon publishes it for every lnode beside what was delivered, shrsim measures
its runs against it, and the tests check the policies and enforcers against it.
"""

from __future__ import annotations

import numpy as np

from fairshare.core.index import TreeIndex

#: The weight of a zero-share node, relative to the largest sibling weight: small
#: enough that it gets a share only when its siblings with shares are satisfied.
_ZERO_SHARE_WEIGHT = 1e-9


def maxmin_allocation(
    idx: TreeIndex,
    shares: np.ndarray,
    demand: np.ndarray,
    capacity: float,
    even: bool = False,
) -> np.ndarray:
    """Every node's fair allocation (CPUs; a group's is the sum of its leaves').

    `shares` per node (>= 0), `demand` per leaf (CPUs it would use unconstrained;
    non-leaves are ignored), `capacity` the machine's CPUs.  Nodes that want nothing
    get 0; the allocations of the root's children sum to min(capacity, total demand).
    """
    leaf_demand = np.where(idx.leaf, np.maximum(np.asarray(demand, dtype=float), 0.0), 0.0)
    want = idx.subtree_sum(leaf_demand)
    weight = _weights(idx, np.asarray(shares, dtype=float), want > 0, even)
    alloc = np.zeros(idx.n)
    alloc[0] = min(float(capacity), float(want[0]))
    for s, e in idx.bounds[1:]:
        alloc[s:e] = _water_fill(idx.parent0[s:e], want[s:e], weight[s:e], alloc)
    return alloc


def _weights(idx: TreeIndex, shares: np.ndarray, wanting: np.ndarray, even: bool) -> np.ndarray:
    """Each wanting node's weight among its wanting siblings: its shares (with `even`,
    plus an equal part of its idle siblings' shares); a zero-share node a tiny weight."""
    w = np.where(wanting, shares, 0.0)
    if even:
        idle = idx.sibling_sum(np.where(wanting, 0.0, shares))
        n = idx.sibling_sum((wanting & (shares > 0)).astype(float))
        extra = np.divide(idle, n, out=np.zeros(idx.n), where=n > 0)
        w = np.where(wanting & (shares > 0), w + extra, w)
    top = idx.sibling_sum(w)  # the set's total: the scale of its zero-share nodes' weight
    tiny = np.where(top > 0, top, 1.0) * _ZERO_SHARE_WEIGHT
    return np.where(wanting & (w <= 0), tiny, w)


def _water_fill(parent: np.ndarray, want: np.ndarray, weight: np.ndarray, alloc: np.ndarray):
    """One level's allocations: within each parent's children, min(want, level x weight),
    the level chosen so that they sum to the parent's allocation (all of `want` when the
    children want less).  Children are contiguous and in parent order."""
    out = np.zeros(len(want))
    live = np.flatnonzero(want > 0)
    if not len(live):
        return out
    par, d, w = parent[live], want[live], weight[live]
    order = np.lexsort((d / w, par))  # by parent, then by want per weight
    par, d, w, live = par[order], d[order], w[order], live[order]
    starts = np.flatnonzero(np.concatenate(([True], par[1:] != par[:-1])))
    seg = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(par))))
    avail = alloc[par]
    # Child j (sorted by want / weight) is satisfied when, with every child before it
    # satisfied and the rest at its level, its parent's allocation is not exceeded.
    d_before = _exclusive_cumsum(d, starts, seg)
    w_from = np.add.reduceat(w, starts)[seg] - _exclusive_cumsum(w, starts, seg)
    satisfied = d_before + d / w * w_from <= avail * (1 + 1e-12)
    d_sat = np.bincount(seg, weights=d * satisfied, minlength=len(starts))
    w_rest = np.bincount(seg, weights=w * ~satisfied, minlength=len(starts))
    level = np.divide(avail[starts] - d_sat, w_rest, out=np.zeros(len(starts)), where=w_rest > 0)
    out[live] = np.where(satisfied, d, level[seg] * w)
    return out


def _exclusive_cumsum(values: np.ndarray, starts: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Within each segment (beginning at `starts`), the sum of the values before each."""
    c = np.cumsum(values) - values
    return c - c[starts][seg]
