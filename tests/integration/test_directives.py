"""The udbgen directive language: parsing (every field, errors with their positions),
the final-state rules, and atomicity."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from udb import directives as d
from udb.errors import DirectiveError
from udb.models import Account, Entry
from udb.session import open_udb, read_session

# -- parsing ----------------------------------------------------------------------------


def one(text: str) -> d.Directive:
    (directive,) = d.parse(text, "t.udb")
    return directive


def values(text: str) -> dict:
    return {f: v for f, v, _ in one(text).fields}


def test_every_field_is_parsed_to_its_value():
    got = values(
        "create:x:uid:5:gids:1,20:acids:3,acme:resgrp:Grp:shares:10:shflags:040000:"
        "shusage:1.5:shcharge:2.25:shextime:100:cpuquota:10:cpuquotaused:0.5:nice:-5:"
        "halflife:8h:scope:global:pooled:yes:passwd:*:comment:hello # world:"
    )
    assert got == {
        "uid": 5,
        "gids": [1, 20],
        "acids": [3, "acme"],
        "resgrp": "Grp",
        "shares": 10,
        "shflags": 0o40000,  # 16384: octal, as the guide writes it
        "shusage": 1.5,
        "shcharge": 2.25,
        "shextime": 100.0,
        "cpuquota": 10.0,
        "cpuquotaused": 0.5,
        "nice": -5,
        "halflife": 28800.0,
        "scope": "global",
        "pooled": 1,
        "passwd": "*",
        "comment": "hello # world",
    }
    assert set(got) == set(d.FIELDS)


def test_guide_forms():
    # Section 4.4.2 writes gid (singular) and the account flag 01000000; 4.4.4.1 writes acids::.
    assert values("create:Maint:uid:999:gid:10:passwd:*:shflags:040000:shares:100:resgrp:0:") == {
        "uid": 999,
        "gids": [10],
        "passwd": "*",
        "shflags": 16384,
        "shares": 100,
        "resgrp": 0,
    }
    assert values("update:a:shflags:01000000:acids::")["shflags"] == 262144
    assert values("update:a:acids::") == {"acids": []}
    assert values("update:a:shflags:0:") == {"shflags": 0}
    assert values("update:a:shflags:40000:") == {"shflags": 16384}  # octal with or without 0
    # Section 4.9.1 puts a blank before the field name.
    assert values("update:xyz: cpuquota:10:") == {"cpuquota": 10.0}


def test_several_directives_on_a_line_and_comments():
    text = (
        "# a comment line\n"
        "\n"
        "create:A:uid:1:  create:B:uid:2: # trailing comment: with colons\n"
        "   delete:C:  update:D:shares:3:\n"
        "acid:proj:2001: delacid:old:\n"
    )
    got = [(x.verb, x.name, x.line, x.col()) for x in d.parse(text, "t")]
    assert got == [
        ("create", "A", 3, 1),
        ("create", "B", 3, 18),
        ("delete", "C", 4, 4),
        ("update", "D", 4, 15),
        ("acid", "proj", 5, 1),
        ("delacid", "old", 5, 17),
    ]
    assert d.parse(text, "t")[4].fields[0][:2] == ("acid", 2001)


def test_values_keep_their_text():
    # A verb or a '#' in a value position is just text.
    assert values("update:a:comment:create:passwd:#x:") == {"comment": "create", "passwd": "#x"}
    assert values("update:a:comment:  two  spaces :") == {"comment": "  two  spaces "}


@pytest.mark.parametrize(
    ("text", "col", "expected"),
    [
        ("crate:a:uid:1:", 1, "expected a directive"),
        ("create:a:uid:1: foo:b:", 17, "unknown field 'foo'"),
        ("delete:a:uid:1:", 10, "expected a directive"),
        (
            "create:a:uid:1:shares:x:",
            23,
            "shares: expected a whole number from 0 to 2147483647, not 'x'",
        ),
        ("create:a:uid:1:colour:red:", 16, "unknown field 'colour'"),
        ("create:a:uid:-1:", 14, "uid: expected a whole number from 0 to 4294967294"),
        ("create:a:shflags:080000:", 18, "shflags: expected an octal number"),
        ("create:a:shusage:-1:", 18, "expected a number from 0 to 1e+30"),
        ("create:a:shcharge:nan:", 19, "expected a number from 0 to 1e+30"),
        # every field has a range (issue 18: all of these were accepted)
        ("create:a:uid:4294967296:", 14, "uid: expected a whole number from 0 to 4294967294"),
        ("create:a:uid:1:gids:9223372036854775808:", 21, "gids: expected comma-separated"),
        ("create:a:uid:1:shares:8888888888:", 23, "from 0 to 2147483647, not '8888888888'"),
        ("create:a:uid:1:shares:" + "9" * 50 + ":", 23, "from 0 to 2147483647"),
        ("create:a:uid:1:acids:" + "9" * 5000 + ":", 22, "account numbers from 0 to 4294967294"),
        ("create:a:uid:1:shusage:1e308:", 24, "shusage: expected a number from 0 to 1e+30"),
        ("create:a:uid:1:shextime:inf:", 25, "shextime: expected a number from 0 to 1e+11"),
        ("create:a:uid:1:cpuquota:1e13:", 25, "cpuquota: expected a number from 0 to 1e+12"),
        ("create:a:uid:1:shflags:077777777777:", 24, "at most 017777777777"),
        ("create:a:uid:1:comment:a\x00b:", 24, "comment: expected printable text"),
        ("create:a:uid:1:comment:\x1b[2J:", 24, "comment: expected printable text"),
        ("create:a:uid:1:passwd:" + "x" * 257 + ":", 23, "at most 256 characters"),
        ("acid:p:4294967295:", 8, "expected an account number from 0 to 4294967294"),
        ("create:a:nice:20:", 15, "expected a nice value from -20 to 19"),
        ("create:a:gids:1,x:", 15, "expected comma-separated whole numbers"),
        ("create:a:acids:1,a b:", 16, "expected comma-separated account numbers or names"),
        ("create:a:resgrp:a b:", 17, "expected a resource group's uid or name"),
        ("create:a:uid:1", 10, "uid: expected a value followed by ':'"),
        ("create:a", 1, "expected NAME followed by ':'"),
        ("create:a b:uid:1:", 8, "expected ':' after the name a, found a blank before 'b'"),
        ("acid:p:x:", 8, "expected an account number"),
        ("acid:p:", 8, "expected the account NUMBER"),
    ],
)
def test_errors_name_source_line_and_column(text, col, expected):
    with pytest.raises(DirectiveError) as err:
        d.parse("# header\n" + text + "\n", "site.udb")
    assert (err.value.source, err.value.line, err.value.col) == ("site.udb", 2, col)
    assert expected in err.value.message
    assert str(err.value).startswith(f"site.udb:2:{col}: ")


def test_acids_are_limited_to_maxvids():
    ok = ",".join(str(i) for i in range(64))
    assert len(values(f"update:a:acids:{ok}:")["acids"]) == 64
    with pytest.raises(DirectiveError, match="at most 64"):
        d.parse(f"update:a:acids:{ok},64:", "t")


# -- applying ---------------------------------------------------------------------------

GROUPS = (
    "create:G:uid:100:shflags:040000:shares:1:passwd:*:\n"
    "create:H:uid:200:shflags:040000:shares:1:resgrp:G:passwd:*:\n"
)


def run(url: str, text: str, **kw) -> d.Changes:
    return d.run(open_udb(url), d.parse(text, "t.udb"), **kw)


def rows(url: str) -> dict[str, Entry]:
    with read_session(open_udb(url)) as s:
        return {e.name: e for e in s.scalars(select(Entry))}


def error_of(url: str, text: str) -> DirectiveError:
    with pytest.raises(DirectiveError) as err:
        run(url, text)
    return err.value


def test_create_update_delete_in_one_run(udb_url):
    ch = run(
        udb_url,
        GROUPS + "create:u:uid:1000:resgrp:H:shares:5:\n"
        "update:u:shares:7:gid:3:\n"
        "create:gone:uid:1001:resgrp:100:\n"
        "delete:gone:\n",
    )
    got = rows(udb_url)
    assert sorted(got) == ["G", "H", "u"]
    assert (got["u"].resgrp, got["u"].shares, got["u"].gids) == (200, 7, [3])
    assert got["H"].resgrp == 100  # resgrp by name is stored as the group's uid
    assert ch.summary() == "3 created, 0 updated, 0 deleted, 0 accounts added, 0 accounts removed"


def test_update_reports_old_and_new_values(udb_url):
    run(udb_url, GROUPS + "create:u:uid:1000:resgrp:H:shares:5:")
    ch = run(udb_url, "update:u:shares:9:resgrp:G:comment:x: update:G:shares:1:")
    assert [(n, [(c.field, c.old, c.new) for c in cs]) for n, cs in ch.updated] == [
        ("u", [("resgrp", 200, 100), ("shares", 5, 9), ("comment", "", "x")])
    ]
    assert list(ch.as_directives()) == [
        "update:u:resgrp:100:shares:9:comment:x:  # was resgrp:200:shares:5:comment::"
    ]


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        ("create:G:uid:5:", 1, "create:G: an entry named G already exists"),
        ("create:x:uid:100:", 1, "create:x: uid 100 is already used by G"),
        ("create:x:uid:7:\ncreate:y:uid:7:", 2, "create:y: uid 7 is already used by x"),
        ("create:x:shares:1:", 1, "create:x: a new entry needs a uid field"),
        ("update:nobody:shares:1:", 1, "update:nobody: no entry named nobody"),
        ("delete:nobody:", 1, "delete:nobody: no entry named nobody"),
        ("create:x:uid:7:resgrp:Nope:", 1, "resgrp: no entry named Nope"),
        ("create:x:uid:7:resgrp:999:", 1, "resgrp 999 names no entry"),
        ("create:x:uid:7:\ncreate:y:uid:8:resgrp:x:", 2, "resgrp 7 is not a resource group"),
        ("create:x:uid:7:acids:42:", 1, "acids: account 42 is not registered"),
        ("create:x:uid:7:acids:proj:", 1, "acids: no account named proj"),
        ("create:x:uid:7:shflags:01000000:", 1, "a shareholder's uid must be a registered"),
        ("create:x:uid:7:shflags:01040000:", 1, "cannot mark both a group"),
        ("update:G:resgrp:H:", 1, "update:G: resgrp cycle: G -> H -> G"),
        ("update:G:resgrp:100:", 1, "update:G: resgrp cycle: G -> G"),
        ("delete:G:", 1, "delete:G: resgrp 100 names no entry"),  # H is left without a parent
        ("update:G:shflags:0:", 1, "update:G: resgrp 100 is not a resource group"),
        ("acid:p:1:\nacid:p:2:", 2, "account p is already registered as 1"),
        ("acid:p:1:\nacid:q:1:", 2, "account number 1 is already registered as p"),
        ("delacid:p:", 1, "delacid:p: no account named p"),
    ],
)
def test_final_state_errors_blame_the_directive(udb_url, text, line, expected):
    run(udb_url, GROUPS)
    err = error_of(udb_url, "# first line\n" + text + "\n")
    assert err.line == line + 1
    assert expected in err.message


def test_removing_a_used_account_is_refused_at_the_delacid(udb_url):
    run(udb_url, GROUPS + "acid:p:2001:\ncreate:u:uid:1000:resgrp:H:shares:1:acids:p:\n")
    err = error_of(udb_url, "update:G:shares:2:\ndelacid:p:\n")
    assert (err.line, err.col) == (2, 1)
    assert err.message == (
        "delacid:p: acids: account 2001 is not registered (register it with acid:NAME:2001:)"
    )
    # ... and allowed once nothing lists it.
    run(udb_url, "update:u:acids::\ndelacid:p:\n")
    with read_session(open_udb(udb_url)) as s:
        assert s.scalars(select(Account)).all() == []


def test_an_error_points_at_the_value_it_is_about(udb_url):
    err = error_of(udb_url, "create:x:uid:7:shares:1:resgrp:Nope:")
    assert err.col == len("create:x:uid:7:shares:1:resgrp:") + 1


def test_names_resolve_in_order_within_a_run(udb_url):
    # A group and an account made earlier in the same run can be named later.
    run(
        udb_url,
        "acid:proj:2001:\n"
        "create:P:uid:300:shflags:040000:shares:1:passwd:*:\n"
        "create:proj:uid:2001:shflags:01000000:resgrp:P:shares:1:passwd:*:\n"
        "create:u:uid:1000:resgrp:P:acids:proj,2001:shares:1:\n",
    )
    assert rows(udb_url)["u"].acids == [2001, 2001]
    assert rows(udb_url)["u"].resgrp == 300


def test_two_uids_can_be_swapped(udb_url):
    run(udb_url, "create:a:uid:1:\ncreate:b:uid:2:\n")
    run(udb_url, "update:a:uid:2:\nupdate:b:uid:1:\n")
    got = rows(udb_url)
    assert (got["a"].uid, got["b"].uid) == (2, 1)


def test_delete_then_create_makes_a_new_entry(udb_url):
    run(udb_url, "create:a:uid:1:shares:5:comment:old:\n")
    ch = run(udb_url, "delete:a:\ncreate:a:uid:1:\n")
    assert (ch.deleted, [r["name"] for r in ch.created]) == (["a"], ["a"])
    assert (rows(udb_url)["a"].shares, rows(udb_url)["a"].comment) == (0, "")


def test_replace_starts_from_nothing(acme):
    ch = run(acme, GROUPS)
    assert sorted(rows(acme)) != ["G", "H"]  # without replace: added to ACME
    run(acme, "delete:G: delete:H:")
    ch = run(acme, GROUPS, replace=True)
    assert sorted(rows(acme)) == ["G", "H"]
    assert len(ch.deleted) == 32 and len(ch.created) == 2


def test_faults_the_udb_already_had_do_not_block_unrelated_changes(udb_url):
    # An entry whose group vanished behind udbgen's back (e.g. by hand in SQL).
    run(udb_url, GROUPS + "create:u:uid:1000:resgrp:H:shares:1:\n")
    with sqlite3.connect(udb_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE entries SET resgrp = 4242 WHERE name = 'u'")
    run(udb_url, "update:G:shares:3:")
    assert rows(udb_url)["G"].shares == 3
    assert "resgrp 4242 names no entry" in error_of(udb_url, "update:u:shares:2:").message


def test_test_mode_writes_nothing(acme):
    before = dump(acme)
    ch = run(acme, "update:u1:shares:30: delete:u2: acid:x:5:", test=True)
    assert ch.summary() == "0 created, 1 updated, 1 deleted, 1 accounts added, 0 accounts removed"
    assert dump(acme) == before


# -- atomicity --------------------------------------------------------------------------


def dump(url: str) -> list[str]:
    """Every row of every table, as SQL text (what the UDB file holds)."""
    open_udb(url).dispose()
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return list(conn.iterdump())


def test_an_error_in_the_last_line_changes_nothing(acme):
    before = dump(acme)
    text = (
        "create:new1:uid:5001:resgrp:Proj2:shares:10:\n"
        "update:u1:shares:99:\n"
        "delete:u3:\n"
        "acid:extra:4000:\n"
        "update:u9:resgrp:NoSuchGroup:\n"
    )
    err = error_of(acme, text)
    assert (err.line, err.message) == (5, "update:u9: resgrp: no entry named NoSuchGroup")
    assert dump(acme) == before


valid_directive = st.one_of(
    st.builds("update:u{}:shares:{}:".format, st.integers(1, 16), st.integers(0, 1000)),
    st.builds("update:u{}:comment:{}:".format, st.integers(1, 16), st.from_regex(r"[a-z ]{0,8}")),
    st.builds("delete:u{}:".format, st.integers(1, 16)),
    st.builds("create:n{}:uid:{}:resgrp:Proj3:".format, st.integers(0, 9), st.integers(5000, 5009)),
    st.builds("acid:a{}:{}:".format, st.integers(0, 9), st.integers(3000, 3009)),
)
bad_directive = st.sampled_from(
    [
        "update:u1:resgrp:4242:",
        "create:Maint:uid:1:",
        "update:Proj1:resgrp:Proj1A:",
        "update:ghost:shares:1:",
        "create:z:uid:9999:acids:77:",
        "delete:Maint:",
    ]
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(prefix=st.lists(valid_directive, max_size=12), bad=bad_directive)
def test_a_rejected_file_leaves_the_udb_byte_identical(acme, prefix, bad):
    before = dump(acme)
    text = "\n".join([*prefix, bad]) + "\n"
    with pytest.raises(DirectiveError):
        run(acme, text)
    assert dump(acme) == before
