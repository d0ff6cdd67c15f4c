"""The pure scheduling cycle: each step alone with numbers worked out by hand, then the
whole cycle's invariants (hypothesis) and its feedback equilibrium."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace as Row

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trees import random_trees, table_one

from fairshare.core.consts import ADJGROUPS, K5, LIMSHARE, Consts
from fairshare.core.cycle import (
    PRIORITY_MAX,
    Consumption,
    Decision,
    apply_sharemin,
    background_leaves,
    decay_usage,
    effective_shares,
    group_adjustment,
    leaf_charges,
    limshare_band,
    lnode_table,
    near_future_shares,
    priority,
    raise_usage,
)
from fairshare.core.lnode import activate, new_table
from fairshare.core.policies import run_cycle
from fairshare.core.split import machine_shares
from fairshare.core.tree import Kind, build_tree, tree_index
from udb.models import IDLE_UID

G = 0o40000


def flat(*shares, idle=False):
    rows = [Row(name=f"u{i}", uid=1001 + i, resgrp=0, shares=s, shflags=0)
            for i, s in enumerate(shares)]  # fmt: skip
    if idle:
        rows.append(Row(name="Idle", uid=IDLE_UID, resgrp=0, shares=0, shflags=0))
    return build_tree(rows)


def busy(tree, cpu: dict[str, float], idle: tuple[str, ...] = ()) -> Consumption:
    c = Consumption.zeros(tree.size)
    for name, seconds in cpu.items():
        n = tree.node(name)
        c.cpu[n], c.nrun[n], c.refs[n] = seconds, 1, 1
    for name in idle:
        c.refs[tree.node(name)] = 1
    return c


def with_lnodes(tree, usage: dict[str, float]):
    t = new_table(tree)
    for name, u in usage.items():
        activate(t, tree.node(name), u)
    return t


# -- step 1: charges -------------------------------------------------------------------


def test_leaf_charges_by_hand():
    c = Consumption.zeros(2)
    c.cpu[1], c.bio[1], c.sio[1], c.syscalls[1], c.mem[1], c.tty[1] = 2.0, 10, 4, 100, 50, 3
    consts = Consts(cost_tick=100, cost_bio=2, cost_sio=5, cost_syscall=0.5, cost_mem=1,
                    cost_tty=7, percent=50)  # fmt: skip
    # (100 x 200 ticks + 2 x 10 + 5 x 4 + 0.5 x 100 + 1 x 50 + 7 x 3) x 0.5
    expected = (20000 + 20 + 20 + 50 + 50 + 21) * 0.5
    assert leaf_charges(c, consts).tolist() == [0.0, expected]


# -- step 2: m_share and sharemin ------------------------------------------------------


def test_machine_shares_match_the_tree(tmp_path):
    tree = table_one()
    idx = tree_index(tree)
    for mask in ([0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 0, 1], [0, 0, 0, 0, 1, 1]):
        leaves = np.array(mask, dtype=bool)
        active = tree.active_nodes(leaves)
        np.testing.assert_allclose(
            machine_shares(idx, tree.shares, active), tree.m_shares(leaves), atol=1e-15
        )
    # Table I's m_shares: A1 0.50, B1 0.45, B2 0.05
    m = machine_shares(idx, tree.shares, np.ones(tree.size, dtype=bool))
    assert [m[tree.node(n)] for n in ("A1", "B1", "B2")] == pytest.approx([0.5, 0.45, 0.05])


def test_sharemin_raises_small_leaves():
    tree = flat(1, 499, 500)
    idx = tree_index(tree)
    m = tree.m_shares()
    out = apply_sharemin(idx, m, tree.leaf_mask, 0.1)
    # 0.001 -> 0.1; the others share 0.9 in proportion 499:500
    assert out[1:].tolist() == pytest.approx([0.1, 0.9 * 499 / 999, 0.9 * 500 / 999])
    assert out[0] == pytest.approx(1.0)


def test_sharemin_iterates_when_scaling_pushes_others_below():
    tree = flat(2, 8, 90)
    out = apply_sharemin(tree_index(tree), tree.m_shares(), tree.leaf_mask, 0.1)
    # 0.02 -> 0.1 leaves 0.9 for 8:90, giving 0.073 < 0.1, so that one is fixed too.
    assert out[1:].tolist() == pytest.approx([0.1, 0.1, 0.8])


def test_sharemin_equal_when_impossible():
    tree = flat(1, 2, 3)
    out = apply_sharemin(tree_index(tree), tree.m_shares(), tree.leaf_mask, 0.4)
    assert out[1:].tolist() == pytest.approx([1 / 3] * 3)


# -- step 3: ADJGROUPS -------------------------------------------------------------------


def test_group_adjustment_figure_5():
    tree = table_one()
    idx = tree_index(tree)
    active = np.ones(tree.size, dtype=bool)
    m = machine_shares(idx, tree.shares, active)
    charges = np.zeros(tree.size)
    charges[tree.node("A1")] = 90.0
    charges[tree.node("B2")] = 10.0
    adj = group_adjustment(idx, tree.kinds == Kind.GROUP, active, m, charges, 0.75)
    # B: actual 10/100 = 0.1 of the charges, due 0.5: 0.1 < 0.75 x 0.5, so its users'
    # charges are scaled by 0.1 / 0.375.
    f = 0.1 / 0.375
    assert adj[tree.node("B")] == pytest.approx(f)
    assert adj[tree.node("B1")] == pytest.approx(f) and adj[tree.node("B2")] == pytest.approx(f)
    assert adj[tree.node("A")] == 1.0 and adj[tree.node("A1")] == 1.0
    # within tolerance: no adjustment
    charges[tree.node("B2")] = 60.0  # B has 0.4 >= 0.375
    adj = group_adjustment(idx, tree.kinds == Kind.GROUP, active, m, charges, 0.75)
    assert (adj == 1.0).all()


def test_adjgroups_discounts_usage_not_charge():
    tree = table_one()
    t = with_lnodes(tree, {"A1": 0.0, "B2": 0.0})
    c = busy(tree, {"A1": 0.9, "B2": 0.1})
    out = run_cycle(tree, t, c, Consts(flags=ADJGROUPS), 4.0)
    b2 = tree.node("B2")
    assert out.charge[b2] == pytest.approx(0.1 * 10000)  # full cost
    assert out.usage[b2] == pytest.approx(0.1 * 10000 * (0.1 / 0.375))  # discounted
    without = run_cycle(tree, t, c, Consts(), 4.0)
    assert without.usage[b2] == pytest.approx(1000.0)


# -- step 4: decay ---------------------------------------------------------------------


def test_decay_usage():
    assert decay_usage(np.array([1000.0]), np.array([10.0]), 0.5).tolist() == [510.0]


def test_cycle_decays_by_elapsed_over_halflife():
    tree = flat(1, 1)
    t = with_lnodes(tree, {"u0": 1000.0, "u1": 0.0})
    c = busy(tree, {"u1": 1.0}, idle=("u0",))
    out = run_cycle(tree, t, c, Consts(halflife=60.0), 120.0)
    assert out.usage[tree.node("u0")] == pytest.approx(250.0)
    assert out.usage[0] == pytest.approx(250.0 + 10000.0)  # groups: sum of the leaves


# -- step 5: effective shares ----------------------------------------------------------


def test_equilibrium_usage_gives_due_share():
    # Usage proportional to m_share (what a user at its share accumulates): e = m.
    tree = flat(2, 1)
    t = with_lnodes(tree, {"u0": 2e6, "u1": 1e6})
    out = run_cycle(tree, t, busy(tree, {"u0": 0.0, "u1": 0.0}), Consts(), 0.0)
    assert out.e_share[1:].tolist() == pytest.approx([2 / 3, 1 / 3])


def test_near_future_proportion_by_hand():
    # m = 1/2 each, usage 1 and 3: m^2/u = 0.25 and 0.0833: proportions 3/4 and 1/4
    # (below K5 x due = 1, so no edge effect).
    tree = flat(1, 1)
    idx = tree_index(tree)
    m = tree.m_shares()
    usage = np.array([4.0, 1.0, 3.0])
    demand = np.ones(3, dtype=bool)
    sh = effective_shares(idx, m, usage, demand, demand, K5)
    assert sh.e_share[1:].tolist() == pytest.approx([0.75, 0.25])
    assert sh.raise_.tolist() == [1.0, 1.0, 1.0]


def test_table_one_gives_b_half_with_adjgroups():
    # Both organisations have used half of the CPU (A1 and B2 each 0.5 of the usage).
    # With ADJGROUPS the proportion is split group by group: A and B each get m^2/u =
    # 0.25/0.5, i.e. half; B1 is idle, so B2 gets all of B's half.  (No charges this
    # cycle, so the group adjustment itself changes nothing.)
    tree = table_one()
    t = with_lnodes(tree, {"A1": 5e5, "B1": 0.0, "B2": 5e5})
    c = busy(tree, {"A1": 0.0, "B2": 0.0}, idle=("B1",))
    out = run_cycle(tree, t, c, Consts(flags=ADJGROUPS), 0.0)
    e = {n: out.e_share[tree.node(n)] for n in ("A", "B", "A1", "B1", "B2")}
    assert e["A"] == pytest.approx(0.5) and e["B"] == pytest.approx(0.5)
    assert e["A1"] == pytest.approx(0.5) and e["B2"] == pytest.approx(0.5)
    # B1, idle, is told what it would get if it started: B's half, nearly all of it
    # (its usage is 0, so it is bounded only by K5 x 0.9 x 0.5 = 0.9).
    assert e["B1"] == pytest.approx(0.5, rel=1e-6)
    assert out.demand[tree.node("B")] and not out.demand[tree.node("B1")]


def test_the_table_keeps_the_due_share_and_the_flat_near_future_proportion():
    # Table I with A1 and B2 busy, B1 logged in but idle, ADJGROUPS (group by group):
    # due A 1/2, A1 1/2 (alone in A), B 1/2, B2 1/2 (the only demanding leaf of B);
    # B1, idle, is told what would be due if it started: 0.9/(0.9 + 0.1) of B's half.
    # The flat Kay-Lauder proportion over the demanding leaves: A1 0.5^2/1e5, B2
    # 0.05^2/1e5, i.e. 100/101 and 1/101; 0 for B1 and the groups.
    tree = table_one()
    t = with_lnodes(tree, {"A1": 1e5, "B1": 0.0, "B2": 1e5})
    c = busy(tree, {"A1": 0.0, "B2": 0.0}, idle=("B1",))
    out = run_cycle(tree, t, c, Consts(flags=ADJGROUPS), 0.0)  # no charges: no adjustment
    due = {n: out.due[tree.node(n)] for n in ("A", "B", "A1", "B1", "B2")}
    assert due == pytest.approx({"A": 0.5, "B": 0.5, "A1": 0.5, "B1": 0.45, "B2": 0.5})
    pri = {n: out.pri[tree.node(n)] for n in ("A", "B", "A1", "B1", "B2")}
    assert pri == pytest.approx({"A": 0, "B": 0, "A1": 100 / 101, "B1": 0, "B2": 1 / 101})


def test_table_one_flat_without_adjgroups():
    # The same usage without ADJGROUPS: Kay-Lauder's flat model, every leaf against
    # every other by m^2/u: B2 gets (0.05^2/0.5) / (0.05^2/0.5 + 0.5^2/0.5) = 1/101,
    # A1 the rest; organisation B is B2.  Both are within K5 x their due share (m_share
    # over the demanding leaves': 0.05/0.55 and 0.5/0.55), so nothing is capped.
    tree = table_one()
    t = with_lnodes(tree, {"A1": 5e5, "B1": 0.0, "B2": 5e5})
    out = run_cycle(tree, t, busy(tree, {"A1": 0.0, "B2": 0.0}, idle=("B1",)), Consts(), 0.0)
    e = {n: out.e_share[tree.node(n)] for n in ("A", "B", "A1", "B1", "B2")}
    assert e["B2"] == pytest.approx(1 / 101) and e["B"] == pytest.approx(1 / 101)
    assert e["A1"] == pytest.approx(100 / 101) and e["A"] == pytest.approx(100 / 101)
    # B1, idle with usage 0, would be held at K5 x its due share if it started:
    # 0.45 / (0.55 + 0.45) x 2.
    assert e["B1"] == pytest.approx(0.9)
    # the due shares flat: m_share over the demanding leaves' (B1: over them and itself)
    due = {n: out.due[tree.node(n)] for n in ("A", "B", "A1", "B1", "B2")}
    assert due == pytest.approx(
        {"A": 0.5 / 0.55, "B": 0.05 / 0.55, "A1": 0.5 / 0.55, "B1": 0.45, "B2": 0.05 / 0.55}
    )
    # At equilibrium (usage in proportion to what each gets) B2 gets 0.05/0.55.
    t = with_lnodes(tree, {"A1": 0.5 / 0.55 * 1e6, "B1": 0.0, "B2": 0.05 / 0.55 * 1e6})
    out = run_cycle(tree, t, busy(tree, {"A1": 0.0, "B2": 0.0}, idle=("B1",)), Consts(), 0.0)
    assert out.e_share[tree.node("B2")] == pytest.approx(1 / 11)


def test_edge_effect_newcomer_capped_at_k5_due_and_usage_raised():
    tree = flat(1, 1, 1, 1)
    t = with_lnodes(tree, {"u0": 1e6, "u1": 1e6, "u2": 2e6, "u3": 0.0})
    c = busy(tree, {"u0": 0.0, "u1": 0.0, "u2": 0.0, "u3": 0.0})
    out = run_cycle(tree, t, c, Consts(), 0.0)
    e = out.e_share[1:]
    assert e[3] == pytest.approx(K5 * 0.25)  # due 1/4, never more than twice that
    # the rest in the old proportion m^2/u: 2:2:1 of the other half
    assert e[:3].tolist() == pytest.approx([0.2, 0.2, 0.1])
    # Figure 4: the newcomer's usage is raised so that m^2/usage gives exactly K5 x due.
    w = out.m_share[1:] ** 2 / out.usage[1:]
    assert (w / w.sum())[3] == pytest.approx(0.5)
    assert out.usage[1:4].tolist() == [1e6, 1e6, 2e6]  # others untouched


def test_edge_effect_in_groups_bounds_the_leaf():
    # A new group with a new user: the group is bounded at K5 x its due, and so is the user.
    tree = table_one()
    t = with_lnodes(tree, {"A1": 1e6, "B2": 0.0})
    out = run_cycle(tree, t, busy(tree, {"A1": 0.0, "B2": 0.0}), Consts(), 0.0)
    assert out.e_share[tree.node("B2")] <= K5 * 0.5 + 1e-12
    assert out.e_share[tree.node("A1")] + out.e_share[tree.node("B2")] == pytest.approx(1.0)


def test_raise_usage_reaches_each_capped_nodes_target():
    tree = table_one()
    idx = tree_index(tree)
    usage = np.zeros(tree.size)
    usage[[tree.node("A1"), tree.node("B1"), tree.node("B2")]] = [10.0, 1.0, 3.0]
    f = np.ones(tree.size)
    f[tree.node("B")] = 5.0  # B: 4 -> 20, its users keeping 1:3
    f[tree.node("B1")] = 2.0  # B1 raised within B first
    out = raise_usage(idx, usage, f)
    # B1 doubled relative to B2 (2:3), then B scaled to 20 in all
    assert out[tree.node("B1")] == pytest.approx(8.0) and out[tree.node("B2")] == pytest.approx(
        12.0
    )
    assert out[tree.node("A1")] == 10.0


def test_limshare_caps_at_maxushare_times_due():
    tree = flat(1, 1, 1, 1)
    t = with_lnodes(tree, {"u0": 1e6, "u1": 1e6, "u2": 1e6, "u3": 1e3})
    c = busy(tree, {f"u{i}": 0.0 for i in range(4)})
    consts = Consts(flags=LIMSHARE, maxushare=1.5)
    out = run_cycle(tree, t, c, consts, 0.0)
    assert out.e_share[4] == pytest.approx(1.5 * 0.25)
    assert out.e_share[1:4].tolist() == pytest.approx([0.625 / 3] * 3)
    no_limit = run_cycle(tree, t, c, Consts(), 0.0)
    assert no_limit.e_share[4] == pytest.approx(0.5)  # only the K5 bound


@pytest.mark.parametrize("maxushare", [3.0, 8.0])
def test_maxushare_is_the_ceiling_of_a_users_effective_share(maxushare):
    """The guide's 4.6.1.4: -X "defines the maximum effective share for an individual
    user"; "values of 8.0 and greater are good for a batch environment".  Ten equal
    users (due 1/10), nine with a long past, one new: by m^2/usage the newcomer would
    take 99% of the machine; LIMSHARE holds it at maxushare x due (ACME's -X 3.0: 30%,
    -X 8: 80%), where the band was capped at 2 x due whatever X said."""
    tree = flat(*[1] * 10)
    t = with_lnodes(tree, {**{f"u{i}": 1e6 for i in range(9)}, "u9": 1e3})
    c = busy(tree, {f"u{i}": 0.0 for i in range(10)})
    out = run_cycle(tree, t, c, Consts(flags=LIMSHARE, maxushare=maxushare), 0.0)
    cap = maxushare * 0.1
    assert out.e_share[10] == pytest.approx(cap)
    assert out.e_share[1:10].tolist() == pytest.approx([(1 - cap) / 9] * 9)
    # Figure 4 with X as the limit: the newcomer's usage is raised so that m^2 / usage
    # gives exactly the cap among the others' 9 x 0.1^2 / 1e6
    assert out.usage[10] == pytest.approx(0.01 / (9e-8 * cap / (1 - cap)))


@pytest.mark.parametrize(("k5", "cap"), [(2.0, 0.2), (3.0, 0.3), (8.0, 0.8)])
def test_without_limshare_k5_is_the_ceiling_and_shradmin_sets_it(k5, cap):
    """Kay-Lauder's edge effects (Figure 4, "We have set K5 to 2"): without LIMSHARE
    the newcomer of the test above gets at most K5 x due, whatever maxushare says."""
    tree = flat(*[1] * 10)
    t = with_lnodes(tree, {**{f"u{i}": 1e6 for i in range(9)}, "u9": 1e3})
    c = busy(tree, {f"u{i}": 0.0 for i in range(10)})
    out = run_cycle(tree, t, c, Consts(k5=k5, maxushare=20.0), 0.0)
    assert out.e_share[10] == pytest.approx(cap)
    assert limshare_band(Consts(k5=k5, maxushare=20.0)) == (0.0, k5)
    assert limshare_band(Consts(flags=LIMSHARE, k5=k5, maxushare=3.0)) == (1 / 3, 3.0)


def test_limshare_floor_keeps_a_heavy_user_at_due_over_maxushare():
    # Four equal users; u3's past usage is 100,000 times the others'.  Due 1/4 each;
    # maxushare 2 keeps u3 at 1/8 (not ~3e-6) and the rest share 7/8 by m^2/usage.
    tree = flat(1, 1, 1, 1)
    t = with_lnodes(tree, {"u0": 1e6, "u1": 1e6, "u2": 1e6, "u3": 1e11})
    c = busy(tree, {f"u{i}": 0.0 for i in range(4)})
    out = run_cycle(tree, t, c, Consts(flags=LIMSHARE, maxushare=2.0), 0.0)
    assert out.e_share[4] == pytest.approx(1 / 8)
    assert out.e_share[1:4].tolist() == pytest.approx([7 / 24] * 3)
    assert out.usage[4] == pytest.approx(1e11)  # the floor lowers nobody's usage
    assert run_cycle(tree, t, c, Consts(), 0.0).e_share[4] < 1e-5  # marooned without it


def test_limshare_band_holds_at_every_level():
    # Table I with everyone busy: A and B are due 1/2, B1 and B2 0.45 and 0.05.  A1's
    # usage is huge: A is held at its floor 1/4; B's 3/4 would give B2 (m^2/usage
    # 0.05^2 against B1's 0.45^2) 0.0091, below its floor 0.025, so B2 gets 0.025.
    tree = table_one()
    t = with_lnodes(tree, {"A1": 1e11, "B1": 1e6, "B2": 1e6})
    c = busy(tree, {"A1": 0.0, "B1": 0.0, "B2": 0.0})
    out = run_cycle(tree, t, c, Consts(flags=LIMSHARE, maxushare=2.0), 0.0)
    e = {name: out.e_share[tree.node(name)] for name in ("A", "B", "A1", "B1", "B2")}
    assert e == pytest.approx({"A": 0.25, "B": 0.75, "A1": 0.25, "B1": 0.725, "B2": 0.025})


def test_maxusage_makes_background():
    tree = flat(1, 1, 1)
    t = with_lnodes(tree, {"u0": 2e12, "u1": 1e6, "u2": 3e6})
    c = busy(tree, {"u0": 4.0, "u1": 0.0, "u2": 0.0})
    out = run_cycle(tree, t, c, Consts(), 4.0)
    assert out.background.tolist() == [False, True, False, False]
    assert out.e_share[1] == 0.0
    # the others split the machine as if u0 did not compete: m^2/u = 3:1
    assert out.e_share[2:].tolist() == pytest.approx([0.75, 0.25])


def test_background_leaves_by_hand():
    """Node 0 a group; leaves 1-5: at MAXUSAGE exactly (1e6), past it, below it, below
    it with no machine share (Idle), and not an lnode (not in `leaves`)."""
    leaves = np.array([False, True, True, True, True, False])
    usage = np.array([9e9, 1e6, 2e6, 999_999.0, 5.0, 9e9])
    m = np.array([1.0, 0.25, 0.25, 0.5, 0.0, 0.0])
    assert background_leaves(leaves, usage, m, 1e6).tolist() == [
        False, True, True, False, True, False
    ]  # fmt: skip
    # MAXUSAGE out of reach: only the share-less leaf stays in the background
    assert background_leaves(leaves, usage, m, 1e30).tolist() == [
        False, False, False, False, True, False
    ]  # fmt: skip


def test_the_bookkeeping_follows_what_the_policy_decided():
    """lnode_table by hand on two leaves of one root (K = 0.5 over 4 s): sums, rate,
    charge and priority from a Decision, then with every optional part given."""
    tree = flat(1, 3)
    t = with_lnodes(tree, {"u0": 0.0, "u1": 0.0})
    c = busy(tree, {"u0": 2.0, "u1": 2.0})
    c.nrun[2] = 3
    leaves = np.array([False, True, True])
    d = Decision(
        active=np.array([True, True, True]),
        m_share=np.array([1.0, 0.25, 0.75]),
        charges=np.array([0.0, 8.0, 4.0]),
        usage=np.array([0.0, 100.0, 300.0]),
        k=0.5,
        e_share=np.array([1.0, 0.5, 0.5]),
        background=np.zeros(3, dtype=bool),
    )
    out = lnode_table(tree_index(tree), t, c, 4.0, d)
    assert out.usage.tolist() == [400.0, 100.0, 300.0]  # groups: their leaves' sum
    assert out.rate.tolist() == [1.5, 1.0, 0.5]  # (1 - K) / 4 s x charges
    assert out.charge.tolist() == [0.0, 8.0, 4.0] and out.nrun.tolist() == [4, 1, 3]
    # usage x nrun / m_share^2
    assert out.priority.tolist() == pytest.approx([1600.0, 1600.0, 300 * 3 / 0.5625])
    assert out.adj.tolist() == [1.0, 1.0, 1.0] and out.due.tolist() == [0.0, 0.0, 0.0]
    assert out.demand.tolist() == [True, True, True] and out.policy_state is None
    full = dataclasses.replace(
        d,
        adj=np.array([1.0, 0.5, 1.0]),
        due=np.array([1.0, 0.4, 0.6]),
        billed=np.array([0.0, 6.0, 3.0]),
        group_usage=np.array([900.0, 100.0, 300.0]),
        demanding=leaves & (c.nrun > 1),
        priority="e_share",
    )
    out = lnode_table(tree_index(tree), t, c, 4.0, full)
    assert out.usage.tolist() == [900.0, 100.0, 300.0]  # the group's own
    assert out.charge.tolist() == [0.0, 6.0, 3.0]  # billed, not charged
    assert out.rate.tolist() == [1.5, 1.0, 0.5]  # the rate follows the charges
    assert out.demand.tolist() == [True, False, True]
    assert out.priority.tolist() == pytest.approx([4.0, 4.0, 12.0])  # nrun / e_share^2
    assert out.adj.tolist() == [1.0, 0.5, 1.0] and out.due.tolist() == [1.0, 0.4, 0.6]
    assert leaves.tolist() == (tree.leaf_mask & out.active).tolist()


def test_zero_share_idle_is_background_with_max_priority():
    tree = flat(1, idle=True)
    idle = tree.node("Idle")
    t = with_lnodes(tree, {"u0": 1e6, "Idle": 0.0})
    c = busy(tree, {"u0": 1.0, "Idle": 3.0})
    out = run_cycle(tree, t, c, Consts(), 4.0)
    assert out.background[idle] and out.e_share[idle] == 0.0
    assert out.m_share[idle] == 0.0 and out.priority[idle] == PRIORITY_MAX
    assert out.e_share[tree.node("u0")] == 1.0


def test_priority_formula():
    p = priority(np.array([1000.0, 5.0]), np.array([2, 1]), np.array([0.5, 0.0]))
    assert p.tolist() == [8000.0, PRIORITY_MAX]


def test_rate_cpu_and_counts():
    tree = flat(1, 1)
    t = with_lnodes(tree, {"u0": 0.0, "u1": 0.0})
    c = busy(tree, {"u0": 3.0, "u1": 1.0})
    c.nrun[1], c.refs[1] = 3, 5
    consts = Consts(halflife=4.0)  # K = 0.5 over 4 s
    out = run_cycle(tree, t, c, consts, 4.0)
    # rate decays like usage: (1 - K) x charges / elapsed = 0.5 x 30000 / 4
    assert out.rate[1] == pytest.approx(3750.0)
    assert out.cpu[1:].tolist() == [0.75, 0.25] and out.cpu[0] == 1.0
    assert out.nrun.tolist() == [4, 3, 1] and out.refs.tolist() == [6, 5, 1]
    assert out.cpu_seconds[1:].tolist() == [3.0, 1.0]
    # a second cycle: leaves decay their own rate; groups are sums, never decayed twice
    again = run_cycle(tree, out, c, consts, 4.0)
    assert again.rate[1] == pytest.approx(3750.0 * 0.5 + 3750.0)
    assert again.rate[0] == pytest.approx(again.rate[1] + again.rate[2])
    assert again.charge.tolist() == pytest.approx([0.0, 60000.0, 20000.0])
    assert again.usage[0] == pytest.approx(again.usage[1] + again.usage[2])


def test_run_cycle_is_pure():
    tree = table_one()
    t = with_lnodes(tree, {"A1": 5.0, "B2": 7.0})
    before = t.copy()
    c = busy(tree, {"A1": 1.0, "B2": 2.0})
    c_before = c.cpu.copy()
    run_cycle(tree, t, c, Consts(flags=ADJGROUPS | LIMSHARE), 4.0)
    for name in ("usage", "charge", "active", "e_share", "m_share"):
        np.testing.assert_array_equal(getattr(t, name), getattr(before, name))
    np.testing.assert_array_equal(c.cpu, c_before)


def test_policy_is_pluggable():
    class Frozen:
        name = "frozen"

        def cycle(self, tree, table, consumption, consts, elapsed):
            return table

    tree = flat(1)
    t = new_table(tree)
    assert run_cycle(tree, t, Consumption.zeros(tree.size), Consts(), 4.0, Frozen()) is t


# -- the feedback loop -----------------------------------------------------------------


def test_feedback_converges_to_shares():
    # Two saturating users 3:1: e ~ m^2/u and u ~ delivered, so delivered -> m.
    tree = flat(3, 1)
    t = with_lnodes(tree, {"u0": 0.0, "u1": 0.0})
    consts = Consts(halflife=600.0)
    e = np.array([0.0, 0.5, 0.5])
    for _ in range(1500):
        t = run_cycle(tree, t, busy(tree, {"u0": 8 * e[1], "u1": 8 * e[2]}), consts, 4.0)
        e = t.e_share
    assert e[1:].tolist() == pytest.approx([0.75, 0.25], abs=1e-4)


def test_caps_that_fill_the_machine_leave_the_others_nothing_not_everyone():
    """Hypothesis found this: g1 and u6, nearly unused, are capped at K5 x due, and
    their caps (2 x 2/66 and 2 x 31/66) fill the machine exactly; u3, with all the
    usage, gets nothing.  Rounding put the caps 1e-12 over the machine, and the water
    fill then released every cap and gave all three 0."""
    rows = [
        Row(name="g1", uid=501, resgrp=0, shares=2, shflags=G),
        Row(name="u3", uid=1003, resgrp=0, shares=33, shflags=0),
        Row(name="u6", uid=1006, resgrp=0, shares=31, shflags=0),
        Row(name="u0", uid=1000, resgrp=501, shares=1, shflags=0),
    ]
    tree = build_tree(rows)
    table = new_table(tree)
    c = Consumption.zeros(tree.size)
    for name in ("u3", "u6", "u0"):
        n = tree.node(name)
        activate(table, n, 0.0)
        c.refs[n] = c.nrun[n] = 1
    c.cpu[tree.node("u3")] = 1.0
    out = run_cycle(tree, table, c, Consts(flags=0), 0.0)
    e = {name: out.e_share[tree.node(name)] for name in ("u3", "u6", "u0")}
    assert e["u6"] == pytest.approx(K5 * 31 / 66)
    assert e["u0"] == pytest.approx(K5 * 2 / 66)
    assert e["u3"] == pytest.approx(0.0, abs=1e-9)
    assert sum(e.values()) == pytest.approx(1.0)


# -- invariants ------------------------------------------------------------------------


@st.composite
def scenes(draw):
    """A random 1-3 level tree with random activity, demand and usage."""
    tree, nusers = draw(random_trees(max_users=12))
    table = new_table(tree)
    c = Consumption.zeros(tree.size)
    usage = st.one_of(st.just(0.0), st.floats(0.0, 1e13))
    for u in range(nusers):
        n = tree.node(f"u{u}")
        state = draw(st.sampled_from(["off", "idle", "busy"]))
        if state != "off":
            activate(table, n, draw(usage))
            c.refs[n] = 1
        if state == "busy":
            c.nrun[n] = draw(st.integers(1, 4))
            c.cpu[n] = draw(st.floats(0.0, 16.0))
    flags = draw(st.sampled_from([0, ADJGROUPS, LIMSHARE, ADJGROUPS | LIMSHARE]))
    consts = Consts(flags=flags, sharemin=draw(st.sampled_from([0.0, 0.05])),
                    idleshare=draw(st.sampled_from(["proportional", "even"])),
                    maxushare=draw(st.sampled_from([1.5, 2.0, 8.0])),
                    k5=draw(st.sampled_from([2.0, 3.0])))  # fmt: skip
    return tree, table, c, consts


@settings(max_examples=150, deadline=None)
@given(scenes(), st.sampled_from([0.0, 4.0, 3600.0]))
def test_cycle_invariants(scene, elapsed):
    tree, table, c, consts = scene
    out = run_cycle(tree, table, c, consts, elapsed)
    for name in ("usage", "e_share", "m_share", "rate", "priority", "adj"):
        assert np.isfinite(getattr(out, name)).all(), name
    assert (out.usage >= 0).all()
    leaf = tree.leaf_mask & out.active
    competing = leaf & out.demand & ~out.background
    if competing.any():
        assert out.e_share[competing].sum() == pytest.approx(1.0)
        assert out.e_share[0] == pytest.approx(1.0)
    active_with_shares = leaf & (out.m_share > 0)
    if active_with_shares.any():
        assert out.m_share[leaf].sum() == pytest.approx(1.0)
    assert (out.e_share[out.background] == 0).all()
    # never more than K5 x the due share: m_share renormalised over the competing
    # siblings at every level (effective_shares returns it)
    idx = tree_index(tree)
    sched = idx.subtree_sum(competing) > 0
    floor, limit = limshare_band(consts)
    assert limit == (consts.maxushare if consts.flags & LIMSHARE else consts.k5)
    assert floor == (1 / consts.maxushare if consts.flags & LIMSHARE else 0.0)
    flat, even = not consts.flags & ADJGROUPS, consts.idleshare == "even"
    sh = near_future_shares(
        idx, out.m_share, out.usage, out.active, sched, limit, floor, flat=flat, even=even
    )
    assert (out.e_share[competing] <= limit * sh.due[competing] * (1 + 1e-9)).all()
    # and, with LIMSHARE, never less than due / maxushare (the guide's 4.6.1.4)
    assert (out.e_share[competing] >= floor * sh.due[competing] * (1 - 1e-9)).all()
    if tree.depth == 1 or flat:
        # Figure 4 on one level (the flat model's one level too): m^2 / (raised usage)
        # gives exactly the bounded shares.
        # (Deeper, a raised newcomer also raises its group's usage, as in the paper.)
        np.testing.assert_allclose(
            sh.e_share[competing], out.e_share[competing], rtol=1e-9, atol=1e-9
        )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(1e-7, 1e7),  # w: m^2 / usage
            st.floats(0.0, 0.5),  # floor, as a fraction of the cap
            st.floats(1e-4, 1.0),  # cap
            st.booleans(),  # wants CPU
        ),
        min_size=1,
        max_size=12,
    ),
    st.floats(0.01, 1.0),
)
def test_water_fill_is_the_common_ratio_clipped_to_each_band(nodes, parent):
    """One sibling set: the demanding nodes get clip(t x w, floor, cap) for one t that
    makes the set sum to its parent's e_share (when the bands allow it), the others 0;
    the capped ones are marked."""
    from fairshare.core.cycle import _water_fill_level
    from fairshare.core.tree import tree_index

    tree = flat(*[1] * len(nodes))
    idx = tree_index(tree)
    w, lo_frac, cap, want = (np.array(v) for v in zip(*nodes, strict=True))
    low = lo_frac * cap
    e_share = np.zeros(idx.n)
    e_share[0] = parent
    ek, t, capped = _water_fill_level(idx, 1, e_share, w, low, cap, want)
    assert np.all(ek[~want] == 0)
    d = want
    if not d.any():
        return
    assert np.all(ek[d] >= low[d] * (1 - 1e-9)) and np.all(ek[d] <= cap[d] * (1 + 1e-9))
    if low[d].sum() <= parent <= cap[d].sum():
        assert ek.sum() == pytest.approx(parent, rel=1e-9, abs=1e-12)
    free = d & (ek > low * (1 + 1e-9)) & (ek < cap * (1 - 1e-9))
    assert ek[free] == pytest.approx(t[free] * w[free], rel=1e-9)
    assert np.all(capped[ek < cap * (1 - 1e-9)] == 0)
