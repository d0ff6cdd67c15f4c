"""How the UNICOS policy splits the machine among the lnodes (pure numpy, no node loop).

Two questions the constants answer; fairshare.core.cycle glues these pieces into
`near_future_shares`.

Hierarchically or flat: the ADJGROUPS flag.  Kay-Lauder's Share computes every lnode's
machine share (m_share) down the share tree, and then "m_share is used instead of
shares in the user-level scheduler": the *flat model*, in which every user competes
with every other user by m^2 / usage, whichever group it belongs to.  The paper's
Table I shows what that misses: A1 (m_share 0.50) alone in organisation A; in B, B1
(0.45) logged in but idle and B2 (0.05) CPU-bound.  Flat, B2 competes with its 0.05
against A1's 0.50 and settles at 0.05 / 0.55 = 9.1% of the machine, organisation B
with it.  ADJGROUPS is the guide's answer (seed 004: "with ADJGROUPS disabled, the
implementation collapses to the flat model"), and with it this suite splits the
near-future proportion group by group, so that B1's idle share stays in B: B gets half.

- without ADJGROUPS: `flat_index` is a one-level tree (the root and every leaf under
  it) on which the cycle's own arithmetic (fairshare.core.cycle.effective_shares: m^2 /
  usage, K5 edge effects, LIMSHARE band) runs over all leaves at once; `to_tree` maps
  the result back, a group's figure being the sum of its leaves'.  At equilibrium a
  demanding leaf gets its due share: its m_share over the demanding leaves' m_shares.
- with ADJGROUPS: effective_shares on the share tree itself (group by group); the group
  adjustment (Kay-Lauder Figure 5) then only corrects what the split still misses.

Where an idle member's share goes: `Consts.idleshare`.  When a member of a sibling set
claims no CPU, its share goes to its siblings that do (subgroup isolation, seed 001):

- ``proportional`` (the default, the UNICOS guide's rule): in proportion to their own
  shares.  m_share is the shares over the active siblings' shares (the guide's Figure
  4), the due share the m_share over the demanding siblings'.
- ``even`` (Elmroth and Gardfjall's Figure 13): evenly, the same part to each.  Project
  P-B1's users hold 55%, 30% and 15%; when U-B12 (30%) is idle, U-B11 gets 55 + 15 = 70%
  and U-B13 15 + 15 = 30% (proportionally: 55/70 = 78.6% and 15/70 = 21.4%).

The rule applies at both places a share is passed on: m_share (`spread` over the tree's
shares: a sibling without an lnode is idle) and the due share (`even_targets`: an lnode
that wants no CPU is idle).  In the flat model the leaves are each other's siblings.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fairshare.core.index import Memo, TreeIndex

#: The flat model's index of a tree's index, and its nodes (`flat_index`).
_FLAT: Memo[tuple[TreeIndex, np.ndarray]] = Memo("flat model index")


def spread(idx: TreeIndex, weight: np.ndarray, member: np.ndarray, even: bool) -> np.ndarray:
    """Every member's part of its sibling set (fractions; each set's members sum to 1).

    `weight` is each node's claim (shares, or m_share; >= 0), `member` marks the nodes
    that take part; the others (with weight) are idle.  Proportional: weight / the
    members' weight.  Even: (weight + the idle siblings' weight / the number of members)
    / the whole set's weight.  Members with weight 0 and non-members get 0.
    """
    mem = member & (weight > 0)
    wm = weight * mem
    M = idx.sibling_sum(wm)
    if not even:
        return np.divide(wm, M, out=np.zeros(idx.n), where=M > 0)
    T = idx.sibling_sum(weight)
    n = idx.sibling_sum(mem.astype(float))
    extra = np.divide(T - M, n, out=np.zeros(idx.n), where=n > 0)
    return np.divide(wm + extra * mem, T, out=np.zeros(idx.n), where=mem & (T > 0))


def even_targets(idx: TreeIndex, m: np.ndarray, active: np.ndarray, demand: np.ndarray):
    """m_share with the idle siblings' m_share spread evenly (fractions of the machine).

    What effective_shares takes as `m` under the even rule: among every sibling set, a
    demanding node aims at its m_share plus an equal part of what its active but idle
    siblings leave (the demanding nodes' targets sum to the set's m_share, so the due
    shares follow).  An active node that wants no CPU gets the target that gives it,
    among the demanding siblings' targets, what it would get if it alone started:
    (m + the others' idle m_share / (members + 1)) / the set's m_share.
    """
    mm = np.where(active, m, 0.0)
    mem = demand & (mm > 0)
    T = idx.sibling_sum(mm)
    M = idx.sibling_sum(mm * mem)
    n = idx.sibling_sum(mem.astype(float))
    extra = np.divide(T - M, n, out=np.zeros(idx.n), where=n > 0)
    target = np.where(mem, mm + extra, 0.0)
    idle = active & ~demand & (mm > 0) & (n > 0)
    if np.count_nonzero(idle):
        # joined: d = (m + (T - M - m) / (n + 1)) / T; as a share of (members + it),
        # with the members' targets summing to T: d T / (1 - d).
        d = np.divide(mm + (T - M - mm) / (n + 1), T, out=np.zeros(idx.n), where=idle)
        target = np.where(idle, np.divide(d * T, 1 - d, out=np.zeros(idx.n), where=idle), target)
    alone = active & ~demand & (mm > 0) & (n == 0)
    return np.where(alone, mm, target)


def flat_index(idx: TreeIndex) -> tuple[TreeIndex, np.ndarray]:
    """(the flat model's index, its nodes): a one-level tree, the root with every leaf of
    `idx` as its child; `nodes[j]` is flat node j's node in `idx` (nodes[0] = 0, the
    root).  Cached on `idx`."""
    hit = _FLAT.get(idx)
    if hit is not None:
        return hit
    leaves = np.flatnonzero(idx.leaf)
    leaves = leaves[leaves > 0]
    count = len(leaves)
    nodes = np.concatenate(([0], leaves)).astype(np.int64)
    n = count + 1
    zero = np.zeros(0, dtype=np.int64)
    first = np.zeros(1 if count else 0, dtype=np.int64)
    within = None
    if idx.within is not None:
        within = np.eye(n)
        within[1:, 0] = 1.0
    flat = dataclasses.replace(
        idx,
        n=n,
        leaf=np.arange(n) > 0,
        bounds=[(0, 1), (1, n)] if count else [(0, 1)],
        ppos=[np.zeros(1, dtype=np.int64)] + ([np.zeros(count, dtype=np.int64)] if count else []),
        firsts=[zero] + ([first] if count else []),
        owners=[zero] + ([first] if count else []),
        parent0=np.zeros(n, dtype=np.int64),
        parent1=np.zeros(count, dtype=np.int64),
        owner_nodes=[zero] + ([first] if count else []),
        within=within,
        has_shares=idx.has_shares[nodes],
        group=np.zeros(n, dtype=bool),
        memos={},
    )
    return _FLAT.put(idx, (flat, nodes))


def to_tree(idx: TreeIndex, nodes: np.ndarray, values: np.ndarray, demand: np.ndarray):
    """Flat-model figures (k, flat nodes) back on the tree's nodes: (k, idx.n).

    Leaves and the root get their own; a group gets the sum over its demanding leaves,
    or, if none of them wants CPU, over all its leaves (what they would get if they
    started).  `demand` is over the tree's nodes.
    """
    values = np.atleast_2d(values)
    k = len(values)
    out = np.zeros((k, idx.n))
    out[:, nodes] = values
    leafvals = out * idx.leaf
    sums = idx.subtree_sum(np.concatenate((leafvals * demand, leafvals)))
    group = ~idx.leaf
    group[0] = False
    return np.where(group & demand, sums[:k], np.where(group, sums[k:], out))


def machine_shares(
    idx: TreeIndex, shares: np.ndarray, active: np.ndarray, even: bool = False
) -> np.ndarray:
    """m_share of every node over the active nodes (fractions of the machine, 0 inactive).

    The normalisation of ShareTree.m_shares (UNICOS Figure 4): each node's shares over
    its active siblings', multiplied down from the root.  With `even` (idleshare even,
    fairshare.core.split) the inactive siblings' shares go to the active ones evenly instead.
    """
    if even:
        return idx.down_product(spread(idx, shares, active, True))
    weight = shares * active
    sums = idx.sibling_sum(weight)
    local = np.divide(weight, sums, out=np.zeros(idx.n), where=sums > 0)
    return idx.down_product(local)
