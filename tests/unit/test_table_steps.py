"""The daemon's steps on the lnode table (fairshare.core.steps): shrdaemon and shrsim share them."""

from __future__ import annotations

from types import SimpleNamespace as Row

import numpy as np
import pytest

from fairshare.core.consts import GLOBALUSAGE, Consts
from fairshare.core.cycle import Consumption
from fairshare.core.lnode import new_table
from fairshare.core.policies import run_cycle
from fairshare.core.site import SiteState
from fairshare.core.steps import activate_stored, advance
from fairshare.core.tree import build_tree

G = 0o40000


@pytest.fixture
def tree():
    # root -> P (group) -> u1, u2 ; root -> u3
    rows = [
        Row(name="P", uid=100, resgrp=0, shares=1, shflags=G),
        Row(name="u1", uid=1001, resgrp=100, shares=1, shflags=0),
        Row(name="u2", uid=1002, resgrp=100, shares=1, shflags=0),
        Row(name="u3", uid=1003, resgrp=0, shares=1, shflags=0),
    ]
    return build_tree(rows)


def test_activate_stored_ages_the_stored_usage(tree):
    # 100 charge units stored two half-lives ago come back as 25; the group becomes active.
    consts = Consts(halflife=3600.0)
    t = new_table(tree)
    u1 = tree.node("u1")
    assert activate_stored(t, u1, 100.0, 1000.0, 1000.0 + 7200.0, consts) == pytest.approx(25.0)
    assert t.usage[u1] == pytest.approx(25.0) and t.stored[u1] == pytest.approx(25.0)
    assert t.active[u1] and t.active[tree.node("P")] and not t.active[tree.node("u3")]


def busy(tree) -> tuple:
    t = new_table(tree)
    u1, u3 = tree.node("u1"), tree.node("u3")
    for n in (u1, u3):
        activate_stored(t, n, 0.0, 0.0, 0.0, Consts())
    c = Consumption.zeros(tree.size)
    c.refs[[u1, u3]] = 1
    c.nrun[[u1, u3]] = 1
    c.cpu[[u1, u3]] = [3.0, 1.0]
    return t, c, u1, u3


def test_advance_is_the_cycle_and_counts_the_sites_cpu(tree):
    t, c, u1, u3 = busy(tree)
    consts = Consts()
    expected = run_cycle(tree, t, c, consts, 4.0)
    alone, bad = advance(tree, t, c, consts, 4.0)
    assert bad == []
    np.testing.assert_array_equal(alone.e_share, expected.e_share)
    np.testing.assert_array_equal(alone.usage, expected.usage)
    # A host's site state counts the CPU; without GLOBALUSAGE its factors change nothing.
    site = SiteState.new(tree.size)
    site.factor[u1] = 2.0
    hosted, _ = advance(tree, t, c, consts, 4.0, site)
    np.testing.assert_array_equal(hosted.e_share, expected.e_share)
    assert site.cpu[[u1, u3]].tolist() == [3.0, 1.0] and site.elapsed == 4.0


def test_advance_applies_the_site_factors_under_globalusage(tree):
    # u1's factor 2 against u3's 1: their e_shares keep their sum and go 2:1 in u1's
    # favour relative to what the cycle gave them.
    t, c, u1, u3 = busy(tree)
    consts = Consts(flags=GLOBALUSAGE)
    plain = run_cycle(tree, t, c, consts, 4.0).e_share
    site = SiteState.new(tree.size)
    site.factor[u1] = 2.0
    table, _ = advance(tree, t, c, consts, 4.0, site)
    e = table.e_share
    assert e[u1] + e[u3] == pytest.approx(plain[u1] + plain[u3])
    assert e[u1] / e[u3] == pytest.approx(2 * plain[u1] / plain[u3])
    assert e[tree.node("P")] == pytest.approx(e[u1])  # a group: its demanding leaves
