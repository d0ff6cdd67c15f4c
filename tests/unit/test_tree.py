"""The share tree and its normalisation: the guide's Figure 4, the ACME site, properties."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairshare.core.tree import Kind, build_tree
from udb.models import SHF_ACCOUNT, SHF_GROUP


@dataclass
class E:
    name: str
    uid: int
    resgrp: int = 0
    shares: int = 0
    shflags: int = 0
    acids: list[int] = field(default_factory=list)


def group(name, uid, shares, resgrp=0):
    return E(name, uid, resgrp, shares, SHF_GROUP)


def figure4():
    """Figure 4: G1 25%, G2 50%, G3 25%, members' shares in ranges 0-1000, 0-10, 0-100."""
    rows = [group("G1", 101, 25), group("G2", 102, 50), group("G3", 103, 25)]
    for k, sh in enumerate((700, 150, 150)):
        rows.append(E(f"a{k}", 1000 + k, 101, sh))
    for k, sh in enumerate((1, 2, 3, 4)):
        rows.append(E(f"b{k}", 2000 + k, 102, sh))
    for k, sh in enumerate((40, 25, 15)):
        rows.append(E(f"c{k}", 3000 + k, 103, sh))
    return rows


def acme():
    """ACME (guide tables 30 and 31), Share by User, without Idle and unknown."""
    rows = [
        group("Maint", 999, 100),
        group("Proj1", 111, 500),
        group("Proj2", 222, 250),
        group("Proj3", 333, 150),
        group("Proj1A", 444, 500, 111),
        group("Proj1B", 555, 500, 111),
    ]
    members = [(999, 25)] * 4 + [(444, 50)] * 2 + [(555, 50)] * 2
    members += [(222, 50), (222, 30), (222, 10), (222, 10)] + [(333, 25)] * 4
    for k, (rg, sh) in enumerate(members, 1):
        rows.append(E(f"u{k}", 1000 + k, rg, sh))
    return rows


def test_figure4_machine_and_group_shares():
    tree = build_tree(figure4())
    m, g = tree.m_shares(), tree.group_shares()
    expect_m = {
        "G1": 0.25, "G2": 0.50, "G3": 0.25,
        "a0": 0.175, "a1": 0.0375, "a2": 0.0375,
        "b0": 0.05, "b1": 0.10, "b2": 0.15, "b3": 0.20,
        "c0": 0.125, "c1": 0.078125, "c2": 0.046875,
    }  # fmt: skip
    expect_g = {"a0": 0.70, "a1": 0.15, "b0": 0.10, "b3": 0.40, "c0": 0.50, "c1": 0.3125}
    for name, value in expect_m.items():
        assert m[tree.node(name)] == pytest.approx(value, abs=1e-15), name
    for name, value in expect_g.items():
        assert g[tree.node(name)] == pytest.approx(value, abs=1e-15), name
    # "The sum of machine shares from each group adds up to the share allocated to the group."
    assert tree.subtree_sum(np.where(tree.leaf_mask, m, 0))[tree.node("G2")] == pytest.approx(0.5)


def test_acme_static_entitlements():
    tree = build_tree(acme())
    m = tree.m_shares()
    # u5 = Proj1 50% x Proj1A 50% x 50/100 = 12.5%; u1 = Maint 10% x 25/100; u10 = 25% x 30%.
    expect = {"u1": 0.025, "u5": 0.125, "u8": 0.125, "u9": 0.125, "u10": 0.075, "u13": 0.0375}
    for name, value in expect.items():
        assert m[tree.node(name)] == pytest.approx(value, abs=1e-15), name
    assert tree.level[tree.node("u5")] == 3 and tree.level[tree.node("u1")] == 2
    assert [tree.names[a] for a in tree.ancestors(tree.node("u6"))] == ["Proj1A", "Proj1", ""]


def test_acme_only_u5_and_u9_active():
    """Active: u5 (under Proj1/Proj1A) and u9 (Proj2).  Root level: 500 vs 250 active
    shares -> Proj1 2/3, Proj2 1/3; Proj1A is Proj1's only active child, u5 its only user."""
    tree = build_tree(acme())
    active = np.zeros(tree.size, dtype=bool)
    active[[tree.node("u5"), tree.node("u9")]] = True
    m = tree.m_shares(active)
    assert m[tree.node("u5")] == pytest.approx(2 / 3)
    assert m[tree.node("Proj1A")] == pytest.approx(2 / 3)
    assert m[tree.node("u9")] == pytest.approx(1 / 3)
    assert m[tree.node("Proj1B")] == 0 and m[tree.node("u6")] == 0 and m[tree.node("Maint")] == 0


def test_share_by_account_mode():
    rows = [
        group("Proj1", 111, 3),
        group("Proj2", 222, 1),
        E("acct1", 5001, 111, 10, SHF_ACCOUNT),
        E("acct2", 5002, 111, 30, SHF_ACCOUNT),
        E("acct3", 5003, 222, 7, SHF_ACCOUNT),
        E("alice", 1001, 111, 50, 0, [5001]),
        E("Idle", 11, 0, 0),
        E("unknown", 12, 222, 1),
    ]
    tree = build_tree(rows, "account")
    assert tree.find("alice") is None  # users reach accounts through acids
    assert tree.kind(tree.node("acct1")) == Kind.ACCOUNT
    assert tree.kind(tree.node("unknown")) == Kind.USER  # still a leaf to charge unknown uids
    m = tree.m_shares()
    assert m[tree.node("acct1")] == pytest.approx(0.75 * 10 / 40)
    assert m[tree.node("acct3")] == pytest.approx(0.25 * 7 / 8)
    assert m[tree.node("unknown")] == pytest.approx(0.25 / 8)
    by_user = build_tree(rows, "user")
    assert by_user.find("acct1") is None and by_user.find("alice") is not None


def test_detached_entries_and_reasons():
    rows = [
        group("G", 100, 1),
        group("A", 200, 1, 201),
        group("B", 201, 1, 200),  # A and B form a cycle
        E("under_cycle", 1001, 200, 1),
        E("missing", 1002, 777, 1),
        E("under_user", 1003, 1004, 1),
        E("ok", 1004, 100, 1),
    ]
    tree = build_tree(rows)
    reasons = {d.name: d.reason for d in tree.detached}
    assert reasons == {
        "A": "cycle",
        "B": "cycle",
        "under_cycle": "ancestor-detached",  # its chain runs into the cycle (Or, as udbgen -a)
        "missing": "missing-parent",
        "under_user": "parent-not-group",
    }
    assert tree.names[1:] == ["G", "ok"]


# -- properties ---------------------------------------------------------------------------


@st.composite
def share_trees(draw, min_shares=1):
    """Random well-formed trees: groups under earlier groups or ROOT, users under groups."""
    n_groups = draw(st.integers(1, 12))
    rows = []
    for k in range(n_groups):
        parent = draw(st.sampled_from([0] + [100 + j for j in range(k)]))
        rows.append(group(f"G{k}", 100 + k, draw(st.integers(min_shares, 50)), parent))
    for k in range(draw(st.integers(1, 40))):
        parent = 100 + draw(st.integers(0, n_groups - 1))
        rows.append(E(f"u{k}", 1000 + k, parent, draw(st.integers(min_shares, 100))))
    return rows


def leaf_masks(tree, draw):
    leaves = np.flatnonzero(tree.leaf_mask)
    chosen = draw(st.lists(st.sampled_from(leaves.tolist()), min_size=1, unique=True))
    mask = np.zeros(tree.size, dtype=bool)
    mask[chosen] = True
    return mask


@settings(max_examples=100, deadline=None)
@given(share_trees(), st.data())
def test_active_leaves_sum_to_one_and_never_exceed_parent(rows, data):
    tree = build_tree(rows)
    active = leaf_masks(tree, data.draw)
    m = tree.m_shares(active)
    assert m[active].sum() == pytest.approx(1.0)
    assert (m[~tree.active_nodes(active)] == 0).all()
    for node in range(1, tree.size):
        assert m[node] <= m[tree.parent[node]] + 1e-12


@settings(max_examples=100, deadline=None)
@given(share_trees(min_shares=0), st.data())
def test_adding_an_active_sibling_never_raises_anyone(rows, data):
    tree = build_tree(rows)
    active = leaf_masks(tree, data.draw)
    idle = np.flatnonzero(tree.leaf_mask & ~active)
    if not len(idle):
        return
    newcomer = data.draw(st.sampled_from(idle.tolist()))
    before = tree.m_shares(active)
    others = tree.active_nodes(active)  # the nodes already there (not the newcomer's chain)
    active[newcomer] = True
    after = tree.m_shares(active)
    assert (after[others] <= before[others] + 1e-12).all()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 30), st.integers(0, 31), st.sampled_from([0, SHF_GROUP])),
        max_size=30,
        unique_by=lambda t: t[0],
    )
)
def test_tree_links_follow_resgrp(entries):
    """Every node hangs under the group its resgrp names, one level below it, and an entry
    is detached exactly when its resgrp chain through groups does not reach ROOT."""
    rows = [E(f"e{uid}", uid, rg, 1, flags) for uid, rg, flags in entries]
    tree = build_tree(rows)
    groups = {r.uid: r.resgrp for r in rows if r.shflags}

    def reaches_root(rg, seen=()):
        if rg == 0:
            return True
        return rg in groups and rg not in seen and reaches_root(groups[rg], (*seen, rg))

    for r in rows:
        node = tree.find(r.name)
        assert (node is not None) == reaches_root(r.resgrp)
        if node is not None:
            parent = tree.parent[node]
            assert tree.ids[parent] == r.resgrp
            assert tree.level[node] == tree.level[parent] + 1
            assert parent < node  # breadth first: parents precede children
    assert len(tree.detached) + tree.size - 1 == len(rows)
    assert [rows[i].name for i in tree.source[1:]] == tree.names[1:]
    assert [rows[i].name for i in tree.detached_source] == [d.name for d in tree.detached]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 30), st.integers(0, 31), st.sampled_from([0, SHF_GROUP])),
        max_size=30,
        unique_by=lambda t: t[0],
    )
)
def test_detached_reasons_are_udbgens_faults(entries):
    """The tree leaves out exactly the entries udbgen -a finds a chain fault in, and names
    each entry's fault as udbgen -a does (udb.rules, one set of fault names)."""
    from udb.check import check_udb
    from udb.rules import FAULT_NAMES

    rows = [E(f"e{uid}", uid, rg, 1, flags) for uid, rg, flags in entries]
    for r in rows:
        r.passwd = "*" if r.shflags else "x"
    tree = build_tree(rows)
    faults = {p.name: FAULT_NAMES[p.code] for p in check_udb(rows, {}) if p.code in FAULT_NAMES}
    assert {d.name: d.reason for d in tree.detached} == faults
