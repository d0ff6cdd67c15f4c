"""udbsee through its command line: directives, -f, --json, and the round trip through udbgen."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from udb.cli.udbgen import main as udbgen
from udb.cli.udbsee import main as udbsee
from udb.directives import FIELDS
from udb.models import Account, Entry
from udb.session import open_udb, read_session


def see(*args: str):
    return CliRunner().invoke(udbsee, list(args), catch_exceptions=False)


def gen(*args: str, stdin: str | None = None):
    """udbgen, creating the UDB named by --udb when it is missing (--create)."""
    return CliRunner().invoke(udbgen, ["--create", *args], input=stdin, catch_exceptions=False)


def snapshot(url: str) -> tuple[list[tuple], list[tuple]]:
    """Every entry (all fields but the row id) and every account, in UDB order."""
    with read_session(open_udb(url)) as s:
        entries = [
            (e.name, *(getattr(e, f) for f in FIELDS))
            for e in s.scalars(select(Entry).order_by(Entry.id))
        ]
        accounts = [(a.acid, a.name) for a in s.scalars(select(Account).order_by(Account.acid))]
    return entries, accounts


def test_shows_named_entries_as_create_directives(acme):
    r = see("--udb", acme, "u5", "Proj1A")
    assert r.exit_code == 0
    assert r.stdout.splitlines() == [
        "create:u5:uid:1005:gids:20:acids::resgrp:444:shares:50:shflags:0:shusage:0.0:"
        "shcharge:0.0:shextime:0.0:cpuquota:0.0:cpuquotaused:0.0:nice:0:passwd::comment::",
        "create:Proj1A:uid:444:gids:20:acids::resgrp:111:shares:500:shflags:040000:shusage:0.0:"
        "shcharge:0.0:shextime:0.0:cpuquota:0.0:cpuquotaused:0.0:nice:0:passwd:*:"
        "comment:Project 1, part A:",
    ]


def test_field_list_and_verb_as_in_the_guide(acme):
    # Section 4.4.9: udbsee -a -fupdate,uid,resgrp,shares,shusage,shcharge > tempfile
    r = see("--udb", acme, "-f", "update, uid, resgrp,shares,shusage,shcharge", "u1", "Idle")
    assert r.stdout.splitlines() == [
        "update:u1:uid:1001:resgrp:999:shares:25:shusage:0.0:shcharge:0.0:",
        "update:Idle:uid:11:resgrp:0:shares:0:shusage:0.0:shcharge:0.0:",
    ]
    # ... and that output is valid udbgen input which changes nothing.
    r2 = gen("--udb", acme, "-p", "-", stdin=r.stdout)
    assert (r2.exit_code, r2.stdout) == (0, "")
    assert "0 created, 0 updated, 0 deleted" in r2.stderr


def test_json(acme_acct):
    r = see("--udb", acme_acct, "--json", "u5")
    (rec,) = json.loads(r.stdout)
    assert rec == {
        "name": "u5",
        "uid": 1005,
        "gids": [20],
        "acids": [2101, 2102],
        "resgrp": 444,
        "shares": 50,
        "shflags": 0,
        "shusage": 0.0,
        "shcharge": 0.0,
        "shextime": 0.0,
        "cpuquota": 0.0,
        "cpuquotaused": 0.0,
        "nice": 0,
        "halflife": 0.0,
        "scope": "",
        "pooled": 0,
        "passwd": "",
        "comment": "",
    }
    r = see("--udb", acme_acct, "--json", "-f", "shares,shflags", "p3")
    assert json.loads(r.stdout) == [{"name": "p3", "shares": 100, "shflags": 0o1000000}]


def test_accounts(acme_acct):
    r = see("--udb", acme_acct, "--accounts")
    assert r.stdout.splitlines()[:2] == ["acid:sysadm:2000:", "acid:p1a-sim:2101:"]
    assert len(r.stdout.splitlines()) == 7
    r = see("--udb", acme_acct, "--accounts", "--json")
    assert json.loads(r.stdout)[-1] == {"name": "p3", "acid": 2301}


def test_all_lists_accounts_then_entries_in_udb_order(acme_acct):
    lines = see("--udb", acme_acct, "-a").stdout.splitlines()
    assert len(lines) == 7 + 39
    assert all(line.startswith("acid:") for line in lines[:7])
    assert lines[7].startswith("create:Maint:") and lines[-1].startswith("create:u16:")


def test_password_hashes_are_never_shown(udb_url):
    secret = "$6$salt$c2VjcmV0aGFzaA"
    assert gen("--udb", udb_url, "-c", f"create:a:uid:5:passwd:{secret}:").exit_code == 0
    assert gen("--udb", udb_url, "-c", "create:b:uid:6:passwd:*:").exit_code == 0
    outputs = [
        see("--udb", udb_url, "-a").stdout,
        see("--udb", udb_url, "--json", "a").stdout,
        see("--udb", udb_url, "-f", "passwd", "a").stdout,
        gen("--udb", udb_url, "-p", "-c", "update:a:passwd:x:").stdout,
        gen("--udb", udb_url, "-p", "--json", "-c", "update:a:passwd:x:").stdout,
    ]
    for out in outputs:
        assert secret not in out and "c2VjcmV0" not in out
    assert json.loads(outputs[1])[0]["passwd"] is None
    assert outputs[2] == "create:a:\n"
    assert "passwd:*:" in see("--udb", udb_url, "b").stdout


def test_default_is_the_callers_own_entry(udb_url):
    r = see("--udb", udb_url)
    assert r.exit_code == 2 and f"no entry has your uid {os.getuid()}" in r.stderr
    gen("--udb", udb_url, "-c", f"create:me:uid:{os.getuid()}:")
    assert see("--udb", udb_url, "-f", "uid").stdout == f"create:me:uid:{os.getuid()}:\n"


def test_errors(acme):
    for args, message in (
        (["nosuch"], "udbsee: no entry named nosuch\n"),
        (["-f", "uid,colour", "u1"], "udbsee: -f: unknown field 'colour'"),
        (["-a", "u1"], "udbsee: give NAMEs or -a, not both\n"),
    ):
        r = see("--udb", acme, *args)
        assert r.exit_code == 2 and r.stderr.startswith(message)


def test_round_trip_reproduces_the_udb(acme_acct, tmp_path):
    out = see("--udb", acme_acct, "-a").stdout
    copy = f"sqlite:///{tmp_path / 'copy.sqlite'}"
    r = gen("--udb", copy, "-", stdin=out)
    assert r.exit_code == 0, r.output
    assert snapshot(copy) == snapshot(acme_acct)
    assert see("--udb", copy, "-a").stdout == out


text_value = st.text(  # printable text: the comment field's range
    st.characters(blacklist_characters=":", blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn")),
    max_size=12,
).filter(str.isprintable)
entry_values = st.fixed_dictionaries(
    {
        "gids": st.lists(st.integers(0, 2**31 - 1), max_size=3),
        "shares": st.integers(0, 2**31 - 1),
        "shusage": st.floats(0, 1e30, allow_nan=False),
        "shcharge": st.floats(0, 1e30, allow_nan=False),
        "shextime": st.floats(0, 4e9, allow_nan=False),
        "cpuquota": st.floats(0, 1e9, allow_nan=False),
        "cpuquotaused": st.floats(0, 1e9, allow_nan=False),
        "nice": st.integers(-20, 19),
        "passwd": st.sampled_from(["", "*"]),
        "comment": text_value,
    }
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(entry_values, min_size=1, max_size=4))
def test_round_trip_keeps_every_value_exactly(tmp_path_factory, values):
    d = tmp_path_factory.mktemp("rt")
    src, dst = f"sqlite:///{d / 'a.sqlite'}", f"sqlite:///{d / 'b.sqlite'}"
    lines = ["create:G:uid:100:shflags:040000:shares:1:passwd:*:", "acid:proj:7:"]
    for i, v in enumerate(values):
        fields = "".join(f"{k}:{FIELDS[k].format(x)}:" for k, x in v.items())
        lines.append(f"create:e{i}:uid:{1000 + i}:resgrp:G:acids:proj:{fields}")
    assert gen("--udb", src, "-", stdin="\n".join(lines)).exit_code == 0
    stored = snapshot(src)
    assert [row[FIELDS_INDEX["shusage"]] for row in stored[0][1:]] == [v["shusage"] for v in values]
    out = see("--udb", src, "-a").stdout
    assert gen("--udb", dst, "-", stdin=out).exit_code == 0
    assert snapshot(dst) == stored


FIELDS_INDEX = {f: i + 1 for i, f in enumerate(FIELDS)}


def test_its_script_runs_without_a_garbage_collection(acme):
    """udbsee started as its installed script starts it (udb.cli.start): no cyclic
    garbage collection from before the imports to the end of a listing (a quarter of
    udbsee -a's time at 100,000 entries), and the listing is the command's own."""
    code = (
        "import atexit, gc, sys\n"
        "from udb.cli import start\n"
        f"sys.argv = ['udbsee', '--udb', {acme!r}, '-a']\n"
        "runs = sum(g['collections'] for g in gc.get_stats())\n"
        "def report():  # at exit: the script leaves the process from within start\n"
        "    print(sum(g['collections'] for g in gc.get_stats()) - runs, file=sys.stderr)\n"
        "atexit.register(report)\n"
        "start.udbsee()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.stderr.splitlines()[-1:], done.returncode) == (["0"], 0), done.stderr
    assert done.stdout == see("--udb", acme, "-a").stdout
