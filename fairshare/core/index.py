"""The level structure of a share tree, for per-level arithmetic (pure numpy).

A `TreeIndex` is built once per tree (`ShareTree.index`) from its breadth-first
numbering: the contiguous node range of every level, each node's parent, and which
nodes are leaves, hold shares or are groups.  With it, sibling sums are one bincount,
products down the tree one step per level, and subtree sums one matrix product on small
trees or one reduceat per level on large ones: the cycle (fairshare.core.cycle), the
split (fairshare.core.split) and the tree's own normalisation loop over levels, never
over nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

#: Trees up to this many nodes sum subtrees with one matrix product.
SMALL_TREE = 400

T = TypeVar("T")


@dataclass
class TreeIndex:
    """Level slices of a breadth-first numbered tree, for fast per-level arithmetic.

    bounds[k] = (start, stop) of level k's node numbers; ppos[k] = each level-k node's
    parent as a position within level k-1.  Children of one parent are contiguous and
    in parent order (build_tree numbers them so), so `firsts[k]` (the first child of each
    parent that has children, within level k) and `owners[k]` (those parents' positions
    within level k-1) let np.add.reduceat sum siblings for many arrays at once.
    """

    n: int
    leaf: np.ndarray
    bounds: list[tuple[int, int]]
    ppos: list[np.ndarray]
    firsts: list[np.ndarray]
    owners: list[np.ndarray]
    parent0: np.ndarray  # parent of every node, the root's being itself (0)
    parent1: np.ndarray  # parents of nodes 1..n-1
    owner_nodes: list[np.ndarray]  # owners[k] as node numbers
    within: np.ndarray | None  # small trees: within[j, i] = 1 if j is i or below it
    has_shares: np.ndarray  # shares > 0
    group: np.ndarray  # Kind.GROUP
    # The last result of every `Memo` (by its Memo object; read and written through it).
    memos: dict[Memo, tuple] = field(default_factory=dict, repr=False, compare=False)

    def sibling_sum(self, values: np.ndarray) -> np.ndarray:
        """For every node, the sum of `values` over it and its siblings (root: its own)."""
        sums = np.bincount(self.parent1, weights=values[1:], minlength=self.n)
        out = sums[self.parent0]
        out[0] = values[0]
        return out

    def down_product(self, ratio: np.ndarray, top: float = 1.0) -> np.ndarray:
        """For every node, `top` times the product of `ratio` over it and its ancestors
        below the root (a new array; ratio[0] is ignored)."""
        out = np.array(ratio, dtype=float)
        out[0] = top
        p = self.parent0
        for s, e in self.bounds[1:]:
            out[s:e] *= out[p[s:e]]
        return out

    def subtree_sum(self, values: np.ndarray) -> np.ndarray:
        """Each node's value plus those of all its descendants (a new float array).

        `values` may be (n,) or (k, n) for k arrays at once.  Small trees use one matrix
        product with `within` (fewer numpy calls matter more than arithmetic there).
        """
        if self.within is not None:
            return np.asarray(values, dtype=float) @ self.within
        t = np.array(values, dtype=float)
        for k in range(len(self.bounds) - 1, 0, -1):
            s, e = self.bounds[k]
            t[..., self.owner_nodes[k]] += np.add.reduceat(t[..., s:e], self.firsts[k], axis=-1)
        return t


class Memo(Generic[T]):
    """One memoised result per tree index, for one function: the module that computes
    the result owns its `Memo` object, so no other module can reach its entry.

    What the cycle memoises depends only on which lnodes exist and which want CPU (it
    changes when processes come and go, not every cycle), or on the tree alone: `get`
    returns the last value `put` on that index if it was put with an equal `key` (None
    for a result that depends on the tree alone), else None.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Memo({self.name!r})"

    def get(self, idx: TreeIndex, key: object = None) -> T | None:
        """The value last put on `idx` under an equal `key`, or None."""
        hit = idx.memos.get(self)
        if hit is None or hit[0] != key:
            return None
        return hit[1]

    def put(self, idx: TreeIndex, value: T, key: object = None) -> T:
        """Keep `value` (for `key`) as this memo's one entry on `idx`; returns it."""
        idx.memos[self] = (key, value)
        return value


def build_index(
    levels: list[np.ndarray],
    parent: np.ndarray,
    leaf: np.ndarray,
    shares: np.ndarray,
    group: np.ndarray,
) -> TreeIndex:
    """The `TreeIndex` of a breadth-first numbered tree: its `levels` (node numbers per
    level), every node's `parent` (-1 for the root), and the masks of its leaves, of the
    nodes with shares > 0 and of its groups (ShareTree.index builds it once per tree)."""
    size = len(parent)
    bounds, ppos, firsts, owners = [], [], [], []
    for k, lv in enumerate(levels):
        s, e = int(lv[0]), int(lv[-1]) + 1
        if e - s != len(lv) or (k and s != bounds[-1][1]):
            raise ValueError("tree levels must be contiguous breadth-first node ranges")
        bounds.append((s, e))
        if k == 0:
            ppos.append(np.zeros(1, dtype=np.int64))
            firsts.append(np.zeros(0, dtype=np.int64))
            owners.append(np.zeros(0, dtype=np.int64))
            continue
        pp = parent[s:e] - bounds[k - 1][0]
        if (np.diff(pp) < 0).any():
            raise ValueError("children must be numbered in the order of their parents")
        first = np.flatnonzero(np.concatenate(([True], pp[1:] != pp[:-1])))
        ppos.append(pp)
        firsts.append(first)
        owners.append(pp[first])
    parent0 = parent.copy()
    parent0[0] = 0
    owner_nodes = [o + bounds[k - 1][0] if k else o for k, o in enumerate(owners)]
    within = None
    if size <= SMALL_TREE:
        within = np.eye(size)
        for s, e in bounds[1:]:
            within[s:e] += within[parent0[s:e]]
    return TreeIndex(
        size, leaf, bounds, ppos, firsts, owners, parent0, parent0[1:].copy(),
        owner_nodes, within, shares > 0, group,
    )  # fmt: skip
