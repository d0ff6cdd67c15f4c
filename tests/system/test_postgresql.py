"""The UDB on PostgreSQL: each test gets a database of its own on the session's
throwaway server (tests/conftest.py: pg_url, pg_db; UDB_TEST_PG_URL names a server of
your own instead).  A round trip through udbgen and udbsee, the daemon's advisory
lock, the image a caller sees, and shrdist's row locks serialising two runs.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ACME, load
from integration.test_image import counts, entries, fill
from integration.test_no_lost_updates import NO_AUTH
from integration.test_session import shares_of
from sqlalchemy import select, text

from fairshare.admin.shrdist import Caller, redistribute
from udb.cli.udbgen import main as udbgen
from udb.cli.udbsee import main as udbsee
from udb.image import make_image, open_image
from udb.models import Entry, ShareChange
from udb.session import open_udb, read_session, write_session

pytestmark = pytest.mark.requires("postgresql")


# -- a round trip and the daemon's lock (from tests/integration/test_session.py) ------------


def test_postgresql_round_trip(pg_url, acme_acct):
    engine = open_udb(pg_url, create=True)  # as udbgen does
    with engine.begin() as conn:  # a clean slate when UDB_TEST_PG_URL is reused
        conn.execute(text("DELETE FROM entries"))
        conn.execute(text("DELETE FROM accounts"))
    out = CliRunner().invoke(udbsee, ["--udb", acme_acct, "-a"]).stdout
    r = CliRunner().invoke(udbgen, ["--udb", pg_url, "-"], input=out)
    assert r.exit_code == 0, r.output
    assert CliRunner().invoke(udbsee, ["--udb", pg_url, "-a"]).stdout == out
    # Errors leave PostgreSQL untouched too.
    r = CliRunner().invoke(udbgen, ["--udb", pg_url, "-c", "update:u1:shares:5: delete:Proj2:"])
    assert r.exit_code == 2 and "delete:Proj2: resgrp 222 names no entry" in r.stderr
    assert shares_of(engine, "u1") == 25
    r = CliRunner().invoke(udbgen, ["--udb", pg_url, "-a", "-A"])
    assert r.exit_code == 0, r.output
    # Swapping two uids passes PostgreSQL's per-row unique check too.
    r = CliRunner().invoke(
        udbgen, ["--udb", pg_url, "-c", "update:u1:uid:1002: update:u2:uid:1001:"]
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(udbsee, ["--udb", pg_url, "-f", "uid", "u1", "u2"])
    assert r.stdout == "create:u1:uid:1002:\ncreate:u2:uid:1001:\n"


def test_postgresql_daemon_lock_is_an_advisory_lock_keyed_by_host(pg_url, acme_acct):
    # Issue 11.13: the lock is the database's, not the URL's spelling: two URLs of one
    # PostgreSQL database (one with a needless option) find the same lock.
    from fairshare.daemon.lock import AlreadyRunning, DaemonLock

    engine = open_udb(pg_url, create=True)
    other = open_udb(pg_url + "&application_name=second")
    held = DaemonLock(pg_url, "pg", host="node1", engine=engine)
    held.acquire()
    try:
        with pytest.raises(AlreadyRunning, match="already served by a shrdaemon for host node1"):
            DaemonLock(pg_url, "pg", host="node1", engine=other).acquire()
        node2 = DaemonLock(pg_url, "pg", host="node2", engine=other)
        node2.acquire()  # another host's daemon on the same UDB is welcome
        node2.release()
    finally:
        held.release()
    again = DaemonLock(pg_url, "pg", host="node1", engine=other)
    again.acquire()
    again.release()


# -- images (from tests/integration/test_image.py) ---------------------------------------------


def test_postgresql_gives_the_same_image(pg_url, udb_url):
    pg = open_udb(pg_url, create=True)
    with pg.begin() as conn:  # a clean slate when UDB_TEST_PG_URL is reused
        for table in ("lnode_checkpoints", "sync_requests", "entries", "accounts"):
            conn.execute(text(f"DELETE FROM {table}"))
    fill(pg)
    fill(open_udb(udb_url))
    for viewer in (7001, 0):
        a = open_image(make_image(pg, viewer))
        b = open_image(make_image(open_udb(udb_url), viewer))
        assert entries(a) == entries(b)
        assert counts(a) == counts(b)


# -- shrdist's row locks (from tests/integration/test_no_lost_updates.py) -----------------------


def test_two_runs_serialise_on_postgresql_too(pg_url):
    """PostgreSQL takes no lock at BEGIN: shrdist locks the members' rows (FOR UPDATE), so
    a second run waits for the first and re-reads what it committed."""
    load(pg_url, ACME)
    engine = open_udb(pg_url)
    root = Caller("root", 0, "root")
    auth = Path(NO_AUTH)
    first_done, release, second_started = threading.Event(), threading.Event(), threading.Event()
    errors = []

    def first():
        try:
            with write_session(engine) as s:
                redistribute(s, root, "Proj2", {"u9": 60}, auth=auth, now=1.0)
                first_done.set()
                release.wait(20)  # hold the transaction open
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)
            first_done.set()

    def second():
        try:
            with write_session(engine) as s:
                second_started.set()
                redistribute(s, root, "Proj2", {"u9": 70, "u10": 20}, auth=auth, now=2.0)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    t1 = threading.Thread(target=first)
    t1.start()
    assert first_done.wait(20)
    t2 = threading.Thread(target=second)
    t2.start()
    assert second_started.wait(20)
    time.sleep(0.5)
    assert t2.is_alive()  # waiting for the first run's row locks
    release.set()
    t1.join(20)
    t2.join(20)
    assert errors == []
    with read_session(engine) as s:
        log = [
            (r.member, r.old, r.new)
            for r in s.scalars(select(ShareChange).order_by(ShareChange.time, ShareChange.member))
        ]
        u9 = s.scalar(select(Entry.shares).where(Entry.name == "u9"))
    assert log == [("u9", 50, 60), ("u10", 30, 20), ("u9", 60, 70)]
    assert u9 == 70
