"""Share trees the cycle's and the policies' tests share: Kay-Lauder's Table I and a
hypothesis strategy for random trees."""

from __future__ import annotations

from types import SimpleNamespace as Row

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
