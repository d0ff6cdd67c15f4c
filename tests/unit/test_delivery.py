"""What was delivered against the fair target, and the flat enforcers' shares
(fairshare.core.delivery), driven through the cycle the daemon and shrsim run."""

from __future__ import annotations

import math
from types import SimpleNamespace as Row

import numpy as np
import pytest
from trees import G

from fairshare.core.consts import Consts
from fairshare.core.cycle import Consumption
from fairshare.core.delivery import MINUTE, TRIM_RANGE, leaf_want
from fairshare.core.lnode import activate, new_table
from fairshare.core.maxmin import maxmin_allocation
from fairshare.core.steps import advance
from fairshare.core.tree import ShareTree, build_tree
from fairshare.sim.machine import water_fill

DELTA = 4.0
#: The README's constants (scenario 14), with a short half-life so a test settles fast.
CONSTS = Consts(flags=0o6, halflife=600.0, maxushare=3.0, mingshare=0.85, sharemin=0.002)


def two_groups() -> ShareTree:
    """Physics (u1, u2) and Chem (u3, u4), equal shares: the Groups issue's case."""
    rows = [
        Row(name="Physics", uid=500, resgrp=0, shares=1, shflags=G),
        Row(name="Chem", uid=600, resgrp=0, shares=1, shflags=G),
        *(Row(name=f"u{i}", uid=1000 + i, resgrp=500, shares=1, shflags=0) for i in (1, 2)),
        *(Row(name=f"u{i}", uid=1000 + i, resgrp=600, shares=1, shflags=0) for i in (3, 4)),
    ]
    return build_tree(rows)


#: CPUs each user would use: 8 busy loops, a fork-heavy loop, 1 busy loop, 1% of a CPU.
WANT = {"u1": 8.0, "u2": 1.0, "u3": 1.0, "u4": 0.01}
#: Runnable processes at a sample: the interactive user is seldom caught running.
NRUN = {"u1": 8, "u2": 1, "u3": 1, "u4": 0}
CAP = np.array(list(WANT.values()))


def drive(tree: ShareTree, kernel, cycles: int, consts: Consts = CONSTS, measured=True, nrun=NRUN):
    """`cycles` cycles on 2 CPUs of a kernel that gives the users (in WANT's order) the
    CPUs `kernel(table, users)` returns from the last cycle's table; `measured`: the
    cycle is told the wants (the simulator's collector), else it estimates them.
    Returns the last table and the CPUs each user got in the last cycle."""
    users = [tree.node(u) for u in WANT]
    table = new_table(tree)
    for n in users:
        activate(table, n, 0.0)
    got = np.zeros(len(users))
    for _ in range(cycles):
        c = Consumption.zeros(tree.size)
        c.cpus = 2.0
        c.nrun[users] = list(nrun.values())
        c.refs[users] = np.maximum(list(nrun.values()), 1)
        got = kernel(table, users)
        c.cpu[users] = got * DELTA
        if measured:
            c.want = np.zeros(tree.size)
            c.want[users] = CAP * DELTA
        table, _ = advance(tree, table, c, consts, DELTA)
    return table, dict(zip(WANT, got, strict=True))


def flat_kernel(tree: ShareTree, consts: Consts, cycles: int, measured: bool):
    """`drive` a flat kernel: every lnode side by side, weighed by its flat share, each
    capped at what it wants."""

    def kernel(table, users):
        return water_fill(2.0, np.maximum(table.flat[users], 1e-9), CAP)

    return drive(tree, kernel, cycles, consts, measured)


def fair(tree: ShareTree) -> dict[str, float]:
    demand = np.zeros(tree.size)
    for u, cpus in WANT.items():
        demand[tree.node(u)] = cpus
    alloc = maxmin_allocation(tree.index, tree.shares, demand, 2.0)
    return {tree.names[n]: float(alloc[n]) for n in range(1, tree.size)}


@pytest.mark.parametrize("policy", ["unicos", "slurm", "feedback"])
@pytest.mark.parametrize("measured", [True, False], ids=["measured", "estimated"])
def test_a_flat_kernel_weighed_by_the_flat_shares_delivers_the_max_min_allocation(policy, measured):
    """Weighed by e_share side by side, u4's unused share went to every runnable lnode
    (Physics got two thirds); weighed by the flat shares it goes to u3."""
    tree = two_groups()
    table, got = flat_kernel(tree, CONSTS.replace(policy=policy), 300, measured)
    target = fair(tree)
    assert got == pytest.approx({u: target[u] for u in WANT}, abs=0.02)  # 1 pp of 2 CPUs
    assert got["u1"] + got["u2"] == pytest.approx(1.0, abs=0.02)
    for name in ("Physics", "Chem", *WANT):
        n = tree.node(name)
        assert table.target[n] == pytest.approx(target[name] / 2, abs=1e-3)
        assert table.got[n] == pytest.approx(target[name] / 2, abs=0.01)
    assert table.want[tree.node("Physics")] == pytest.approx(9.0, abs=0.01)


def test_the_interactive_user_keeps_a_weight_to_be_served_when_it_wakes():
    """u4 gets all it wants, and weighs at least its e_share: the weight it does not use
    is not lost (the kernel caps it at its want), and it is there when u4 wakes."""
    tree = two_groups()
    table, _ = flat_kernel(tree, CONSTS, 100, measured=True)
    u3, u4 = tree.node("u3"), tree.node("u4")
    assert table.flat[u4] >= table.e_share[u4] * (1 - 1e-9) and table.e_share[u4] > 0.1
    assert table.got[u3] == pytest.approx(0.99 / 2, abs=0.01)  # u3 gets what u4 leaves


def test_without_adjgroups_a_member_still_leaves_its_share_to_its_own_group():
    """Kay-Lauder's flat model splits by each user's own share, but what u4 leaves goes
    to u3 first, as the nested cgroups give it: every enforcer delivers the same."""
    tree = two_groups()
    _table, got = flat_kernel(tree, CONSTS.replace(flags=0o4), 300, measured=True)
    assert got["u3"] == pytest.approx(0.99, abs=0.02)


def test_the_trim_corrects_a_kernel_that_delivers_less_than_the_weights_say():
    """A kernel that gives u1 only 80% of what its weight says: the trim rises until u1
    receives its allocation, and stays within its range."""
    tree = two_groups()

    def kernel(table, users):
        weight = np.maximum(table.flat[users], 1e-9) * [0.8, 1, 1, 1]
        return water_fill(2.0, weight, CAP)

    table, _ = drive(tree, kernel, 200, CONSTS.replace(policy="feedback"))
    u1 = tree.node("u1")
    assert table.got[u1] == pytest.approx(0.25, abs=0.005)
    assert 1.0 < table.trim[u1] <= TRIM_RANGE[1]


def test_a_group_trim_corrects_a_kernel_that_spreads_the_other_groups_weight():
    """Nested cgroups on 2 CPUs as the kernel runs them: Physics' weight is spread over
    both CPUs by where its nine processes run (one of them on u3's CPU), so Chem's one
    busy process shares its CPU with a ninth of Physics' weight and Chem receives 45%
    at equal weights.  The groups' trims raise Chem's weight and lower Physics' until
    Chem receives its allocation, and stay within their range."""
    tree = two_groups()
    chem, physics, u4 = tree.node("Chem"), tree.node("Physics"), tree.node("u4")

    def kernel(table, users):
        w = np.where(table.nested > 0, table.nested, 1.0)  # equal before the first cycle
        u3 = w[chem] / (w[chem] + w[physics] / 9) - WANT["u4"]
        physics_cpus = water_fill(2.0 - u3 - WANT["u4"], w[users[:2]], CAP[:2])
        return np.array([*physics_cpus, u3, WANT["u4"]])

    table, _ = drive(tree, kernel, 200)
    assert table.got[chem] == pytest.approx(0.5, abs=0.005)
    assert 1.0 < table.trim[chem] <= TRIM_RANGE[1]
    assert TRIM_RANGE[0] <= table.trim[physics] < 1.0
    # u4 gets all it wants, so its trim stays where it was; nested cgroups weigh every
    # node by its e_share times its trim.
    assert table.trim[u4] == pytest.approx(1.0, abs=0.01)
    assert table.nested[chem] == pytest.approx(table.e_share[chem] * table.trim[chem])


def test_cpu_taken_outside_the_tree_leaves_the_trims_alone():
    """Processes outside the tree (root's) take a fifth of the machine, and the kernel
    shares the rest exactly by the flat shares: every lnode is short alike, so no trim
    moves (without the scaling every one would climb to the top of its range, where
    none could correct another)."""
    tree = two_groups()

    def outside(table, users):
        return water_fill(1.6, np.maximum(table.flat[users], 1e-9), CAP)

    table, _ = drive(tree, outside, 100)
    trims = table.trim[[tree.node(u) for u in ("u1", "u2", "u3")]]
    assert trims.max() < 1.1 and trims.min() > 0.9


def test_an_lnode_that_gets_nothing_leaves_its_allocation_to_its_own_group():
    """u4 is caught runnable at every sample (it wants a CPU) but receives nothing, and
    a flat kernel hands its weight to every lnode: u4 is not competing, so what its
    want would be allocated is owed to its own group (u3), and the trims move until u3
    receives Chem's half (else u4 would keep being owed a CPU, and every other lnode,
    receiving more than it is owed, would fall to the bottom of its range)."""
    tree = two_groups()

    def kernel(table, users):
        return water_fill(2.0, np.maximum(table.flat[users], 1e-9), CAP * [1, 1, 1, 0])

    table, got = drive(tree, kernel, 200, measured=False, nrun={**NRUN, "u4": 1})
    assert table.want[tree.node("u4")] == 1.0 and got["u4"] == 0.0
    assert got["u3"] == pytest.approx(1.0, abs=0.02)
    assert table.trim[tree.node("u3")] > 1.0 > table.trim[tree.node("u1")] > TRIM_RANGE[0]


def test_the_wants_are_measured_where_known_else_estimated():
    c = Consumption.zeros(4)
    c.cpu[:] = [0.0, 2.0, 0.04, 4.0]
    c.nrun[:] = [0, 8, 0, 0]
    leaves = np.array([False, True, True, True])
    assert leaf_want(c, 4.0, leaves).tolist() == [0.0, 8.0, 0.01, 1.0]
    c.want = np.array([0.0, 32.0, 0.04, 2.0])  # the collector knows: no less than the CPU used
    assert leaf_want(c, 4.0, leaves).tolist() == [0.0, 8.0, 0.01, 1.0]
    assert leaf_want(c, 0.0, leaves).tolist() == [0.0, 8.0, 0.0, 0.0]  # a re-plan: nrun
    # Where it does not know (NaN: a process of the leaf not read), the estimate: an
    # interactive leaf caught runnable at the sample looks as if it wants a CPU.
    c.nrun[:] = [0, 8, 1, 0]
    c.want = np.array([0.0, np.nan, 0.08, np.nan])
    assert leaf_want(c, 4.0, leaves).tolist() == [0.0, 8.0, 0.02, 1.0]
    c.want[2] = np.nan
    assert leaf_want(c, 4.0, leaves).tolist() == [0.0, 8.0, 1.0, 1.0]


def test_got_minute_averages_about_the_last_minute():
    tree = two_groups()
    table, _ = flat_kernel(tree, CONSTS, 1, measured=True)
    u1 = tree.node("u1")
    steady = table.got[u1]
    before = table.got_minute[u1]
    c = Consumption.zeros(tree.size)
    c.cpus = 2.0
    c.refs[u1] = c.nrun[u1] = 8
    c.cpu[u1] = steady * 2.0 * MINUTE  # the same rate over one minute
    table, _ = advance(tree, table, c, CONSTS, MINUTE)
    k = math.exp(-1.0)
    assert table.got_minute[u1] == pytest.approx(before * k + steady * (1 - k))
    assert table.got_minute[tree.node("Physics")] >= table.got_minute[u1]
