"""shrview and shrinfo show what the machine delivered against the fair target: the
Groups issue's interactive member (examples/scenarios/14_interactive_member.toml) on an
enforcer that lets Chem fall behind, published by the cycle into a real UDB.

Scenario 14's tree and constants, with u5 (Physics, logged in, never runnable) added.
On 2 CPUs, every 4 s cycle, as side-by-side weights deliver it (the flat enforcer the
issue saw): u4 (interactive) uses 1% of a CPU, 0.04 CPU s, and u1, u2 and u3, each
runnable, split the rest evenly, (8 - 0.04) / 3 CPU s each.  Over the cycle (of the
machine, 8 CPU s): u1 = u2 = u3 = 0.331667, u4 = 0.005, u5 = 0; Physics 0.663333, Chem
0.336667.  Over the last minute the same (every cycle alike, and a new lnode's minute
starts at its first cycle's).  What they want: u1 8 CPUs (8 runnable), u2 1, u3 1, u4 0.01 (the
CPU it used), u5 0; so the fair targets (max-min on 2 CPUs, Physics and Chem one share
each): Physics 1 CPU (u1 and u2 0.5 each, 25%), Chem 1 CPU (u4 its 0.01, 0.5%; u3 the
0.99 left, 49.5%), 50% each.  Chem is 50 - 33.67 = 16.33 points behind; u3 behind by
as much (49.5 - 33.17), within a hair: shrinfo names the group.
"""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ROOT

from fairshare.admin.shradmin import set_constants
from fairshare.cli.shrinfo import main as shrinfo
from fairshare.cli.shrview import main as shrview
from fairshare.core.consts import Consts
from fairshare.core.cycle import Consumption
from fairshare.core.lnode import activate, new_table
from fairshare.core.steps import advance
from fairshare.display.shrinfo import profile_lines
from fairshare.display.shrview import _fixed_lines, display_columns, display_json, display_lines
from fairshare.report.lnodes import ViewRequest, view_columns, view_lnodes
from fairshare.report.profile import active_profile
from fairshare.report.published import Snapshot
from fairshare.store.config import load_consts, load_tree
from fairshare.store.published import CycleHeader, LnodeStore
from integration.test_shrview import _row
from udb import directives
from udb.columnar import row_columns
from udb.jsonout import dumps
from udb.session import open_udb, read_connection, write_session

SCENARIO = ROOT / "examples" / "scenarios" / "14_interactive_member.toml"
EPOCH = 1_700_000_000
CYCLES = 150
NOW = EPOCH + 4 * CYCLES + 10
#: CPU seconds each leaf used every cycle, and its runnable processes at the sample.
CPU = {"u1": 7.96 / 3, "u2": 7.96 / 3, "u3": 7.96 / 3, "u4": 0.04, "u5": 0.0}
NRUN = {"u1": 8, "u2": 1, "u3": 1, "u4": 0, "u5": 0}
#: Over the last minute: what the cycle received times this (see the module docstring).
MINUTE = 1.0
GOT = {"u1": 7.96 / 24, "u2": 7.96 / 24, "u3": 7.96 / 24, "u4": 0.005, "u5": 0.0}
GOT |= {"Physics": GOT["u1"] + GOT["u2"], "Chem": GOT["u3"] + GOT["u4"]}
FAIR = {"Physics": 0.5, "Chem": 0.5, "u1": 0.25, "u2": 0.25, "u3": 0.495, "u4": 0.005, "u5": 0.0}


@pytest.fixture(scope="module")
def chem_behind(tmp_path_factory) -> str:
    """The URL of a UDB with scenario 14's tree (and u5) and constants, where host h
    published the table of CYCLES cycles of CPU and NRUN and stopped."""
    url = f"sqlite:///{tmp_path_factory.mktemp('delivered') / 'udb.sqlite'}"
    scenario = tomllib.loads(SCENARIO.read_text())
    text = scenario["directives"] + "create:u5:uid:1005:resgrp:Physics:shares:1:\n"
    engine = open_udb(url, create=True)
    directives.run(engine, directives.parse(text, str(SCENARIO)))
    with write_session(engine) as s:
        set_constants(s, scenario["consts"], who="test", now=EPOCH)
    with read_connection(engine) as s:
        tree, consts = load_tree(s, "user"), load_consts(s)
    table = new_table(tree)
    for name in CPU:
        activate(table, tree.node(name), 0.0)
    for _ in range(CYCLES):
        c = Consumption.zeros(tree.size)
        c.cpus = 2.0
        for name, cpu in CPU.items():
            c.cpu[tree.node(name)] = cpu
            c.nrun[tree.node(name)] = NRUN[name]
            c.refs[tree.node(name)] = max(NRUN[name], 1)
        table, _bad = advance(tree, table, c, consts, 4.0)
    store = LnodeStore(engine, "h")
    store.publish(
        tree, table, CycleHeader(EPOCH + 4 * CYCLES, 4.0, "nice", 1, CYCLES, "user", EPOCH)
    )
    store.mark_stopped(EPOCH + 4 * CYCLES)
    return url


def run(command, url: str, *args: str):
    result = CliRunner().invoke(command, ["--udb", url, "--now", str(NOW), *args])
    assert result.exit_code == 0, result.output
    return result


def test_shrview_shows_what_each_lnode_got_against_its_fair_target(chem_behind):
    text = run(shrview, chem_behind, "-dm").stdout
    lines = text.split("\n\n", 1)[1].splitlines()
    assert lines[2].split()[:7] == "Name Rate% Eshr% Rshr% Got% Min% Fair%".split()
    cells = {line.split()[0]: line.split() for line in lines[3:]}
    assert list(cells) == ["Chem", "u3", "u4", "Physics", "u1", "u2", "u5"]
    for name, row in cells.items():
        assert row[4] == f"{100 * GOT[name]:.2f}", name
        assert row[5] == f"{100 * GOT[name] * MINUTE:.2f}", name
        assert row[6] == f"{100 * FAIR[name]:.2f}", name
    assert cells["Chem"][4:7] == ["33.67", "33.67", "50.00"]
    assert cells["u3"][4:7] == ["33.17", "33.17", "49.50"]
    # u5 wants no CPU: its Eshr% is what it would get if it alone started, in
    # parentheses; the others' are shares the scheduler gives, and sum to 100.
    assert cells["u5"][2].startswith("(") and cells["u5"][2].endswith(")")
    shown = [row[2] for row in cells.values()]
    assert [x.startswith("(") for x in shown] == [False] * 6 + [True]
    assert float(cells["Chem"][2]) + float(cells["Physics"][2]) == pytest.approx(100, abs=0.02)
    doc = json.loads(run(shrview, chem_behind, "-dm", "--json").stdout)
    by_name = {v["name"]: v for v in doc["lnodes"]}
    assert [v["eshr_if_started"] for v in doc["lnodes"]] == [False] * 6 + [True]
    chem = by_name["Chem"]
    assert chem["got_pct"] == pytest.approx(100 * GOT["Chem"], abs=1e-6)
    assert chem["min_pct"] == pytest.approx(100 * GOT["Chem"] * MINUTE, abs=1e-6)
    assert chem["fair_pct"] == pytest.approx(50.0, abs=1e-6)
    assert by_name["u5"]["eshr_pct"] > 0 and by_name["u5"]["demand"] is False


def test_shrinfo_names_the_group_behind_its_fair_target_and_by_how_much(chem_behind):
    behind = 100 * (FAIR["Chem"] - GOT["Chem"] * MINUTE)
    assert behind == pytest.approx(16.33, abs=0.01)
    for user in ("u3", "u4"):
        lines = run(shrinfo, chem_behind, user).stdout.splitlines()
        assert lines[1].startswith("  in group Chem: Rshr 50%, Eshr ")
        assert lines[1].endswith("; got 33.7% over the last minute, fair target 50%")
        assert (
            "  group Chem got 33.7% over the last minute against a fair target of 50.0%: "
            "16.3 points behind"
        ) in lines
        assert not any("no group above it" in line for line in lines)
        doc = json.loads(run(shrinfo, chem_behind, user, "--json").stdout)["user"]
        assert doc["behind"] == "Chem" and doc["behind_points"] == pytest.approx(behind)
        assert doc["groups"][0]["got_minute"] == pytest.approx(GOT["Chem"] * MINUTE)
        assert doc["groups"][0]["target"] == pytest.approx(0.5)
    lines = run(shrinfo, chem_behind, "u3").stdout.splitlines()
    assert lines[2] == (
        "  it got 33.2% over the last minute (33.2% in the last cycle), fair target 49.5%"
    )
    # Physics got more than its fair target: nothing above u1 is behind.
    lines = run(shrinfo, chem_behind, "u1").stdout.splitlines()
    assert (
        "  it and the groups above it got their fair targets over the last minute (within 1 point)"
    ) in lines
    doc = json.loads(run(shrinfo, chem_behind, "u1", "--json").stdout)["user"]
    assert doc["behind"] is None and doc["behind_points"] is None
    assert doc["got"] == pytest.approx(GOT["u1"]) and doc["target"] == pytest.approx(0.25)
    assert doc["eshr_if_started"] is False
    # u5 wants no CPU: its E-share is what it would get if it alone started.
    lines = run(shrinfo, chem_behind, "u5").stdout.splitlines()
    assert "  E-share: (" in lines[0]
    assert lines[1] == (
        "  it wants no CPU: (E-share) is what it would get if it alone started, not a share "
        "it is getting"
    )
    assert json.loads(run(shrinfo, chem_behind, "u5", "--json").stdout)["user"]["eshr_if_started"]


def test_the_lnode_furthest_behind_is_named_and_a_point_is_noise():
    """G is 2 points behind, u (in G) 20: u is named, as "it".  Within 1 point of its
    target nobody is behind; of two behind by as much within a point, the group."""
    rows = [
        _row(0, "root", -1, 0, "root", 1.0, 1.0, got=1.0, target=1.0),
        _row(1, "G", 0, 1, "group", 0.5, 0.5, got=0.48, target=0.5),
        _row(2, "u", 1, 2, "user", 0.25, 0.25, got=0.2, target=0.4),
    ]
    p = active_profile(view_lnodes(rows, frozenset()), "u", Consts())
    assert (p.behind, p.behind_points) == ("u", pytest.approx(20.0))
    assert (
        "  it got 20.0% over the last minute against a fair target of 40.0%: 20.0 points behind"
    ) in profile_lines(p)
    rows[2].got_minute = 0.391  # 0.9 points
    rows[1].got_minute = 0.491
    p = active_profile(view_lnodes(rows, frozenset()), "u", Consts())
    assert p.behind is None
    rows[2].got_minute = 0.2
    rows[1].got_minute = 0.305  # 19.5 points: within a point of u's 20
    p = active_profile(view_lnodes(rows, frozenset()), "u", Consts())
    assert (p.behind, p.behind_points) == ("G", pytest.approx(19.5))


def test_a_table_of_an_older_daemon_shows_dashes():
    """A table published before want, target, got and got_minute were (NaN when read):
    "-" in the text, null in the JSON, and the display still one format per line."""
    rows = [
        _row(0, "root", -1, 0, "root", 1.0, 1.0),
        _row(1, "G", 0, 1, "group", 1.0, 1.0),
        _row(2, "busy", 1, 2, "user", 0.5, 1.0),
        _row(3, "idle", 1, 2, "user", 0.5, 0.5, demand=False, nrun=0),
    ]
    published = row_columns(rows, [c.name for c in type(rows[0]).__table__.columns][1:])
    assert np.isnan(published["got"]).all()
    snap = Snapshot(
        "h", 1, 0.0, 4.0, 0.0, True, None, 0.0, "none", "user", None, Consts(), published
    )
    lines = display_lines(snap, ViewRequest("monitor"), str)
    table = [line.split() for line in lines[5:]]
    assert table[0][:7] == "Name Rate% Eshr% Rshr% Got% Min% Fair%".split()
    assert [row[4:7] for row in table[1:]] == [["-", "-", "-"]] * 3
    assert [row[2] for row in table[1:]] == ["100.00", "100.00", "(50.00)"]
    cols = view_columns(published, frozenset())
    monitor = display_columns("monitor", Consts())
    assert _fixed_lines(monitor, ["G", "busy", "idle"], cols, np.arange(1, 4)) is not None
    doc = json.loads(dumps(display_json(snap, ViewRequest("monitor"))))
    got = [(v["got_pct"], v["min_pct"], v["fair_pct"], v["eshr_if_started"]) for v in doc["lnodes"]]
    assert got == [(None, None, None, False)] * 2 + [(None, None, None, True)]
