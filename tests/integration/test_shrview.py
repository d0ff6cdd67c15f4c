"""shrview: the daemon runs on the simulator into a temporary UDB, then every display's
columns are checked against the published rows and against figures worked out by hand
from the scenario below.

The scenario: 2 CPUs, groups A (3 shares) and B (1 share); in A, `me` (the caller's
uid, 2 CPU-bound processes) and a2 (1); in B, b1 (1 CPU-bound process) and quiet
(logged in, never runnable); away (B, 2 shares) has no processes.  Active leaves:
me, a2, b1, quiet, so the machine shares are A 3/4, B 1/4, me = a2 = 3/8,
b1 = quiet = 1/8.  quiet wants no CPU and ADJGROUPS splits the machine group by group,
so b1's due share is all of B's, 1/4 (flat, without ADJGROUPS, it would be 1/7); with
LIMSHARE and maxushare 1.5 the limits are 1.5 x the due shares.  The machine is
always busy (4 runnable processes on 2 CPUs): 100 cycles of 4 s use 2 x 400 = 800
CPU seconds = 80,000 ticks, charged 100 each.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import assert_stored
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fairshare.cli.shrview import main
from fairshare.core.consts import Consts
from fairshare.display import columns
from fairshare.display.shrview import (
    _fixed_lines,
    bar,
    column_heading,
    column_texts,
    display_columns,
    round6,
)
from fairshare.report.lnodes import ViewRequest, rows_of, select_rows, view_columns, view_lnodes
from fairshare.report.nice import nice_table
from fairshare.report.published import Source, pick_host
from fairshare.sim.daemon import simulated_daemon
from fairshare.store.published import LnodeStore
from udb.errors import NotFound
from udb.models import PublishedLnode
from udb.remote import Reader
from udb.session import open_udb

DATA = Path(__file__).resolve().parents[1] / "data"
#: The simulated clock's start, the number of cycles run, and "now" for the displays:
#: the last cycle ran at EPOCH + 400, so the table is 100 s old at NOW.
EPOCH = 1_700_000_000
CYCLES = 100
NOW = EPOCH + 500
ME = os.getuid()

SCENARIO = f'''
cpus = 2
duration = "20m"
delta = "4s"

directives = """
create:A:uid:52000:shflags:040000:shares:3:
create:B:uid:53000:shflags:040000:shares:1:
create:me:uid:{ME}:resgrp:A:shares:1:
create:a2:uid:52002:resgrp:A:shares:1:
create:b1:uid:53001:resgrp:B:shares:1:
create:quiet:uid:53002:resgrp:B:shares:1:
create:away:uid:53003:resgrp:B:shares:2:shusage:1000:shextime:{NOW - 240}:
"""

[consts]
halflife = "2m"
flags = ["ADJGROUPS", "LIMSHARE"]
maxushare = 1.5

[[workload]]
name = "me"
procs = 2

[[workload]]
name = "a2"
procs = 1

[[workload]]
name = "b1"
procs = 1

[[workload]]
name = "quiet"
procs = 1
demand = 0
'''


#: Share by Account: the caller's entry `me` is charged to acctB (its default) or acctA.
ACCOUNT_SCENARIO = f'''
cpus = 1
duration = "10m"
delta = "4s"

directives = """
acid:acctA:3001:
acid:acctB:3002:
acid:other:3003:
create:G:uid:3000:shflags:040000:shares:1:
create:acctA:uid:3001:shflags:01000000:shares:1:resgrp:G:
create:acctB:uid:3002:shflags:01000000:shares:3:resgrp:G:
create:other:uid:3003:shflags:01000000:shares:1:resgrp:0:
create:me:uid:{ME}:acids:acctB,acctA:resgrp:G:shares:1:
"""

[consts]
flags = ["SHAREBYACCT"]

[[workload]]
name = "acctA"
procs = 1

[[workload]]
name = "acctB"
procs = 1

[[workload]]
name = "other"
procs = 1
'''


def simulated(directory: Path, text: str = SCENARIO) -> tuple[str, object]:
    """A UDB in `directory` and the simulated daemon on `text` over it (not started)."""
    scenario = directory / "scenario.toml"
    scenario.write_text(text)
    url = f"sqlite:///{directory / 'udb.sqlite'}"
    engine = open_udb(url, create=True)  # as shrdaemon --simulate does for its scenario
    daemon, _model, _length = simulated_daemon(engine, str(scenario), epoch=EPOCH)
    return url, daemon


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> str:
    """The URL of a UDB where the daemon ran CYCLES cycles of SCENARIO and stopped."""
    url, daemon = simulated(tmp_path_factory.mktemp("shrview"))
    assert daemon.run(CYCLES) == CYCLES
    return url


@pytest.fixture(scope="module")
def by_account(tmp_path_factory) -> str:
    """The URL of a UDB where the daemon ran 5 cycles of ACCOUNT_SCENARIO and stopped."""
    url, daemon = simulated(tmp_path_factory.mktemp("by_account"), ACCOUNT_SCENARIO)
    daemon.run(5)
    return url


@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC for the test (the displays print local times)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def run(url: str, *args: str):
    result = CliRunner().invoke(main, ["--udb", url, "--now", str(NOW), *args], prog_name="shrview")
    return result


def as_json(url: str, *args: str) -> dict:
    result = run(url, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def published_rows(url: str) -> dict[str, PublishedLnode]:
    _head, rows = LnodeStore(open_udb(url), "simulator").read_published()
    return {r.name: r for r in rows}


def body(text: str) -> list[list[str]]:
    """The table of a plain display: its lines after the blank line, from the heading
    that starts with Name where there is one (the lines above it left out), split on
    blanks."""
    lines = text.split("\n\n", 1)[1].splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("Name ")]
    return [line.split() for line in lines[heads[0] if heads else 0 :]]


# -- the monitor display ---------------------------------------------------------------


def test_monitor_columns_match_the_published_rows_and_the_hand_figures(published, utc):
    result = run(published, "-dm")
    assert result.exit_code == 0, result.output
    table = body(result.stdout)
    # The guide's header (Usage in thousands of charge units), with what the lnodes
    # received over the last cycle and minute and their fair targets.
    heading = "Name Rate% Eshr% Rshr% Got% Min% Fair% Usage(k) Rate Muse Ref Chld Flags"
    assert table[0] == heading.split()
    by_name = {cells[0].lstrip("*"): cells for cells in table[1:]}
    assert list(by_name) == ["A", "a2", "me", "B", "b1", "quiet"]
    rows = published_rows(published)
    for name, cells in by_name.items():
        r = rows[name]
        # quiet wants no CPU: its Eshr% is what it would get if it alone started.
        eshr = f"{100 * r.e_share:.2f}"
        assert cells[2] == (f"({eshr})" if name == "quiet" else eshr)
        assert cells[3] == f"{100 * r.m_share:.2f}"
        assert cells[4:7] == [f"{100 * x:.2f}" for x in (r.got, r.got_minute, r.target)]
        assert cells[7] == f"{r.usage / 1000:.0f}"
        assert cells[8] == f"{r.rate:.2f}"
        assert cells[10] == str(r.refs)
    # Machine shares from the scenario's shares (see the module docstring).
    rshr = {name: cells[3] for name, cells in by_name.items()}
    assert rshr == {
        "A": "75.00",
        "a2": "37.50",
        "me": "37.50",
        "B": "25.00",
        "b1": "12.50",
        "quiet": "12.50",
    }
    # At equilibrium each demanding lnode gets its due share; quiet would get 1.5 x 1/8.
    eshr = {name: float(cells[2].strip("()")) for name, cells in by_name.items()}
    for name, due in {"A": 75, "me": 37.5, "a2": 37.5, "B": 25, "b1": 25}.items():
        assert eshr[name] == pytest.approx(due, abs=0.2)
    assert eshr["quiet"] == pytest.approx(18.75, abs=0.01)
    # Rate% is each lnode's share of all leaves' rate; groups hold their leaves'.
    total = sum(rows[n].rate for n in ("me", "a2", "b1", "quiet"))
    assert by_name["me"][1] == f"{100 * rows['me'].rate / total:.2f}"
    assert by_name["A"][1] == f"{100 * (rows['me'].rate + rows['a2'].rate) / total:.2f}"
    assert by_name["quiet"][1] == "0.00"
    # Muse: charges since activation; the whole machine, 800 CPU s x 10,000 per CPU s.
    muse = {name: int(cells[9]) for name, cells in by_name.items()}
    assert muse["A"] == round(rows["me"].charge + rows["a2"].charge)
    assert muse["A"] + muse["B"] == pytest.approx(8_000_000, abs=2)
    assert by_name["A"][11] == "2" and by_name["B"][11] == "2" and by_name["me"][11] == "0"
    assert [by_name[n][10] for n in ("A", "me", "a2", "B", "b1", "quiet")] == list("321211")
    # Flags as the guide shows them: users 10000, groups 50000, demanding or not.
    assert by_name["A"][12] == "50000"
    assert by_name["me"][12] == "10000"
    assert by_name["quiet"][12] == "10000"


def test_monitor_shows_the_fair_targets_and_what_was_delivered(published, utc):
    result = run(published, "-dm")
    by_name = {cells[0].lstrip("*"): cells for cells in body(result.stdout)[1:]}
    # The fair targets, max-min over what they want (me 2 CPUs, a2 1, b1 1, quiet 0) on
    # 2 CPUs: A 3/4 of them, B 1/4 (b1 wants more), halved in A; quiet wants nothing.
    fair = {name: cells[6] for name, cells in by_name.items()}
    assert fair == {
        "A": "75.00",
        "a2": "37.50",
        "me": "37.50",
        "B": "25.00",
        "b1": "25.00",
        "quiet": "0.00",
    }
    # The simulated machine delivers them (the cycle's nested cgroups), over the last
    # cycle and over the last minute alike.
    for name, cells in by_name.items():
        assert float(cells[4]) == pytest.approx(float(fair[name]), abs=0.5)
        assert float(cells[5]) == pytest.approx(float(fair[name]), abs=0.5)
    # The legend says what the new columns and the parentheses are.
    legend = result.stdout.split("\n\n", 1)[1].splitlines()[:2]
    assert legend[0].startswith("Got%: the CPU it received over the last cycle, Min%: ")
    assert legend[1] == "(Eshr%): it wants no CPU; the share it would get if it alone started"


def test_names_are_indented_by_level_and_the_callers_lnode_is_starred(published, utc):
    lines = run(published, "-dm").stdout.split("\n\n", 1)[1].splitlines()
    names = [re.match(r" *\*?\S+", line).group() for line in lines[3:]]  # after the legend
    assert names == ["A", "  a2", "  *me", "B", "  b1", "  quiet"]
    doc = as_json(published, "-dm")
    assert [v["name"] for v in doc["lnodes"] if v["own"]] == ["me"]
    assert {v["name"]: v["level"] for v in doc["lnodes"]}["me"] == 2


def test_in_share_by_account_mode_the_callers_accounts_are_starred(by_account):
    doc = as_json(by_account, "-dm")
    assert [v["name"] for v in doc["lnodes"]] == ["G", "acctA", "acctB", "other"]
    assert {v["name"] for v in doc["lnodes"] if v["own"]} == {"acctA", "acctB"}
    flags = {v["name"]: v["flags"] for v in doc["lnodes"]}
    assert flags == {"G": "50000", "acctA": "1010000", "acctB": "1010000", "other": "1010000"}
    # G and other 1 share each at the top; acctA 1 and acctB 3 of G's half.
    rshr = {v["name"]: v["rshr_pct"] for v in doc["lnodes"]}
    assert rshr == {"G": 50.0, "acctA": 12.5, "acctB": 37.5, "other": 50.0}


def test_monitor_json_shape(published):
    doc = as_json(published, "-dm")
    assert doc["host"] == "simulator"
    assert doc["cycle"] == CYCLES
    assert doc["time"] == EPOCH + 4 * CYCLES
    assert doc["running"] is False
    assert doc["age"] == pytest.approx(100)
    assert doc["display"] == "monitor"
    assert (doc["select"], doc["sort"]) == ("all", "tree")
    me = next(v for v in doc["lnodes"] if v["name"] == "me")
    keys = (
        "name level uid kind own rate_pct eshr_pct eshr_if_started rshr_pct got_pct min_pct "
        "fair_pct usage rate muse ref chld flags demand background"
    )
    assert list(me) == keys.split()
    assert me["eshr_if_started"] is False and me["fair_pct"] == 37.5
    row = published_rows(published)["me"]
    assert (me["got_pct"], me["min_pct"]) == (
        round(100 * row.got, 6),
        round(100 * row.got_minute, 6),
    )
    assert me["uid"] == ME and me["kind"] == "user" and me["rshr_pct"] == 37.5
    assert me["flags"] == "10000" and me["ref"] == 2
    assert me["demand"] is True and me["background"] is False
    assert me["usage"] == published_rows(published)["me"].usage  # charge units, not k
    quiet = next(v for v in doc["lnodes"] if v["name"] == "quiet")
    assert quiet["demand"] is False and quiet["eshr_if_started"] is True
    assert quiet["eshr_pct"] == pytest.approx(18.75) and quiet["fair_pct"] == 0.0


# -- adjgroup, limshare, statistics, nice, graph --------------------------------------------


def test_adjgroup_columns(published, utc):
    result = run(published, "-da")
    table = body(result.stdout)
    assert table[0] == "Name Rate% CPU% Rshr% Nrun Rate Proj% Adj_a New% Pri%".split()
    by_name = {cells[0].lstrip("*"): cells for cells in table[1:]}
    rows = published_rows(published)
    for name, cells in by_name.items():
        r = rows[name]
        assert cells[2] == f"{100 * r.cpu:.2f}"
        assert cells[4] == str(r.nrun)
        assert cells[7] == f"{r.adj:.2f}"
        new = f"{100 * r.e_share:.2f}"
        assert cells[8] == (f"({new})" if name == "quiet" else new)
    # The machine is shared as due: CPU% A 75, B 25; within A, me and a2 half each.
    assert float(by_name["A"][2]) == pytest.approx(75, abs=0.5)
    assert float(by_name["b1"][2]) == pytest.approx(25, abs=0.5)
    assert [by_name[n][4] for n in ("me", "a2", "b1", "quiet")] == ["2", "1", "1", "0"]
    # Proj%: the share of its siblings' rate; b1 is the only one in B using CPU.
    proj_me = rows["me"].rate / (rows["me"].rate + rows["a2"].rate)
    assert by_name["me"][6] == f"{100 * proj_me:.2f}"
    assert by_name["b1"][6] == "100.00" and by_name["quiet"][6] == "0.00"
    # Pri%: m^2/usage over the demanding leaves (quiet does not demand); groups sum.
    w = {n: rows[n].m_share ** 2 / rows[n].usage for n in ("me", "a2", "b1")}
    total = sum(w.values())
    assert by_name["me"][9] == f"{100 * w['me'] / total:.2f}"
    assert by_name["A"][9] == f"{100 * (w['me'] + w['a2']) / total:.2f}"
    assert by_name["quiet"][9] == "0.00"
    doc = as_json(published, "-da")
    keys = "rate_pct cpu_pct rshr_pct nrun rate proj_pct adj_a new_pct eshr_if_started pri_pct"
    assert list(doc["lnodes"][0])[5:] == keys.split()
    assert [v["eshr_if_started"] for v in doc["lnodes"]] == [False] * 5 + [True]


def test_limshare_shows_the_band_around_the_due_share(published, utc):
    result = run(published, "-dl")
    text = result.stdout
    assert "LIMSHARE on, maxushare = 1.5: Eshr kept between Due/1.5 and Due x 1.5" in text
    table = body(text)
    assert table[0] == "Name Rshr% Due% Eshr% Floor% Limit% Lim".split()
    cells = {c[0].lstrip("*"): c[1:] for c in table[1:]}
    # due shares: A 3/4, me = a2 3/8, B 1/4, b1 1/4 (quiet demands nothing); the band
    # is due / 1.5 .. due x 1.5.
    due = {"A": 0.75, "a2": 0.375, "me": 0.375, "B": 0.25, "b1": 0.25}
    for name, d in due.items():
        assert cells[name][1] == f"{100 * d:.2f}"
        assert cells[name][3:5] == [f"{100 * d / 1.5:.2f}", f"{100 * d * 1.5:.2f}"]
    assert cells["quiet"][1] == "-" and cells["quiet"][3:] == ["-", "-"]
    assert cells["quiet"][2].startswith("(") and cells["b1"][2][0].isdigit()
    assert all(len(c) == 5 for c in cells.values())  # nobody at a bound
    doc = as_json(published, "-dl")
    assert doc["limshare"] is True and doc["maxushare"] == 1.5
    assert doc["band"] == {"floor": pytest.approx(1 / 1.5), "limit": 1.5} and doc["k5"] == 2.0
    quiet = next(v for v in doc["lnodes"] if v["name"] == "quiet")
    assert quiet["limit_pct"] is None and quiet["floor_pct"] is None and quiet["lim"] is None
    assert quiet["eshr_if_started"] is True
    b1 = next(v for v in doc["lnodes"] if v["name"] == "b1")
    assert b1["due_pct"] == 25.0 and b1["floor_pct"] == pytest.approx(100 / 6, abs=1e-6)


def _row(
    node,
    name,
    parent,
    level,
    kind,
    m,
    e,
    usage=1.0,
    demand=True,
    nrun=1,
    rate=0.0,
    due=None,
    got=None,
    target=None,
):
    """A published lnode; `got` (also its got_minute) and `target` None as an older
    daemon published them."""
    return PublishedLnode(
        host="h",
        node=node,
        name=name,
        uid=1000 + node,
        kind=kind,
        parent=parent,
        level=level,
        shares=1.0,
        refs=nrun,
        nrun=nrun,
        usage=usage,
        charge=0.0,
        cpu_seconds=0.0,
        rate=rate,
        m_share=m,
        e_share=e,
        cpu=0.0,
        adj=1.0,
        priority=usage * nrun / m**2 if m else 1e30,
        background=False,
        demand=demand,
        due=due,
        got=got,
        got_minute=got,
        target=target,
    )


def test_users_held_at_the_limit_or_the_floor_are_marked():
    """A newcomer (usage ~0) gets maxushare x its due share and no more: Lim is max; a
    heavy user gets due / maxushare and no less: Lim is min."""
    from fairshare.display.shrview import display_columns

    third = 1 / 3
    rows = [
        _row(0, "root", -1, 0, "root", 1.0, 1.0, due=1.0),
        _row(1, "old", 0, 1, "user", third, 0.25, usage=1e6, due=third),
        _row(2, "heavy", 0, 1, "user", third, 0.25, usage=1e9, due=third),
        _row(3, "new", 0, 1, "user", third, 0.5, usage=1e-9, due=third),
    ]
    consts = Consts(flags=0o4, maxushare=1.5)
    cols = {c.key: c for c in display_columns("limshare", consts)}
    old, heavy, new = view_lnodes(rows, frozenset())[1:]
    # the cycle's due share, 1/3 each, as published: the band is 2/9 .. 1/2
    assert new.due == pytest.approx(third) and cols["limit_pct"].text(new) == "50.00"
    assert cols["floor_pct"].text(new) == "22.22"
    assert cols["lim"].text(new) == "max" and cols["lim"].text(old) == ""
    heavy.e_share = 2 / 9
    assert cols["lim"].text(heavy) == "min" and cols["lim"].value(heavy) == "min"
    off = {c.key: c for c in display_columns("limshare", Consts(maxushare=1.5))}
    assert off["lim"].text(new) == "" and off["lim"].text(heavy) == ""  # LIMSHARE off


def test_limshare_shows_the_band_in_force_k5_without_limshare():
    """The guide's 4.6.1.4: "You can view the effect of the maxushare option with the
    shrview -dl command."  With LIMSHARE the band is due / X .. X x due (X the ceiling,
    -X 8 for a batch site); without it, Kay-Lauder's K5 x due is the only bound, and the
    line above the table says which is in force."""
    from fairshare.display.shrview import display_columns, limshare_line

    third = 1 / 3
    rows = [
        _row(0, "root", -1, 0, "root", 1.0, 1.0, due=1.0),
        _row(1, "old", 0, 1, "user", third, 1 / 3 - 1 / 9, usage=1e6, due=third),
        _row(2, "new", 0, 1, "user", third, 2 / 3, usage=1e-9, due=third),
        _row(3, "heavy", 0, 1, "user", third, 1 / 9, usage=1e9, due=third),
    ]
    old, new, heavy = view_lnodes(rows, frozenset())[1:]
    batch = {c.key: c for c in display_columns("limshare", Consts(flags=0o4, maxushare=8.0))}
    assert batch["limit_pct"].text(new) == "266.67"  # 8 x 1/3: the ceiling, not 2 x due
    assert batch["floor_pct"].text(heavy) == "4.17"  # 1/3 / 8
    assert batch["lim"].text(new) == ""  # 2/3 is below the ceiling
    k5 = {c.key: c for c in display_columns("limshare", Consts(maxushare=8.0))}
    assert k5["limit_pct"].text(new) == "66.67" and k5["floor_pct"].text(heavy) == "0.00"
    assert k5["lim"].text(new) == "max"  # held by K5 = 2
    k3 = {c.key: c for c in display_columns("limshare", Consts(maxushare=8.0, k5=3.0))}
    assert k3["limit_pct"].text(new) == "100.00" and k3["lim"].text(new) == ""
    assert limshare_line(Consts(flags=0o4, maxushare=8.0)) == (
        "LIMSHARE on, maxushare = 8: Eshr kept between Due/8 and Due x 8 (maxushare is "
        "the ceiling; K5 = 2 not in force)"
    )
    assert limshare_line(Consts(maxushare=8.0, k5=3.0)) == (
        "LIMSHARE off: Eshr kept at most Due x 3 (Kay-Lauder's edge effects, K5 = 3; "
        "maxushare = 8 not in force)"
    )


def test_statistics(published, utc):
    text = run(published, "-ds").stdout
    lines = text.split("\n\n", 1)[1].splitlines()
    assert lines[1].split()[:3] == ["Active", "id's:", "4/5"]
    assert lines[2].split()[:3] == ["Active", "groups:", "2"]
    rows = published_rows(published)
    high = max(rows[n].usage for n in ("me", "a2", "b1", "quiet"))
    assert lines[1].split()[4:] == [f"{high:.4e}", "1.0000e+12"]
    mix = {cells[0]: cells[1:] for cells in (line.split() for line in lines[3:])}
    assert mix["syscall"] == ["bio", "sio", "tick", "mem", "tty"]
    assert mix["Charge:"] == ["0%", "0%", "0%", "100%", "0%", "0%"]
    assert mix["Costs:"] == ["0", "0", "0", "100", "0", "0"]
    assert mix["Counts:"] == ["0", "0", "0", "80000", "0", "0"]
    st = as_json(published, "-ds")["statistics"]
    assert (st["active_ids"], st["total_ids"], st["active_groups"]) == (4, 5, 2)
    assert st["counts"]["tick"] == pytest.approx(80000)
    assert st["charge_pct"]["tick"] == 100 and st["costs"]["tick"] == 100
    assert st["usage_max"] == 1e12 and st["usage_high"] == pytest.approx(high)


def test_nice_table_is_the_guides():
    """The guide's -dn table (4.6.1.3, -D 2,60), digit for digit: NiceD 0.4044 (half-life
    0.766) at nice -20, 0.6590 at -3, 0.7039 (1.974) at 0, 0.9586 (16.377) at 17, 0.9885
    (60.000) at 19; Ticks 150, 147, 145 ... 102, 100, 97 ... 57, 55, and 0 (not 1) at 19."""
    rows = nice_table(Consts(nice_decay=(2.0, 60.0), halflife=3600.0))
    assert [r.nice for r in (rows[0], rows[20], rows[39])] == [-20, 0, 19]
    guide = {0: (0.4044, 0.766), 1: (0.4194, 0.798), 10: (0.5542, 1.174), 17: (0.6590, 1.662),
             20: (0.7039, 1.974), 23: (0.7489, 2.397), 37: (0.9586, 16.377),
             38: (0.9735, 25.844), 39: (0.9885, 60.000)}  # fmt: skip
    for n, (decay, half) in guide.items():
        assert (round(rows[n].decay, 4), round(rows[n].halflife, 3)) == (decay, half), n
    ticks = {0: 150, 1: 147, 2: 145, 3: 142, 10: 125, 18: 105, 19: 102, 20: 100, 21: 97,
             22: 95, 23: 92, 37: 57, 38: 55, 39: 0}  # fmt: skip
    assert {n: rows[n].ticks for n in ticks} == ticks
    # Rates: 1 - the Rate column's decay per second (the usage half-life's), graded by Ticks
    gain = 1 - 0.5 ** (1 / 3600)
    assert rows[20].rate == pytest.approx(gain) and rows[0].rate == pytest.approx(1.5 * gain)
    assert rows[39].rate == 0
    assert (rows[20].weight, rows[39].weight, rows[0].weight) == (1024, 15, 88761)
    # Under (1,30) the guide warns of negative decays: they have no half-life.
    low = nice_table(Consts(nice_decay=(0.9, 30.0)))
    assert low[0].decay < 0 and low[0].halflife is None


def test_nice_display_and_json(published, utc):
    text = run(published, "-dn").stdout
    assert "-D 2,60: Linux ignores the NiceD decay" in text
    table = body(text)[1:]
    assert table[0] == ["NiceD", "Nice", "Nice", "Nice"]
    assert table[1] == ["N", "Nice", "Decay", "1/2life", "Rates", "Ticks", "Weight"]
    gain = 1 - 0.5 ** (1 / 120)  # the scenario's half-life is 2 minutes
    assert table[2] == ["0", "-20", "0.4044", "0.766", f"{1.5 * gain:.6f}", "150", "88761"]
    assert table[22] == ["20", "0", "0.7039", "1.974", f"{gain:.6f}", "100", "1024"]
    assert table[41] == ["39", "19", "0.9885", "60.000", "0.000000", "0", "15"]
    doc = as_json(published, "-dn")
    assert len(doc["nice"]) == 40 and doc["lnodes"] == []
    keys = ["n", "nice", "niced", "halflife", "rate", "ticks", "weight"]
    assert list(doc["nice"][0]) == keys
    assert doc["nice"][0]["ticks"] == 150


def test_bar_marks_consumption_and_the_allocated_share():
    assert bar(0.5, 0.2) == "#" * 10 + "I" + "#" * 14  # 25 # for 50%, I at 10 = 20%
    assert bar(0.1, 0.3) == "#####" + " " * 10 + "I"
    assert bar(0.0, 0.02) == " I"
    assert bar(0.001, 0.5) == "#" + " " * 24 + "I"  # any use shows one #
    assert len(bar(1.0, 1.0)) == 51


def test_graph(published, utc):
    table = body(run(published, "-dg").stdout)
    assert table[0] == ["Group", "No.", "%Rate"]
    assert [cells[:2] for cells in table[1:3]] == [["A", "2"], ["B", "2"]]
    assert table[-1] == ["Total", "=>", "4"]
    doc = as_json(published, "-dg")
    a = doc["lnodes"][0]
    assert (a["name"], a["no"], a["rshr_pct"]) == ("A", 2, 75.0)
    assert a["bar"] == bar(a["rate_pct"] / 100, 0.75)
    assert a["bar"][37:40].count("I") == 1 and doc["total"] == 4


# -- select and sort -------------------------------------------------------------------


def names(url: str, *args: str) -> list[str]:
    return [v["name"] for v in as_json(url, "-dm", *args)["lnodes"]]


def test_select(published):
    assert names(published, "-so") == ["A", "B"]
    assert names(published, "-s", "groups") == ["A", "B"]
    assert names(published, "-su") == ["a2", "me", "b1", "quiet"]
    assert names(published, "-s", "B") == ["B", "b1", "quiet"]
    assert names(published, "-sme") == ["me"]
    result = run(published, "-s", "nobody")
    assert result.exit_code == 2
    assert result.stderr == "shrview: -s nobody: no active lnode of that name\n"


def test_subtree_indentation_starts_at_its_top(published, utc):
    lines = run(published, "-dm", "-s", "B").stdout.splitlines()
    assert lines[6].startswith("B ")
    assert lines[7].startswith("  b1 ") and lines[8].startswith("  quiet ")


def test_sort_orders_siblings_within_the_tree(published):
    rows = published_rows(published)
    assert names(published, "-o", "name") == ["A", "a2", "me", "B", "b1", "quiet"]
    by_id = ["A", "me", "a2", "B", "b1", "quiet"] if ME < 52002 else ["A", "a2", "me"]
    assert names(published, "-oi")[: len(by_id)] == by_id
    # Usage descending among siblings; groups stay above their members.
    a_kids = sorted(("me", "a2"), key=lambda n: -rows[n].usage)
    assert names(published, "-ou") == ["A", *a_kids, "B", "b1", "quiet"]
    assert names(published, "-o", "eshr")[3:] == ["B", "b1", "quiet"]
    assert names(published, "-or")[3:] == ["B", "b1", "quiet"]
    result = run(published, "-o", "size")
    assert result.exit_code == 2 and "-o size: expected tree, id, name" in result.stderr


# -- modes, freshness, hosts -----------------------------------------------------------


def test_stopped_daemon_is_said_with_the_age_and_the_table_still_shown(published, utc):
    result = run(published, "-dm")
    assert result.exit_code == 0
    stop = time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(EPOCH + 4 * CYCLES))
    assert result.stderr == (
        "shrview: no daemon is running for simulator; showing the last published state, "
        f"100 s old (cycle {CYCLES}, stopped at {stop} UTC)\n"
    )
    assert "SHRVIEW Type:monitor Select:all Sort_opt:tree" in result.stdout


def test_a_daemon_that_died_is_said_so(tmp_path, utc, monkeypatch):
    """A header still marked running but 64 s (16 cycles) old: no waiting, and said.
    (How long shrview takes here: tests/bench/bench_responsiveness.py.)"""
    url, daemon = simulated(tmp_path)
    daemon.start()
    daemon.step()  # cycle 1 at EPOCH (step() alone does not sleep), then it "dies"
    waits = []
    monkeypatch.setattr(Source, "wait_for_cycle", lambda self, *a, **kw: waits.append(a))
    result = CliRunner().invoke(main, ["--udb", url, "--now", str(EPOCH + 64)], prog_name="shrview")
    assert waits == []  # no waiting for a cycle that will not come
    last = time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(EPOCH))
    assert result.stderr == (
        "shrview: no daemon is running for simulator; showing the last published state, "
        f"64 s old (cycle 1, last cycle at {last} UTC, the daemon did not stop cleanly)\n"
    )
    assert "  *me " in result.stdout


def test_statistics_without_published_counts():
    from fairshare.display.shrview import statistics_lines
    from fairshare.report.lnodes import Statistics

    st = Statistics(1, 2, 0, 5.0, 1e12, 1.0, 1e30, ("tick",), None, {"tick": 100.0}, None)
    lines = statistics_lines(st)
    assert lines[-4:] == [
        "Charge:     -",
        "Costs:    100",
        "Counts:     -",
        "(the daemon that published this table does not publish counts)",
    ]


def test_repeat_mode_separates_outputs_with_form_feeds(published, utc):
    result = run(published, "-dm", "-r", "3")
    assert result.exit_code == 0
    parts = result.stdout.split("\f")
    assert len(parts) == 3 and parts[0] == parts[1] == parts[2]
    assert result.stderr.count("no daemon is running") == 1
    docs = run(published, "-r", "2", "--json").stdout.splitlines()
    assert len(docs) == 2 and all(json.loads(d)["cycle"] == CYCLES for d in docs)


def test_a_running_daemon_is_waited_for_cycle_by_cycle(tmp_path, monkeypatch):
    """Line and repeat modes print each display after the next published cycle.  (How
    long that takes: tests/bench/bench_responsiveness.py.)"""
    url, daemon = simulated(tmp_path)
    waited = []  # whether each wait ended with a new cycle (not the 1.5-delta timeout)
    wait_for_cycle = Source.wait_for_cycle

    def watched(*args, **kw):
        waited.append(wait_for_cycle(*args, **kw))
        return waited[-1]

    monkeypatch.setattr(Source, "wait_for_cycle", watched)
    daemon.start()
    daemon.step()
    stop = threading.Event()

    def cycles() -> None:
        while not stop.wait(0.3):
            daemon.step()

    ticker = threading.Thread(target=cycles)
    ticker.start()
    try:
        result = CliRunner().invoke(
            main, ["--udb", url, "--now", str(EPOCH + 4), "-r", "3", "--json"]
        )
    finally:
        stop.set()
        ticker.join()
        daemon.shutdown()
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    seen = [d["cycle"] for d in docs]
    assert seen[0] >= 2 and seen[0] < seen[1] < seen[2]
    assert all(d["running"] for d in docs)
    assert waited == [True, True, True]  # one new cycle every 0.3 s, never the timeout


def test_continuous_mode_has_a_monitors_keys(published, utc):
    """4.4.11's continuous mode, on Textual: m a s n l g switch the display, o the sort,
    / selects a user or group (refusing a name nobody has), p pauses, + and - the
    interval, ? shows the help, q quits."""
    import asyncio

    from textual.widgets import Static

    from fairshare.tui.monitor import Monitor
    from fairshare.tui.views import ShrviewView

    source = Source(Reader(published, None), None, NOW)
    app = Monitor(ShrviewView(source, ViewRequest(display="monitor")), 4.0)
    seen = {}

    def text(widget: str) -> str:
        return str(app.query_one(widget, Static).content)

    async def drive():
        async with app.run_test(size=(140, 50)) as pilot:
            seen["first"] = text("#frame")
            await pilot.press("a")
            seen["adjgroup"] = (text("#frame"), text("#status"))
            await pilot.press("n", "o")
            seen["nice"] = (text("#frame"), text("#status"))
            await pilot.press("m", "/", *"quiet", "enter")
            seen["select"] = (text("#frame"), text("#status"))
            await pilot.press("/", *"nosuch", "enter")
            seen["nosuch"] = text("#status")
            await pilot.press("p", "+", "+", "-")
            seen["paused"] = text("#status")
            await pilot.press("?")
            seen["help"] = app.query_one("#help", Static).has_class("shown")
            await pilot.press("q")
        return app.return_value

    frames = asyncio.run(drive())
    assert "SHRVIEW Type:monitor" in seen["first"] and "no daemon is running" in seen["first"]
    assert "SHRVIEW Type:adjgroup" in seen["adjgroup"][0]
    assert seen["adjgroup"][1].startswith("shrview -da (adjgroup)  sort tree  select all")
    assert "SHRVIEW Type:nice tables" in seen["nice"][0] and "sort id" in seen["nice"][1]
    assert "select quiet" in seen["select"][1] and "quiet" in seen["select"][0]
    assert "select quiet" in seen["nosuch"] and "nosuch" in seen["nosuch"]  # kept, said why
    assert "[paused]" in seen["paused"] and seen["help"]
    assert app.interval == 8.0 and frames >= 5


def test_continuous_mode_needs_a_terminal(published):
    result = run(published, "-c")  # CliRunner: no terminal
    assert result.exit_code == 2
    assert result.stderr.endswith(
        "shrview -c: continuous mode is a full-screen display and needs a terminal; "
        "use -r N for N displays one after the other\n"
    )


def test_continuous_goes_with_neither_json_nor_repeat(published):
    for extra in (["--json"], ["-r", "2"]):
        result = run(published, "-c", *extra)
        assert result.exit_code == 2
        assert "-c (continuous) goes with neither -r, --json nor -P" in result.stderr


def test_bad_display_letter(published):
    result = run(published, "-dx")
    assert result.exit_code == 2
    assert result.stderr.startswith("shrview: -d x: expected m (monitor)")


def test_host_choice():
    assert pick_host(["a", "b"], None, "b") == "b"
    assert pick_host(["simulator"], None, "here") == "simulator"
    assert pick_host(["a", "b"], "a", "here") == "a"
    with pytest.raises(NotFound, match="several hosts published lnode tables: give --host; "):
        pick_host(["a", "b"], None, "here")
    with pytest.raises(NotFound, match="--host c: nothing published for it; hosts: a, b"):
        pick_host(["a", "b"], "c", "here")


def test_nothing_published(udb_url):
    result = CliRunner().invoke(main, ["--udb", udb_url])
    assert result.exit_code == 2
    assert "no lnode table has been published in this UDB" in result.stderr


# -- one stored rendering per display ----------------------------------------------------


@pytest.mark.parametrize("letter", list("masnlg"))
def test_stored_rendering(published, utc, letter):
    result = run(published, f"-d{letter}")
    assert result.exit_code == 0
    assert_stored(DATA / f"shrview_d{letter}.txt", result.stdout)


def test_the_quick_start_shows_the_last_cycle_with_the_workload_running(tmp_path):
    """After shrdaemon --simulate runs the ACME scenario to its end, -da and -ds show the
    users still busy (the old daemon's last sample fell just after the end: Nrun 0,
    Pri% 0 and Share_pri 0 for everyone)."""
    from fairshare.cli.shrdaemon import main as shrdaemon

    acme = Path(__file__).resolve().parents[2] / "examples"
    text = (acme / "scenarios" / "06_acme.toml").read_text()
    text = text.replace('"../acme/acme.udb"', f'"{acme / "acme" / "acme.udb"}"')
    text = text.replace('duration = "2h"', 'duration = "10m"').replace('warmup = "1h"', "")
    path = tmp_path / "acme.toml"
    path.write_text(text)
    url = f"sqlite:///{tmp_path / 'acme.sqlite'}"
    r = CliRunner().invoke(shrdaemon, ["--udb", url, "--simulate", str(path)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["--udb", url, "--host", "simulator", "-da", "--json"])
    assert r.exit_code == 0, r.output
    users = [x for x in json.loads(r.stdout)["lnodes"] if x["kind"] == "user"]
    assert len(users) == 16
    assert all(u["nrun"] == 2 and u["pri_pct"] > 0 for u in users), users
    r = CliRunner().invoke(main, ["--udb", url, "--host", "simulator", "-ds", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["statistics"]["priority_high"] > 0


_NUMBERS = st.one_of(
    st.floats(-1e7, 1e7, allow_nan=False),
    st.sampled_from([0.0, -0.0, 9.995, 99.995, 0.995, 0.004999, -0.005, 999.5, 1e-30]),
)
#: Machine shares (their squares divide the test rows' priority).
_SHARES = st.one_of(st.floats(1e-9, 1.0), st.sampled_from([0.0, 0.99995, 0.0999949, 0.5]))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            _SHARES,
            _NUMBERS,
            _NUMBERS,
            _NUMBERS,
            st.integers(0, 10**6),
            st.booleans(),
            st.one_of(st.none(), _NUMBERS),
        ),
        min_size=1,
    )
)
@example(values=[(1.0, 0.0, 0.0, 0.0, 0, True, 0.0), (1.0, 0.0, 0.0, -0.0, 0, True, 0.0)])
@example(values=[(0.5, 9.995, 0.0, 0.0, 1, False, None), (0.5, 99.995, 0.0, 0.0, 0, True, 1.0)])
@example(values=[(0.5, -0.005, 0.0, 0.0, 1, False, -0.0), (0.5, 0.5, 0.0, 0.0, 1, True, None)])
@pytest.mark.parametrize("display", ["monitor", "adjgroup"])
def test_fixed_width_lines_are_the_cell_by_cell_columns(display, values):
    """-dm's and -da's one-format-per-line layout (widths from each column's extremes) gives the
    very lines of formatting every cell and padding it, whatever the numbers' signs,
    sizes and rounding, with the effective shares of lnodes that want no CPU in
    parentheses and "-" for what an older daemon did not publish (None).  The examples:
    -0.00 is wider than 0.00; 9.995 and 99.995 are halves; -0.005 prints -0.50."""
    rows = [_row(0, "root", -1, 0, "root", 1.0, 1.0)] + [
        _row(i + 1, f"u{i}", 0, 1, "user", m, e, u, demand, n, r, got=got, target=e)
        for i, (m, e, u, r, n, demand, got) in enumerate(values)
    ]
    table = view_columns(rows, frozenset())
    shown = rows_of(table)[1:]
    at = np.arange(1, len(rows))
    cols = display_columns(display, Consts())
    heads = [column_heading(c, table, at) for c in cols]
    for accent in ("", "é"):  # ASCII names, and others
        names = [("*" if i % 3 == 0 else "") + v.name + accent for i, v in enumerate(shown)]
        cells = zip(names, *(column_texts(c, shown) for c in cols[1:]), strict=True)
        expected = columns([heads], list(cells), [c.right for c in cols])
        assert _fixed_lines(cols, names, table, at) == expected


def test_fixed_width_lines_leave_what_is_not_finite_to_the_cells():
    rows = [_row(0, "root", -1, 0, "root", 1.0, 1.0), _row(1, "u", 0, 1, "user", 0.5, 0.5)]
    table = view_columns(rows, frozenset())
    table["rate"] = np.array([0.0, float("inf")])
    assert _fixed_lines(display_columns("monitor", Consts()), ["u"], table, np.arange(1, 2)) is None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.floats(-1e3, 1e3),
            st.integers(-(10**9), 10**9).map(lambda k: (k + 0.5) / 1e6),  # halves
            st.sampled_from([0.0, -0.0, 2.5e-7, 1.0000005, -0.0000005, 4503599627370497.0]),
        )
    )
)
def test_round6_is_pythons_round_value_by_value(values):
    """The JSON's percentages are rounded at once (display.shrview.round6) to the very
    floats of Python's round(v, 6): signs of zero, halves, NaN and the infinities kept."""
    got = round6(np.array(values, dtype=float)).tolist()
    want = [round(v, 6) for v in values]
    assert [struct.pack("<d", g) for g in got] == [struct.pack("<d", w) for w in want]


def _walk(lnodes, select_, sort):
    """The order shrview showed lnodes in before select_rows, one lnode at a time: depth
    first from the root's children (or every lnode of the selected name), siblings
    sorted by the -o key then the name; the oracle of the test below."""
    key = {
        "tree": lambda v: v.name,
        "name": lambda v: v.name,
        "id": lambda v: v.uid,
        "usage": lambda v: -v.usage,
        "rate": lambda v: -v.rate_share,
        "eshr": lambda v: -v.e_share,
    }[sort]
    kids = {}
    for v in lnodes:
        kids.setdefault(v.parent, []).append(v)
    for sibs in kids.values():
        sibs.sort(key=lambda v: (key(v), v.name))
    if select_ in ("all", "groups", "users"):
        start = [c for t in lnodes if t.parent < 0 for c in kids.get(t.node, [])]
    else:
        start = [v for v in lnodes if v.name == select_]
    out, stack = [], list(reversed(start))
    while stack:
        v = stack.pop()
        if select_ == "groups" and not v.is_group:
            continue
        if not (select_ == "users" and v.is_group):
            out.append(v.node)
        stack.extend(reversed(kids.get(v.node, [])))
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from("abc"), st.sampled_from([0.0, 1.0, 2.5])),
        max_size=25,
    ),
    st.sampled_from(["all", "groups", "users", "a", "b"]),
    st.sampled_from(["tree", "id", "name", "usage", "rate", "eshr"]),
)
def test_select_rows_gives_the_depth_first_walks_order(nodes, select_, sort):
    """select_rows places every row by subtree sizes; it shows the very lnodes, in the
    very order, of the depth-first walk (ties of names and keys included)."""
    rows, level = [_row(0, "root", -1, 0, "root", 1.0, 1.0)], {0: 0}
    parents = {i + 1: p % (i + 1) for i, (p, _n, _u) in enumerate(nodes)}
    has_kids = set(parents.values())
    for i, (_p, name, usage) in enumerate(nodes):
        node, parent = i + 1, parents[i + 1]
        level[node] = level[parent] + 1
        kind = "group" if node in has_kids else "user"
        rows.append(_row(node, name, parent, level[node], kind, 0.5, 0.25, usage, rate=usage))
    table = view_columns(rows, frozenset())
    want = _walk(rows_of(table), select_, sort)
    if not want and select_ in ("a", "b"):
        with pytest.raises(NotFound):
            select_rows(table, select_, sort)
        return
    assert np.asarray(table["node"])[select_rows(table, select_, sort)].tolist() == want


# -- start-up cost -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("shrview", "-dm"),
        ("shrview", "-dm", "--json"),
        ("shrview", "-ds"),
        ("shrview", "--site"),
        ("shrtree", "-l", "--json"),  # exit status 1: no Idle, no UnKnown entry
        ("shrinfo", "-v", "me"),
        ("shrinfo", "-a", "--json"),
    ],
)
def test_the_displays_start_lean(published, command):
    """A display started as its installed script starts it (fairshare.cli.start) reads
    the UDB with Core statements (udb.tables) alone: SQLAlchemy's ORM, a tenth of a
    second of every command's start, is never imported, not even later; no garbage
    collection runs from before the imports to the end; and numpy's OpenBLAS gets one
    thread (a display multiplies no matrices)."""
    name, *args = command
    code = (
        "import atexit, gc, os, sys\n"
        "from fairshare.cli import start\n"
        f"sys.argv = [{name!r}, '--udb', {published!r}, '--now', {str(NOW)!r}, *{args!r}]\n"
        "runs = sum(g['collections'] for g in gc.get_stats())\n"
        "def report():  # at exit: the script leaves the process from within start\n"
        "    runs_now = sum(g['collections'] for g in gc.get_stats()) - runs\n"
        "    blas = os.environ.get('OPENBLAS_NUM_THREADS')\n"
        "    engines = len(sys.modules['udb.session']._engines)\n"
        "    print('sqlalchemy.orm' in sys.modules, runs_now, blas, engines, file=sys.stderr)\n"
        "atexit.register(report)\n"
        f"start.{name}()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env
    )
    *_, last = done.stderr.splitlines() or [""]
    # The engines were disposed of before the atexit handlers ran (udb.cli.start.leave).
    assert last == "False 0 1 0", done.stderr
    assert done.returncode == (1 if name == "shrtree" else 0), done.stderr


def test_parsable_lines_are_the_json_records_for_scripts(published):
    """-P: a heading of the --json keys, then one |-separated line an lnode, the same
    values as --json's, for the tabular displays; refused where there is no table."""
    for display in ("m", "a", "l", "g"):
        r = run(published, "-d", display, "-P")
        assert r.exit_code == 0, r.output
        lines = r.stdout.splitlines()
        doc = as_json(published, "-d", display)
        keys = lines[0].split("|")
        assert keys == list(doc["lnodes"][0])
        assert len(lines) == 1 + len(doc["lnodes"])
        for line, rec in zip(lines[1:], doc["lnodes"], strict=True):
            fields = dict(zip(keys, line.split("|"), strict=True))
            assert fields["name"] == rec["name"]
            for k, v in rec.items():
                if isinstance(v, float):
                    assert float(fields[k]) == v, (display, k)
    for bad in (["-d", "n", "-P"], ["-d", "s", "-P"], ["-P", "--json"], ["--site", "-P"]):
        r = run(published, *bad)
        assert r.exit_code == 2 and "-P" in r.output, bad
