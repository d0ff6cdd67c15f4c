"""udbgen through its command line, on real temporary SQLite UDBs."""

from __future__ import annotations

import json

from click.testing import CliRunner
from conftest import ACME, ACME_ACCT
from sqlalchemy import select

from udb.cli.udbgen import main as udbgen
from udb.models import Entry
from udb.session import open_udb, read_session


def cli(*args: str, stdin: str | None = None):
    return CliRunner().invoke(udbgen, list(args), input=stdin, catch_exceptions=False)


def entries(url: str) -> dict[str, Entry]:
    with read_session(open_udb(url)) as s:
        return {e.name: e for e in s.scalars(select(Entry))}


def test_loads_acme_from_a_file(udb_url):
    r = cli("--udb", udb_url, "-v", str(ACME))
    assert r.exit_code == 0, r.output
    assert "32 created, 0 updated, 0 deleted" in r.stderr
    got = entries(udb_url)
    # Table 30 and Table 31, and the special entries of section 4.4.4.
    assert {n: got[n].shares for n in ("Maint", "Proj1", "Proj2", "Proj3")} == {
        "Maint": 100,
        "Proj1": 500,
        "Proj2": 250,
        "Proj3": 150,
    }
    assert [got[f"u{i}"].shares for i in range(1, 17)] == [25] * 4 + [50] * 4 + [
        50,
        30,
        10,
        10,
    ] + [25] * 4
    assert [got[f"u{i}"].resgrp for i in (1, 5, 7, 9, 16)] == [999, 444, 555, 222, 333]
    assert (got["Proj1A"].resgrp, got["Proj1B"].resgrp) == (111, 111)
    assert (got["Idle"].uid, got["Idle"].shares, got["Idle"].shflags) == (11, 0, 0)
    assert (got["unknown"].uid, got["unknown"].resgrp, got["unknown"].shares) == (12, 999, 1)
    assert got["root"].resgrp == 999 and got["Maint"].shflags == 0o40000


def test_reads_stdin_and_command_line(udb_url):
    r = cli("--udb", udb_url, "-", "-c", "update:u1:shares:7:", stdin=ACME.read_text())
    assert r.exit_code == 0, r.output
    assert entries(udb_url)["u1"].shares == 7


def test_udb_url_from_the_environment(udb_url, monkeypatch):
    monkeypatch.setenv("UDB_URL", udb_url)
    assert cli("-c", "create:a:uid:5:").exit_code == 0
    assert "a" in entries(udb_url)


def test_error_is_one_line_exit_2_and_nothing_written(acme, tmp_path):
    bad = tmp_path / "site.udb"
    bad.write_text("update:u1:shares:99:\n\nupdate:u2:resgrp:Proj9:\n")
    r = cli("--udb", acme, str(bad))
    assert r.exit_code == 2
    assert r.stderr == f"udbgen: {bad}:3:18: update:u2: resgrp: no entry named Proj9\n"
    assert r.stdout == ""
    assert entries(acme)["u1"].shares == 25


def test_stdin_errors_name_stdin(udb_url):
    r = cli("--udb", udb_url, "-", stdin="create:a:uid:x:\n")
    assert r.exit_code == 2
    assert r.stderr.startswith("udbgen: <stdin>:1:14: create:a: uid: expected")


def test_bad_input_creates_no_udb(tmp_path):
    path = tmp_path / "never.sqlite"
    r = cli("--udb", str(path), "-c", "bogus:")
    assert r.exit_code == 2 and not path.exists()


def test_unreadable_file(udb_url, tmp_path):
    r = cli("--udb", udb_url, str(tmp_path / "missing.udb"))
    assert r.exit_code == 2
    assert "cannot read" in r.stderr and "missing.udb" in r.stderr


def test_test_mode_prints_changes_and_writes_nothing(acme):
    r = cli("--udb", acme, "-p", "-c", "update:u1:shares:30: create:n:uid:5000:resgrp:Proj2:")
    assert r.exit_code == 0
    assert r.stdout.splitlines() == [
        "create:n:uid:5000:resgrp:222:",
        "update:u1:shares:30:  # was shares:25:",
    ]
    assert "test mode, nothing written: 1 created, 1 updated" in r.stderr
    assert entries(acme)["u1"].shares == 25 and "n" not in entries(acme)


def test_test_mode_json(acme):
    r = cli("--udb", acme, "-p", "--json", "-c", "update:u1:shares:30: delete:u2: acid:x:7:")
    assert json.loads(r.stdout) == {
        "created": [],
        "updated": [{"name": "u1", "fields": {"shares": [25, 30]}}],
        "deleted": ["u2"],
        "accounts_added": [{"name": "x", "acid": 7}],
        "accounts_removed": [],
    }


def test_test_mode_still_reports_errors(acme):
    r = cli("--udb", acme, "-p", "-c", "delete:Proj2:")
    assert r.exit_code == 2
    assert "delete:Proj2: resgrp 222 names no entry" in r.stderr


def test_replace(acme):
    assert cli("--udb", acme, "-r", "-c", "create:Only:uid:5:").exit_code == 0
    assert list(entries(acme)) == ["Only"]


def test_option_misuse_is_exit_2(udb_url):
    for args in (
        [],
        ["-a", "-c", "create:a:uid:1:"],
        ["-G", "5", "-c", "create:a:uid:1:"],
        ["--resgrp", "G", "-c", "create:a:uid:1:"],
        ["--passwd", "/etc/passwd", "--nss"],
        ["--map", "staff=Proj1", "-c", "create:a:uid:1:"],
        ["--map", "staff", "--nss"],
    ):
        r = cli("--udb", udb_url, *args)
        assert r.exit_code == 2, args
        assert r.stderr.startswith("udbgen: ") and r.stderr.count("\n") == 1


# -- analysis (-a) ----------------------------------------------------------------------


def test_analyze_acme_is_clean(acme, acme_acct, tmp_path):
    r = cli("--udb", acme, "-a", "-R")
    assert (r.exit_code, r.stdout) == (0, "")
    assert "0 warnings, 0 errors (by resgrp, 4 levels)" in r.stderr
    r = cli("--udb", acme_acct, "-a", "-A")
    assert (r.exit_code, r.stdout) == (0, "")


def test_analyze_reports_problems_and_exits_1(acme):
    # Users without acids cannot be placed by account; Idle with shares breaks its rule.
    assert cli("--udb", acme, "-c", "update:Idle:shares:5: update:u1:resgrp:0:").exit_code == 0
    r = cli("--udb", acme, "-a", "-R")
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert "warning\tu1\t1001\tRt\tUser references ROOT directly" in lines
    assert any(line.startswith("error\tIdle\t11\tId\t") for line in lines)
    r = cli("--udb", acme, "-a", "-A", "--json")
    problems = json.loads(r.stdout)
    assert r.exit_code == 1
    assert {"severity": "error", "name": "u9", "uid": 1009, "code": "Na"}.items() <= next(
        p for p in problems if p["name"] == "u9"
    ).items()


def test_analyze_depth_limit(acme):
    # Proj1 -> Proj1A -> u5 is level 3: fine with 4 levels, too deep with 3.
    assert cli("--udb", acme, "-a", "-G", "4").exit_code == 0
    r = cli("--udb", acme, "-a", "-G", "3")
    assert r.exit_code == 1
    deep = [line.split("\t")[1] for line in r.stdout.splitlines() if "\tDp\t" in line]
    assert deep == ["u5", "u6", "u7", "u8"]


# -- --passwd ---------------------------------------------------------------------------

PASSWD = """\
root:x:0:0:root:/root:/bin/bash
operator:x:11:0:operator:/root:/sbin/nologin
alice:x:1001:100:Alice Example,,,:/home/alice:/bin/bash
bob:*:2001:100:Bob:/home/bob:/bin/sh
carol:x:2002:100::/home/carol:/bin/sh
bob:x:2003:100:Bob again:/home/bob:/bin/sh
"""


def test_passwd_import_creates_the_missing_accounts(acme, tmp_path):
    f = tmp_path / "passwd"
    f.write_text(PASSWD)
    r = cli("--udb", acme, "-v", "--passwd", str(f), "--resgrp", "Proj3", "--shares", "10")
    assert r.exit_code == 0, r.output
    got = entries(acme)
    assert (got["bob"].uid, got["bob"].resgrp, got["bob"].shares) == (2001, 333, 10)
    assert (got["bob"].gids, got["bob"].passwd, got["bob"].comment) == ([100], "*", "Bob")
    assert (got["carol"].passwd, got["carol"].uid) == ("", 2002)
    assert "alice" not in got  # uid 1001 is u1's
    assert got["root"].resgrp == 999  # present: left alone
    assert "operator" in got and got["operator"].uid == 8  # ACME's, not uid 11 (Idle's)
    skipped = [line for line in r.stderr.splitlines() if "skipping" in line]
    assert [s.split("skipping ")[1] for s in skipped] == [
        "root: already in the UDB",
        "operator: already in the UDB",
        "alice: uid 1001 already in the UDB",
        "bob: listed twice",
    ]
    assert "2 created" in r.stderr


def test_the_documented_one_liner_works_on_a_fresh_udb(udb_url, tmp_path):
    f = tmp_path / "passwd"
    f.write_text(PASSWD + "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    r = cli("--udb", udb_url, "-v", "--passwd", str(f), "--resgrp", "Users", "--min-uid", "1000")
    assert r.exit_code == 0, r.output
    got = entries(udb_url)
    # The system entries a tree needs, then the users in Users: not nobody, not root's
    # passwd line (uid 0 is the skeleton's root, in System).
    assert sorted(got) == sorted(
        ["System", "Users", "Idle", "unknown", "root", "alice", "bob", "carol"]
    )
    assert got["alice"].resgrp == got["Users"].uid and got["Users"].shflags == 0o40000
    assert got["unknown"].resgrp == got["root"].resgrp == got["System"].uid
    assert "skipping nobody: the unprivileged nobody account is never imported" in r.stderr
    a = cli("--udb", udb_url, "-a")
    assert a.exit_code == 0 and "0 errors" in a.stderr, a.output


def test_an_import_creates_the_group_it_names_when_missing(acme, tmp_path):
    f = tmp_path / "passwd"
    f.write_text("dora:x:3001:100::/:/bin/sh\n")
    r = cli("--udb", acme, "--passwd", str(f), "--resgrp", "Staff", "--shares", "7")
    assert r.exit_code == 0, r.output
    got = entries(acme)
    assert (got["Staff"].shflags, got["Staff"].resgrp, got["Staff"].shares) == (0o40000, 0, 100)
    assert (got["dora"].resgrp, got["dora"].shares) == (got["Staff"].uid, 7)
    assert "System" not in got  # ACME has its system entries: no skeleton is added


def test_unix_groups_map_to_resource_groups(udb_url, tmp_path):
    from udb.passwd import GroupMap, PasswdUser, passwd_directives

    groups = GroupMap([("physics", "Phys"), ("staff", "Staff")])
    groups._by_gid.update({100: "users", 200: "physics"})
    groups._members.update({"staff": {"bob", "carol"}, "physics": set()})
    users = [
        PasswdUser("alice", "x", 1001, 200, "", 1),  # primary group physics
        PasswdUser("bob", "x", 1002, 100, "", 2),  # a member of staff
        PasswdUser("carol", "x", 1003, 200, "", 3),  # both: the first rule wins
        PasswdUser("dan", "x", 1004, 100, "", 4),  # neither: the default
    ]
    out = passwd_directives(
        users, "nss", resgrp="Users", shares=1, existing_names=set(), existing_uids=set(),
        groups=groups,
    )  # fmt: skip
    got = {d.name: dict((f, v) for f, v, _ in d.fields)["resgrp"] for d in out.directives}
    assert got == {"alice": "Phys", "bob": "Staff", "carol": "Phys", "dan": "Users"}


def test_nss_enrols_the_name_service_accounts_above_min_uid(udb_url, monkeypatch):
    import pwd

    fake = [
        pwd.struct_passwd(("root", "x", 0, 0, "root", "/root", "/bin/sh")),
        pwd.struct_passwd(("svc", "x", 999, 999, "", "/", "/bin/false")),
        pwd.struct_passwd(("ldapuser", "*", 70001, 100, "From LDAP", "/h", "/bin/sh")),
        pwd.struct_passwd(("nobody", "x", 65534, 65534, "", "/", "/bin/false")),
    ]
    monkeypatch.setattr(pwd, "getpwall", lambda: fake)
    r = cli("--udb", udb_url, "--nss")
    assert r.exit_code == 0, r.output
    got = entries(udb_url)
    assert "ldapuser" in got and got["ldapuser"].resgrp == got["Users"].uid
    assert got["ldapuser"].comment == "From LDAP" and got["ldapuser"].passwd == "*"
    assert "svc" not in got and "nobody" not in got
    assert cli("--udb", udb_url, "-a").exit_code == 0


def test_init_lays_the_skeleton_once_and_makes_a_udb_only_when_asked(tmp_path):
    url = f"sqlite:///{tmp_path / 'new.sqlite'}"
    r = cli("--udb", url, "-c", "create:a:uid:5:")
    assert r.exit_code == 2 and "udbgen --init creates one" in r.stderr
    assert not (tmp_path / "new.sqlite").exists()
    r = cli("--udb", url, "--init")
    assert r.exit_code == 0 and "created a new UDB" in r.stderr
    first = entries(url)
    assert sorted(first) == sorted(["System", "Users", "Idle", "unknown", "root"])
    r = cli("--udb", url, "--init", "-v")
    assert r.exit_code == 0 and "0 created" in r.stderr  # nothing missing: nothing changed
    assert cli("--udb", url, "-a").exit_code == 0


def test_passwd_file_errors(udb_url, tmp_path):
    f = tmp_path / "passwd"
    f.write_text("ok:x:5:5::/:/bin/sh\nbroken:x:5\n")
    r = cli("--udb", udb_url, "--passwd", str(f), "--resgrp", "0")
    assert r.exit_code == 2
    assert r.stderr == f"udbgen: {f}:2:1: expected 7 ':'-separated fields, found 3\n"


def test_acme_files_load_with_their_shares(acme_acct):
    got = entries(acme_acct)
    assert (got["p1a-sim"].shflags, got["p1a-sim"].resgrp, got["p1a-sim"].uid) == (
        0o1000000,
        444,
        2101,
    )
    assert got["u5"].acids == [2101, 2102] and got["root"].acids == [2000]
    assert got["Idle"].acids == [] and got["u16"].resgrp == 333


def test_acme_files_use_the_intended_names():
    # The guide misprints Proj1 as Projl and u6 with a Cyrillic letter; the files do not.
    from udb.directives import parse

    for path in (ACME, ACME_ACCT):
        names = {x.name for x in parse(path.read_text(), str(path)) if x.verb == "create"}
        assert {"Proj1", "Proj1A", "Proj1B", "u6", "u16", "Idle", "unknown", "root"} <= names
        assert all(n.isascii() for n in names) and not any("Projl" in n for n in names)


def test_the_first_error_in_input_order_is_reported(udb_url, tmp_path):
    # Both faults are only found in the final state; the file comes before -c.
    f = tmp_path / "site.udb"
    f.write_text("create:x:uid:7:\ncreate:y:uid:8:resgrp:7:\n")
    r = cli("--udb", udb_url, str(f), "-c", "create:z:uid:9:resgrp:8:")
    assert r.exit_code == 2
    assert r.stderr == f"udbgen: {f}:2:1: create:y: resgrp 7 is not a resource group " + (
        "(a resgrp must be 0 or a group's uid)\n"
    )


# -- a refused first run leaves the filesystem exactly as it found it ----------------------

#: Directives that parse but are refused once applied (no such entry).
REFUSED = ("-c", "update:nobody:shares:5:")


def _snapshot(root):
    """Every path under `root` with its kind, bytes (files) and link target (links)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p)] = ("link", str(p.readlink()))
        elif p.is_dir():
            out[str(p)] = ("dir",)
        else:
            st = p.stat()
            out[str(p)] = ("file", p.read_bytes(), st.st_ino, st.st_mode, st.st_mtime_ns)
    return out


def test_refused_first_run_keeps_an_existing_empty_file(tmp_path):
    path = tmp_path / "udb.sqlite"
    path.touch()
    before = _snapshot(tmp_path)
    r = cli("--udb", str(path), *REFUSED)
    assert r.exit_code == 2, r.output
    assert _snapshot(tmp_path) == before


def test_refused_first_run_keeps_a_symlinks_target(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "db"
    target.touch()
    (tmp_path / "udb.sqlite").symlink_to(target)
    before = _snapshot(tmp_path)
    r = cli("--udb", str(tmp_path / "udb.sqlite"), *REFUSED)
    assert r.exit_code == 2, r.output
    assert _snapshot(tmp_path) == before


def test_refused_first_run_keeps_another_programs_empty_alembic_database(tmp_path):
    import sqlite3

    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
    before = _snapshot(tmp_path)
    r = cli("--udb", str(path), *REFUSED)
    assert r.exit_code == 2, r.output
    assert _snapshot(tmp_path) == before
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_refused_first_run_removes_the_directories_it_made(tmp_path):
    (tmp_path / "keep").mkdir()
    before = _snapshot(tmp_path)
    r = cli("--udb", str(tmp_path / "keep" / "a" / "b" / "udb.sqlite"), *REFUSED)
    assert r.exit_code == 2, r.output
    assert _snapshot(tmp_path) == before
