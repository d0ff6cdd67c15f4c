"""Slurm's classic fair-share factor (seed 002): the sshare figures with the seed's worked
example, the mapping of the factor to e_share with hand-worked numbers, the policy's
invariants (hypothesis) and its equilibrium."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace as Row

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from trees import random_trees

from fairshare.cli import shradmin, shrinfo, shrsim, shrtree
from fairshare.core.consts import Consts
from fairshare.core.cycle import Consumption
from fairshare.core.lnode import activate, new_table
from fairshare.core.policies import POLICIES, policy_for, run_cycle
from fairshare.core.policies.slurm import SlurmPolicy, slurm_e_shares
from fairshare.core.sshare import share_ratios, sshare
from fairshare.core.tree import build_tree, tree_index
from udb.cli import udbgen
from udb.models import IDLE_UID
from udb.session import dispose_all

G = 0o40000


def seed_site(extra=()):
    """The seed's Figure 3: A 40 / D 60; B 30 / C 10 under A; E 25 / F 35 under D; user 1
    in B, users 2 and 3 (1 share each) in C, user 4 in E, user 5 in F."""
    rows = [
        Row(name="A", uid=500, resgrp=0, shares=40, shflags=G),
        Row(name="D", uid=600, resgrp=0, shares=60, shflags=G),
        Row(name="B", uid=501, resgrp=500, shares=30, shflags=G),
        Row(name="C", uid=502, resgrp=500, shares=10, shflags=G),
        Row(name="E", uid=601, resgrp=600, shares=25, shflags=G),
        Row(name="F", uid=602, resgrp=600, shares=35, shflags=G),
        Row(name="user1", uid=1001, resgrp=501, shares=1, shflags=0),
        Row(name="user2", uid=1002, resgrp=502, shares=1, shflags=0),
        Row(name="user3", uid=1003, resgrp=502, shares=1, shflags=0),
        Row(name="user4", uid=1004, resgrp=601, shares=1, shflags=0),
        Row(name="user5", uid=1005, resgrp=602, shares=1, shflags=0),
        *extra,
    ]
    return build_tree(rows)


SEED_USAGE = {"user1": 0.2, "user2": 0.25, "user3": 0.0, "user4": 0.25, "user5": 0.0}


def figures_of(tree, usage: dict[str, float], total=None, dampening=1.0):
    u = np.zeros(tree.size)
    for name, value in usage.items():
        u[tree.node(name)] = value
    f = sshare(tree_index(tree), tree.shares, tree.subtree_sum(u), dampening, total)
    return {
        name: (
            f.normalized_shares[i],
            f.normalized_usage[i],
            f.effective_usage[i],
            f.fairshare_factor[i],
        )
        for i, name in enumerate(tree.names)
    }


def test_seed_worked_example_to_six_decimals():
    # The seed's usages are fractions of the machine's total (they leave 0.3 to others).
    f = figures_of(seed_site(), SEED_USAGE, total=1.0)
    shares = {"user1": 0.3, "user2": 0.05, "user3": 0.05, "user4": 0.25, "user5": 0.35}
    for name, s in shares.items():
        assert f[name][0] == pytest.approx(s, abs=5e-7)
    # Effective usage of the accounts, then of the users (the seed's bullet lists).
    expected_ue = {
        "A": 0.45, "D": 0.25, "B": 0.3875, "C": 0.3, "E": 0.25, "F": 0.25 * 35 / 60,
        "user1": 0.3875, "user2": 0.275, "user3": 0.15, "user4": 0.25, "user5": 0.25 * 35 / 60,
    }  # fmt: skip
    for name, ue in expected_ue.items():
        assert round(f[name][2], 6) == round(ue, 6), name
    assert round(f["F"][2], 4) == 0.1458  # the seed's rounded figure
    factors = {"user1": 0.408479, "user2": 0.022097, "user3": 0.125000, "user4": 0.500000}
    for name, factor in factors.items():
        assert round(f[name][3], 6) == factor, name
    # User 5 exactly: UE = 0.25 x 35/60 = 7/48, S = 0.35, F = 2 ** (-(7/48) / 0.35) = 2 ** (-5/12).
    assert f["user5"][3] == pytest.approx(2 ** (-5 / 12), rel=1e-12)
    assert round(f["user5"][3], 6) == 0.749154
    # Normalized usage: the seed's actual usages, summed up the tree.
    assert f["A"][1] == pytest.approx(0.45) and f["C"][1] == pytest.approx(0.25)
    assert f["user3"][1] == 0.0


def test_total_defaults_to_the_tree_and_other_usage_only_normalises():
    """Usage left to a zero-share entry at the top counts in the total only: the seed's
    example with its remaining 0.3 charged to such an entry gives the seed's figures
    without an explicit total (as udbgen's shusage loads it, see test_udbgen)."""
    other = Row(name="other", uid=2000, resgrp=0, shares=0, shflags=0)
    f = figures_of(seed_site((other,)), {**SEED_USAGE, "other": 0.3})
    assert round(f["user2"][3], 6) == 0.022097
    assert f["other"][0] == 0.0 and f["other"][3] == 0.0  # no shares: factor 0


def test_first_tier_keeps_its_actual_usage_and_dampening_divides():
    rows = [Row(name=n, uid=1001 + i, resgrp=0, shares=s, shflags=0)
            for i, (n, s) in enumerate((("a", 3), ("b", 1)))]  # fmt: skip
    tree = build_tree(rows)
    f = figures_of(tree, {"a": 6.0, "b": 2.0}, dampening=4.0)
    assert f["a"][2] == pytest.approx(0.75) and f["b"][2] == pytest.approx(0.25)
    assert f["a"][3] == pytest.approx(2 ** (-0.75 / 0.75 / 4))
    assert f["b"][3] == pytest.approx(2 ** (-0.25 / 0.25 / 4))


def test_no_usage_at_all_gives_factor_one():
    f = figures_of(seed_site(), {})
    assert f["user1"][1:] == (0.0, 0.0, 1.0)


# -- the mapping: e_share from S x F -----------------------------------------------------


def e_shares(tree, usage, demand, runnable=None, dampening=1.0):
    idx = tree_index(tree)
    u = np.zeros(tree.size)
    for name, value in usage.items():
        u[tree.node(name)] = value
    d = np.zeros(tree.size, dtype=bool)
    d[[tree.node(n) for n in demand]] = True
    r = d.copy()
    r[[tree.node(n) for n in runnable or ()]] = True
    f = sshare(idx, tree.shares, tree.subtree_sum(u), dampening)
    e = slurm_e_shares(idx, f, dampening, d, r)
    return {name: e[i] for i, name in enumerate(tree.names)}


def two_groups():
    """A (a1, a2) and B (b1, b2), equal shares everywhere."""
    rows = [
        Row(name="A", uid=500, resgrp=0, shares=1, shflags=G),
        Row(name="B", uid=600, resgrp=0, shares=1, shflags=G),
        Row(name="a1", uid=1001, resgrp=500, shares=1, shflags=0),
        Row(name="a2", uid=1002, resgrp=500, shares=1, shflags=0),
        Row(name="b1", uid=1003, resgrp=600, shares=1, shflags=0),
        Row(name="b2", uid=1004, resgrp=600, shares=1, shflags=0),
    ]
    return build_tree(rows)


def test_siblings_at_their_shares_keep_the_ratio_of_their_shares():
    rows = [Row(name=n, uid=1001 + i, resgrp=0, shares=s, shflags=0)
            for i, (n, s) in enumerate((("a", 3), ("b", 1)))]  # fmt: skip
    tree = build_tree(rows)
    # Usage in proportion to the shares: both factors are 0.5, e_share 3:1.
    e = e_shares(tree, {"a": 3.0, "b": 1.0}, ["a", "b"])
    assert (e["a"], e["b"]) == pytest.approx((0.75, 0.25))
    # b unused (F = 1) against a at 3/4 of the usage (UE/S = 1, F = 1/2): b weighs twice its
    # share, and no more: 0.25 x 1 against 0.75 x 0.5 (a's usage is all of it: F = 2 ** (-4/3)).
    e = e_shares(tree, {"a": 1.0}, ["a", "b"])
    wa, wb = 0.75 * 2 ** (-1 / 0.75), 0.25 * 1.0
    assert e["b"] == pytest.approx(wb / (wa + wb))


def test_an_idle_members_share_stays_in_its_group():
    tree = two_groups()
    # b2 idle: b1 gets all of B's half; A's half is split by the factors of a1 and a2.
    e = e_shares(tree, {"a1": 1.0, "a2": 1.0, "b1": 1.0}, ["a1", "a2", "b1"])
    assert e["A"] + e["B"] == pytest.approx(1.0)
    # U_A = 2/3, U_B = 1/3 (S 0.5 each): A weighs 0.5 x 2 ** (-4/3), B 0.5 x 2 ** (-2/3).
    wa, wb = 2 ** (-4 / 3), 2 ** (-2 / 3)
    assert e["A"] == pytest.approx(wa / (wa + wb))
    assert e["b1"] == pytest.approx(e["B"]) and e["b2"] == 0.0
    assert e["a1"] == pytest.approx(e["A"] / 2) == pytest.approx(e["a2"])


def test_a_runnable_node_that_does_not_demand_gets_what_it_would_alone():
    tree = two_groups()
    e = e_shares(tree, {"a1": 1.0}, ["a1"], runnable=["b1"])
    assert e["a1"] == e["A"] == 1.0
    # b1 alone in B (F_B = 1, weight 0.5) beside A (U = 1, F = 2 ** -2, weight 0.5 / 4).
    assert e["B"] == pytest.approx(0.5 / (0.5 + 0.125)) == pytest.approx(e["b1"])
    assert e["b2"] == 0.0


def test_factors_that_underflow_still_share_the_machine():
    # 1e-6 of the machine each, one with all the usage: F = 2 ** -1e6 = 0 in floats.
    n = 1000
    rows = [Row(name=f"u{i}", uid=1001 + i, resgrp=0, shares=1, shflags=0) for i in range(n)]
    tree = build_tree(rows)
    e = e_shares(tree, {"u0": 1.0}, ["u0", "u1"])
    assert np.isfinite(list(e.values())).all()
    assert e["u0"] + e["u1"] == pytest.approx(1.0)
    assert e["u0"] == pytest.approx(0.0, abs=1e-300) and e["u1"] == pytest.approx(1.0)
    e = e_shares(tree, {"u0": 1.0}, ["u0"])
    assert e["u0"] == 1.0


# -- the policy --------------------------------------------------------------------------


def busy(tree, cpu: dict[str, float]) -> Consumption:
    c = Consumption.zeros(tree.size)
    for name, seconds in cpu.items():
        n = tree.node(name)
        c.cpu[n], c.nrun[n], c.refs[n] = seconds, 1, 1
    return c


def test_the_constants_select_the_policy():
    assert isinstance(policy_for(Consts(policy="slurm")), SlurmPolicy)
    assert POLICIES["slurm"].name == "slurm"


def settle(tree, names, consts, cycles=2000):
    """Saturating users on 8 CPUs that get what e_share gives them, from no usage."""
    t = new_table(tree)
    for name in names:
        activate(t, tree.node(name), 0.0)
    e = {name: 1.0 / len(names) for name in names}
    for _ in range(cycles):
        t = run_cycle(tree, t, busy(tree, {n: 8 * 4.0 * e[n] for n in names}), consts, 4.0)
        e = {name: t.e_share[tree.node(name)] for name in names}
    return e


def test_converges_to_the_shares_in_a_flat_tree():
    rows = [Row(name=n, uid=1001 + i, resgrp=0, shares=s, shflags=0)
            for i, (n, s) in enumerate((("a", 3), ("b", 1)))]  # fmt: skip
    e = settle(build_tree(rows), ["a", "b"], Consts(policy="slurm", halflife=600.0))
    assert (e["a"], e["b"]) == pytest.approx((0.75, 0.25), abs=1e-3)


def test_groups_get_their_halves_whatever_their_members():
    """Scenario 04's tree: A's two busy members against B's one, equal shares."""
    tree = two_groups()
    e = settle(tree, ["a1", "a2", "b1"], Consts(policy="slurm", halflife=600.0))
    assert (e["a1"], e["a2"], e["b1"]) == pytest.approx((0.25, 0.25, 0.5), abs=1e-3)


def test_unequal_siblings_settle_between_their_shares_and_slurms_equal_factors():
    """B 30 and C 10 under A, D idle: entitled 3:1.  Equal factors (Slurm's ordering)
    would need U_B = 9 U_C; S x F settles between (the effective usage's (1 - s) term
    weakens the feedback on the larger sibling)."""
    tree = seed_site()
    e = settle(tree, ["user1", "user2"], Consts(policy="slurm", halflife=600.0))
    assert e["user1"] + e["user2"] == pytest.approx(1.0)
    assert 0.75 < e["user1"] < 0.9


def test_background_and_zero_shares_get_nothing():
    rows = [
        Row(name="u0", uid=1001, resgrp=0, shares=1, shflags=0),
        Row(name="u1", uid=1002, resgrp=0, shares=1, shflags=0),
        Row(name="Idle", uid=IDLE_UID, resgrp=0, shares=0, shflags=0),
    ]
    tree = build_tree(rows)
    t = new_table(tree)
    activate(t, tree.node("u0"), 2e10)
    activate(t, tree.node("u1"), 0.0)
    activate(t, tree.node("Idle"), 0.0)
    c = busy(tree, {"u0": 1.0, "u1": 1.0, "Idle": 1.0})
    out = run_cycle(tree, t, c, Consts(policy="slurm", maxusage=1e10), 4.0)
    e = dict(zip(tree.names, out.e_share, strict=True))
    assert e["u0"] == 0.0 and e["Idle"] == 0.0 and e["u1"] == 1.0
    assert out.background[tree.node("u0")] and out.background[tree.node("Idle")]


@st.composite
def scenes(draw):
    """A random 1-3 level tree with random activity, demand and usage."""
    tree, nusers = draw(random_trees(max_users=8, group_shares=0))
    t = new_table(tree)
    c = Consumption.zeros(tree.size)
    for u in range(nusers):
        n = tree.node(f"u{u}")
        if draw(st.booleans()):
            activate(t, n, draw(st.floats(0, 1e12)))
            if draw(st.booleans()):
                c.cpu[n] = draw(st.floats(0, 8))
                c.nrun[n] = c.refs[n] = 1
    return tree, t, c


@settings(max_examples=200, deadline=None)
@given(scenes(), st.floats(1.0, 9999.0))
def test_policy_invariants(scene, dampening):
    tree, t, c = scene
    out = run_cycle(tree, t, c, Consts(policy="slurm", dampening=dampening), 4.0)
    assert np.isfinite(out.e_share).all() and (out.e_share >= 0).all()
    assert (out.usage >= 0).all()
    idx = tree_index(tree)
    demand = idx.leaf & out.demand & ~out.background
    if demand.any():
        assert out.e_share[demand].sum() == pytest.approx(1.0)
        # A demanding group's e_share is the sum of its demanding members'.
        below = idx.subtree_sum(np.where(demand, out.e_share, 0.0))
        groups = ~idx.leaf & (below > 0)
        np.testing.assert_allclose(out.e_share[groups], below[groups], rtol=1e-9)
    assert (out.e_share[~out.active] == 0).all()
    # The figures are fractions, whatever the usage.
    f = sshare(idx, tree.shares, out.usage, dampening, None, share_ratios(idx, tree.shares))
    for a in (f.normalized_shares, f.normalized_usage, f.effective_usage, f.fairshare_factor):
        assert ((a >= 0) & (a <= 1 + 1e-12)).all()


# -- shrsim: `policy = "slurm"` in a scenario's [consts] ----------------------------------

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def shrsim_slurm(stem: str, tmp_path) -> dict:
    """shrsim --json on example scenario `stem` with policy = "slurm" added to [consts]."""
    (path,) = SCENARIOS.glob(f"{stem}_*.toml")
    text = path.read_text().replace("[consts]\n", '[consts]\npolicy = "slurm"\n', 1)
    assert 'policy = "slurm"' in text
    # A UDB named relative to the scenario (06's) is found from the copy too.
    text = text.replace('udb = "../', f'udb = "{SCENARIOS.parent}/')
    scenario = tmp_path / path.name
    scenario.write_text(text)
    r = CliRunner().invoke(shrsim.main, [str(scenario), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    return {**doc["lnodes"], **doc["groups"]}


def test_shrsim_scenario_04_each_organisation_half_under_slurm(tmp_path):
    d = shrsim_slurm("04", tmp_path)
    for name, share in (("A", 0.5), ("B", 0.5), ("a1", 0.25), ("a2", 0.25), ("b1", 0.5)):
        assert d[name]["delivered"] == pytest.approx(share, abs=0.01), name


def test_shrsim_scenario_05_idle_members_share_stays_in_b_under_slurm(tmp_path):
    d = shrsim_slurm("05", tmp_path)
    assert d["B"]["delivered"] == pytest.approx(0.5, abs=0.01)
    assert d["B2"]["delivered"] == pytest.approx(0.5, abs=0.01)


def test_shrsim_scenario_06_acme_every_user_at_its_fair_share(tmp_path):
    """ACME under slurm: every group and every user within 0.1 point of its fair share,
    inside Proj2 too (u9 50, u10 30, u11 and u12 10 shares), where u9, the largest part
    of its group, settled 0.8 point above its 12.5% while the weights took Slurm's
    effective usage."""
    d = shrsim_slurm("06", tmp_path)
    for name, m in d.items():
        assert abs(m["deviation_pp"]) < 0.1, name
    assert d["u9"]["fair"] == pytest.approx(0.125) and d["u11"]["fair"] == pytest.approx(0.025)


# -- the seed's site loaded with udbgen (shusage per user), shown by shrtree and shrinfo --

CLASSIC = SCENARIOS.parent / "slurm" / "classic.udb"
SEED_TIME = "1700000000"  # the example's shextime: its usage aged by nothing


@pytest.fixture
def classic(tmp_path):
    url = str(tmp_path / "classic.sqlite")
    r = CliRunner().invoke(udbgen.main, ["--udb", url, "--create", str(CLASSIC)])
    assert r.exit_code == 0, r.output
    yield url
    dispose_all()


def test_udbgen_loads_the_seed_site_and_shrtree_shows_its_figures(classic):
    r = CliRunner().invoke(shrtree.main, ["--udb", classic, "-l", "--json", "--now", SEED_TIME])
    assert r.exit_code == 0, r.output
    nodes = {n["name"]: n for n in json.loads(r.output)["nodes"]}
    seed = {  # name: (normalized shares, effective usage, fair-share factor), the seed's
        "A": (0.4, 0.45, None), "D": (0.6, 0.25, None), "B": (0.3, 0.3875, None),
        "C": (0.1, 0.3, None), "E": (0.25, 0.25, None), "F": (0.35, 0.145833, None),
        "user1": (0.3, 0.3875, 0.408479), "user2": (0.05, 0.275, 0.022097),
        "user3": (0.05, 0.15, 0.125), "user4": (0.25, 0.25, 0.5),
        "user5": (0.35, 0.145833, 0.749154),
    }  # fmt: skip
    for name, (s, ue, factor) in seed.items():
        n = nodes[name]
        assert round(n["normalized_shares"], 6) == s, name
        assert round(n["effective_usage"], 6) == ue, name
        if factor is not None:
            assert round(n["fairshare_factor"], 6) == factor, name
    assert nodes["user5"]["fairshare_factor"] == pytest.approx(2 ** (-5 / 12), rel=1e-12)
    for name, u in (("user1", 0.2), ("user2", 0.25), ("user3", 0.0), ("A", 0.45)):
        assert nodes[name]["normalized_usage"] == pytest.approx(u)
        assert nodes[name]["normalized_usage"] == nodes[name]["system_usage"]
    # The table (-l) shows them with six decimals, as sshare prints them.
    r = CliRunner().invoke(shrtree.main, ["--udb", classic, "-l", "--now", SEED_TIME])
    (line,) = [x for x in r.output.splitlines() if " user2 " in x]
    assert line.split()[-4:] == ["0.050000", "0.250000", "0.275000", "0.022097"]
    # Without -l: the guide's columns only.
    r = CliRunner().invoke(shrtree.main, ["--udb", classic, "--now", SEED_TIME])
    assert "Fair" not in r.output


def test_the_figures_follow_the_dampening_factor_whatever_the_policy(classic):
    r = CliRunner().invoke(shradmin.main, ["--udb", classic, "--dampening", "2"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(shrtree.main, ["--udb", classic, "-l", "--json", "--now", SEED_TIME])
    nodes = {n["name"]: n for n in json.loads(r.output)["nodes"]}
    assert nodes["user1"]["fairshare_factor"] == pytest.approx(2 ** (-0.3875 / 0.3 / 2))
    r = CliRunner().invoke(shrinfo.main, ["--udb", classic, "user1", "--now", SEED_TIME])
    assert r.exit_code == 0, r.output
    assert f"fair-share factor {2 ** (-0.3875 / 0.3 / 2):.6f}" in r.output


def test_shrinfo_shows_an_entrys_figures_from_its_stored_usage(classic):
    r = CliRunner().invoke(shrinfo.main, ["--udb", classic, "user5", "--now", SEED_TIME, "--json"])
    assert r.exit_code == 0, r.output
    user = json.loads(r.output)["user"]
    assert user["normalized_shares"] == pytest.approx(0.35)
    assert user["normalized_usage"] == 0.0
    assert user["effective_usage"] == pytest.approx(0.25 * 35 / 60)
    assert user["fairshare_factor"] == pytest.approx(2 ** (-5 / 12), rel=1e-12)
    r = CliRunner().invoke(shrinfo.main, ["--udb", classic, "user2", "--now", SEED_TIME])
    assert (
        "  Slurm (from stored usage): normalized shares 0.050000, normalized usage 0.250000, "
        "effective usage 0.275000, fair-share factor 0.022097"
    ) in r.output.splitlines()
