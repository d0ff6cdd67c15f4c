"""The guide's directive language (4.3.1, 4.4.2, 4.4.9): set/add/remove operators, its
warnings, a field given twice, a missing ':' and udbsee's -f list as printed."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from udb import directives as d
from udb.cli.udbgen import main as udbgen
from udb.cli.udbsee import main as udbsee
from udb.errors import DirectiveError
from udb.models import Entry
from udb.session import open_udb, read_session


def gen(*args: str):
    return CliRunner().invoke(udbgen, list(args), catch_exceptions=False)


def see(*args: str):
    return CliRunner().invoke(udbsee, list(args), catch_exceptions=False)


def entry(url: str, name: str) -> Entry:
    with read_session(open_udb(url)) as s:
        return s.scalars(select(Entry).where(Entry.name == name)).one()


@pytest.fixture
def u1(udb_url):
    r = gen("--udb", udb_url, "-c", "acid:p1:5001: acid:p2:5002: acid:p3:5003:",
            "-c", "create:u1:uid:101:gids:20:acids:5001:shflags:02:")  # fmt: skip
    assert r.exit_code == 0, r.output
    return udb_url


def test_acids_plus_adds_minus_removes_equals_sets(u1):
    # 4.3.1: "acids = + - :n1, n2,, nn:" -- the issue's own example first.
    assert gen("--udb", u1, "-c", "update:u1:acids+:5002:").exit_code == 0
    assert entry(u1, "u1").acids == [5001, 5002]
    assert gen("--udb", u1, "-c", "update:u1:acids+:p3,5001:").exit_code == 0
    assert entry(u1, "u1").acids == [5001, 5002, 5003]  # already there: not added twice
    assert gen("--udb", u1, "-c", "update:u1:acids-:5001,p3:").exit_code == 0
    assert entry(u1, "u1").acids == [5002]
    assert gen("--udb", u1, "-c", "update:u1:acids=:5003,5001:").exit_code == 0
    assert entry(u1, "u1").acids == [5003, 5001]
    r = see("--udb", u1, "-f", "acids+", "u1")  # an operator is no field to show
    assert r.exit_code == 2 and "-f: unknown field 'acids+'" in r.stderr


def test_shflags_plus_sets_bits_minus_clears_them(u1):
    # 4.3.1: "shflags = + -:octal:"
    assert gen("--udb", u1, "-c", "update:u1:shflags+:040:").exit_code == 0
    assert entry(u1, "u1").shflags == 0o42
    assert gen("--udb", u1, "-c", "update:u1:shflags-:02:").exit_code == 0
    assert entry(u1, "u1").shflags == 0o40
    assert gen("--udb", u1, "-c", "update:u1:shflags=:0:").exit_code == 0
    assert entry(u1, "u1").shflags == 0


def test_an_operator_on_an_unregistered_acid_is_refused(u1):
    r = gen("--udb", u1, "-c", "update:u1:acids+:nosuch:")
    assert r.exit_code == 2
    assert "acids: no account named nosuch" in r.stderr
    assert entry(u1, "u1").acids == [5001]


def test_a_field_given_twice_names_both_columns(u1):
    r = gen("--udb", u1, "-c", "update:u1:shares:5:nice:3:shares:6:")
    assert r.exit_code == 2
    assert r.stderr.endswith(
        "-c:1:27: update:u1: shares given twice in one directive (columns 11 and 27)\n"
    )
    assert entry(u1, "u1").shares == 0  # nothing written
    with pytest.raises(DirectiveError, match=r"acids given twice .*columns 11 and 19"):
        d.parse("update:u1:acids:1:acids+:2:", "-c")  # an operator is the same field
    with pytest.raises(DirectiveError, match=r"gids given twice .*columns 11 and 17"):
        d.parse("update:u1:gid:1:gids:2:", "-c")  # and so is an alias


def test_a_missing_colon_after_the_name_says_so(udb_url):
    r = gen("--udb", udb_url, "-c", "create:Grp uid:5000")
    assert r.exit_code == 2
    assert r.stderr.endswith(
        "-c:1:8: create: expected ':' after the name Grp, found a blank before 'uid'\n"
    )
    with pytest.raises(DirectiveError, match=r"not '5 nice' \(a ':' missing before 'nice'\?\)"):
        d.parse("update:u1:shares:5 nice:3:", "-c")


def test_a_resource_group_without_passwd_gets_star(udb_url):
    # 4.4.2: "do not specify a password (the default encrypted password is the character *)"
    r = gen("--udb", udb_url, "-c", "create:Proj9:uid:999:gid:10:shflags:040000:resgrp:0:")
    assert r.exit_code == 0, r.output
    assert entry(udb_url, "Proj9").passwd == "*"
    r = gen("--udb", udb_url, "-c", "create:Proj8:uid:998:gid:10:shflags:040000:passwd::")
    assert entry(udb_url, "Proj8").passwd == ""  # given: kept as given
    gen("--udb", udb_url, "-c", "create:u9:uid:9001:gid:10:resgrp:999:shares:1:")
    assert entry(udb_url, "u9").passwd == ""  # users keep what they are given
    r = gen("--udb", udb_url, "-a")
    assert "Proj9" not in {line.split("\t")[1] for line in r.output.splitlines() if "Pw" in line}


def test_an_entry_with_no_gid_warns_and_is_written(udb_url):
    # 4.4.2: "at least one GID must be specified, or warning messages will occur"
    r = gen("--udb", udb_url, "-c", "create:Maint:uid:999:passwd:*:shflags:040000:shares:100:")
    assert r.exit_code == 0
    assert (
        "udbgen: warning: -c:1:1: create:Maint: no gids (at least one GID must be specified)\n"
        in r.stderr
    )
    assert entry(udb_url, "Maint").shares == 100
    r = gen("--udb", udb_url, "-c", "create:Proj1:uid:111:gid:20:shflags:040000:")
    assert r.exit_code == 0 and "warning" not in r.stderr
    r = gen("--udb", udb_url, "-c", "update:Proj1:gids::")
    assert "update:Proj1: no gids" in r.stderr


def test_udbsee_takes_the_guides_field_list_with_blanks(u1):
    # 4.4.9: udbsee -a -fupdate, uid, resgrp, shares, shusage, shcharge > tempfile
    argv = "-a -fupdate, uid, resgrp, shares, shusage, shcharge".split()
    r = see("--udb", u1, *argv)
    assert r.exit_code == 0, r.output
    assert "update:u1:uid:101:resgrp:0:shares:0:shusage:0.0:shcharge:0.0:\n" in r.output
    r = see("--udb", u1, "-fupdate, uid,", "shares", "u1")
    assert r.output == "update:u1:uid:101:shares:0:\n"
