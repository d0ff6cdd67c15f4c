"""The UDB as one caller may see it: a filtered copy, shipped as a SQLite image.

shrdaemon answers a reader's `udb` request (fairshare.server.server) with `make_image`:
an in-memory SQLite copy of its UDB, whatever the backend, with what the caller
may not see removed, serialised to bytes.  The reader opens it with `open_image`
and runs the very code it runs on a UDB it can open itself, so every display has
one implementation whichever way its data came.

What a caller other than root does not get (man/shrdaemon.8, "Security model"):

- the password field of every entry (blank), its own included;
- in other users' entries: the CPU quota and the quota used (0) and the comment
  (blank): `PRIVATE` lists these columns, and udbsee leaves them out;
- the daemon's own bookkeeping: lnode checkpoints, pending shrsync requests and the
  shradmin change log (tables emptied).

Everything else (the share tree, shares, flags, acids, decayed usage and charges,
the published lnode table, the constants, shrdist's change log) is what shrview,
shrtree and shrinfo show every user anyway.  Deleted content is overwritten
(SQLite's secure_delete), so nothing removed survives in the image's free pages.
"""

from __future__ import annotations

import sqlite3

from sqlalchemy import Engine, StaticPool, create_engine, insert, select, text
from sqlalchemy.engine import make_url

from udb import tables

#: Columns of other users' entries a caller other than root does not see (blanked
#: by `make_image`, left out by udbsee).
PRIVATE = ("cpuquota", "cpuquotaused", "comment")
#: Tables a caller other than root gets empty: the daemon's and the administrators' records.
WITHHELD = ("lnode_checkpoints", "sync_requests", "const_changes")


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
            dst.execute("UPDATE entries SET passwd = '' WHERE passwd != ''")
            dst.execute(
                "UPDATE entries SET cpuquota = 0, cpuquotaused = 0, comment = '' WHERE uid != ? "
                "AND (cpuquota != 0 OR cpuquotaused != 0 OR comment != '')",
                (viewer,),
            )
            for table in WITHHELD:
                dst.execute(f"DELETE FROM {table}")
            dst.execute("COMMIT")
        image = bytearray(dst.serialize())
    finally:
        dst.close()
    # A copy of a WAL database says so in its header (bytes 18 and 19 = 2), and an
    # in-memory database cannot be opened in WAL mode: mark it a rollback-journal one.
    image[18] = image[19] = 1
    return bytes(image)


def open_image(image: bytes) -> Engine:
    """A read-only engine on a database image made by `make_image`."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.deserialize(image)
    conn.execute("PRAGMA query_only = ON")
    return create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool)
