"""The fair level (fairshare.core.fair): the usage at which an lnode gets its due part as
the policy in force splits the machine.  By hand for each rule the old report copy
ignored (idleshare even, the LIMSHARE floor, the policies), then against the policies'
own split on tables the cycle made (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trees import random_trees

from fairshare.core.consts import ADJGROUPS, LIMSHARE, Consts
from fairshare.core.cycle import (
    USAGE_FLOOR,
    Consumption,
    effective_shares,
    limshare_band,
    near_future_shares,
)
from fairshare.core.fair import SplitFigures
from fairshare.core.index import build_index
from fairshare.core.lnode import activate, new_table
from fairshare.core.policies import fair_usage, run_cycle
from fairshare.core.policies.feedback import demanding_shares, transient_shares
from fairshare.core.policies.slurm import slurm_e_shares
from fairshare.core.split import even_targets
from fairshare.core.sshare import sshare

G = 0o40000


def star(shares, usage, demanding):
    """Figures of users u0.. with `shares` under the root (m_share their proportion), their
    `usage` (the root's their sum) and `demanding` marks, as a published table gives them."""
    n = len(shares)
    m = np.asarray(shares, dtype=float) / sum(shares)
    figures, pos = SplitFigures.of_lnodes(
        node=np.arange(n + 1),
        parent=np.array([-1] + [0] * n),
        group=np.arange(n + 1) == 0,
        shares=np.array([1.0, *shares]),
        m_share=np.concatenate(([1.0], m)),
        usage=np.array([float(sum(usage)), *usage]),
        demanding=np.array([any(demanding), *demanding]),
    )
    assert pos.tolist() == list(range(n + 1))
    return figures


def test_published_lnodes_are_renumbered_breadth_first():
    """Rows in any order (a level-3 row before a level-2 one, children before their
    parent) get positions breadth first, children in their parents' order; a row
    whose parent is not published has none."""
    node = np.array([0, 1, 2, 3, 4, 5, 9])
    parent = np.array([-1, 0, 0, 1, 3, 2, 7])  # 4 under 3 under 1; 5 under 2; 9 orphan
    group = np.array([True, True, True, True, False, False, False])
    ones = np.ones(7)
    f, pos = SplitFigures.of_lnodes(node, parent, group, ones, ones, ones, group)
    assert pos.tolist() == [0, 1, 2, 3, 5, 4, -1]
    assert f.idx.bounds == [(0, 1), (1, 3), (3, 5), (5, 6)]
    assert f.idx.parent0.tolist() == [0, 0, 0, 1, 2, 3]
    assert f.idx.leaf.tolist() == [False, False, False, False, True, True]
    assert f.others(1).tolist() == [2] and f.others(0).tolist() == []


def test_idleshare_even_weighs_the_spread_shares():
    """u0 (3 shares), u1 (1) and u2 (4, idle) under the root, u1 used 100.  Proportional:
    u0's due part is 3/4, and u* = 0.375^2 (1/4) / (3/4 x 0.125^2 / 100) = 300.  Even: u2's
    0.5 goes half to each, targets 0.625 and 0.375, u0's due part 5/8, and u* =
    0.625^2 (3/8) / (5/8 x 0.375^2 / 100) = 166.67: its usage must fall further."""
    f = star([3, 1, 4], [500.0, 100.0, 0.0], [True, True, False])
    assert fair_usage(f, 1, Consts()) == pytest.approx(300.0)
    assert fair_usage(f, 1, Consts(idleshare="even")) == pytest.approx(500 / 3)


def test_the_limshare_floor_holds_a_heavy_sibling_up():
    """Three users of equal shares (m = 1/3); u1 used 1e6, u2 10.  By m^2/u alone, u0 at
    its due part 1/3 leaves u2 almost all the rest: u* = (1/9)(2/3) / ((1/3)(1/9)(1e-6 +
    1/10)) = 2 / (0.1 + 1e-6), about twice u2's usage.  LIMSHARE (maxushare 1.5) keeps u1
    at 1/3 / 1.5 = 2/9 at least: u2 takes 4/9 at t = (4/9) / ((1/9) / 10) = 40, and u0
    gets 1/3 when (1/9) / u x 40 = 1/3: u* = 40/3."""
    f = star([1, 1, 1], [50.0, 1e6, 10.0], [True, True, True])
    assert fair_usage(f, 1, Consts()) == pytest.approx(2 / (0.1 + 1e-6))
    limshare = Consts(flags=LIMSHARE, maxushare=1.5)
    assert limshare_band(limshare) == (pytest.approx(2 / 3), 1.5)
    assert fair_usage(f, 1, limshare) == pytest.approx(40 / 3)


def test_each_policy_has_its_own_fair_level():
    """u0 (3 shares) and u1 (1) under the root, u1 used 100.  UNICOS: u* = 300 (m^2/u in
    the ratio of the shares, 9:1, at usage 3:1).  Feedback: usage in proportion to the
    shares, u* = 300 as well (the redistribution aims at the fair line u / s).  Slurm:
    S x 2 ** (-U / S) in the ratio of the shares, U = u / (u + 100): 2 ** (-U0 / 0.75)
    = 2 ** (-U1 / 0.25) when U0 = 3 U1, u* = 300: the same point (usage in proportion
    to the shares) on this one level, but each found by its own rule."""
    f = star([3, 1], [50.0, 100.0], [True, True])
    for policy in ("unicos", "feedback", "slurm"):
        assert fair_usage(f, 1, Consts(policy=policy)) == pytest.approx(300.0), policy
    # Three users: Slurm's factor sets a different point than m^2/u.
    f = star([2, 1, 1], [0.0, 100.0, 300.0], [True, True, True])
    unicos, slurm = (fair_usage(f, 1, Consts(policy=p)) for p in ("unicos", "slurm"))
    feedback = fair_usage(f, 1, Consts(policy="feedback"))
    assert unicos == pytest.approx(0.5**2 * 0.5 / (0.5 * 0.25**2 * (1 / 100 + 1 / 300)))
    assert feedback == pytest.approx(0.5 * 400 / 0.5)  # m_x x their usage / their m
    assert slurm != pytest.approx(unicos, rel=1e-3)
    assert _slurm_part(f, 1, slurm) == pytest.approx(0.5)


def test_no_fair_level_alone_or_without_shares():
    f = star([1, 1], [5.0, 5.0], [True, False])
    assert fair_usage(f, 1, Consts()) is None  # nobody else wants CPU
    f = star([1, 0], [5.0, 5.0], [True, True])
    for policy in ("unicos", "feedback", "slurm"):
        assert fair_usage(f, 2, Consts(policy=policy)) is None, policy


def _slurm_part(f: SplitFigures, x: int, u: float, dampening: float = 1.0) -> float:
    """x's part of its parent's share under Slurm's split with x's usage u."""
    usage = f.usage.copy()
    chain = [x]
    while chain[-1]:
        chain.append(int(f.idx.parent0[chain[-1]]))
    usage[chain[1:]] += u - f.usage[x]
    usage[x] = u
    ratios = (f.local_shares, f.idx.down_product(f.local_shares))
    figures = sshare(f.idx, f.local_shares, usage, dampening, None, ratios)
    demand = f.demanding.copy()
    demand[x] = True
    e = slurm_e_shares(f.idx, figures, dampening, demand, demand)
    return e[x] / e[chain[1]]


# -- against the policies' own split ---------------------------------------------------


@st.composite
def tables(draw):
    """A random tree, its lnodes after a few cycles of random consumption under a random
    policy and constants, and those constants."""
    tree, nusers = draw(random_trees(max_users=8))
    consts = Consts(
        policy=draw(st.sampled_from(["unicos", "slurm", "feedback"])),
        flags=draw(st.sampled_from([0, ADJGROUPS, ADJGROUPS | LIMSHARE, LIMSHARE])),
        idleshare=draw(st.sampled_from(["proportional", "even"])),
        maxushare=1.5,
    )
    table = new_table(tree)
    states = [draw(st.sampled_from(["off", "idle", "busy"])) for _ in range(nusers)]
    for u, state in enumerate(states):
        if state != "off":
            activate(table, tree.node(f"u{u}"), draw(st.floats(0.0, 1e7)))
    for _ in range(draw(st.integers(1, 3))):
        c = Consumption.zeros(tree.size)
        for u, state in enumerate(states):
            n = tree.node(f"u{u}")
            c.refs[n] = state != "off"
            if state == "busy":
                c.nrun[n], c.cpu[n] = 1, draw(st.floats(0.0, 4.0))
        table = run_cycle(tree, table, c, consts, 4.0)
    return tree, table, consts


def _weighed(f: SplitFigures, node: int) -> int:
    """The node whose siblings `node` is weighed among (itself, or its lowest ancestor
    with demanding siblings)."""
    x = node
    while not len(f.others(x)):
        x = int(f.idx.parent0[x])
    return x


def _at(f: SplitFigures, node: int, u: float) -> np.ndarray:
    """The usage with `node`'s set to u (its ancestors' with it)."""
    usage = f.usage.copy()
    x = node
    while x:
        x = int(f.idx.parent0[x])
        # the node's old usage off first: a group holding only it then has exactly u,
        # where adding u - old would leave the rounding of a large old usage in a small u
        usage[x] = (usage[x] - f.usage[node]) + u
    usage[node] = u
    return usage


@settings(max_examples=200, deadline=None)
@given(tables())
def test_at_its_fair_level_the_policys_split_gives_an_lnode_its_due_part(scene):
    """For every active leaf with a fair level (above USAGE_FLOOR), the policy's own split, with
    that leaf's usage at it, gives the node it is weighed as its due part of its
    parent's share: under UNICOS the cycle's effective shares (m^2/u, flat without
    ADJGROUPS, even targets, K5 and LIMSHARE bands; the parent at its due share), under
    Slurm slurm_e_shares, under feedback the redistribution (transient shares over the
    demanding siblings)."""
    tree, table, consts = scene
    f = SplitFigures.of_table(tree, table)
    leaves = np.flatnonzero(tree.leaf_mask & table.active & (table.m_share > 0))
    for leaf in leaves.tolist():
        u = fair_usage(f, leaf, consts)
        if u is None or u < 1e-6:  # none, or where USAGE_FLOOR blurs the split
            continue
        # `_at` moves the ancestors' usage by u minus the leaf's: where u is below the
        # float precision of those sums at the tolerance asserted, the split it builds
        # is not the one at u (a group at 2.6e5 whose leaf's level is 1e-5).
        if u < 1e-8 * f.usage[f.chain(leaf)].max():
            continue
        usage = _at(f, leaf, u)
        if consts.policy == "unicos":
            _check_unicos(f, leaf, usage, consts)
        elif consts.policy == "slurm":
            x = _weighed(f, leaf)
            local = f.local_shares
            due = local[x] / (local[x] + local[f.others(x)].sum())
            assert _slurm_part(f, x, usage[x], consts.dampening) == pytest.approx(due, rel=1e-6)
        else:
            x = _weighed(f, leaf)
            nleaves = f.idx.subtree_sum(f.idx.leaf & f.active)
            plain = np.maximum(usage - USAGE_FLOOR * nleaves, 0.0)
            t = transient_shares(f.idx, f.m_share * f.active, plain)
            demand = f.demanding.copy()
            demand[x] = True
            part = demanding_shares(f.idx, t, demand, np.zeros(f.idx.n, dtype=bool))[x]
            others = f.others(x)
            due = f.m_share[x] / (f.m_share[x] + f.m_share[others].sum())
            assert part == pytest.approx(due, rel=1e-6, abs=1e-12)


def _check_unicos(f: SplitFigures, leaf: int, usage: np.ndarray, consts: Consts) -> None:
    """x's part of its parent's share at `usage` is its due part, the parent at its due
    share: on the whole tree when the parent is the root (or the model flat), else on
    x's sibling set alone, under a root of its own, with their targets as shares."""
    flat = not consts.flags & ADJGROUPS
    floor, limit = limshare_band(consts)
    x = leaf if flat else _weighed(f, leaf)
    demand = f.demanding.copy()
    demand[x] = True  # as if it wanted CPU (an idle one is given what it would get)
    even = consts.idleshare == "even"
    parent = 0 if flat else int(f.idx.parent0[x])
    if parent == 0:
        sh = near_future_shares(
            f.idx, f.m_share, usage, f.active, demand, limit, floor, flat=flat, even=even
        )
        assert sh.e_share[x] == pytest.approx(sh.due[x], rel=1e-6)
        return
    target = even_targets(f.idx, f.m_share, f.active, demand) if even else f.m_share
    sibs = np.flatnonzero((f.idx.parent0 == parent) & (np.arange(f.idx.n) > 0))
    n = len(sibs)
    up = np.concatenate(([-1], np.zeros(n, dtype=np.int64)))
    top = np.arange(n + 1) == 0
    star = build_index([np.zeros(1, np.int64), np.arange(1, n + 1)], up, ~top, ~top, top)
    m = np.concatenate(([1.0], target[sibs] / target[sibs].sum()))
    sh = effective_shares(
        star,
        m,
        np.concatenate(([1.0], usage[sibs])),
        np.concatenate(([True], f.active[sibs])),
        np.concatenate(([True], demand[sibs])),
        limit,
        floor,
    )
    at = 1 + int(np.flatnonzero(sibs == x)[0])
    assert sh.e_share[at] == pytest.approx(sh.due[at], rel=1e-6)
