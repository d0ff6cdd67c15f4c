"""The fair level: the usage at which an lnode's part of the machine, as the policy in
force splits it, is its due part (pure numpy).

shrinfo explains how long a user would have to stay idle for its usage to decay to its
fair level (fairshare.report.profile); it asks the policy here
(fairshare.core.policies.fair_usage, each policy's `fair_usage`), so that the figure
follows the cycle's own split: the constants (ADJGROUPS's flat model, idleshare, the K5
and LIMSHARE bands) and the policy (unicos, slurm, feedback).

`SplitFigures` is what a split reads of the lnodes, over a tree index: from an lnode
table and its tree (`of_table`), or from a published table's rows (`of_lnodes`, on an
index of its own over the published lnodes).  `fair_usage` is the rule every policy
shares: lnode x competes with its *demanding* siblings (those the scheduler shares the
CPU among, or groups with one below); where it has none, it is weighed where its lowest
ancestor with some is, that ancestor's usage but x's held as it is.  The policy's
`level` answers for one sibling set: the usage (charge units) at which x's part of its
parent's share equals its due part, its claim over its own and its demanding siblings'
claims (m_share, or Slurm's shares), with those siblings' usage as it is (under UNICOS
with the parent at its due share, which the K5 and LIMSHARE bands are multiples of).
`bisect_level` finds it on a policy's own split where no closed form gives it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fairshare.core.index import TreeIndex, build_index
from fairshare.core.split import flat_index
from fairshare.core.sshare import share_ratios

if TYPE_CHECKING:
    from fairshare.core.lnode import LnodeTable
    from fairshare.core.tree import ShareTree

#: One policy's answer for one sibling set: (figures, x, x's demanding siblings) -> the
#: usage of x at which it gets its due part, or None when there is none.
Level = Callable[["SplitFigures", int, np.ndarray], "float | None"]


@dataclass(frozen=True)
class SplitFigures:
    """What the split reads of the lnodes, as arrays over `idx`'s nodes.

    m_share: machine shares (fractions of the machine, 0 where inactive); usage: decayed
    usage (charge units; a group's is its subtree's, or under the feedback policy its
    own); demanding: the leaves the scheduler shares the CPU among (they want CPU, are
    not background and have a machine share) and the groups with one below; active: the
    lnodes; local_shares: each node's shares over all its siblings' in the share tree,
    lnodes or not (Slurm's share ratio; the root's 1).
    """

    idx: TreeIndex
    m_share: np.ndarray
    usage: np.ndarray
    demanding: np.ndarray
    active: np.ndarray
    local_shares: np.ndarray

    @classmethod
    def of_table(cls, tree: ShareTree, table: LnodeTable) -> SplitFigures:
        """The figures of an lnode table over its share tree."""
        idx = tree.index
        leaves = idx.leaf & table.active & table.demand & ~table.background
        demanding = idx.subtree_sum(leaves & (table.m_share > 0)) > 0
        local, _ = share_ratios(idx, tree.shares)
        return cls(idx, table.m_share, table.usage, demanding, table.active.copy(), local)

    @classmethod
    def of_lnodes(
        cls,
        node: np.ndarray,
        parent: np.ndarray,
        group: np.ndarray,
        shares: np.ndarray,
        m_share: np.ndarray,
        usage: np.ndarray,
        demanding: np.ndarray,
        local_shares: np.ndarray | None = None,
    ) -> tuple[SplitFigures, np.ndarray]:
        """(the figures, each row's position in them) of the published lnodes given as
        columns: node numbers, their parents' (-1 for the root), group (or root) marks,
        shares, m_share, usage, demanding marks and, when the share tree is at hand, the
        `local_shares` (else over the published siblings alone).  They are renumbered
        breadth first on an index of their own; a row whose parent is not among them
        has no position (-1)."""
        levels, parent_pos = _breadth_first(np.asarray(node), np.asarray(parent))
        order = np.concatenate(levels)
        n = len(order)
        pos = np.full(len(node), -1, dtype=np.int64)
        pos[order] = np.arange(n)
        group = np.asarray(group, dtype=bool)[order]
        levels = [pos[lv] for lv in levels if len(lv)]
        shares = np.asarray(shares, dtype=float)[order]
        idx = build_index(levels, parent_pos, ~group, shares, group)
        if local_shares is None:
            local, _ = share_ratios(idx, shares)
        else:
            local = np.asarray(local_shares, dtype=float)[order]
        figures = cls(
            idx,
            np.asarray(m_share, dtype=float)[order],
            np.asarray(usage, dtype=float)[order],
            np.asarray(demanding, dtype=bool)[order],
            np.ones(n, dtype=bool),
            local,
        )
        return figures, pos

    def flat(self, node: int) -> tuple[SplitFigures, int | None]:
        """(the figures on the flat model's index, fairshare.core.split.flat_index: the
        root over every leaf; `node`'s number there, None for a group).  Their
        local_shares are the tree's (the flat model is UNICOS's, which has no use
        for them)."""
        fidx, nodes = flat_index(self.idx)
        where = np.flatnonzero(nodes == node)
        at = int(where[0]) if len(where) and node != 0 else None
        arrays = (self.m_share, self.usage, self.demanding, self.active, self.local_shares)
        return SplitFigures(fidx, *(a[nodes] for a in arrays)), at

    def spine(self, x: int) -> tuple[SplitFigures, int]:
        """(the figures of x's ancestors and their siblings alone, on an index of their
        own; x's number there): all that decides the shares from the root down to x's
        sibling set, whatever lies below the others."""
        idx = self.idx
        keep = np.zeros(idx.n, dtype=bool)
        for c in self.chain(x)[:-1]:
            keep |= idx.parent0 == idx.parent0[c]
        keep[0] = True
        nodes = np.flatnonzero(keep)  # breadth first still: a subset in node order
        starts = np.array([s for s, _e in idx.bounds])
        level = np.searchsorted(starts, nodes, side="right") - 1
        levels = [np.flatnonzero(level == k) for k in range(int(level.max()) + 1)]
        parent = np.searchsorted(nodes, idx.parent0[nodes])
        parent[0] = -1
        sub = build_index(levels, parent, idx.leaf[nodes], idx.has_shares[nodes], idx.group[nodes])
        arrays = (self.m_share, self.usage, self.demanding, self.active, self.local_shares)
        return SplitFigures(sub, *(a[nodes] for a in arrays)), int(np.searchsorted(nodes, x))

    def chain(self, x: int) -> list[int]:
        """x and its ancestors, up to the root."""
        out = [x]
        while out[-1] != 0:
            out.append(int(self.idx.parent0[out[-1]]))
        return out

    def others(self, x: int) -> np.ndarray:
        """x's demanding siblings (node numbers, in order; x itself not among them)."""
        if x == 0:
            return np.zeros(0, dtype=np.int64)
        sib = np.flatnonzero((self.idx.parent0 == self.idx.parent0[x]) & self.demanding)
        return sib[(sib != x) & (sib != 0)]  # the root is its own parent0


def _breadth_first(node: np.ndarray, parent: np.ndarray) -> tuple[list, np.ndarray]:
    """(the rows level by level, breadth first: children in their parents' order, then
    by node number; each row's parent in that order as a position in it, -1 for the
    root).  Rows whose parent is not among them are left out."""
    by_node = np.argsort(node, kind="stable")
    at = np.minimum(np.searchsorted(node, parent, sorter=by_node), len(node) - 1)
    parent_row = np.where((parent >= 0) & (node[by_node[at]] == parent), by_node[at], -1)
    roots = np.flatnonzero(parent < 0)[:1]
    order, parent_pos = [roots], [np.full(len(roots), -1, dtype=np.int64)]
    pos = np.full(len(node), -1, dtype=np.int64)
    pos[roots] = 0
    placed, frontier = len(roots), roots
    while len(frontier):
        kids = np.flatnonzero(np.isin(parent_row, frontier))
        kids = kids[np.lexsort((node[kids], pos[parent_row[kids]]))]
        pos[kids] = placed + np.arange(len(kids))
        placed += len(kids)
        order.append(kids)
        parent_pos.append(pos[parent_row[kids]])
        frontier = kids
    return order, np.concatenate(parent_pos)


#: Bisection steps of `bisect_level` (its bracket halves each step).
LEVEL_STEPS = 64


def bisect_level(part: Callable[[float], float], due: float, high: float) -> float | None:
    """The usage u >= 0 (charge units) at which `part(u)`, x's part of its parent's share
    under a policy's split with x's usage u (the less the more it has used), falls to
    its `due` part: 0 if it is there with no usage, None if it stays above it however
    much x uses.  `high` is where the bracket starts, doubled until part falls below."""
    if part(0.0) <= due:
        return 0.0
    low = 0.0
    for _ in range(LEVEL_STEPS):
        if part(high) < due:
            break
        low, high = high, 2 * high
    else:
        return None
    for _ in range(LEVEL_STEPS):
        mid = (low + high) / 2
        low, high = (mid, high) if part(mid) > due else (low, mid)
    return (low + high) / 2


def fair_usage(figures: SplitFigures, node: int, level: Level) -> float | None:
    """u*, lnode `node`'s fair level (charge units, at least 0), by the policy's `level`
    (see the module docstring): where `node` has no demanding sibling, its lowest
    ancestor x with some is weighed, and u* is x's less the rest of x's usage.  None
    when no lnode of another branch wants CPU, or the policy gives none."""
    x = node
    others = figures.others(x)
    while not len(others):
        if x == 0:
            return None
        x = int(figures.idx.parent0[x])
        others = figures.others(x)
    fair = level(figures, x, others)
    if fair is None:
        return None
    return max(fair - (float(figures.usage[x]) - float(figures.usage[node])), 0.0)
