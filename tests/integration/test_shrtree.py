"""shrtree through click's CliRunner on real temporary SQLite UDBs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import assert_stored
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import insert

from fairshare.cli.shrtree import main
from fairshare.report.sharetree import _shown_problems
from udb import models
from udb.check import WARNING, Problem
from udb.models import SHF_ACCOUNT, SHF_GROUP
from udb.session import dispose_all, open_udb, write_session

DATA = Path(__file__).resolve().parents[1] / "data"
NOW = 1_700_000_000.0
HOUR = 3600.0  # the default half-life


def entry(name, uid, resgrp=0, shares=0, shflags=0, passwd="x", **kw):
    return dict(name=name, uid=uid, resgrp=resgrp, shares=shares, shflags=shflags,
                passwd=passwd, **kw)  # fmt: skip


def acme_entries():
    """ACME (guide tables 30, 31), Idle, unknown, an unused group Spare with 0 shares, and
    usage: u5 600 now, u9 800 one half-life ago (400), u1 1000 two half-lives ago (250)."""
    rows = [
        entry("Idle", 11, 0, 0, passwd="*"),
        entry("unknown", 12, 999, 1, passwd="*"),
        entry("Spare", 666, 0, 0, SHF_GROUP, "*"),
    ]
    for name, uid, shares, resgrp in [
        ("Maint", 999, 100, 0),
        ("Proj1", 111, 500, 0),
        ("Proj2", 222, 250, 0),
        ("Proj3", 333, 150, 0),
        ("Proj1A", 444, 500, 111),
        ("Proj1B", 555, 500, 111),
    ]:
        rows.append(entry(name, uid, resgrp, shares, SHF_GROUP, "*"))
    members = [(999, 25)] * 4 + [(444, 50)] * 2 + [(555, 50)] * 2
    members += [(222, 50), (222, 30), (222, 10), (222, 10)] + [(333, 25)] * 4
    usage = {1: (1000.0, NOW - 2 * HOUR), 5: (600.0, NOW), 9: (800.0, NOW - HOUR)}
    for k, (resgrp, shares) in enumerate(members, 1):
        shusage, shextime = usage.get(k, (0.0, 0.0))
        rows.append(entry(f"u{k}", 1000 + k, resgrp, shares, shusage=shusage, shextime=shextime))
    return rows


def make_udb(path: Path, rows, accounts=()):
    engine = open_udb(str(path), create=True)
    with write_session(engine) as s:
        s.execute(insert(models.Entry), rows)
        if accounts:
            s.execute(insert(models.Account), [dict(acid=a, name=n) for a, n in accounts])
    dispose_all()
    return path


@pytest.fixture
def acme(tmp_path):
    path = make_udb(tmp_path / "acme.sqlite", acme_entries())
    yield path
    dispose_all()


def run(path, *args):
    result = CliRunner().invoke(main, ["--udb", str(path), "--now", str(NOW), *args])
    return result


def as_json(path, *args):
    result = run(path, "--json", *args)
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def test_long_display_matches_the_stored_rendering(acme):
    result = run(acme, "-l")
    assert result.exit_code == 0, result.output
    assert_stored(DATA / "shrtree_acme_l.txt", result.stdout.replace(str(acme), "UDB_PATH"))


def test_default_shows_groups_only_with_the_header(acme):
    result = run(acme)
    lines = result.stdout.splitlines()
    assert lines[0] == "DISPLAY OF SHARE TREE"
    assert "Format:        Groups only" in lines
    assert "Warning Count: 1 (Nc) Group has no references" in lines
    assert "Warning Count: 1 (Zs) Group has zero shares" in lines
    names = [line.split()[1] for line in lines if line[:3].strip().isdigit()]
    assert names == ["ROOT", "Maint", "Proj1", "Proj1A", "Proj1B", "Proj2", "Proj3", "Spare"]


def test_json_shape_and_figures(acme):
    status, doc = as_json(acme, "-l")
    assert status == 0
    assert set(doc) >= {"nodes", "warnings", "errors"}
    assert (doc["warnings"], doc["errors"]) == (2, 0)
    assert (doc["group_count"], doc["account_count"], doc["user_count"]) == (8, 0, 18)
    nodes = {n["name"]: n for n in doc["nodes"]}
    required = {"name", "id", "level", "kind", "parent", "shares", "system_share",
                "group_share", "system_usage", "codes"}  # fmt: skip
    assert all(required <= set(n) for n in doc["nodes"])
    u5 = nodes["u5"]
    assert (u5["id"], u5["level"], u5["kind"], u5["parent"], u5["shares"]) == (
        1005,
        3,
        "user",
        "Proj1A",
        50,
    )
    assert u5["system_share"] == pytest.approx(0.125)  # 50% x 50% x 50%
    assert u5["group_share"] == pytest.approx(0.5)
    # Decayed usage: u5 600, u9 800/2 = 400, u1 1000/4 = 250; total 1250.
    assert u5["system_usage"] == pytest.approx(600 / 1250)
    assert nodes["Proj2"]["system_usage"] == pytest.approx(400 / 1250)
    assert nodes["Maint"]["system_usage"] == pytest.approx(250 / 1250)
    assert nodes["ROOT"]["system_usage"] == pytest.approx(1.0)
    assert nodes["u1"]["system_share"] == pytest.approx(0.1 * 25 / 101)  # unknown has 1 share
    assert nodes["Idle"]["kind"] == "idle" and nodes["Idle"]["system_share"] == 0
    assert nodes["Spare"]["codes"] == ["Nc", "Zs"]
    assert nodes["Proj1A"]["parent"] == "Proj1" and nodes["Proj1"]["parent"] == "ROOT"
    assert nodes["ROOT"]["parent"] is None and nodes["ROOT"]["level"] == 0
    leaves = [n for n in doc["nodes"] if n["kind"] in ("user", "idle")]
    assert sum(n["system_share"] for n in leaves) == pytest.approx(1.0)
    _, groups_only = as_json(acme)
    assert {n["kind"] for n in groups_only["nodes"]} == {"group"}


def test_node_subtree(acme):
    status, doc = as_json(acme, "-l", "--node", "Proj1")
    assert [n["name"] for n in doc["nodes"]] == [
        "Proj1",
        "Proj1A",
        "u5",
        "u6",
        "Proj1B",
        "u7",
        "u8",
    ]
    assert (doc["node"], doc["group_count"], doc["user_count"], doc["warnings"]) == (
        "Proj1",
        3,
        4,
        0,
    )
    result = run(acme, "--node", "Nowhere")
    assert result.exit_code == 2
    assert "Nowhere" in result.stderr and "no such node" in result.stderr


def broken_entries():
    """Every kind of fault: a cycle, a missing group, a user on ROOT, no Idle, too deep."""
    rows = [e for e in acme_entries() if e["name"] != "Idle"]
    rows += [
        entry("Loop1", 700, 701, 10, SHF_GROUP, "*"),
        entry("Loop2", 701, 700, 10, SHF_GROUP, "*"),
        entry("lost", 2001, 700, 10),
        entry("orphan", 2002, 4242, 10),
        entry("onroot", 2003, 0, 10),
        entry("Deep", 710, 444, 10, SHF_GROUP, "*"),
        entry("deepuser", 2004, 710, 10),
    ]
    return rows


def test_the_error_listing_is_coloured_by_severity_on_a_terminal(tmp_path):
    path = make_udb(tmp_path / "bad.sqlite", broken_entries())
    plain = run(path, "-e").stdout.splitlines()
    env = {"FORCE_COLOR": "1", "NO_COLOR": None, "TERM": "xterm-256color", "COLORTERM": None}
    coloured = (
        CliRunner()
        .invoke(main, ["--udb", str(path), "--now", str(NOW), "-e"], env=env)
        .stdout.splitlines()
    )
    assert len(coloured) == len(plain)
    kinds = set()
    for p, c in zip(plain, coloured, strict=True):
        kind = p.split(None, 1)[0] if p else ""
        if kind == "**ERROR**":
            assert c == f"\x1b[1;31m{p}\x1b[0m"
        elif kind == "**WARN***":
            assert c == f"\x1b[33m{p}\x1b[0m"
        else:  # the header and the table's heading
            assert c == p
        kinds.add(kind)
    assert {"**ERROR**", "**WARN***", "Type"} <= kinds


def test_errors_exit_1_and_the_error_listing(tmp_path):
    path = make_udb(tmp_path / "bad.sqlite", broken_entries())
    result = run(path, "-e")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert "Errors:        6" in lines and "Warnings:      3" in lines
    table = lines[lines.index(next(x for x in lines if x.startswith("Type"))) :]
    assert table[0].split() == ["Type", "Name", "ID", "Status", "Description"]
    rows = [line.split(None, 5) for line in table[1:]]
    rows = [r if r[3] != "-" else r[:4] + [""] + [" ".join(r[4:])] for r in rows]
    got = {(r[1], r[5].split(":")[0]) for r in rows}
    assert got == {
        ("Idle", "Id"),
        ("Loop1", "Cy"),
        ("Loop2", "Cy"),
        ("lost", "Or"),
        ("orphan", "Mg"),
        ("deepuser", "Dp"),
        ("onroot", "Rt"),
        ("Spare", "Nc"),
        ("Spare", "Zs"),
    }
    assert rows[0][:3] == ["**ERROR**", "Idle", "-"]  # UDB-wide problems first
    kinds = {r[1]: r[0] for r in rows}
    assert kinds["onroot"] == "**WARN***" and kinds["orphan"] == "**ERROR**"


def test_its_script_exits_with_the_status_and_whole_output_on_a_pipe(tmp_path):
    """The installed script leaves without the interpreter's teardown (udb.cli.start):
    what it printed still arrives whole on a pipe, with the command's exit status; a
    reader already gone (a pager quit, head) costs no error message."""
    crowd = [entry(f"c{k}", 5000 + k, 333, 1) for k in range(3000)]  # more than a pipe holds
    path = make_udb(tmp_path / "bad.sqlite", broken_entries() + crowd)
    code = "import sys; from fairshare.cli.start import shrtree; sys.argv[0] = 'shrtree'; shrtree()"
    command = [sys.executable, "-c", code, "--udb", str(path), "--now", str(NOW), "-l", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (1, "")
    assert json.loads(done.stdout) == as_json(path, "-l")[1]
    gone, pipe = os.pipe()
    os.close(gone)
    done = subprocess.run(command, stdout=pipe, stderr=subprocess.PIPE, check=False)
    os.close(pipe)
    assert (done.returncode, done.stderr) == (0, b"")


def test_detached_entries_in_json(tmp_path):
    path = make_udb(tmp_path / "bad.sqlite", broken_entries())
    status, doc = as_json(path, "-l")
    assert status == 1 and doc["errors"] == 6
    nodes = {n["name"]: n for n in doc["nodes"]}
    for name in ("Loop1", "Loop2", "lost", "orphan"):
        assert nodes[name]["level"] is None and nodes[name]["parent"] is None
    assert nodes["lost"]["codes"] == ["Or"] and nodes["deepuser"]["level"] == 4
    assert any(p["code"] == "Id" and p["uid"] is None for p in doc["problems"])
    _, errors_only = as_json(path, "-e")
    assert {n["name"] for n in errors_only["nodes"]} == {
        "Loop1", "Loop2", "lost", "orphan", "onroot", "deepuser", "Spare"
    }  # fmt: skip


def test_by_account(tmp_path):
    rows = [
        entry("Idle", 11, 0, 0, passwd="*"),
        entry("unknown", 12, 999, 1, passwd="*"),
        entry("Maint", 999, 0, 100, SHF_GROUP, "*"),
        entry("Proj1", 111, 0, 300, SHF_GROUP, "*"),
        entry("maint", 5000, 999, 10, SHF_ACCOUNT, "*"),
        entry("proj1a", 5001, 111, 30, SHF_ACCOUNT, "*"),
        entry("proj1b", 5002, 111, 10, SHF_ACCOUNT, "*"),
        entry("alice", 1001, 999, 50, acids=[5001, 5000]),
        entry("bob", 1002, 999, 50, acids=[5002]),
        entry("carol", 1003, 999, 50, acids=[]),
    ]
    path = make_udb(tmp_path / "acct.sqlite", rows, [(5000, "maint"), (5001, "a"), (5002, "b")])
    status, doc = as_json(path, "-A", "-l")
    assert status == 1 and doc["analyzed"] == "account"
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert "alice" not in nodes and nodes["proj1a"]["kind"] == "account"
    # Proj1 300/400 of the machine, proj1a 30/40 of Proj1.
    assert nodes["proj1a"]["system_share"] == pytest.approx(0.75 * 0.75)
    assert nodes["maint"]["system_share"] == pytest.approx(0.25 * 10 / 11)
    assert [p["name"] for p in doc["problems"] if p["code"] == "Na"] == ["carol"]
    assert (doc["account_count"], doc["user_count"]) == (3, 5)  # alice bob carol Idle unknown
    status, by_uid = as_json(path, "-l")
    assert status == 0 and by_uid["analyzed"] == "uid"
    assert "alice" in {n["name"] for n in by_uid["nodes"]}
    text = run(path, "-A").stdout
    assert "Analyzed:      By Account" in text and "Error Count:   1 (Na)" in text


def test_missing_udb_file_is_exit_2_and_not_created(tmp_path):
    path = tmp_path / "none.sqlite"
    result = run(path)
    assert result.exit_code == 2
    assert f"no UDB at {path}; create one with udbgen" in result.stderr and not path.exists()


def test_help_lists_every_option():
    out = CliRunner().invoke(main, ["--help"]).output
    for option in ("--udb", "-l", "-e", "-A", "--node", "--now", "--json"):
        assert option in out


def guide_example_entries():
    """The site of the guide's shrtree displays (section 4.4.11.3), groups as printed, a few
    users: Serv, Country, Region and TechOps are referenced by nobody; Unknown (a group)
    and the unknown user have zero shares; Users' children have shares 1:0:1:3:6:0:10:0."""
    g = SHF_GROUP
    rows = [
        entry("Idle", 11, 0, 0, passwd="*"),
        entry("Demos", 8367, 0, 10, g, "*"),
        entry("Serv", 8001, 8367, 10, g, "*"),
        entry("System", 8389, 0, 10, g, "*"),
        entry("Admin", 8306, 8389, 10, g, "*"),
        entry("Unknown", 8393, 0, 0, g, "*"),
        entry("unknown", 12, 8393, 0, passwd="*"),
        entry("Users", 8395, 0, 10, g, "*"),
        entry("root", 0, 8306, 10),
        entry("demo", 100, 8367, 10),
    ]
    for k, (name, uid, shares) in enumerate(
        [("CCN", 8354, 1), ("Country", 8359, 0), ("HardDev", 8372, 1), ("Intl", 8374, 3),
         ("Mktg", 8381, 6), ("Region", 8385, 0), ("SoftDev", 8386, 10), ("TechOps", 8390, 0)]
    ):  # fmt: skip
        rows.append(entry(name, uid, 8395, shares, g, "*"))
        if shares:
            rows.append(entry(f"user{k}", 2000 + k, uid, 10))
    return rows


def test_the_guide_example_header_and_codes(tmp_path):
    path = make_udb(tmp_path / "guide.sqlite", guide_example_entries())
    result = run(path)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    header = lines[lines.index("Group Count:   15") : lines.index("Group Count:   15") + 8]
    assert header[3:] == [
        "Warnings:      9",
        "Errors:        0",
        "Warning Count: 4 (Nc) Group has no references",
        "Warning Count: 1 (Zs) User has zero shares",
        "Warning Count: 4 (Zs) Group has zero shares",
    ]
    rows = {line.split()[1]: line for line in lines if line[:3].strip().isdigit()}
    assert len(rows) == 15  # ROOT and 14 groups, as in the guide
    assert rows["Serv"].split()[-3:] == ["G", "Nc", "40000"]
    assert rows["Unknown"].split()[-3:] == ["G", "Zs", "40000"]
    for name in ("Country", "Region", "TechOps"):
        assert rows[name].split()[-4:] == ["G", "Nc", "Zs", "40000"]
    # Group Share of Users' children as in the guide: 4.8, 14.3, 28.6, 47.6 percent.
    for name, share in (
        ("CCN", "4.8%"),
        ("Intl", "14.3%"),
        ("Mktg", "28.6%"),
        ("SoftDev", "47.6%"),
    ):
        assert rows[name].split()[4] == share


def test_aged_usage_halves_every_halflife_and_never_grows():
    from fairshare.core.lnode import decayed_usage

    got = decayed_usage([800.0, 800.0, 800.0], [NOW - HOUR, NOW - 3 * HOUR, NOW + HOUR], NOW, HOUR)
    assert got.tolist() == pytest.approx([400.0, 100.0, 800.0])


def test_system_usage_uses_the_configured_halflife(tmp_path):
    path = make_udb(tmp_path / "acme.sqlite", acme_entries())
    engine = open_udb(str(path))
    with write_session(engine) as s:
        s.execute(insert(models.Const), [dict(name="halflife", value=2 * HOUR)])
    dispose_all()
    _, doc = as_json(path, "-l")
    nodes = {n["name"]: n for n in doc["nodes"]}
    # Half-life 2 h: u5 600, u9 800 x 0.5 ** 0.5, u1 1000 x 0.5.
    total = 600 + 800 * 0.5**0.5 + 500
    assert nodes["u5"]["system_usage"] == pytest.approx(600 / total)
    assert nodes["Maint"]["system_usage"] == pytest.approx(500 / total)


def test_empty_udb_shows_root_and_the_missing_idle_and_unknown(tmp_path):
    path = tmp_path / "empty.sqlite"
    open_udb(str(path), create=True)  # as udbgen makes one
    dispose_all()
    status, doc = as_json(path, "-l")
    assert status == 1
    assert [n["name"] for n in doc["nodes"]] == ["ROOT"]
    assert [(p["code"], p["uid"]) for p in doc["problems"]] == [("Id", None), ("Uk", None)]


@given(
    st.lists(
        st.tuples(st.sampled_from("abcdef"), st.one_of(st.none(), st.integers(0, 3))),
        max_size=30,
    ),
    st.lists(st.sampled_from("abcdef"), unique=True),
)
def test_problems_are_shown_udb_wide_first_then_by_row_then_by_name(found, rows):
    """The order of the problem listing: a stable sort on (of an entry, the row of its
    entry or after every row, its name)."""
    problems = [Problem("Zs", WARNING, name, uid, "m") for name, uid in found]
    position = {name: k for k, name in enumerate(rows)}
    expected = sorted(
        problems,
        key=lambda p: (
            p.uid is not None,
            position.get(p.name, len(rows)) if p.uid is not None else len(rows),
            p.name,
        ),
    )
    entry = np.array([-1 if p.uid is None else "abcdef".index(p.name) for p in problems])
    row = np.array(
        [len(rows) if p.uid is None else position.get(p.name, len(rows)) for p in problems]
    )
    got = _shown_problems(problems, entry, row, len(rows), True)
    assert [id(p) for p in got] == [id(p) for p in expected]
    # With --node, only the problems of the rows shown, in the same order.
    shown = _shown_problems(problems, entry, row, len(rows), False)
    assert [id(p) for p in shown] == [
        id(p) for p in expected if p.uid is not None and p.name in position
    ]


def test_the_error_listing_shows_the_guides_status_numbers(tmp_path):
    """4.4.11.3's shrtree -e: Serv (a group with Nc) is 10, the group Unknown with Zs
    1000, the user unknown with Zs 1001, Country (a group, Nc and Zs) 1010."""
    rows = [
        entry("Idle", 11, 0, 0, passwd="*", gids=[0]),
        entry("Demos", 8367, 0, 100, SHF_GROUP, "*"),
        entry("Serv", 8001, 8367, 100, SHF_GROUP, "*"),
        entry("Unknown", 8393, 0, 0, SHF_GROUP, "*"),
        entry("unknown", 12, 8393, 0, passwd="*"),
        entry("Users", 8395, 0, 100, SHF_GROUP, "*"),
        entry("Country", 8359, 8395, 0, SHF_GROUP, "*"),
        entry("u1", 1001, 8367, 10),
    ]
    lines = run(make_udb(tmp_path / "guide.sqlite", rows), "-e").stdout.splitlines()
    status = {}
    for line in lines[lines.index(next(x for x in lines if x.startswith("Type"))) + 1 :]:
        kind, name, uid, number, letter, text = line.split(None, 5)
        status[(name, text.split(":")[0])] = (number, letter)
    assert status == {
        ("Serv", "Nc"): ("10", "G"),
        ("Unknown", "Zs"): ("1000", "G"),
        ("unknown", "Zs"): ("1001", "U"),
        ("Country", "Nc"): ("1010", "G"),
        ("Country", "Zs"): ("1010", "G"),
    }


def test_repeat_mode_prints_n_displays_one_share_cycle_apart(acme):
    """4.4.11: every display command has line, repeat and continuous modes, paced by the
    share cycle (shradmin -R): -r 3 prints three displays separated by form feeds."""
    from fairshare.cli.shradmin import main as shradmin

    assert CliRunner().invoke(shradmin, ["--udb", str(acme), "-R", "0.2"]).exit_code == 0
    r = run(acme, "-r", "3")
    assert r.exit_code == 0, r.output
    shows = r.stdout.split("\f")
    assert len(shows) == 3 and all(s.startswith("DISPLAY OF SHARE TREE") for s in shows)
    assert run(acme, "-r", "2", "-c").exit_code == 2


def test_continuous_mode_needs_a_terminal_and_has_a_monitors_keys(acme):
    import asyncio

    from textual.widgets import Static

    from fairshare.report.sharetree import load_tree_report
    from fairshare.tui.monitor import Monitor
    from fairshare.tui.views import ShrtreeView

    r = run(acme, "-c")
    assert r.exit_code == 2 and "shrtree -c: continuous mode is a full-screen display" in r.stderr

    def load(node):
        return load_tree_report(str(acme), None, now=NOW, mode="user", node=node)

    app = Monitor(ShrtreeView(load), 4.0)
    seen = {}

    def frame() -> str:
        return str(app.query_one("#frame", Static).content)

    async def drive():
        async with app.run_test(size=(140, 60)) as pilot:
            seen["groups"] = frame()
            await pilot.press("l")
            seen["long"] = frame()
            await pilot.press("/", *"Proj1A", "enter")
            seen["node"] = (frame(), str(app.query_one("#status", Static).content))
            await pilot.press("e")
            seen["errors"] = frame()
            await pilot.press("q")

    asyncio.run(drive())
    assert "u5" not in seen["groups"] and "Proj2" in seen["groups"]
    assert "u5" in seen["long"] and "Format:        Groups and users" in seen["long"]
    assert "Proj2" not in seen["node"][0] and "node Proj1A" in seen["node"][1]
    assert "Type" in seen["errors"] and "Lv" not in seen["errors"]
