"""Target-deviation tuples and the flat priority made from them (seed 001, section 4; pure).

Elmroth and Gardfjall pass a job down the policy tree and collect, root to leaf, each
entry's *target deviation*: its target share minus its actual share, in percent of its
parent (from -100 to +100).  The job of the least favoured entry is the one whose tuple
is lexicographically largest: the entry farthest behind its target at the top level,
then within it at the next, and so on (subgroup isolation: an entry's deviation orders
only its own siblings' jobs).  Adding 100 to every element makes the tuple the digits
of a number in base 200, so a scheduler that knows nothing of the tree can order jobs
by one flat priority:

    priority = sum over i = 1..d of (deviation[i] + 100) x 200 ** (d - i)

d being the depth of the policy tree, shorter tuples padded with deviation 0.

Here, for every lnode of a site:

- `target`: its shares over the shares of its siblings that are present (an lnode here,
  or, measured globally, with usage at another site; idle siblings' shares spread as
  `Consts.idleshare` says, the cycle's m_share rule: fairshare.core.grid.targets_and_actuals);
- `actual`: its usage over theirs, this site's or, where its parent's scope is global,
  every site's (fairshare.core.grid);
- `deviation`: target - actual in percentage points; 0 for every member of a pooled
  subtree, which takes its pooled ancestor's standing (Slurm's FairShare=parent);
- the *digits*: deviation + 100 rounded down to a whole number and kept within 0..199,
  so that the flat priority orders exactly as the digit tuples do lexicographically
  (a deviation of +100, an entry with no usage at all among busy siblings, is digit 199).

The priority is a Python integer (exact at any depth; below 2**63 up to depth 8).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairshare.core.grid import grid_usage, pooled_below, present_nodes, targets_and_actuals
from fairshare.core.tree import ShareTree

#: The base of the flat priority, and the largest digit.
BASE = 200
TOP_DIGIT = BASE - 1


@dataclass(frozen=True)
class Standing:
    """Every node's target, actual share and deviation (per node; fractions of the parent
    for target and actual, percentage points for deviation), and the tree's depth."""

    tree: ShareTree
    target: np.ndarray
    actual: np.ndarray
    deviation: np.ndarray
    depth: int

    def paths(self, nodes: np.ndarray) -> np.ndarray:
        """The root-to-leaf chains of `nodes` (int [len(nodes), depth]): column k holds
        each node's ancestor at level k + 1, -1 past the node's own level."""
        tree = self.tree
        nodes = np.asarray(nodes, dtype=np.int64)
        out = np.full((len(nodes), max(self.depth, 1)), -1, dtype=np.int64)
        cur = nodes.copy()
        for _ in range(self.depth):
            lv = tree.level[cur]
            ok = lv >= 1
            out[np.flatnonzero(ok), lv[ok] - 1] = cur[ok]
            cur = np.where(ok, tree.parent[cur], 0)
        return out

    def deviations(self, nodes: np.ndarray) -> np.ndarray:
        """The deviation tuples of `nodes` (float [len(nodes), depth], percentage points),
        padded with 0."""
        p = self.paths(nodes)
        return np.where(p >= 0, self.deviation[np.maximum(p, 0)], 0.0)

    def digits(self, nodes: np.ndarray) -> np.ndarray:
        """The base-200 digits of `nodes` (int [len(nodes), depth]): deviation + 100
        rounded down, within 0..199."""
        d = np.floor(self.deviations(nodes) + 100.0)
        return np.clip(d, 0, TOP_DIGIT).astype(np.int64)

    def priority(self, nodes: np.ndarray) -> list[int]:
        """The flat priority of each of `nodes` (exact integers; larger: farther behind
        its targets, to run first)."""
        return flat_priority(self.digits(nodes))


def flat_priority(digits: np.ndarray) -> list[int]:
    """The numbers whose base-200 digits are the rows of `digits` (most significant
    first), as exact Python integers."""
    d = digits.shape[1] if digits.ndim == 2 else 0
    weights = np.array([BASE ** (d - 1 - i) for i in range(d)], dtype=object)
    return [int(v) for v in (digits.astype(object) @ weights)] if d else [0] * len(digits)


def standing(
    tree: ShareTree,
    usage: np.ndarray,
    active: np.ndarray,
    *,
    even: bool = False,
    measured: np.ndarray | None = None,
    remote: np.ndarray | None = None,
) -> Standing:
    """The `Standing` of `tree`'s nodes for the lnodes `active` (leaves, and groups above
    them) with `usage` per node (charge units, a group's the sum of its active leaves'),
    the other sites' usage `remote` (per node) counting where `measured` globally
    (fairshare.core.grid), idle siblings' shares spread evenly with `even`."""
    if measured is None:
        measured = np.zeros(tree.size, dtype=bool)
    present = present_nodes(tree, active & tree.leaf_mask, measured, remote)
    g = grid_usage(tree, usage, remote, measured)
    target, actual = targets_and_actuals(tree, present, g, even)
    deviation = np.where(present, (target - actual) * 100.0, 0.0)
    deviation[0] = 0.0
    deviation = np.where(pooled_below(tree), 0.0, deviation)
    return Standing(tree, target, actual, deviation, tree.depth)
