"""Per-entry usage scope, the other sites' usage and pooled subtrees (fairshare.core.grid)."""

from __future__ import annotations

from types import SimpleNamespace as Row

import numpy as np

from fairshare.core.consts import ADJGROUPS, GLOBALUSAGE, Consts
from fairshare.core.cycle import Consumption
from fairshare.core.grid import GridState, grid_view, pooled_below, update_factors
from fairshare.core.lnode import activate, new_table
from fairshare.core.steps import advance
from fairshare.core.tree import build_tree

G = 0o40000


def vo_tree(scope: str = "global", pooled: int = 0):
    """Figure 4's VO-A half: VO-A (30) with P-A1..3 (50, 30, 20), each with one user, and
    a local group L (70) with two users; VO-A has `scope`, L is `pooled`."""
    rows = [
        Row(name="VO-A", uid=500, resgrp=0, shares=30, shflags=G, scope=scope, pooled=0),
        Row(name="L", uid=600, resgrp=0, shares=70, shflags=G, scope="", pooled=pooled),
        Row(name="P-A1", uid=501, resgrp=500, shares=50, shflags=G, scope="", pooled=0),
        Row(name="P-A2", uid=502, resgrp=500, shares=30, shflags=G, scope="", pooled=0),
        Row(name="P-A3", uid=503, resgrp=500, shares=20, shflags=G, scope="", pooled=0),
        Row(name="a1", uid=1001, resgrp=501, shares=1, shflags=0, scope="", pooled=0),
        Row(name="a2", uid=1002, resgrp=502, shares=1, shflags=0, scope="", pooled=0),
        Row(name="a3", uid=1003, resgrp=503, shares=1, shflags=0, scope="", pooled=0),
        Row(name="l1", uid=1004, resgrp=600, shares=3, shflags=0, scope="", pooled=0),
        Row(name="l2", uid=1005, resgrp=600, shares=1, shflags=0, scope="", pooled=0),
    ]
    return build_tree(rows)


def test_scope_is_inherited_and_measured_as_the_parent_divides():
    t = vo_tree()
    g, m = t.global_scope(), t.measured_globally()
    by = {n: i for i, n in enumerate(t.names)}
    assert g[by["VO-A"]] and g[by["P-A1"]] and g[by["a1"]] and not g[by["L"]] and not g[0]
    # VO-A's own standing is this site's (its parent, the root, is local); below it, global.
    assert not m[by["VO-A"]] and m[by["P-A1"]] and m[by["a2"]] and not m[by["l1"]]
    # GLOBALUSAGE: every entry global, a local entry's subtree excepted.
    assert t.measured_globally(True)[by["VO-A"]] and t.measured_globally(True)[by["L"]]
    local = vo_tree(scope="local")
    assert not local.measured_globally(True)[by["P-A1"]]


def _busy(t, names):
    table = new_table(t)
    c = Consumption.zeros(t.size)
    for n in names:
        activate(table, t.node(n), 1.0)
        c.nrun[t.node(n)] = 1
        c.refs[t.node(n)] = 1
    return table, c


def test_other_sites_usage_counts_only_below_a_global_entry():
    """VO-A's projects with usage 1 each here; P-A1 used 9 more at other sites.  Globally
    the split within VO-A is by m^2 / grid usage: .25/10, .09/1, .04/1; locally by
    .25, .09, .04; L's users are local either way."""
    t = vo_tree()
    consts = Consts(flags=ADJGROUPS, k5=100.0)
    names = ["a1", "a2", "a3", "l1", "l2"]
    remote = np.zeros(t.size)
    remote[t.node("P-A1")] = remote[t.node("a1")] = 9.0
    remote[t.node("VO-A")] = 9.0  # VO-A's own standing is local: this is ignored
    remote[t.node("l1")] = 100.0  # a local entry: ignored
    out = {}
    for scope in ("global", "local"):
        t = vo_tree(scope)
        table, c = _busy(t, names)
        grid = GridState.new(t.size)
        grid.exchange(remote)
        new, _ = advance(t, table, c, consts, 0.0, grid=grid)
        out[scope] = new.e_share
    e, w = out["global"], np.array([0.25 / 10, 0.09, 0.04])
    vo = [t.node(n) for n in ("a1", "a2", "a3")]
    assert np.allclose(e[vo] / e[vo].sum(), w / w.sum())
    w = np.array([0.25, 0.09, 0.04])
    assert np.allclose(out["local"][vo] / out["local"][vo].sum(), w / w.sum())
    vo_a = 0.09 / 3 / (0.09 / 3 + 0.49 / 2)  # VO-A (usage 3) against L (2): local both ways
    for scope in out:  # L's users, 3:1 in shares and usage 1 each: 9:1
        assert np.isclose(out[scope][vo].sum(), vo_a)
        l1, l2 = out[scope][t.node("l1")], out[scope][t.node("l2")]
        assert np.isclose(l1 / l2, 9.0)


def test_without_other_sites_nothing_changes():
    t = vo_tree()
    consts = Consts(flags=ADJGROUPS | GLOBALUSAGE)
    table, c = _busy(t, ["a1", "a2", "l1"])
    a, _ = advance(t, table, c, consts, 4.0)
    b, _ = advance(t, table, c, consts, 4.0, grid=GridState.new(t.size))
    assert grid_view(t, consts, GridState.new(t.size)) is None
    assert np.array_equal(a.e_share, b.e_share)


def test_a_pooled_group_splits_by_shares_not_usage():
    t = vo_tree(pooled=1)
    assert pooled_below(t)[t.node("l1")] and not pooled_below(t)[t.node("L")]
    table, c = _busy(t, ["l1", "l2"])
    table.usage[t.node("l1")] = 1000.0  # heavy past usage does not count inside the pool
    new, _ = advance(t, table, c, Consts(flags=ADJGROUPS), 0.0)
    assert np.isclose(new.e_share[t.node("l1")] / new.e_share[t.node("l2")], 3.0)


def test_grid_factor_falls_for_an_entry_above_its_global_target():
    t = vo_tree()
    consts = Consts(flags=ADJGROUPS)
    table, c = _busy(t, ["a1", "a2", "a3"])
    table.usage[:] = 0
    for n in ("a1", "a2", "a3"):
        table.usage[t.node(n)] = 1.0
    table.usage = t.subtree_sum(table.usage * t.leaf_mask)
    grid = GridState.new(t.size)
    remote = np.zeros(t.size)
    remote[t.node("P-A1")] = remote[t.node("a1")] = 9.0
    grid.exchange(remote)
    demand = np.zeros(t.size, dtype=bool)
    demand[[t.node(n) for n in ("a1", "a2", "a3", "P-A1", "P-A2", "P-A3", "VO-A")]] = True
    update_factors(t, grid, table.usage, table.active, demand, consts)
    f = grid.factor
    # P-A1: 10 of 12 against 50%, times 0.6; P-A2 (1 of 12 against 30%) and P-A3 (against
    # 20%) doubled (the step bound); the set scaled so the largest is 1: P-A1 0.6 / 2.
    assert np.isclose(f[t.node("P-A2")], 1.0) and np.isclose(f[t.node("P-A3")], 1.0)
    assert np.isclose(f[t.node("P-A1")], 0.3)


def test_the_speed_factor_scales_what_a_cpu_second_is_charged():
    from fairshare.core.cycle import leaf_charges

    c = Consumption.zeros(3)
    c.cpu[1] = 2.0
    one = leaf_charges(c, Consts())
    assert np.allclose(leaf_charges(c, Consts(speed=2.5)), 2.5 * one)
    assert one[1] == 2.0 * 100 * 100  # 2 CPU s x 100 ticks x cost_tick 100
