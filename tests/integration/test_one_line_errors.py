"""Guard, "Every error one line": what ended in a traceback (or ran for ever) as a bad day
or a hostile user produced it, now one line on stderr and exit status 2, and nothing
written.  The randomised forms of the same inputs: tests/integration/test_fuzz_guard.py."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fairshare.admin.shrdist import Caller, authorise, parse_assignments, read_auth
from fairshare.cli.newacct import main as newacct
from fairshare.cli.shradmin import main as shradmin
from fairshare.cli.shrdaemon import main as shrdaemon
from fairshare.cli.shrdist import main as shrdist
from fairshare.cli.shrinfo import main as shrinfo
from fairshare.cli.shrprio import main as shrprio
from fairshare.cli.shrsim import main as shrsim
from fairshare.cli.shrsync import main as shrsync
from fairshare.cli.shrtree import main as shrtree
from fairshare.cli.shrview import main as shrview
from fairshare.core.tree import build_tree
from fairshare.daemon.sessions import resolve_account
from fairshare.store.config import load_consts, tree_rows
from udb.cli.udbgen import main as udbgen
from udb.cli.udbsee import main as udbsee
from udb.errors import NotFound, OptionError
from udb.session import dispose_all, open_udb, read_session

ROOT_DIR = Path(__file__).resolve().parents[2]
SCENARIO = ROOT_DIR / "examples" / "scenarios" / "06_acme.toml"

#: The ten commands and arguments that make each open the UDB `url`.
COMMANDS = {
    "udbgen": lambda url: (udbgen, ["--udb", url, "-c", "create:zz:uid:7001:shares:1:"]),
    "udbsee": lambda url: (udbsee, ["--udb", url, "-a"]),
    "shrtree": lambda url: (shrtree, ["--udb", url, "-l"]),
    "shrview": lambda url: (shrview, ["--udb", url, "-dm"]),
    "shrinfo": lambda url: (shrinfo, ["--udb", url]),
    "shrprio": lambda url: (shrprio, ["--udb", url]),
    "shradmin": lambda url: (shradmin, ["--udb", url]),
    "shrdist": lambda url: (shrdist, ["--udb", url, "--history"]),
    "shrsync": lambda url: (shrsync, ["--udb", url, "-u"]),
    "shrdaemon": lambda url: (
        shrdaemon,
        ["--udb", url, "--once", "--enforcer", "none", "--socket", ""],
    ),
    "shrsim": lambda url: (
        shrsim,
        ["--udb", url, str(ROOT_DIR / "examples/scenarios/01_equal_shares.toml")],
    ),
}


def one_line(result, code: int = 2) -> str:
    """The one line `result` printed on stderr, checked: exit `code`, no traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def damage_names(path: Path) -> None:
    """Give the UDB's `entries` table a name and SQL that are not UTF-8, as a stray
    write into the schema page would."""
    dispose_all()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET name = CAST(X'656EFF74' AS TEXT), "
        "sql = CAST(X'435245415445205441424C45207A7AFF28612029' AS TEXT) WHERE name = 'entries'"
    )
    conn.commit()
    conn.close()


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"shrsim"}))
def test_a_schema_name_that_is_not_utf8_is_a_damaged_udb_for_every_command(acme, tmp_path, command):
    path = Path(acme.removeprefix("sqlite:///"))
    damage_names(path)
    before = path.read_bytes()
    cmd, args = COMMANDS[command](acme)
    said = one_line(CliRunner().invoke(cmd, args))
    assert "malformed database schema (an object's name is not UTF-8)" in said
    assert path.read_bytes() == before


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_usage_errors_are_one_line_exit_2(command, udb_url):
    cmd, _args = COMMANDS[command](udb_url)
    said = one_line(CliRunner().invoke(cmd, ["--no-such-option"]))
    assert "No such option '--no-such-option'" in said and said.endswith("--help)")


def test_a_bad_option_value_is_one_line_naming_the_option(udb_url):
    said = one_line(CliRunner().invoke(shradmin, ["--udb", udb_url, "--history", "--last", "0"]))
    assert "Invalid value for '--last': 0 is not in the range 1<=x<=1000000" in said
    said = one_line(CliRunner().invoke(newacct, ["a", "b", "c"]))
    assert "unexpected extra argument" in said.lower()


def test_newacct_takes_an_account_number_in_ascii_digits_only(acme_acct):
    with read_session(open_udb(acme_acct)) as s:
        with pytest.raises(NotFound, match="٢١٠١: no such account"):
            resolve_account(s, "٢١٠١")
        with pytest.raises(NotFound):
            resolve_account(s, "9" * 5000)
        assert resolve_account(s, "2101") == 2101


@pytest.mark.parametrize(
    "value",
    ["u9=²", "u9=١٢", "u9=" + "9" * 5000],
    ids=["superscript", "arabic-indic", "5000-digits"],
)
def test_shrdist_takes_whole_numbers_in_ascii_digits_only(acme, value):
    with pytest.raises(OptionError, match="expected NAME=SHARES with SHARES a whole number"):
        parse_assignments([value])
    r = CliRunner().invoke(shrdist, ["--udb", acme, "-g", "Proj2", "-b", value])
    assert "expected NAME=SHARES with SHARES a whole number >= 0" in one_line(r)


def test_an_auth_file_not_utf8_is_one_line_and_root_needs_none(acme, tmp_path):
    auth = tmp_path / "shrdist.auth"
    auth.write_bytes(b"mlb Proj2\ncaf\xe9 Proj3\n")
    auth.chmod(0o644)
    with pytest.raises(OptionError, match=r"shrdist.auth:2: not UTF-8 text \(byte 13\)"):
        read_auth(auth)
    engine = open_udb(acme)
    with read_session(engine) as s:
        tree = build_tree(tree_rows(s), load_consts(s).mode)
    view = authorise(Caller("root", 0, "root"), tree, None, auth)
    assert view.group == "/"
    for bad in (b"caf\xe9 Proj3\n", b"one two three\n"):
        auth.write_bytes(bad)
        args = ["--udb", acme, "--auth", str(auth), "-g", "Proj2", "-b", "u9=60"]
        r = CliRunner().invoke(shrdist, args)
        assert r.exit_code == 0, r.output  # root's own shrdist is not stopped by it


def test_a_scenario_not_utf8_is_file_line_column(tmp_path, udb_url):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(SCENARIO.read_bytes().replace(b"\n", b"\n# caf\xe9\n", 1))
    said = one_line(CliRunner().invoke(shrsim, ["--udb", udb_url, str(bad)]))
    assert said.endswith(f"{bad}:2:6: not UTF-8 text: byte 0xe9")
    db = tmp_path / "sim.sqlite"
    r = CliRunner().invoke(shrdaemon, ["--udb", str(db), "--simulate", str(bad), "--once"])
    assert one_line(r).endswith(f"{bad}:2:6: not UTF-8 text: byte 0xe9")
    assert not db.exists()


def test_a_udb_the_daemon_cannot_write_at_start_is_one_line(acme, monkeypatch, tmp_path):
    """Another writer holds a transaction for longer than the busy timeout (cut to a
    fraction of a second here) when the daemon starts."""
    import udb.session

    monkeypatch.setattr(udb.session, "BUSY_TIMEOUT", 0.2)
    dispose_all()
    path = acme.removeprefix("sqlite:///")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE entries SET shares = shares WHERE 0")
    try:
        log = tmp_path / "log"
        args = ["--udb", acme, "--once", "--enforcer", "none", "--socket", ""]
        r = CliRunner().invoke(shrdaemon, [*args, "--log-file", str(log)])
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    said = one_line(r)
    assert "cannot write the UDB at start (database is locked)" in said
    assert "Traceback" not in log.read_text()


def test_shrview_c_without_a_terminal_is_refused_at_once(acme):
    """Before: drew for ever into a pipe (this test timed out)."""
    r = subprocess.run(
        [sys.executable, "-m", "fairshare.cli.shrview", "--udb", acme, "-c"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PYTHONPATH": str(ROOT_DIR), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "python -m fairshare.cli.shrview: shrview -c: continuous mode is a full-screen display "
        "and needs a terminal; use -r N for N displays one after the other"
    ]
