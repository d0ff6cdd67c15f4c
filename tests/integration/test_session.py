"""Sessions and storage: WAL, a writer with readers at once, migrations.  On PostgreSQL:
tests/system/test_postgresql.py."""

from __future__ import annotations

import os
import threading
import time

from click.testing import CliRunner
from sqlalchemy import select, text, update

from udb import directives
from udb.cli.udbgen import main as udbgen
from udb.cli.udbsee import main as udbsee
from udb.models import Entry
from udb.session import (
    current_revision,
    default_path,
    make_engine,
    open_udb,
    read_session,
    resolve_url,
    upgrade,
    write_session,
)


def shares_of(engine, name: str) -> int:
    with read_session(engine) as s:
        return s.scalar(select(Entry.shares).where(Entry.name == name))


def test_url_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_path() == tmp_path / "fairshare" / "udb.sqlite"
    assert resolve_url() == f"sqlite:///{tmp_path}/fairshare/udb.sqlite"
    monkeypatch.setenv("UDB_URL", "postgresql+psycopg://u@h/db")
    assert resolve_url() == "postgresql+psycopg://u@h/db"
    assert resolve_url("rel.sqlite") == f"sqlite:///{os.path.abspath('rel.sqlite')}"


def test_default_udb_needs_no_root(tmp_path):
    # The autouse fixture points XDG_DATA_HOME into tmp_path: the default UDB goes there.
    r = CliRunner().invoke(udbgen, ["-c", "create:a:uid:5:"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "xdg" / "fairshare" / "udb.sqlite").exists()
    assert CliRunner().invoke(udbsee, ["-f", "uid", "a"]).stdout == "create:a:uid:5:\n"


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(udb_url):
    with open_udb(udb_url).connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


def test_readers_read_while_a_writer_holds_its_transaction(acme):
    engine = open_udb(acme)
    written, release = threading.Event(), threading.Event()

    def writer():
        with write_session(engine) as s:
            s.execute(update(Entry).where(Entry.name == "u1").values(shares=99))
            written.set()
            release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert written.wait(10)
        # Readers are not blocked, and see the last committed state (blocked, they would
        # see the writer's 99 once it commits).  How long they take:
        # tests/bench/bench_responsiveness.py.
        assert shares_of(engine, "u1") == 25
        r = CliRunner().invoke(udbsee, ["--udb", acme, "-f", "shares", "u1"])
        assert r.stdout == "create:u1:shares:25:\n"
    finally:
        release.set()
        t.join()
    assert shares_of(engine, "u1") == 99


def test_a_second_writer_waits_for_the_first(acme):
    engine = open_udb(acme)
    holding, order = threading.Event(), []

    def first():
        with write_session(engine) as s:
            s.execute(update(Entry).where(Entry.name == "u1").values(shares=1))
            holding.set()
            time.sleep(0.5)
            order.append("first commits")

    t = threading.Thread(target=first)
    t.start()
    assert holding.wait(10)
    # udbgen queues behind the open transaction (BEGIN IMMEDIATE + busy timeout), then works
    # on the committed state: it sees u1's new shares.
    changes = directives.run(engine, directives.parse("update:u1:shares:2:", "-c"))
    order.append("second commits")
    t.join()
    assert order == ["first commits", "second commits"]
    assert [(c.old, c.new) for c in changes.updated[0][1]] == [(1, 2)]
    assert shares_of(engine, "u1") == 2


def test_a_udb_at_the_first_revision_upgrades_in_place(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = make_engine(url)
    upgrade(engine, "0001")
    assert current_revision(engine) == "0001"
    with engine.begin() as conn:  # rows as the first version wrote them
        conn.execute(
            text(
                "INSERT INTO entries (name, uid, gids, acids, resgrp, shares, shflags, shusage,"
                " shcharge, shextime, cpuquota, cpuquotaused, nice, passwd, comment) VALUES"
                " ('Grp', 100, '[10]', '[]', 0, 7, 16384, 0, 0, 0, 0, 0, 0, '*', 'kept'),"
                " ('old', 1000, '[10]', '[5]', 100, 3, 0, 12.5, 40.25, 1700000000, 0, 0, 0,"
                " '', '')"
            )
        )
        conn.execute(text("INSERT INTO accounts (acid, name) VALUES (5, 'proj')"))
    engine.dispose()

    upgraded = open_udb(url)  # migrates to head on open
    assert current_revision(upgraded) not in (None, "0001")
    r = CliRunner().invoke(udbsee, ["--udb", url, "-a", "-f", "uid,acids,resgrp,shusage,shcharge"])
    assert r.stdout.splitlines() == [
        "acid:proj:5:",
        "create:Grp:uid:100:acids::resgrp:0:shusage:0.0:shcharge:0.0:",
        "create:old:uid:1000:acids:5:resgrp:100:shusage:12.5:shcharge:40.25:",
    ]
    r = CliRunner().invoke(udbgen, ["--udb", url, "-c", "update:old:shares:4:"])
    assert r.exit_code == 0 and shares_of(upgraded, "old") == 4


def test_head_revision_is_alembics_head():
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from udb.session import MIGRATIONS, head_revision

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert head_revision() == ScriptDirectory.from_config(cfg).get_current_head()
