"""The fair target (fairshare.core.maxmin): hierarchical max-min with demand, checked by
hand-worked cases and against a recursive reference written from the definition
(tests/trees.py, maxmin_reference)."""

from __future__ import annotations

from types import SimpleNamespace as Row

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trees import G, maxmin_reference, random_trees, table_one

from fairshare.core.maxmin import maxmin_allocation
from fairshare.core.tree import ShareTree, build_tree


def two_groups() -> ShareTree:
    """The Groups issue's case: Physics (u1, u2) and Chem (u3, u4), equal shares."""
    rows = [
        Row(name="Physics", uid=500, resgrp=0, shares=1, shflags=G),
        Row(name="Chem", uid=600, resgrp=0, shares=1, shflags=G),
        Row(name="u1", uid=1001, resgrp=500, shares=1, shflags=0),
        Row(name="u2", uid=1002, resgrp=500, shares=1, shflags=0),
        Row(name="u3", uid=1003, resgrp=600, shares=1, shflags=0),
        Row(name="u4", uid=1004, resgrp=600, shares=1, shflags=0),
    ]
    return build_tree(rows)


def by_name(tree: ShareTree, values: np.ndarray) -> dict[str, float]:
    return {tree.names[n]: float(values[n]) for n in range(1, tree.size)}


def demand_of(tree: ShareTree, **want: float) -> np.ndarray:
    d = np.zeros(tree.size)
    for name, cpus in want.items():
        d[tree.node(name)] = cpus
    return d


def test_an_interactive_member_leaves_its_share_to_its_own_group():
    t = two_groups()
    got = by_name(
        t, maxmin_allocation(t.index, t.shares, demand_of(t, u1=8, u2=8, u3=1, u4=0.01), 2)
    )
    assert got["Physics"] == pytest.approx(1.0)
    assert got["Chem"] == pytest.approx(1.0)
    assert got["u1"] == pytest.approx(0.5) and got["u2"] == pytest.approx(0.5)
    assert got["u4"] == pytest.approx(0.01)
    assert got["u3"] == pytest.approx(0.99)


def test_a_satisfied_subtree_passes_the_rest_up_to_the_parents_siblings():
    t = two_groups()
    got = by_name(t, maxmin_allocation(t.index, t.shares, demand_of(t, u1=8, u3=0.3, u4=0.2), 2))
    assert got["Chem"] == pytest.approx(0.5)
    assert got["Physics"] == pytest.approx(1.5)
    assert got["u1"] == pytest.approx(1.5)


def test_table_one_gives_each_organisation_half_when_b1_is_idle():
    t = table_one()
    got = by_name(t, maxmin_allocation(t.index, t.shares, demand_of(t, A1=1, B2=1), 1))
    assert got["A"] == pytest.approx(0.5) and got["B"] == pytest.approx(0.5)
    assert got["B2"] == pytest.approx(0.5)


def test_idle_share_is_spread_evenly_under_the_even_rule():
    # Elmroth and Gardfjall's Figure 13: U-B11 55, U-B12 30 (idle), U-B13 15.
    rows = [
        Row(name="b11", uid=1, resgrp=0, shares=55, shflags=0),
        Row(name="b12", uid=2, resgrp=0, shares=30, shflags=0),
        Row(name="b13", uid=3, resgrp=0, shares=15, shflags=0),
    ]
    t = build_tree(rows)
    d = demand_of(t, b11=1, b13=1)
    even = by_name(t, maxmin_allocation(t.index, t.shares, d, 1, even=True))
    prop = by_name(t, maxmin_allocation(t.index, t.shares, d, 1))
    assert even["b11"] == pytest.approx(0.70) and even["b13"] == pytest.approx(0.30)
    assert prop["b11"] == pytest.approx(55 / 70) and prop["b13"] == pytest.approx(15 / 70)


def test_zero_shares_get_only_what_the_others_leave():
    rows = [
        Row(name="idle", uid=1, resgrp=0, shares=0, shflags=0),
        Row(name="a", uid=2, resgrp=0, shares=10, shflags=0),
    ]
    t = build_tree(rows)
    busy = by_name(t, maxmin_allocation(t.index, t.shares, demand_of(t, idle=2, a=2), 2))
    assert busy["a"] == pytest.approx(2.0) and busy["idle"] == pytest.approx(0.0, abs=1e-6)
    light = by_name(t, maxmin_allocation(t.index, t.shares, demand_of(t, idle=2, a=0.5), 2))
    assert light["a"] == pytest.approx(0.5) and light["idle"] == pytest.approx(1.5)


@settings(max_examples=200, deadline=None)
@given(random_trees(), st.data(), st.integers(1, 8))
def test_matches_the_definition_on_random_trees(tree_users, data, cpus):
    tree, _ = tree_users
    leaves = np.flatnonzero(tree.leaf_mask)
    demand = np.zeros(tree.size)
    for n in leaves:
        demand[n] = data.draw(st.sampled_from([0.0, 0.01, 0.3, 1.0, 2.0, 8.0]))
    got = maxmin_allocation(tree.index, tree.shares, demand, cpus)
    want = maxmin_reference(tree, demand, cpus)
    np.testing.assert_allclose(got[leaves], want[leaves], atol=1e-6)
    assert got[0] == pytest.approx(min(cpus, demand.sum()))
