"""Target-deviation tuples and the flat base-200 priority (fairshare.core.deviation)."""

from __future__ import annotations

from types import SimpleNamespace as Row

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from trees import random_trees

from fairshare.core.deviation import flat_priority, standing
from fairshare.core.tree import build_tree

G = 0o40000


def small_tree(pooled: int = 0):
    """A (1 share) with a1, a2 (1 each); B (3 shares) with b1."""
    rows = [
        Row(name="A", uid=500, resgrp=0, shares=1, shflags=G, pooled=pooled),
        Row(name="B", uid=600, resgrp=0, shares=3, shflags=G),
        Row(name="a1", uid=1001, resgrp=500, shares=1, shflags=0),
        Row(name="a2", uid=1002, resgrp=500, shares=1, shflags=0),
        Row(name="b1", uid=1003, resgrp=600, shares=1, shflags=0),
    ]
    return build_tree(rows)


def leaf_usage(t, **usage):
    u = np.zeros(t.size)
    for name, value in usage.items():
        u[t.node(name)] = value
    return t.subtree_sum(u)


def test_the_papers_tuple_and_priority_by_hand():
    """A is due 25% and used half, B 75% and used half: A -25, B +25; a1 and a2 are even
    within A (0).  Digits (75, 100) and (125, 100): 75 x 200 + 100 and 125 x 200 + 100."""
    t = small_tree()
    u = leaf_usage(t, a1=2.0, a2=2.0, b1=4.0)
    s = standing(t, u, u > 0)
    nodes = np.array([t.node("a1"), t.node("a2"), t.node("b1")])
    assert np.allclose(s.deviations(nodes), [[-25, 0], [-25, 0], [25, 0]])
    assert s.digits(nodes).tolist() == [[75, 100], [75, 100], [125, 100]]
    assert s.priority(nodes) == [15100, 15100, 25100]
    # within A, a1 used three times a2: a1 25 - 75 = -50, a2 +50
    u = leaf_usage(t, a1=3.0, a2=1.0, b1=4.0)
    s = standing(t, u, u > 0)
    assert np.allclose(s.deviations(nodes[:2]), [[-25, -25], [-25, 25]])


def test_a_pooled_groups_members_take_its_standing():
    t = small_tree(pooled=1)
    u = leaf_usage(t, a1=3.0, a2=1.0, b1=4.0)
    s = standing(t, u, u > 0)
    nodes = np.array([t.node("a1"), t.node("a2")])
    assert np.allclose(s.deviations(nodes), [[-25, 0], [-25, 0]])
    assert s.priority(nodes)[0] == s.priority(nodes)[1]


def test_a_global_entrys_standing_counts_the_other_sites():
    t = small_tree()
    u = leaf_usage(t, a1=1.0, a2=1.0, b1=4.0)
    remote = np.zeros(t.size)
    remote[t.node("a1")] = remote[t.node("A")] = 2.0  # a1 also used 2 elsewhere
    measured = np.zeros(t.size, dtype=bool)
    measured[[t.node("a1"), t.node("a2")]] = True  # A's scope is global
    s = standing(t, u, u > 0, measured=measured, remote=remote)
    # A against B is local: 2 of 6 against 25%; within A a1 3 of 4 against 50%
    assert np.isclose(s.deviation[t.node("A")], 25 - 100 * 2 / 6)
    assert np.isclose(s.deviation[t.node("a1")], -25) and np.isclose(s.deviation[t.node("a2")], 25)


@settings(max_examples=60, deadline=None)
@given(random_trees(), st.data())
def test_ordering_by_flat_priority_is_lexicographic_ordering_by_tuples(drawn, data):
    tree, _n = drawn
    leaves = np.flatnonzero(tree.leaf_mask)
    u = np.zeros(tree.size)
    for n in leaves.tolist():
        u[n] = data.draw(st.floats(0.0, 100.0, allow_nan=False))
    active = np.zeros(tree.size, dtype=bool)
    active[leaves] = True
    # some subtrees global, with usage at other sites
    measured = np.array([data.draw(st.booleans()) for _ in range(tree.size)])
    measured[0] = False
    remote = tree.subtree_sum(np.where(tree.leaf_mask, u[::-1], 0.0))
    s = standing(tree, tree.subtree_sum(u), active, measured=measured, remote=remote)
    digits = s.digits(leaves)
    prio = s.priority(leaves)
    by_priority = sorted(range(len(leaves)), key=lambda i: (prio[i], i))
    by_tuple = sorted(range(len(leaves)), key=lambda i: (tuple(digits[i]), i))
    assert by_priority == by_tuple
    assert all(0 <= d <= 199 for row in digits.tolist() for d in row)


@given(st.lists(st.lists(st.integers(0, 199), min_size=3, max_size=3), min_size=1, max_size=20))
def test_flat_priority_is_the_base_200_number(rows):
    digits = np.array(rows, dtype=np.int64)
    got = flat_priority(digits)
    assert got == [a * 40000 + b * 200 + c for a, b, c in rows]
    assert sorted(range(len(rows)), key=lambda i: (got[i], i)) == sorted(
        range(len(rows)), key=lambda i: (tuple(rows[i]), i)
    )
