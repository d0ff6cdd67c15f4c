"""Per-node usage half-lives (seed 004, section 2.2.2.4; Kay and Lauder's differential
decay rates): a group's own half-life rules its subtree, the global one the rest."""

from __future__ import annotations

from types import SimpleNamespace as Row

import numpy as np
import pytest

from fairshare.core.consts import Consts
from fairshare.core.cycle import Consumption, node_decay
from fairshare.core.lnode import activate, new_table
from fairshare.core.policies import POLICIES, run_cycle
from fairshare.core.tree import build_tree

G = 0o40000
HOUR = 3600.0


def seed_tree(b_halflife: float = 0.0, sub_halflife: float = 0.0):
    """Seed 004's Figure 2-3: organisations A (users 1, 2) and B (users 3, 4); B may set
    its own half-life, and B's user 4 (a group here, "B4", holding user 4) its own."""
    rows = [
        Row(name="A", uid=100, resgrp=0, shares=1, shflags=G, halflife=0.0),
        Row(name="B", uid=200, resgrp=0, shares=1, shflags=G, halflife=b_halflife),
        Row(name="u1", uid=1, resgrp=100, shares=1, shflags=0, halflife=0.0),
        Row(name="u2", uid=2, resgrp=100, shares=1, shflags=0, halflife=0.0),
        Row(name="u3", uid=3, resgrp=200, shares=1, shflags=0, halflife=0.0),
        Row(name="B4", uid=210, resgrp=200, shares=1, shflags=G, halflife=sub_halflife),
        Row(name="u4", uid=4, resgrp=210, shares=1, shflags=0, halflife=0.0),
    ]
    return build_tree(rows)


def test_a_groups_half_life_is_inherited_by_its_subtree():
    tree = seed_tree(b_halflife=8 * HOUR, sub_halflife=HOUR / 2)
    hl = tree.halflives(HOUR)
    got = {n: hl[tree.node(n)] for n in ("A", "u1", "B", "u3", "B4", "u4")}
    assert got == {"A": HOUR, "u1": HOUR, "B": 8 * HOUR, "u3": 8 * HOUR,
                   "B4": HOUR / 2, "u4": HOUR / 2}  # fmt: skip
    assert hl[0] == HOUR and tree.own_halflives
    assert not seed_tree().own_halflives and seed_tree().halflife is None


def test_node_decay_is_one_number_unless_a_node_sets_its_own():
    consts = Consts(halflife=HOUR)
    assert node_decay(seed_tree(), HOUR, consts) == 0.5
    k = node_decay(seed_tree(b_halflife=2 * HOUR), 2 * HOUR, consts)
    tree = seed_tree(b_halflife=2 * HOUR)
    assert k[tree.node("u1")] == 0.25 and k[tree.node("u3")] == 0.5


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_decays_each_leaf_with_its_own_half_life(policy):
    """Idle lnodes with usage 1000 after two hours: 250 under the global one-hour
    half-life (A's users), 500 under B's two hours, 1000 x 0.5 ** 4 under B4's half hour."""
    tree = seed_tree(b_halflife=2 * HOUR, sub_halflife=HOUR / 2)
    table = new_table(tree)
    for name in ("u1", "u2", "u3", "u4"):
        activate(table, tree.node(name), 1000.0)
    c = Consumption.zeros(tree.size)
    for name in ("u1", "u2", "u3", "u4"):
        c.refs[tree.node(name)] = 1
    out = run_cycle(tree, table, c, Consts(halflife=HOUR, policy=policy), 2 * HOUR)
    usage = {n: float(out.usage[tree.node(n)]) for n in ("u1", "u3", "u4")}
    assert usage == pytest.approx({"u1": 250.0, "u3": 500.0, "u4": 1000.0 / 16})
    assert np.all(out.usage >= 0)


def test_a_returning_user_brings_usage_aged_with_its_groups_half_life():
    """shusage 1000 written two hours ago: 500 back under B's two-hour half-life, 250
    under the global hour (A)."""
    from fairshare.core.steps import activate_stored

    tree = seed_tree(b_halflife=2 * HOUR)
    table = new_table(tree)
    consts, now = Consts(halflife=HOUR), 1e9
    assert activate_stored(table, tree.node("u3"), 1000.0, now - 2 * HOUR, now, consts, tree) == (
        pytest.approx(500.0)
    )
    assert activate_stored(table, tree.node("u1"), 1000.0, now - 2 * HOUR, now, consts, tree) == (
        pytest.approx(250.0)
    )
