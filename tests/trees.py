"""Share trees the cycle's and the policies' tests share: Kay-Lauder's Table I, a
hypothesis strategy for random trees, and the hierarchical max-min allocation worked
out from its definition (the reference fairshare.core.maxmin and the simulator are
checked against)."""

from __future__ import annotations

from types import SimpleNamespace as Row

import numpy as np
from hypothesis import strategies as st

from fairshare.core.tree import ShareTree, build_tree

#: shflags of a resource group.
G = 0o40000


@st.composite
def random_trees(draw, max_users: int = 12, group_shares: int = 1) -> tuple[ShareTree, int]:
    """(tree, number of users): up to 4 groups nested at random under root or each other
    (each with `group_shares` to 50 shares), and 1 to `max_users` users u0.. placed at
    random under root or a group, with 0 to 100 shares."""
    rows, guids = [], [0]
    for g in range(draw(st.integers(0, 4))):
        parent = draw(st.sampled_from(guids))
        rows.append(Row(name=f"g{g}", uid=500 + g, resgrp=parent,
                        shares=draw(st.integers(group_shares, 50)), shflags=G))  # fmt: skip
        guids.append(500 + g)
    nusers = draw(st.integers(1, max_users))
    for u in range(nusers):
        rows.append(Row(name=f"u{u}", uid=1000 + u, resgrp=draw(st.sampled_from(guids)),
                        shares=draw(st.integers(0, 100)), shflags=0))  # fmt: skip
    return build_tree(rows), nusers


def table_one() -> ShareTree:
    """Kay-Lauder Table I: A and B equal; A1 alone in A; B1 9 shares, B2 1 share in B."""
    rows = [
        Row(name="A", uid=500, resgrp=0, shares=1, shflags=G),
        Row(name="B", uid=600, resgrp=0, shares=1, shflags=G),
        Row(name="A1", uid=1001, resgrp=500, shares=1, shflags=0),
        Row(name="B1", uid=1002, resgrp=600, shares=9, shflags=0),
        Row(name="B2", uid=1003, resgrp=600, shares=1, shflags=0),
    ]
    return build_tree(rows)


def maxmin_reference(tree: ShareTree, demand: np.ndarray, capacity: float) -> np.ndarray:
    """Max-min by the definition, one sibling set at a time: repeatedly give every
    unsatisfied child its shares' part of what is left, satisfy those that want less."""
    children: dict[int, list[int]] = {}
    for n in range(1, tree.size):
        children.setdefault(int(tree.parent[n]), []).append(n)
    want = np.zeros(tree.size)
    for n in reversed(range(tree.size)):  # breadth first: children after parents
        want[n] = demand[n] if not children.get(n) else sum(want[c] for c in children[n])
    out = np.zeros(tree.size)

    def split(node: int, amount: float) -> None:
        out[node] = amount
        kids = [c for c in children.get(node, []) if want[c] > 0]
        left, rest = amount, list(kids)
        for zero_pass in (False, True):
            group = [c for c in rest if (tree.shares[c] > 0) != zero_pass]
            while group and left > 1e-15:
                w = [tree.shares[c] if not zero_pass else 1.0 for c in group]
                total = sum(w)
                part = {c: left * wi / total for c, wi in zip(group, w, strict=True)}
                done = [c for c in group if want[c] - given[c] <= part[c]]
                if not done:
                    for c in group:
                        given[c] += part[c]
                    left = 0.0
                    break
                for c in done:
                    left -= want[c] - given[c]
                    given[c] = want[c]
                group = [c for c in group if c not in done]
        for c in kids:
            split(c, given[c])

    given = np.zeros(tree.size)
    split(0, min(capacity, want[0]))
    return out
