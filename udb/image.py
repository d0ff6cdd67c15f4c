"""The UDB as one caller may see it: a filtered copy, shipped as a SQLite image.

shrdaemon answers a reader's `udb` request (fairshare.server.server) with `make_image`:
an in-memory SQLite copy of its UDB, whatever the backend, with what the caller
may not see removed, serialised to bytes.  The reader opens it with `open_image`
and runs the very code it runs on a UDB it can open itself, so every display has
one implementation whichever way its data came.

What a caller other than root gets is listed, never what they do not get
(man/shrdaemon.8, "Security model"): `SHOWN` names, table by table, the columns
copied as they are.  Every other column is blanked (NULL, 0 or empty) and every other
table emptied, so a column or table a later migration adds is private until it is
listed.  Not listed today:

- the password field of every entry (blank), its own included, but the ``*`` of a
  resource group or shareholder entry: whether it is ``*`` is what udbgen -a's and
  shrtree's Pw rule checks, and neither is a login, so there is nothing to hide;
- the CPU quota, the quota used and the comment (`OWN`), except in the caller's own
  entry: the user entry (not a group's nor an account's, whose uid is a number, not
  a login) whose uid is the caller's (`owns`); udbsee leaves them out of others';
- the daemon's own bookkeeping: lnode checkpoints, pending shrsync requests and the
  shradmin change log.

Everything listed (the share tree, shares, flags, acids, decayed usage and charges,
the published lnode table, the constants, shrdist's change log) is what shrview,
shrtree and shrinfo show every user anyway.  Deleted content is overwritten
(SQLite's secure_delete), so nothing removed survives in the image's free pages.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from sqlalchemy import Engine, StaticPool, create_engine, insert, select, text
from sqlalchemy.engine import make_url

from udb import tables
from udb.rules import SHF_ACCOUNT, SHF_GROUP, role_of

#: What a caller other than root sees of each table: the columns copied as they are.
#: Any other column is blanked and any other table emptied (`make_image`).
SHOWN: dict[str, tuple[str, ...]] = {
    "alembic_version": ("version_num",),
    "entries": (
        "id", "name", "uid", "gids", "acids", "resgrp", "shares", "shflags",
        "shusage", "shcharge", "shextime", "nice", "halflife", "scope", "pooled",
    ),
    "accounts": ("acid", "name"),
    "consts": ("name", "value"),
    "lnode_cycles": (
        "host", "time", "delta", "enforcer", "pid", "cycle", "mode", "started", "running",
        "stopped", "counts", "cpus", "delivered", "columnar",
    ),
    "lnodes": (
        "host", "node", "name", "uid", "kind", "parent", "level", "shares", "refs", "nrun",
        "usage", "stored", "charge", "cpu_seconds", "rate", "m_share", "e_share", "cpu",
        "adj", "priority", "background", "demand", "due", "pri", "want", "target", "got",
        "got_minute", "flat",
    ),
    "schedules": ("name", "days", "hours", "settings"),
    "share_changes": ("id", "time", "who", "grp", "member", "old", "new"),
    "serials": ("name", "value"),
}  # fmt: skip
#: The entries whose passwd ``*`` is shown: resource groups and shareholders.
_NO_LOGIN = SHF_GROUP | SHF_ACCOUNT
#: The columns of an entry its owner sees too (`owns`), and nobody else but root.
OWN = ("cpuquota", "cpuquotaused", "comment")


def owns(viewer: int, uid: int, shflags: int) -> bool:
    """Whether uid `viewer` owns the entry with `uid` and `shflags`: only a user entry
    has an owner (a group's or an account's uid is a number, not a login)."""
    return uid == viewer and role_of(shflags, uid) == "user"


def shown_fields(fields: Sequence[str], viewer: int, uid: int, shflags: int) -> list[str]:
    """Which of the entry `fields` uid `viewer` (not root) sees of the entry with `uid`
    and `shflags`, read through the daemon: what `SHOWN` lists, and `OWN` in its own."""
    own = owns(viewer, uid, shflags)
    return [f for f in fields if f in SHOWN["entries"] or (own and f in OWN)]


def _copy(engine: Engine, dst: sqlite3.Connection) -> None:
    """Copy the UDB behind `engine` into the empty SQLite connection `dst`."""
    u = make_url(str(engine.url))
    if u.get_backend_name() == "sqlite" and u.database not in (None, "", ":memory:"):
        # The backup API copies pages in C, without the GIL: a few ms for a large UDB.
        src = sqlite3.connect(f"file:{u.database}?mode=ro", uri=True, timeout=30)
        try:
            src.backup(dst)
        finally:
            src.close()
        return
    # Any other backend: the schema of udb.tables and every row, table by table.
    mem = create_engine("sqlite://", creator=lambda: dst, poolclass=StaticPool)
    tables.metadata.create_all(mem)
    with engine.connect() as src, mem.begin() as out:
        out.exec_driver_sql("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        version = src.execute(text("SELECT version_num FROM alembic_version")).scalar()
        out.execute(text("INSERT INTO alembic_version VALUES (:v)"), {"v": version})
        for table in tables.metadata.sorted_tables:
            rows = [dict(r) for r in src.execute(select(table)).mappings()]
            if rows:
                out.execute(insert(table), rows)


def make_image(engine: Engine, viewer: int) -> bytes:
    """The UDB behind `engine` as uid `viewer` may see it, as a SQLite database image."""
    dst = sqlite3.connect(":memory:", isolation_level=None)
    try:
        _copy(engine, dst)
        if viewer != 0:
            dst.execute("PRAGMA secure_delete = ON")
            dst.execute("BEGIN")
            _withhold(dst, viewer)
            dst.execute("COMMIT")
        image = bytearray(dst.serialize())
    finally:
        dst.close()
    # A copy of a WAL database says so in its header (bytes 18 and 19 = 2), and an
    # in-memory database cannot be opened in WAL mode: mark it a rollback-journal one.
    image[18] = image[19] = 1
    return bytes(image)


def _withhold(dst: sqlite3.Connection, viewer: int) -> None:
    """Blank in `dst` every column `SHOWN` does not list (but `OWN` in the viewer's own
    entry) and empty every table it does not list."""
    names = dst.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    mine = [
        str(i)
        for i, uid, shflags in dst.execute(
            "SELECT id, uid, shflags FROM entries WHERE uid = ?", (viewer,)
        )
        if owns(viewer, uid, shflags)
    ]
    for (table,) in names:
        if table not in SHOWN:
            dst.execute(f'DELETE FROM "{table}"')
            continue
        for _cid, column, decl, notnull, _default, key in dst.execute(
            f'PRAGMA table_info("{table}")'
        ).fetchall():
            if column in SHOWN[table] or key:
                continue
            blank = _blank(decl, notnull)
            own = table == "entries" and column in OWN and mine
            spared = f" AND id NOT IN ({','.join(mine)})" if own else ""
            if table == "entries" and column == "passwd":
                spared = f" AND NOT (passwd = '*' AND shflags & {_NO_LOGIN} != 0)"
            dst.execute(
                f'UPDATE "{table}" SET "{column}" = ? WHERE "{column}" IS NOT ?{spared}',
                (blank, blank),
            )


def _blank(decl: str, notnull: int) -> object:
    """What a withheld column is set to: NULL where it may be, else 0, '' or b''."""
    if not notnull:
        return None
    decl = decl.upper()
    if any(t in decl for t in ("INT", "REAL", "FLOA", "DOUB", "NUM", "BOOL", "DEC")):
        return 0
    if "JSON" in decl:
        return "null"
    if "BLOB" in decl or "BINARY" in decl:
        return b""
    return ""


def open_image(image: bytes) -> Engine:
    """A read-only engine on a database image made by `make_image`."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.deserialize(image)
    conn.execute("PRAGMA query_only = ON")
    return create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool)
