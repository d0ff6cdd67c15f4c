"""shrdist: the auth file, the interactive editor, what needs no root.  As root (batch
and test modes, the change log, a running daemon picking a change up) and as real
unprivileged uids: tests/system/test_shrdist_root.py.

Expected shares are worked from the guide's ACME site (Tables 30 and 31): Proj2 has
250 of the 1000 top-level shares (machine share 0.25) and its users u9..u12 have
50/30/10/10 of 100; Proj1 has 0.5, split 500/500 between Proj1A and Proj1B (0.25
each), whose users u5, u6 (and u7, u8) have 50 each.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select
from textual.widgets import Input, Label

from fairshare.admin.shrdist import (
    Caller,
    NotAuthorised,
    parse_assignments,
    parse_auth,
)
from fairshare.cli.shrdist import main as shrdist
from fairshare.tui.shrdist import make_app
from udb.errors import OptionError
from udb.models import Entry, ShareChange
from udb.remote import Reader
from udb.session import open_udb, read_session

ROOT = Caller("root", 0, "root")
NO_AUTH = "/nonexistent/shrdist.auth"


def shares(url, *names):
    with read_session(open_udb(url)) as s:
        rows = dict(s.execute(select(Entry.name, Entry.shares).where(Entry.name.in_(names))).all())
    return [rows[n] for n in names]


def log_rows(url):
    with read_session(open_udb(url)) as s:
        return [
            (r.who, r.grp, r.member, r.old, r.new)
            for r in s.scalars(select(ShareChange).order_by(ShareChange.id))
        ]


def run(url, *args):
    return CliRunner().invoke(shrdist, ["--udb", url, "--auth", NO_AUTH, *args])


# -- the auth file -------------------------------------------------------------------------


def test_auth_pairs_several_on_a_line_and_comments():
    pairs = parse_auth("# owners\nmlb Mktg mlb tng\n\ncarol Proj2  # the project lead\n", "a")
    assert [(p.login, p.group, p.line) for p in pairs] == [
        ("mlb", "Mktg", 2),
        ("mlb", "tng", 2),
        ("carol", "Proj2", 4),
    ]
    with pytest.raises(OptionError, match=r"^a:2: expected 'login group' pairs, got 3 words"):
        parse_auth("mlb Mktg\nmlb Mktg tng\n", "a")


def test_parse_assignments_refuses_repeats_and_non_numbers():
    assert parse_assignments(["u9=3, u10 = 4", "u11=0"]) == {"u9": 3, "u10": 4, "u11": 0}
    with pytest.raises(OptionError, match="u9 is given twice"):
        parse_assignments(["u9=3,u9=4"])
    with pytest.raises(OptionError, match="item 1 'u9'"):
        parse_assignments(["u9"])
    with pytest.raises(OptionError, match="item 1 'u9=2.5'"):
        parse_assignments(["u9=2.5"])


def test_the_editor_needs_a_terminal(acme):
    r = run(acme, "-g", "Proj2")
    assert r.exit_code == 2 and "the editor needs a terminal" in r.output


# -- the interactive editor ------------------------------------------------------------------


def test_editor_recomputes_as_you_type_u_writes_q_without_u_writes_nothing(acme):
    app = make_app(Reader(acme, None), ROOT, "Proj2", Path(NO_AUTH))
    seen = {}

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            u9 = app.query_one("#shares-3", Input)  # members by name: u10, u11, u12, u9
            u9.focus()
            await pilot.press("end", "backspace", "backspace", "3", "0")
            await pilot.pause()
            seen["group"] = str(app.query_one("#group-3", Label).content)
            seen["machine"] = str(app.query_one("#machine-3", Label).content)
            seen["u10"] = str(app.query_one("#machine-0", Label).content)
            assert shares(acme, "u9") == [50]  # typing writes nothing
            await pilot.press("u")
            await pilot.pause()
            seen["after_u"] = shares(acme, "u9")
            app.query_one("#shares-0", Input).focus()
            await pilot.press("end", "backspace", "backspace", "9", "0")
            await pilot.press("q")
        return app.return_value

    assert asyncio.run(drive()) == 1  # one update written
    # u9 30 of 80: 37.50% of Proj2, 0.25 x 30/80 = 9.375% of the machine; u10 30/80 too.
    assert seen == {"group": "37.50%", "machine": "9.38%", "u10": "9.38%", "after_u": [30]}
    assert shares(acme, "u9", "u10") == [30, 30]  # the 90 typed for u10 was never written
    assert [r[2:] for r in log_rows(acme)] == [("u9", 50, 30)]


def test_editor_q_at_once_writes_nothing(acme):
    app = make_app(Reader(acme, None), ROOT, "Proj2", Path(NO_AUTH))

    async def drive():
        async with app.run_test() as pilot:
            app.query_one("#shares-3", Input).focus()
            await pilot.press("end", "backspace", "7")
            await pilot.press("q")
        return app.return_value

    assert asyncio.run(drive()) == 0
    assert shares(acme, "u9") == [50] and log_rows(acme) == []


def test_not_authorised_is_a_user_error():
    assert NotAuthorised("x").exit_code == 2
