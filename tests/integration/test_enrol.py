# ruff: noqa: F811 - engine is test_daemon's fixture, taken by name
"""shrdaemon --new-uids: a uid the UDB does not hold is enrolled under the default group
(or left with unknown, as the administrator chose), and scheduled from the next cycle."""

from __future__ import annotations

import logging
import pwd

import pytest
from sqlalchemy import select

from fairshare.daemon.daemon import Options
from fairshare.daemon.enrol import RETRY_EVERY, NewUids, parse_new_uids
from integration.test_daemon import engine, entry, make, proc, published  # noqa: F401
from udb.errors import OptionError
from udb.models import SHF_GROUP, Entry
from udb.session import read_session, write_session

LOGINS = {
    1003: pwd.struct_passwd(("carol", "x", 1003, 100, "Carol New", "/h", "/bin/sh")),
    1004: pwd.struct_passwd(("dave", "x", 1004, 100, "", "/h", "/bin/sh")),
    500: pwd.struct_passwd(("svc", "x", 500, 500, "", "/", "/bin/false")),
    65534: pwd.struct_passwd(("nobody", "x", 65534, 65534, "", "/", "/bin/false")),
}


@pytest.fixture(autouse=True)
def logins(monkeypatch):
    def getpwuid(uid):
        if uid not in LOGINS:
            raise KeyError(uid)
        return LOGINS[uid]

    monkeypatch.setattr(pwd, "getpwuid", getpwuid)


def run(engine, new_uids, uids, cycles):
    """A daemon over processes of `uids` (one busy process each), `cycles` cycles run;
    returns it and the names of the lnodes it published after each cycle."""
    plan = lambda i: [proc(100 + k, uid, cpu=1.0) for k, uid in enumerate(uids)]  # noqa: E731
    d, clock, *_ = make(engine, plan, options=Options(enforce_min_uid=1000, new_uids=new_uids))
    d.start()
    seen = []
    for _ in range(cycles):
        clock.sleep(d.consts.delta, d.loop.wake)
        d.step()
        seen.append(set(published(d)[1]))
    return d, seen


def names(engine) -> set[str]:
    with read_session(engine) as s:
        return set(s.scalars(select(Entry.name)))


def test_a_new_user_is_scheduled_under_the_default_group_within_one_cycle(engine):
    d, seen = run(engine, NewUids(group="G", shares=7), [1001, 1003], 2)
    carol = entry(engine, "carol")
    assert (carol.uid, carol.resgrp, carol.shares) == (1003, 500, 7)
    assert (carol.gids, carol.comment) == ([100], "Carol New")
    assert "unknown" in seen[0] and "carol" not in seen[0]  # the cycle that saw it first
    assert "carol" in seen[1]  # the next one schedules it under G
    row = published(d)[1]["carol"]
    assert row.usage > 0 and row.shares == 7


def test_new_uids_unknown_leaves_them_with_unknown(engine):
    _, seen = run(engine, NewUids(enrol=False), [1003], 3)
    assert "carol" not in names(engine) and "carol" not in seen[-1]
    assert "unknown" in seen[-1]


def test_system_uids_and_nobody_are_never_enrolled(engine):
    before = names(engine)
    run(engine, NewUids(group="G"), [500, 65534, 0], 2)
    assert names(engine) == before


def test_a_missing_group_keeps_them_with_unknown_says_so_once_and_is_retried(
    engine,
    caplog,
):
    caplog.set_level(logging.WARNING, logger="shrdaemon")
    _missing_group(engine, caplog)  # shrdaemon's logger propagates (tests/conftest.py)


def _missing_group(engine, caplog):
    d, seen = run(engine, NewUids(group="Staff"), [1003, 1004], 3)
    assert "carol" not in names(engine) and "unknown" in seen[-1]
    warned = [r.getMessage() for r in caplog.records if "cannot enrol" in r.getMessage()]
    assert len(warned) == 2 and "no entry named Staff" in warned[0]
    with write_session(engine) as s:
        s.add(Entry(name="Staff", uid=600, shflags=SHF_GROUP, shares=1))
    for _ in range(RETRY_EVERY):
        d.clock.sleep(d.consts.delta, d.loop.wake)
        d.step()
    assert entry(engine, "carol").resgrp == 600 and entry(engine, "dave").resgrp == 600
    assert len([r for r in caplog.records if "cannot enrol" in r.getMessage()]) == 2


@pytest.mark.parametrize(
    "text, want",
    [
        ("unknown", NewUids(enrol=False)),
        ("enrol", NewUids()),
        ("enrol:Staff", NewUids(group="Staff")),
        ("enrol:Staff:5", NewUids(group="Staff", shares=5)),
    ],
)
def test_new_uids_values(text, want):
    assert parse_new_uids(text) == want


@pytest.mark.parametrize("text", ["", "enrol:Staff:x", "enrol:Staff:-1", "unknown:G", "yes"])
def test_new_uids_refuses_nonsense(text):
    with pytest.raises(OptionError, match="expected unknown, or enrol"):
        parse_new_uids(text)
