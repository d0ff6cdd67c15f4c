"""Where the UDB lives and how to open it.

The UDB is chosen, first match wins, by the `--udb PATH|URL` option, the
`UDB_URL` environment variable, or the default SQLite file
``$XDG_DATA_HOME/fairshare/udb.sqlite`` (``~/.local/share/fairshare/udb.sqlite``),
which needs no root.  A site shares one UDB between the daemon and its
administrators by setting UDB_URL system-wide (for example
``sqlite:////var/lib/fairshare/udb.sqlite`` or a PostgreSQL URL).

SQLite runs in WAL mode with a busy timeout, so the daemon and the admin
commands can use one UDB at once; every transaction begins explicitly so a
run of udbgen is one transaction, and `write_session` takes the write lock
at BEGIN so that two writers serialise instead of failing half-way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from udb.models import Serial

#: Seconds a SQLite connection waits for another writer before giving up.
BUSY_TIMEOUT = 30.0


def default_path() -> Path:
    """The default SQLite UDB file for the calling user."""
    data = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(data) / "fairshare" / "udb.sqlite"


def resolve_url(udb: str | None = None) -> str:
    """The SQLAlchemy URL for `udb` (a path or URL), else UDB_URL, else the default."""
    udb = udb or os.environ.get("UDB_URL") or str(default_path())
    if "://" in udb:
        return udb
    return f"sqlite:///{Path(udb).expanduser().resolve()}"


def display_name(url: str) -> str:
    """The UDB's name for displays: the file path for SQLite, the URL without password else."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        return u.database or ":memory:"
    return u.render_as_string(hide_password=True)


def _sqlite_setup(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record):
        # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        mode = "IMMEDIATE" if conn.get_execution_options().get("udb_write") else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")


MIGRATIONS = Path(__file__).parent / "migrations"


@cache
def head_revision() -> str:
    """The newest schema revision.  Revision ids are the zero-padded number that starts
    each file name in migrations/versions, so this needs no Alembic import (which costs
    every command a few tenths of a second); a test checks it against Alembic's head."""
    return max(p.name.split("_", 1)[0] for p in (MIGRATIONS / "versions").glob("[0-9]*_*.py"))


def current_revision(engine: Engine) -> str | None:
    """The schema revision the UDB is at (None for an empty database)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the UDB's schema to `revision`, keeping every row."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    command.upgrade(cfg, revision)


def make_engine(url: str) -> Engine:
    """An engine for `url` with the UDB's connection settings, schema not touched."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            Path(u.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT})
        _sqlite_setup(engine)
        return engine
    return create_engine(url, pool_pre_ping=True)


_engines: dict[str, Engine] = {}


def open_udb(udb: str | None = None, *, migrate: bool = True) -> Engine:
    """An engine on the UDB named by `udb` (see `resolve_url`), its schema at head.

    A new UDB is created; an older one is migrated in place.  Engines are cached
    per URL within a process.
    """
    url = resolve_url(udb)
    engine = _engines.get(url)
    if engine is None:
        engine = make_engine(url)
        if migrate and current_revision(engine) != head_revision():
            upgrade(engine)
        _engines[url] = engine
    return engine


def open_readonly(udb: str | None = None) -> Engine:
    """An engine that only reads the SQLite UDB file named by `udb` (see `resolve_url`).

    SQLite's read-only mode: no journal-mode change, nothing created or migrated, so a
    user who may read the file but not write it (nor its directory) can.  When the UDB
    is in WAL mode and its -shm file cannot be made (nobody has it open, the directory
    is not ours), SQLite refuses a read-only open; the file is then opened immutable,
    which is safe because no writer has it open.  OptionError for a URL that is not a
    SQLite file.
    """
    import sqlite3
    from urllib.parse import quote

    from udb.errors import OptionError

    u = make_url(resolve_url(udb))
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        raise OptionError(f"{display_name(str(u))}: only a SQLite UDB file can be read read-only")
    path = quote(u.database)

    def connect():
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
        except sqlite3.OperationalError:
            conn.close()
            conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        conn.isolation_level = None
        conn.execute("PRAGMA query_only = ON")
        return conn

    return create_engine("sqlite://", creator=connect)


def dispose_all() -> None:
    """Close every cached engine (tests, and processes that fork)."""
    for engine in _engines.values():
        engine.dispose()
    _engines.clear()


@contextmanager
def read_session(engine: Engine) -> Iterator[Session]:
    """A session for reading; nothing it does is committed."""
    with Session(engine) as session:
        yield session


@contextmanager
def write_session(engine: Engine) -> Iterator[Session]:
    """One write transaction: committed when the block ends, rolled back on any error.

    On SQLite the write lock is taken at BEGIN, so concurrent writers queue
    (up to BUSY_TIMEOUT) rather than fail when they first write.
    """
    with Session(engine.execution_options(udb_write=True)) as session:
        with session.begin():
            yield session


def mark_entries_changed(session: Session) -> None:
    """Bump the entries' change serial, in the caller's write transaction.  Every
    command that changes entries or accounts calls it, so a running daemon notices."""
    session.execute(update(Serial).where(Serial.name == "entries").values(value=Serial.value + 1))


def entries_serial(session: Session) -> int:
    """The entries' change serial (grows with every transaction that changed them)."""
    return session.execute(select(Serial.value).where(Serial.name == "entries")).scalar() or 0
