"""The lnode table: creation with aged usage, release with write-back, group lifetime."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace as Row

import numpy as np
import pytest

from fairshare.core.consts import Consts
from fairshare.core.cycle import Consumption
from fairshare.core.lnode import (
    NodeState,
    accrued,
    activate,
    add_usage,
    aged_usage,
    copy_row,
    keep_finite,
    new_table,
    release,
)
from fairshare.core.policies import run_cycle
from fairshare.core.tree import build_tree

G = 0o40000


@pytest.fixture
def tree():
    # root -> P (group) -> PA (group) -> u1, u2 ; P -> PB (group) -> u3 ; root -> u4
    rows = [
        Row(name="P", uid=100, resgrp=0, shares=1, shflags=G),
        Row(name="PA", uid=101, resgrp=100, shares=1, shflags=G),
        Row(name="PB", uid=102, resgrp=100, shares=1, shflags=G),
        Row(name="u1", uid=1001, resgrp=101, shares=1, shflags=0),
        Row(name="u2", uid=1002, resgrp=101, shares=1, shflags=0),
        Row(name="u3", uid=1003, resgrp=102, shares=1, shflags=0),
        Row(name="u4", uid=1004, resgrp=0, shares=1, shflags=0),
    ]
    return build_tree(rows)


def test_new_table_only_root_active(tree):
    t = new_table(tree)
    assert t.active.tolist() == [True] + [False] * (tree.size - 1)
    assert t.m_share[0] == 1.0 and not t.usage.any() and (t.adj == 1).all()


@pytest.mark.parametrize(
    "shusage, shextime, now, expected",
    [
        (1000.0, 0.0, 3600.0, 500.0),  # one half-life
        (1000.0, 100.0, 7300.0, 250.0),  # two
        (1000.0, 5000.0, 4000.0, 1000.0),  # shextime in the future: no negative age
        (0.0, 0.0, 10.0, 0.0),
    ],
)
def test_aged_usage(shusage, shextime, now, expected):
    assert aged_usage(shusage, shextime, now, Consts()) == pytest.approx(expected)


def test_activate_makes_ancestors_active(tree):
    t = new_table(tree)
    u1 = tree.node("u1")
    activate(t, u1, 42.0)
    on = {tree.names[i] for i in np.flatnonzero(t.active)}
    assert on == {"", "P", "PA", "u1"}
    assert t.usage[u1] == 42.0
    activate(t, u1, 99.0)  # already active: unchanged
    assert t.usage[u1] == 42.0


def test_release_writes_back_and_releases_empty_groups(tree):
    t = new_table(tree)
    for name in ("u1", "u2", "u3"):
        activate(t, tree.node(name), 10.0)
    t.usage[tree.node("u1")] = 25.0  # 10 brought from the UDB, 15 accrued here
    t.charge[tree.node("u1")] = 7.0
    t.cpu_seconds[tree.node("u1")] = 3.0
    wb = release(t, tree.node("u1"), now=1234.0)
    # Only the increment goes back: the 10 it brought are in the UDB already.
    assert (wb.shusage, wb.shextime, wb.charge, wb.cpu_seconds) == (15.0, 1234.0, 7.0, 3.0)
    assert not t.active[tree.node("u1")] and t.usage[tree.node("u1")] == 0
    assert t.active[tree.node("PA")]  # u2 is still there
    release(t, tree.node("u2"), now=1235.0)
    assert not t.active[tree.node("PA")]
    assert t.active[tree.node("P")]  # PB -> u3 still active
    release(t, tree.node("u3"), now=1236.0)
    assert t.active.tolist() == [True] + [False] * (tree.size - 1)


def test_lifecycle_through_cycles(tree):
    consts = Consts(halflife=3600.0)
    t = new_table(tree)
    u4 = tree.node("u4")
    # u4 left 3600 s ago with usage 2e6: it comes back with 1e6.
    activate(t, u4, aged_usage(2e6, 0.0, 3600.0, consts))
    for _ in range(3):
        c = Consumption.zeros(tree.size)
        c.cpu[u4], c.nrun[u4], c.refs[u4] = 4.0, 1, 1
        t = run_cycle(tree, t, c, consts, 4.0)
    wb = release(t, u4, now=3612.0)
    k = consts.K
    charge = 4.0 * 100 * 100  # 4 CPU s at 100 per tick, 100 ticks per s
    assert wb.charge == pytest.approx(3 * charge)
    assert wb.cpu_seconds == pytest.approx(12.0)
    # The increment: what it accrued here (its 1e6 from the UDB decayed with it, and
    # add_usage ages the stored shusage by the same time).
    assert wb.shusage == pytest.approx(charge * (k**2 + k + 1))
    assert wb.shextime == 3612.0


def test_copy_is_deep(tree):
    t = new_table(tree)
    c = t.copy()
    c.usage[1] = 5.0
    assert t.usage[1] == 0.0
    assert c.parent is t.parent


@dataclass
class Tally(NodeState):
    """A policy's state for the tests: two float arrays over the nodes."""

    seen: np.ndarray
    level: np.ndarray


def test_the_table_carries_a_policys_state_row_by_row_without_knowing_it(tree):
    """The row steps treat every field of a policy's state as the table's own: a copy
    is deep, an lnode created or released has 0, a row copied into a table without a
    state gives it one of the same type, and a number not finite is put back."""
    u1, u2, g = tree.node("u1"), tree.node("u2"), tree.node("PA")
    t = new_table(tree)
    assert t.policy_state is None
    t.policy_state = Tally.zeros(tree.size)
    activate(t, u1, 10.0)
    t.policy_state.seen[[g, u1]] = (2.0, 3.0)
    t.policy_state.level[u1] = 4.0
    c = t.copy()
    c.policy_state.seen[u1] = 99.0
    assert type(c.policy_state) is Tally and t.policy_state.seen[u1] == 3.0

    other = new_table(tree)
    copy_row(t, u1, other, u2)
    assert type(other.policy_state) is Tally
    assert (other.policy_state.seen[u2], other.policy_state.level[u2]) == (3.0, 4.0)
    assert other.usage[u2] == 10.0 and not other.policy_state.seen[u1]
    copy_row(new_table(tree), 0, other, u2)  # from a table without state: 0
    assert (other.policy_state.seen[u2], other.policy_state.level[u2]) == (0.0, 0.0)

    new = t.copy()
    new.policy_state.level[u1] = np.inf
    new.policy_state.seen[g] = np.nan
    assert keep_finite(t, new) == [(g, "seen"), (u1, "level")]
    assert (new.policy_state.seen[g], new.policy_state.level[u1]) == (2.0, 4.0)

    release(t, u1, 5.0)  # PA is released with it: its only active leaf
    assert not t.policy_state.seen.any() and not t.policy_state.level.any()
    t.policy_state.level[u2] = 7.0
    activate(t, u2, 0.0)
    assert t.policy_state.level[u2] == 0.0  # created with none


def test_accrued_returns_the_increment_and_marks_it_written(tree):
    t = new_table(tree)
    u1 = tree.node("u1")
    activate(t, u1, 100.0)
    t.usage[u1], t.charge[u1], t.cpu_seconds[u1] = 130.0, 40.0, 2.0
    wb = accrued(t, u1, now=50.0)
    assert (wb.shusage, wb.shextime, wb.charge, wb.cpu_seconds) == (30.0, 50.0, 40.0, 2.0)
    assert t.active[u1] and t.usage[u1] == 130.0 and t.stored[u1] == 130.0
    # The charge and CPU seconds still count from creation (the displays' Muse).
    assert (t.charge[u1], t.charge_written[u1], t.cpu_seconds[u1]) == (40.0, 40.0, 2.0)
    again = accrued(t, u1, now=51.0)  # nothing twice
    assert (again.shusage, again.charge, again.cpu_seconds) == (0.0, 0.0, 0.0)


def test_stored_usage_decays_with_usage(tree):
    consts = Consts(halflife=3600.0)
    t = new_table(tree)
    u1 = tree.node("u1")
    activate(t, u1, 1000.0)
    c = Consumption.zeros(tree.size)
    c.cpu[u1], c.refs[u1], c.nrun[u1] = 1.0, 1, 1
    t = run_cycle(tree, t, c, consts, 3600.0)
    assert t.stored[u1] == pytest.approx(500.0)
    assert t.usage[u1] - t.stored[u1] == pytest.approx(10_000.0)  # this cycle's charge


def test_add_usage_ages_both_to_the_later_time():
    # 100 stored at t=0, 40 accrued as of t=3600, half-life 3600: 50 + 40.
    assert add_usage(100.0, 0.0, 40.0, 3600.0, 3600.0) == (pytest.approx(90.0), 3600.0)
    # An increment older than what is stored is aged to the stored time instead.
    u, t = add_usage(100.0, 3600.0, 40.0, 0.0, 3600.0)
    assert (u, t) == (pytest.approx(120.0), 3600.0)
    # Order does not matter: two hosts adding in either order get the same.
    a = add_usage(*add_usage(0.0, 0.0, 10.0, 100.0, 50.0), 20.0, 200.0, 50.0)
    b = add_usage(*add_usage(0.0, 0.0, 20.0, 200.0, 50.0), 10.0, 100.0, 50.0)
    assert a[0] == pytest.approx(b[0]) and a[1] == b[1] == 200.0
