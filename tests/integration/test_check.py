"""The UDB consistency rules (udb/check.py): every code on a UDB built to trigger it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from sqlalchemy import insert

from udb import models
from udb.check import (
    CODES,
    ERROR,
    WARNING,
    EntryColumns,
    check_udb,
    configured_maxlevels,
    count_by_kind,
    load_accounts,
    load_entry_columns,
)
from udb.models import SHF_ACCOUNT, SHF_GROUP
from udb.session import dispose_all, open_udb, read_session, write_session

MAN = Path(__file__).resolve().parents[2] / "man" / "shrtree.8"


@dataclass(frozen=True)
class E:
    name: str
    uid: int
    resgrp: int = 0
    shares: int = 1
    shflags: int = 0
    acids: list[int] = field(default_factory=list)
    passwd: str = "x"


def grp(name, uid, resgrp=0, shares=100, **kw):
    return E(name, uid, resgrp, shares, SHF_GROUP, passwd="*", **kw)


def acct(name, uid, resgrp, shares=10, **kw):
    return E(name, uid, resgrp, shares, SHF_ACCOUNT, passwd="*", **kw)


IDLE = E("Idle", 11, 0, 0, 0, passwd="*")
UNKNOWN = E("unknown", 12, 999, 1, passwd="*")
BASE = [
    IDLE,
    UNKNOWN,
    grp("Maint", 999),
    grp("Proj1", 111, shares=500),
    E("u1", 1001, 999, 25),
    E("u2", 1002, 111, 50),
]

#: A clean Share by Account site: accounts under groups, users reach them by acids.
ACCOUNT_BASE = [
    IDLE,
    UNKNOWN,
    grp("Maint", 999),
    grp("Proj1", 111, shares=500),
    acct("maint", 5000, 999),
    acct("proj1", 5001, 111),
    E("u1", 1001, 999, 25, acids=[5000]),
    E("u2", 1002, 111, 50, acids=[5001, 5000]),
]
REGISTRY = {5000: "maint", 5001: "proj1"}


def found(entries, mode="user", accounts=REGISTRY, maxlevels=4):
    """{(name, code): problem} of check_udb's answer."""
    problems = check_udb(entries, accounts, mode, maxlevels)
    out = {(p.name, p.code): p for p in problems}
    assert len(out) == len(problems), "one problem per entry and code"
    return out


def swap(entries, name, **changes):
    return [replace(e, **changes) if e.name == name else e for e in entries]


def test_clean_sites_have_no_problems():
    assert check_udb(BASE, REGISTRY, "user") == []
    assert check_udb(ACCOUNT_BASE, REGISTRY, "account") == []


def test_nc_group_with_no_references():
    got = found([*BASE, grp("Empty", 300)])
    assert set(got) == {("Empty", "Nc")}
    p = got["Empty", "Nc"]
    assert (p.severity, p.uid, p.message) == (WARNING, 300, "Group has no references")


def test_nc_counts_only_references_of_the_mode():
    # In Share by Account mode a group referenced only by users has no references.
    rows = [*ACCOUNT_BASE, grp("Users", 400), E("u3", 1003, 400, 10, acids=[5001])]
    assert ("Users", "Nc") in found(rows, "account")
    assert ("Users", "Nc") not in found([*BASE, grp("Users", 400), E("u3", 1003, 400)])


def test_zs_zero_shares_but_not_idle():
    got = found(swap(swap(BASE, "u1", shares=0), "Proj1", shares=0))
    assert got["u1", "Zs"].message == "User has zero shares"
    assert got["Proj1", "Zs"].message == "Group has zero shares"
    assert ("Idle", "Zs") not in got
    got = found(swap(ACCOUNT_BASE, "proj1", shares=0), "account")
    assert got["proj1", "Zs"].message == "Account has zero shares"


def test_rt_user_or_account_on_root():
    got = found([*BASE, E("u3", 1003, 0, 10)])
    assert set(got) == {("u3", "Rt")}
    assert got["u3", "Rt"].message == "User references ROOT directly"
    got = found([*ACCOUNT_BASE, acct("top", 5002, 0)], "account", {**REGISTRY, 5002: "top"})
    assert set(got) == {("top", "Rt")}


def test_mg_missing_group_is_an_error():
    got = found([*BASE, E("u3", 1003, 4242)])
    assert set(got) == {("u3", "Mg")}
    assert got["u3", "Mg"].severity == ERROR
    assert "4242" in got["u3", "Mg"].detail


def test_ng_resgrp_naming_a_user():
    got = found([*BASE, E("u3", 1003, 1001)])
    assert set(got) == {("u3", "Ng")}


def test_cy_cycle_and_or_below_it():
    rows = [*BASE, grp("A", 200, 201), grp("B", 201, 200), E("u3", 1003, 200)]
    got = found(rows)
    assert set(got) == {("A", "Cy"), ("B", "Cy"), ("u3", "Or")}
    assert all(p.severity == ERROR for p in got.values())


def test_self_reference_is_a_cycle():
    got = found([*BASE, grp("Me", 200, 200), E("u3", 1003, 200)])
    assert set(got) == {("Me", "Cy"), ("u3", "Or")}


def test_or_below_a_group_with_a_missing_parent():
    rows = [*BASE, grp("C", 300, 4242), grp("D", 301, 300), E("u3", 1003, 301)]
    got = found(rows)
    assert set(got) == {("C", "Mg"), ("D", "Or"), ("u3", "Or")}


def test_dp_deeper_than_maxgroups():
    # ROOT(0) -> G1(1) -> G2(2) -> G3(3) -> u3(4): Maxgroups 4 allows levels 0..3.
    rows = [*BASE, grp("G1", 301), grp("G2", 302, 301), grp("G3", 303, 302), E("u3", 1003, 303)]
    got = found(rows, maxlevels=4)
    assert set(got) == {("u3", "Dp")}
    assert "level 4" in got["u3", "Dp"].detail
    assert found(rows, maxlevels=5) == {}
    assert set(found(rows, maxlevels=3)) == {("G3", "Dp"), ("u3", "Dp")}


def test_fl_shflags_wrong_for_the_role():
    rows = [
        *BASE,
        E("Both", 300, 0, 10, SHF_GROUP | SHF_ACCOUNT, passwd="*"),
        E("Odd", 301, 0, 10, SHF_GROUP | 0o1, passwd="*"),
        E("u3", 1003, 300, 1),
        E("u4", 1004, 301, 1),
    ]
    got = found(rows)
    assert {k for k in got if k[1] == "Fl"} == {("Both", "Fl"), ("Odd", "Fl")}
    assert "40000" in got["Odd", "Fl"].detail
    rows = [*ACCOUNT_BASE, E("bad", 5002, 111, 10, SHF_ACCOUNT | 0o4, passwd="*")]
    got = found(rows, "account", {**REGISTRY, 5002: "bad"})
    assert set(got) == {("bad", "Fl")}


def test_id_idle_missing_or_misconfigured():
    got = found([e for e in BASE if e.name != "Idle"])
    assert set(got) == {("Idle", "Id")}
    assert got["Idle", "Id"].uid is None and got["Idle", "Id"].severity == ERROR
    bad = swap(BASE, "Idle", shares=5, resgrp=999, acids=[5000], shflags=0o4)
    detail = found(bad)["Idle", "Id"].detail
    for fault in ("shares must be 0", "resgrp must be 0", "acids must be empty", "shflags"):
        assert fault in detail
    got = found([*BASE, E("Idle2", 13, 0, 0)])  # only Idle may have zero shares
    assert ("Idle2", "Zs") in got


def test_uk_unknown_missing_or_a_group():
    got = found([e for e in BASE if e.name != "unknown"])
    assert set(got) == {("UnKnown", "Uk")}
    with_capital = [
        E("UnKnown", 12, 999, 1, passwd="*") if e.name == "unknown" else e for e in BASE
    ]
    assert found(with_capital) == {}
    got = found(swap(BASE, "unknown", shflags=SHF_GROUP))
    assert ("unknown", "Uk") in got


def test_pw_group_or_account_passwd():
    got = found(swap(BASE, "Maint", passwd=""))
    assert set(got) == {("Maint", "Pw")}
    assert got["Maint", "Pw"].message == "Group passwd is not *"


def test_ac_unregistered_acid_in_both_modes():
    rows = swap(ACCOUNT_BASE, "u2", acids=[5001, 7777])
    for mode in ("user", "account"):
        got = found(rows, mode)
        assert got["u2", "Ac"].severity == WARNING and "7777" in got["u2", "Ac"].detail
    got = found(ACCOUNT_BASE, "account", {5000: "maint"})  # proj1's own acid unregistered
    assert set(got) == {("proj1", "Ac"), ("u2", "Ac")}


def test_na_and_sh_only_in_share_by_account_mode():
    rows = [*ACCOUNT_BASE, E("u3", 1003, 111, 10), E("u4", 1004, 111, 10, acids=[1001])]
    got = found(rows, "account", {**REGISTRY, 1001: "u1"})
    assert set(got) == {("u3", "Na"), ("u4", "Sh")}
    assert got["u4", "Sh"].detail == "acid 1001: u1 is a user"
    assert found(rows, "user", {**REGISTRY, 1001: "u1"}) == {}


def test_global_problems_come_first_and_str():
    problems = check_udb([E("u3", 1003, 0, 10)], {}, "user")
    assert [p.code for p in problems] == ["Id", "Uk", "Rt"]
    assert str(problems[2]) == "warning: u3 (uid 1003): Rt: User references ROOT directly"


def test_count_by_kind_groups_codes_and_messages():
    rows = [*BASE, grp("E1", 300), grp("E2", 301), E("u3", 1003, 4242, 0)]
    problems = check_udb(swap(rows, "E2", shares=0), REGISTRY)
    assert count_by_kind(problems) == [
        ("warning", "Nc", "Group has no references", 2),
        ("warning", "Zs", "User has zero shares", 1),
        ("warning", "Zs", "Group has zero shares", 1),
        ("error", "Mg", "Resource group is missing", 1),
    ]


def test_every_code_is_documented_in_the_man_page():
    text = MAN.read_text()
    for code in CODES.values():
        assert f"B {code.code}" in text and code.severity in text, code.code


def test_columns_from_the_udb_and_configured_maxlevels(tmp_path):
    engine = open_udb(str(tmp_path / "udb.sqlite"), create=True)
    try:
        with read_session(engine) as s:
            assert configured_maxlevels(s) == 4
        with write_session(engine) as s:
            s.execute(insert(models.Entry), [vars(e) for e in ACCOUNT_BASE])
            s.execute(insert(models.Account), [dict(acid=a, name=n) for a, n in REGISTRY.items()])
            if hasattr(models, "Const"):
                s.execute(insert(models.Const), [dict(name="maxlevels", value=6)])
        with read_session(engine) as s:
            cols = load_entry_columns(s)
            assert load_accounts(s) == REGISTRY
            if hasattr(models, "Const"):
                assert configured_maxlevels(s) == 6
        assert list(cols.acids[cols.name.index("u2")]) == [5001, 5000]
        assert list(cols.acids[cols.name.index("Idle")]) == []
        ref = EntryColumns.of(ACCOUNT_BASE)
        for name in ("name", "uid", "resgrp", "shares", "shflags", "passwd"):
            assert list(getattr(cols, name)) == list(getattr(ref, name)), name
    finally:
        dispose_all()


@pytest.mark.parametrize("mode", ["users", ""])
def test_bad_mode_is_refused(mode):
    with pytest.raises(ValueError):
        check_udb(BASE, REGISTRY, mode)
