"""shrinfo: profiles from the table the daemon published on the simulated site of
test_shrview (see its docstring for the scenario and the hand-worked shares), from the
UDB alone for users without an lnode, and the explanations on synthetic tables."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace as Entry

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import assert_stored

from fairshare.cli.shrinfo import main
from fairshare.core import policies
from fairshare.core.consts import ADJGROUPS, Consts
from fairshare.core.cycle import Consumption
from fairshare.core.fair import SplitFigures
from fairshare.core.lnode import activate, new_table
from fairshare.core.policies import run_cycle
from fairshare.core.tree import build_tree
from fairshare.display.shrinfo import duration_text, profile_lines
from fairshare.report.info import tree_share_ratios
from fairshare.report.lnodes import view_lnodes
from fairshare.report.profile import active_profile, fair_usage, idle_time
from fairshare.store.published import published_columns
from integration.test_shrview import (  # noqa: F401
    NOW,
    _row,
    by_account,
    published,
    published_rows,
    utc,
)

DATA = Path(__file__).resolve().parents[1] / "data"
#: The constants of the synthetic tables: ADJGROUPS (the cycle splits group by group),
#: a half-life of 10 min; FLAT without ADJGROUPS (the flat model).
GROUPS = Consts(flags=ADJGROUPS, halflife=600.0)
FLAT = Consts(halflife=600.0)


def run(url: str, *args: str):
    return CliRunner().invoke(main, ["--udb", url, "--now", str(NOW), *args], prog_name="shrinfo")


def test_active_user_in_the_manner_of_figure_7(published, utc):  # noqa: F811
    result = run(published, "me")
    assert result.exit_code == 0, result.output
    rows = published_rows(published)
    me, a = rows["me"], rows["A"]
    lines = result.stdout.splitlines()
    assert lines[0] == (
        f"me  Shares: 1  Share: 37.5%  E-share: {100 * me.e_share:.3g}%  Usage: {me.usage:.0f}"
    )
    assert lines[1] == (
        f"  in group A: Rshr 75%, Eshr {100 * a.e_share:.3g}%; got "
        f"{100 * a.got_minute:.3g}% over the last minute, fair target 75%"
    )
    assert lines[2] == (
        f"  it got {100 * me.got_minute:.3g}% over the last minute ({100 * me.got:.3g}% in "
        "the last cycle), fair target 37.5%"
    )
    # The simulated machine delivers the fair targets: nobody is behind.
    assert lines[3] == (
        "  it and the groups above it got their fair targets over the last minute (within 1 point)"
    )
    # Its fair usage among its demanding siblings, as the cycle splits A's share: a2
    # (3/8 like me; b1 is in B): m = 1/2, S = (3/8)^2/u_a2, u* = (3/8)^2 (1-m) / (m S),
    # a2's usage.
    s = (3 / 8) ** 2 / rows["a2"].usage
    fair = (3 / 8) ** 2 * (1 / 2) / ((1 / 2) * s)
    doc = json.loads(run(published, "me", "--json").stdout)
    assert doc["user"]["fair_usage"] == pytest.approx(fair)
    if me.usage > fair:
        assert doc["user"]["idle_seconds"] == pytest.approx(120 * math.log2(me.usage / fair))
    else:
        assert doc["user"]["idle_seconds"] == 0
        assert lines[4] == f"  its usage is at or below its fair level {fair:.0f}"
    assert fair == pytest.approx(rows["a2"].usage)
    assert "no daemon is running for simulator" in result.stderr
    assert result.stderr.startswith("shrinfo: ")


def test_default_user_is_the_callers_entry(published, utc):  # noqa: F811
    assert run(published).stdout.startswith("me  Shares: 1  Share: 37.5%")


def test_user_without_an_lnode_gets_its_static_share_and_aged_usage(published, utc):  # noqa: F811
    lines = run(published, "away").stdout.splitlines()
    # Static: B has 1/4; away holds 2 of B's 1 + 1 + 2 shares: 1/8.  Usage 1000 stored
    # 240 s (two half-lives) before now: 250.
    assert lines[0] == "away  Shares: 2  Share: 12.5%  E-share: -  Usage: 250"
    assert lines[1].startswith("  no active lnode (no processes)")
    assert lines[2] == "  in group B: static share 25%"
    doc = json.loads(run(published, "away", "--json").stdout)["user"]
    assert doc["active"] is False and doc["e_share"] is None
    assert doc["usage"] == pytest.approx(250) and doc["m_share"] == pytest.approx(0.125)


def test_verbose_adds_the_settings_and_active_counts(published, utc):  # noqa: F811
    text = run(published, "-v", "me").stdout
    assert text.startswith("Scheduling flags = ADJGROUPS, LIMSHARE (006)\n")
    assert "Usage decay rate = " in text and "(half-life of 120.0 seconds)" in text
    assert "\nActive users = 4/5, active groups = 2.\n\nme  Shares: 1" in text
    # The guide's lines on nice -20 and run-rate decay (4.6.1.3), from -D 2,60 and -K 2m.
    assert (
        'Process priority decay rate biased by "nice" (-D): high priority (nice -20) 0.4044 '
        "(half-life of 0.8 seconds), avg priority (nice 0) 0.7039 (half-life of 2.0 seconds), "
        "low priority (nice 19) 0.9885 (half-life of 60.0 seconds); Linux ignores these rates"
    ) in text
    run_rate = f"{0.5 ** (1 / 120):.8f}"
    assert f"\nRun rate decay rate = {run_rate} per second (half-life of 120.0 seconds" in text
    doc = json.loads(run(published, "-v", "--json", "me").stdout)
    assert doc["active"] == {"ids": 4, "total_ids": 5, "groups": 2}
    assert doc["settings"]["consts"]["maxushare"] == 1.5


def test_all_lists_every_active_user_as_figure_7(published, utc):  # noqa: F811
    result = run(published, "-a")
    assert result.exit_code == 0, result.output
    rows = published_rows(published)
    leaves = sorted(("me", "a2", "b1", "quiet"), key=lambda n: -rows[n].usage)
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == leaves  # highest usage first
    for line, name in zip(lines, leaves, strict=True):
        r = rows[name]
        eshr = f"{100 * r.e_share:.3g}%"
        assert line.split() == [
            name,
            "Shares:",
            "1",
            "Share:",
            f"{100 * r.m_share:.3g}%",
            "E-share:",
            f"({eshr})" if name == "quiet" else eshr,  # quiet wants no CPU
            "Usage:",
            f"{r.usage:.0f}" if r.usage >= 100 else f"{r.usage:.3g}",
        ]
    # the fields line up in columns, as in the figure
    assert len({line.index("Shares:") for line in lines}) == 1
    assert len({line.index("Usage:") for line in lines}) == 1
    doc = json.loads(run(published, "-a", "--json").stdout)
    assert [u["name"] for u in doc["users"]] == leaves
    assert list(doc["users"][0]) == [
        "name", "uid", "kind", "shares", "m_share", "e_share", "eshr_if_started", "usage",
        "background",
    ]  # fmt: skip
    assert [u["name"] for u in doc["users"] if u["eshr_if_started"]] == ["quiet"]
    verbose = run(published, "-a", "-v").stdout
    assert "\nActive users = 4/5, active groups = 2.\n\n" + lines[0] in verbose


def test_all_takes_no_user_and_needs_a_published_table(published, udb_url):  # noqa: F811
    result = run(published, "-a", "me")
    assert result.exit_code == 2 and "-a lists every user: give no USER" in result.stderr
    result = run(udb_url, "-a")
    assert result.exit_code == 2
    assert "no lnode table has been published" in result.stderr


def test_json_shape(published):  # noqa: F811
    doc = json.loads(run(published, "--json", "b1").stdout)
    assert list(doc) == ["host", "cycle", "time", "running", "age", "notes", "user", "site"]
    assert doc["host"] == "simulator" and doc["running"] is False
    assert doc["site"] is None  # one host, no GLOBALUSAGE
    assert doc["age"] == pytest.approx(100)
    keys = (
        "name uid kind shares m_share e_share usage active groups limited_by limit_ratio "
        "fair_usage idle_seconds halflife background eshr_if_started got got_minute target behind "
        "behind_points normalized_shares normalized_usage effective_usage fairshare_factor"
    )
    assert list(doc["user"]) == keys.split()
    assert doc["user"]["groups"][0]["name"] == "B"
    assert list(doc["user"]["groups"][0]) == "name m_share e_share got_minute target".split()
    assert doc["user"]["target"] == 0.25 and doc["user"]["groups"][0]["target"] == 0.25
    assert doc["user"]["behind"] is None and doc["user"]["behind_points"] is None
    assert doc["user"]["m_share"] == pytest.approx(0.125)


def test_unknown_user(published):  # noqa: F811
    result = run(published, "nobody")
    assert result.exit_code == 2
    assert result.stderr.endswith("shrinfo: nobody: no such UDB entry\n")


def test_share_by_account_shows_the_default_account(by_account):  # noqa: F811
    result = run(by_account)
    lines = result.stdout.splitlines()
    assert lines[0] == "me is charged to its default account acctB"
    assert lines[1].startswith("acctB  Shares: 3  Share: 37.5%  E-share: ")
    assert lines[2].startswith("  in group G: Rshr 50%, Eshr ")
    doc = json.loads(run(by_account, "--json").stdout)
    assert doc["notes"] == ["me is charged to its default account acctB"]
    assert doc["user"]["kind"] == "account" and doc["user"]["name"] == "acctB"


def test_without_any_published_table_the_udb_alone_is_used(acme):
    result = CliRunner().invoke(main, ["--udb", acme, "u5"], prog_name="shrinfo")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    # ACME: Proj1 500/1000, Proj1A half of it, u5 half of that.
    assert result.stdout.startswith("u5  Shares: 50  Share: 12.5%  E-share: -  Usage: 0\n")
    assert "  in group Proj1: static share 50%\n    in group Proj1A: static share 25%" in (
        result.stdout
    )


# -- the explanations on synthetic tables ------------------------------------------------


def test_fair_usage_and_the_idle_time_to_reach_it():
    rows = [
        _row(0, "root", -1, 0, "root", 1.0, 1.0),
        _row(1, "me", 0, 1, "user", 0.5, 0.2, usage=400.0),
        _row(2, "you", 0, 1, "user", 0.5, 0.8, usage=100.0),
    ]
    lnodes = view_lnodes(rows, frozenset())
    # Equal machine shares: me's fair usage is you's, 100; 400 -> 100 is two half-lives.
    assert fair_usage(lnodes, lnodes[1], GROUPS) == pytest.approx(100.0)
    p = active_profile(lnodes, "me", GROUPS)
    assert p.idle_seconds == pytest.approx(1200.0)
    assert profile_lines(p)[-1] == (
        "  idle for 20 min its usage would decay to its fair level 100 (half-life 10 min)"
    )
    assert idle_time(50.0, 100.0, 600.0) == 0.0
    assert fair_usage(lnodes[:2], lnodes[1], GROUPS) is None  # alone: no fair level


def test_fair_usage_is_weighed_among_siblings_as_the_cycle_splits():
    """me and you share group G; other, alone in H, uses little.  me's fair level is
    you's usage (G's share is split between them), whatever other does; solo, alone in
    its group K, is weighed where K is: K's fair level less the usage of its others."""
    rows = [
        _row(0, "root", -1, 0, "root", 1.0, 1.0),
        _row(1, "G", 0, 1, "group", 0.5, 0.5, usage=500.0),
        _row(2, "H", 0, 1, "group", 0.25, 0.25, usage=1.0),
        _row(3, "K", 0, 1, "group", 0.25, 0.25, usage=300.0),
        _row(4, "me", 1, 2, "user", 0.25, 0.1, usage=400.0),
        _row(5, "you", 1, 2, "user", 0.25, 0.4, usage=100.0),
        _row(6, "other", 2, 2, "user", 0.25, 0.25, usage=1.0),
        _row(7, "solo", 3, 2, "user", 0.25, 0.25, usage=200.0),
        _row(8, "asleep", 3, 2, "user", 0.0, 0.0, usage=100.0, demand=False),
    ]
    lnodes = view_lnodes(rows, frozenset())
    assert fair_usage(lnodes, lnodes[4], GROUPS) == pytest.approx(100.0)
    # K among G and H: due part m = 1/4 (G's 1/2, H's 1/4).  At K's fair level H (usage
    # 1) would take 0.744 by m^2/u, but the cycle caps it at K5 = 2 times its due part,
    # 1/2 (edge effects); G takes the rest, 1/4, at t = (1/4) / (0.5^2/500) = 500 per
    # unit of m^2/u, and K gets 1/4 when 0.25^2 / u x 500 = 1/4: u* = 125; less
    # asleep's 100.  (Without the cap: 0.25^2 (3/4) / (m S), S = 0.5^2/500 + 0.25^2/1,
    # below asleep's usage: 0.)
    assert fair_usage(lnodes, lnodes[7], GROUPS) == pytest.approx(125.0 - 100.0)
    # Without ADJGROUPS the cycle is flat: me against every other demanding leaf (you,
    # other, solo), each with m = 1/4, a due part of 1/4.  other (usage 1) is capped at
    # K5 x 1/4 = 1/2; you and solo share 1/4 in proportion to 0.25^2 (1/100 + 1/200):
    # t = (1/4) / (0.25^2 x 3/200), and me gets 1/4 when 0.25^2 / u x t = 1/4.
    t = (1 / 4) / (0.25**2 * 3 / 200)
    flat = 0.25**2 * t / (1 / 4)
    assert flat == pytest.approx(200 / 3)
    assert fair_usage(lnodes, lnodes[4], FLAT) == pytest.approx(flat)
    assert active_profile(lnodes, "me", FLAT).fair_usage == pytest.approx(flat)


@pytest.mark.parametrize("policy", ["unicos", "slurm", "feedback"])
def test_the_fair_level_of_a_published_table_is_the_cores_on_the_daemons(policy):
    """shrinfo's fair level, worked out from the published table (and the share tree's
    share ratios), is the one the core gives on the lnode table the cycle made, under
    each policy.  u2 holds 5 of G's 8 shares but has no lnode: the share ratios over the
    whole tree (u0 1/8, u1 2/8) and over the published siblings alone (1/3, 2/3) set the
    same level, since at its fair level an lnode's usage per share equals its
    siblings' (under Slurm too, whose weights take the normalized usage per share)."""
    g = 0o40000
    tree = build_tree(
        [
            Entry(name="G", uid=500, resgrp=0, shares=1, shflags=g),
            Entry(name="H", uid=600, resgrp=0, shares=1, shflags=g),
            Entry(name="u0", uid=1000, resgrp=500, shares=1, shflags=0),
            Entry(name="u1", uid=1001, resgrp=500, shares=2, shflags=0),
            Entry(name="u2", uid=1002, resgrp=500, shares=5, shflags=0),
            Entry(name="u3", uid=1003, resgrp=600, shares=1, shflags=0),
        ]
    )
    consts = Consts(policy=policy, flags=ADJGROUPS, halflife=600.0)
    table = new_table(tree)
    for name, usage in (("u0", 4e5), ("u1", 1e5), ("u3", 2e5)):
        activate(table, tree.node(name), usage)
    c = Consumption.zeros(tree.size)
    for name, cpu in (("u0", 1.0), ("u1", 2.0), ("u3", 1.0)):
        c.cpu[tree.node(name)] = cpu
        c.nrun[tree.node(name)] = c.refs[tree.node(name)] = 1
    for _ in range(3):
        table = run_cycle(tree, table, c, consts, 4.0)
    lnodes = view_lnodes(published_columns(tree, table, np.flatnonzero(table.active)), {})
    local = tree_share_ratios(tree, lnodes)
    assert local is not None and local.tolist() == [1.0, 0.5, 0.5, 1 / 8, 2 / 8, 1.0]
    want = policies.fair_usage(SplitFigures.of_table(tree, table), tree.node("u0"), consts)
    me = next(v for v in lnodes if v.name == "u0")
    assert want is not None and fair_usage(lnodes, me, consts, local) == pytest.approx(want)
    alone = fair_usage(lnodes, me, consts)  # the share ratios of the published lnodes
    assert alone == pytest.approx(want)
    assert tree_share_ratios(build_tree([]), lnodes) is None  # another tree: none


def test_the_group_furthest_below_its_share_is_named():
    rows = [
        _row(0, "root", -1, 0, "root", 1.0, 1.0),
        _row(1, "G1", 0, 1, "group", 0.5, 0.3),
        _row(2, "G2", 0, 1, "group", 0.5, 0.7),
        _row(3, "sub", 1, 2, "group", 0.25, 0.2),
        _row(4, "me", 3, 3, "user", 0.25, 0.2, usage=10.0),
        _row(5, "you", 2, 2, "user", 0.5, 0.7, usage=10.0),
    ]
    p = active_profile(view_lnodes(rows, frozenset()), "me", GROUPS)
    assert [g.name for g in p.groups] == ["G1", "sub"]
    assert (p.limited_by, p.limit_ratio) == ("G1", pytest.approx(0.6))
    lines = profile_lines(p)
    assert lines[1:3] == [
        "  in group G1: Rshr 50%, Eshr 30%",
        "    in group sub: Rshr 25%, Eshr 20%",
    ]
    assert lines[3] == "  limited by group G1: its effective share is 0.60 of its machine share"
    # A table of an older daemon: what was delivered is not known, and said so.
    assert p.got_minute is None and p.behind is None
    assert lines[4] == (
        "  what it and its groups received is not in this table (its daemon is older "
        "than those figures)"
    )


def test_background_and_zero_share_lnodes_are_explained():
    rows = [
        _row(0, "root", -1, 0, "root", 1.0, 1.0),
        _row(1, "Idle", 0, 1, "idle", 0.0, 0.0, usage=5.0),
        _row(2, "heavy", 0, 1, "user", 0.5, 0.0, usage=2e12),
        _row(3, "you", 0, 1, "user", 0.5, 1.0, usage=10.0),
    ]
    rows[2].background = True
    lnodes = view_lnodes(rows, frozenset())
    idle = profile_lines(active_profile(lnodes, "Idle", GROUPS))
    assert idle[-1] == (
        "  a background lnode (it has no machine share): it runs only on CPU nobody else wants"
    )
    heavy = profile_lines(active_profile(lnodes, "heavy", GROUPS))
    assert heavy[-1] == (
        "  a background lnode (its usage reached MAXUSAGE): it runs only on CPU nobody else wants"
    )


def test_durations_for_people():
    assert [duration_text(s) for s in (45, 750, 3600, 11100, 187200)] == [
        "45 s",
        "12 min 30 s",
        "1 h",
        "3 h 5 min",
        "2 d 4 h",
    ]


def test_stored_rendering(published, utc):  # noqa: F811
    result = run(published, "me")
    assert_stored(DATA / "shrinfo_me.txt", result.stdout)
