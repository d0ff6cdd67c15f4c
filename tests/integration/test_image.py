"""udb.image: the UDB as one caller may see it; udb.session.open_readonly."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError

from udb import directives
from udb.image import make_image, open_image
from udb.models import Entry, LnodeCheckpoint, SyncRequest
from udb.session import open_readonly, open_udb, read_session, write_session

SECRETS = """
create:me:uid:7001:resgrp:0:shares:1:passwd:$6$mine$hash:
update:me:cpuquota:100:cpuquotaused:5:comment:my room:
create:you:uid:7002:resgrp:0:shares:1:passwd:$6$yours$hash:
update:you:cpuquota:200:cpuquotaused:9:comment:your secret:
"""


def fill(engine) -> None:
    directives.run(engine, directives.parse(SECRETS, "secrets"))
    with write_session(engine) as s:
        s.add(
            LnodeCheckpoint(
                host="h", uid=7002, name="you", usage=1, charge=1, cpu_seconds=1, time=1
            )
        )
        s.add(SyncRequest(host="h", kind="update", who="root", requested=1.0))


def entries(engine) -> dict[str, tuple]:
    with read_session(engine) as s:
        rows = s.execute(
            select(Entry.name, Entry.passwd, Entry.cpuquota, Entry.cpuquotaused, Entry.comment)
        ).all()
    return {r[0]: tuple(r[1:]) for r in rows}


def counts(engine) -> tuple[int, int]:
    with read_session(engine) as s:
        return (
            len(s.scalars(select(LnodeCheckpoint)).all()),
            len(s.scalars(select(SyncRequest)).all()),
        )


def test_a_user_sees_no_password_and_only_their_own_private_fields(udb_url):
    engine = open_udb(udb_url)
    fill(engine)
    raw = make_image(engine, 7001)
    seen = open_image(raw)
    got = entries(seen)
    assert got["me"] == ("", 100.0, 5.0, "my room")
    assert got["you"] == ("", 0.0, 0.0, "")
    assert counts(seen) == (0, 0)
    for secret in (b"$6$mine$hash", b"$6$yours$hash", b"your secret"):
        assert secret not in raw  # overwritten, not left in a free page
    # Root's image is the UDB.
    assert entries(open_image(make_image(engine, 0))) == entries(engine)
    assert counts(open_image(make_image(engine, 0))) == (1, 1)


def test_a_column_or_table_added_later_is_private_until_listed(udb_url):
    """Guard: the image was the UDB less a list of private columns, so a column a later
    migration adds was shown to everyone.  What is shown is now a list of its own."""
    engine = open_udb(udb_url)
    fill(engine)
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE entries ADD COLUMN badge TEXT NOT NULL DEFAULT ''"))
        conn.execute(text("ALTER TABLE entries ADD COLUMN pin INTEGER"))
        conn.execute(text("UPDATE entries SET badge = 'badge-' || name, pin = 4242"))
        conn.execute(text("CREATE TABLE audit (who TEXT, what TEXT)"))
        conn.execute(text("INSERT INTO audit VALUES ('root', 'audit-secret')"))
    raw = make_image(engine, 7001)
    with open_image(raw).connect() as seen:
        rows = seen.execute(text("SELECT name, badge, pin, shares FROM entries")).all()
        assert {tuple(r) for r in rows} == {("me", "", None, 1), ("you", "", None, 1)}
        assert seen.execute(text("SELECT count(*) FROM audit")).scalar() == 0
    for secret in (b"badge-me", b"badge-you", b"audit-secret"):
        assert secret not in raw
    with open_image(make_image(engine, 0)).connect() as seen:  # root's image is the UDB
        assert seen.execute(text("SELECT pin FROM entries")).scalars().all() == [4242, 4242]


GROUPS_AND_ACCOUNTS = """
acid:acct:7200:
create:team:uid:7100:shflags:040000:shares:1:cpuquota:300:comment:team secret:
create:acct:uid:7200:shflags:01000000:shares:1:cpuquota:400:comment:acct secret:
"""


def test_only_a_user_entry_has_an_owner(udb_url):
    """Guard: a uid equal to a group's uid or an account's number was taken for that
    entry's owner and shown its CPU quota and comment."""
    engine = open_udb(udb_url)
    fill(engine)
    directives.run(engine, directives.parse(GROUPS_AND_ACCOUNTS, "groups"))
    for viewer in (7100, 7200):
        raw = make_image(engine, viewer)
        got = entries(open_image(raw))
        # passwd * by default (udbgen), shown: it is what the Pw rule checks
        assert got["team"] == ("*", 0.0, 0.0, "") and got["acct"] == ("*", 0.0, 0.0, "")
        assert b"team secret" not in raw and b"acct secret" not in raw
    assert entries(open_image(make_image(engine, 7001)))["me"] == ("", 100.0, 5.0, "my room")


def test_an_image_cannot_be_written(udb_url):
    seen = open_image(make_image(open_udb(udb_url), 7001))
    with pytest.raises(OperationalError, match="readonly"), seen.begin() as conn:
        conn.execute(text("DELETE FROM entries"))


def test_open_readonly_changes_nothing(tmp_path):
    path = tmp_path / "plain.sqlite"
    engine = open_udb(f"sqlite:///{path}", create=True)
    fill(engine)
    engine.dispose()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    before = sorted(p.name for p in tmp_path.iterdir())
    ro = open_readonly(str(path))
    assert entries(ro)["you"][2] == 9.0
    with ro.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "delete"
    with pytest.raises(OperationalError), ro.begin() as c:
        c.execute(text("DELETE FROM entries"))
    ro.dispose()
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM entries").fetchone()[0] == 2
    conn.close()


def test_a_groups_and_a_shareholders_star_passwd_is_shown_to_everyone(udb_url):
    """The Pw rule (udbgen -a, shrtree) checks that a group's or account's passwd is *:
    through the daemon an ordinary user must get the answer root gets."""
    engine = open_udb(udb_url)
    text = (
        "acid:lab:7100:\n"
        "create:Grp:uid:7000:shflags:040000:passwd:*:\n"
        "create:Open:uid:7003:shflags:040000:passwd:$6$g$hash:\n"
        "create:lab:uid:7100:shflags:01000000:passwd:*:\n"
        "create:locked:uid:7004:passwd:*:\n"
    )
    directives.run(engine, directives.parse(text, "t"))
    got = entries(open_image(make_image(engine, 7001)))
    assert (got["Grp"][0], got["lab"][0]) == ("*", "*")
    assert got["Open"][0] == ""  # not *: still reported, its hash never shipped
    assert got["locked"][0] == ""  # a user's: whether their login is locked is theirs
