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

import dataclasses
import json
import os
import re
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, create_engine, event, inspect, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from udb import tables
from udb.errors import UdbError

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

#: Seconds a SQLite connection waits for another writer before giving up.
BUSY_TIMEOUT = 30.0


def default_path() -> Path:
    """The default SQLite UDB file for the calling user."""
    data = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(data) / "fairshare" / "udb.sqlite"


class UnusableUdb(UdbError):
    """A UDB that cannot be used: missing, empty, damaged, another program's database, a
    newer schema, an unreachable server or a URL that does not parse."""


def resolve_url(udb: str | None = None) -> str:
    """The SQLAlchemy URL for `udb` (a path or URL), else UDB_URL, else the default.

    UnusableUdb (password masked) for a URL that does not parse."""
    udb = udb or os.environ.get("UDB_URL") or str(default_path())
    if "://" in udb:
        try:
            make_url(udb)
        except (ArgumentError, ValueError):
            raise UnusableUdb(f"cannot parse the UDB URL {mask_url(udb)!r}") from None
        return udb
    return f"sqlite:///{Path(udb).expanduser().resolve()}"


def mask_url(text: str) -> str:
    """`text` (a URL, perhaps one that does not parse) with any password replaced by ***."""
    return re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", text)


def display_name(url: str) -> str:
    """The UDB's name for displays: the file path for SQLite, the URL without password else."""
    try:
        u = make_url(url)
    except (ArgumentError, ValueError):
        return mask_url(url)
    if u.get_backend_name() == "sqlite":
        return u.database or ":memory:"
    return u.render_as_string(hide_password=True)


#: Bytes of a SQLite UDB read through a memory map (PRAGMA mmap_size).
MMAP_SIZE = 256 * 2**20


def _sqlite_setup(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record):
        # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
            # journal_mode = WAL is set once a database is known to be a UDB (`use_wal`):
            # it is stored in the file, and a database we cannot recognise is never written.
            cur.execute("PRAGMA synchronous = NORMAL")
            cur.execute("PRAGMA foreign_keys = ON")
            # Reads copy from the mapped file instead of one read() per page: the published
            # columns of 100,000 lnodes (17 MB, fairshare.store.published) in 7, not 18 ms.
            cur.execute(f"PRAGMA mmap_size = {MMAP_SIZE}")
        except UnicodeDecodeError:
            # SQLite's message quotes a damaged schema's object name, which the sqlite3
            # module cannot decode: a database error like any other damage.
            raise sqlite3.DatabaseError(
                "malformed database schema (an object's name is not UTF-8)"
            ) from None
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        mode = "IMMEDIATE" if conn.get_execution_options().get("udb_write") else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")


MIGRATIONS = Path(__file__).parent / "migrations"


def _revision_of(path: Path) -> str:
    """The revision id of migration file `path`: its ``revision = "..."`` line (the
    number that starts its name, or the number and a name, as 0017_grid_policy)."""
    found = re.search(r'^revision = "([^"]+)"', path.read_text(), re.M)
    return found.group(1) if found else path.name.split("_", 1)[0]


@cache
def head_revision() -> str:
    """The newest schema revision: that of the migration whose file name starts with the
    highest zero-padded number in migrations/versions, read without importing Alembic
    (which costs every command a few tenths of a second); a test checks it against
    Alembic's head."""
    return known_revisions()[-1]


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
        engine = create_engine(
            url,
            connect_args={"timeout": BUSY_TIMEOUT},
            json_deserializer=_stored_json(display_name(url)),
        )
        _sqlite_setup(engine)
        return engine
    return create_engine(url, pool_pre_ping=True)


@dataclass(frozen=True)
class Footprint:
    """What was at a SQLite UDB's path before `open_udb` made a UDB there: the
    directories above it that were missing (outermost first), the file's bytes and
    times (None: there was no file), and which of its -wal and -shm files existed."""

    path: Path
    missing_dirs: tuple[Path, ...]
    existed: bool
    sidecars: frozenset[str]
    content: bytes | None = None
    times: tuple[int, int] | None = None

    @classmethod
    def before(cls, path: Path) -> Footprint:
        """What is at `path` before SQLite opens it (which makes a missing file): the
        directories above it that do not exist, whether it and its sidecars exist."""
        missing = [d for d in path.parents if not d.exists()]
        sides = frozenset(s for s in ("-wal", "-shm") if Path(f"{path}{s}").exists())
        return cls(path, tuple(reversed(missing)), path.exists(), sides)

    def with_file(self) -> Footprint:
        """This footprint with the file's bytes and times as they are now, if it existed
        (before anything is written: the database is empty, so it is small)."""
        if not self.existed:
            return self
        st = os.stat(self.path)
        content = self.path.read_bytes()
        return dataclasses.replace(self, content=content, times=(st.st_atime_ns, st.st_mtime_ns))

    def restore(self) -> None:
        """Put the path back as it was: a file that existed gets its bytes and times back
        (in place: a symbolic link's target keeps its inode, owner and mode), one that
        did not is removed, as are the -wal and -shm files and the directories this run
        made."""
        for side in ("-wal", "-shm"):
            if side not in self.sidecars:
                Path(f"{self.path}{side}").unlink(missing_ok=True)
        if not self.existed:
            self.path.unlink(missing_ok=True)
        else:
            with open(self.path, "r+b") as f:
                f.write(self.content)
                f.truncate()
            os.utime(self.path, ns=self.times)
        _remove_dirs(self.missing_dirs)


def _stored_json(name: str):
    """The UDB's JSON columns read back (json.loads), a value damaged on disk being
    UnusableUdb naming the UDB `name` instead of a JSONDecodeError deep in a query."""

    def loads(text: str):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            raise UnusableUdb(
                f"{name}: damaged UDB: a stored value is not the JSON that was written "
                f"({text[:20]!r}...); nothing written"
            ) from None

    return loads


_engines: dict[str, Engine] = {}
_created: dict[str, Footprint | None] = {}  # URLs of the UDBs open_udb created: what was there
_last_name = ""  # the UDB last opened, named in the message of a database error


def open_udb(udb: str | None = None, *, migrate: bool = True, create: bool = False) -> Engine:
    """An engine on the UDB named by `udb` (see `resolve_url`), its schema at head.

    Only with `create` (udbgen, and shrdaemon --simulate with its scenario's UDB) is a
    missing or empty database made a new UDB; otherwise it is refused ("no UDB at PATH").
    A database this suite cannot recognise (another program's, a newer schema, a damaged
    file, an unreachable server) raises UnusableUdb and is left untouched; an older UDB
    is migrated in place after a quick integrity check.  Engines are cached per URL
    within a process.
    """
    global _last_name
    url = resolve_url(udb)
    engine = _engines.get(url)
    if engine is None:
        engine = _open_new(url, migrate, create)
        _engines[url] = engine
    else:
        _created.pop(url, None)  # made by an earlier open: not new to this caller
    _last_name = display_name(url)
    return engine


def _open_new(url: str, migrate: bool, create: bool) -> Engine:
    """`open_udb` of a URL not opened yet in this process.  When it makes a new UDB, what
    was at the path before is kept (`Footprint`), so that `discard_created` can put it
    back; a failure here puts it back at once."""
    name = display_name(url)
    path = sqlite_file(url)
    footprint = None
    if path is not None:
        check_sqlite_file(path, create)
        footprint = Footprint.before(path) if create else None
    try:
        engine = connect(url, name)
    except UdbError:
        if footprint is not None:
            _remove_dirs(footprint.missing_dirs)
        raise
    _created.pop(url, None)
    try:
        revision = recognise(engine, name, create)
        if migrate and revision != head_revision():
            quick_check(engine, name)
            if revision is None:
                _created[url] = footprint.with_file() if footprint else None
            upgrade(engine)
        if path is not None and migrate:
            use_wal(engine)
    except (DBAPIError, UdbError) as err:
        engine.dispose()
        was = _created.pop(url, None)
        if was is not None:
            was.restore()
        elif footprint is not None and url not in _engines:
            _remove_dirs(footprint.missing_dirs)
        if isinstance(err, DBAPIError):
            raise UnusableUdb(f"{name}: {database_problem(err)}") from None
        raise
    return engine


def _remove_dirs(made: tuple[Path, ...]) -> None:
    """Remove the directories of `made` (outermost first) that are empty, innermost first."""
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:
            break  # not empty (someone else's since) or already gone: leave it


def open_readonly(udb: str | None = None) -> Engine:
    """An engine that only reads the SQLite UDB file named by `udb` (see `resolve_url`).

    SQLite's read-only mode: no journal-mode change, nothing created or migrated, so a
    user who may read the file but not write it (nor its directory) can.  When the UDB
    is in WAL mode and its -shm file cannot be made (nobody has it open, the directory
    is not ours), SQLite refuses a read-only open; the file is then opened immutable,
    which is safe because no writer has it open.  OptionError for a URL that is not a
    SQLite file.
    """
    from urllib.parse import quote

    from udb.errors import OptionError

    u = make_url(resolve_url(udb))
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        raise OptionError(f"{display_name(str(u))}: only a SQLite UDB file can be read read-only")
    check_sqlite_file(Path(u.database), create=False)  # missing, FIFO, not SQLite...
    path = quote(u.database)

    def connect():
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
        except sqlite3.OperationalError:
            conn.close()
            conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        except UnicodeDecodeError:  # a damaged schema's name quoted in SQLite's message
            conn.close()
            raise sqlite3.DatabaseError(
                "malformed database schema (an object's name is not UTF-8)"
            ) from None
        conn.isolation_level = None
        conn.execute("PRAGMA query_only = ON")
        return conn

    return create_engine("sqlite://", creator=connect)


def use_wal(engine: Engine) -> None:
    """Put a recognised SQLite UDB in WAL mode (kept in the file), so the daemon and the
    admin commands can use it at once."""
    raw = engine.raw_connection()  # outside a transaction, where SQLite allows the change
    try:
        cur = raw.cursor()
        if cur.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            cur.execute("PRAGMA journal_mode = WAL")
        cur.close()
    finally:
        raw.close()


#: A SQLite UDB's WAL longer than this (bytes) is checkpointed and truncated by
#: `trim_wal`: a long-running writer's WAL otherwise grows to SQLite's automatic
#: checkpoint (1,000 pages, 4 MiB) and stays that long, which fills a small filesystem.
WAL_LIMIT = 256 * 1024


def trim_wal(engine: Engine, limit: int = WAL_LIMIT) -> bool | None:
    """When the SQLite UDB of `engine` has a WAL longer than `limit` bytes, copy it into
    the database and truncate it (PRAGMA wal_checkpoint(TRUNCATE)), without waiting for
    readers (a reader's snapshot makes it wait for the next call).  True when it was
    truncated, False when a reader or a full disk kept it, None when there was nothing
    to do (short, not SQLite)."""
    path = sqlite_file(engine.url.render_as_string(hide_password=False))
    if path is None:
        return None
    try:
        if os.stat(f"{path}-wal").st_size <= limit:
            return None
    except OSError:
        return None
    try:
        raw = engine.raw_connection()
    except DBAPIError:
        return False
    cur = raw.cursor()
    try:
        cur.execute("PRAGMA busy_timeout = 0")
        busy = cur.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    except Exception:  # sqlite3.Error: full, read-only, I/O; the next call tries again
        return False
    finally:
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
        cur.close()
        raw.close()
    return not busy


def discard_created(engine: Engine) -> None:
    """Undo the SQLite UDB `open_udb` created in this process, leaving its path exactly
    as it was found (`Footprint.restore`: a refused first run leaves nothing behind and
    removes nothing that was there); anything else is left as it is."""
    url = engine.url.render_as_string(hide_password=False)
    footprint = _created.get(url)
    if footprint is None:
        return
    engine.dispose()
    _engines.pop(url, None)
    _created.pop(url, None)
    footprint.restore()


def created(engine: Engine) -> bool:
    """True if the last `open_udb` of this engine's UDB made it (it was missing or empty)."""
    return engine.url.render_as_string(hide_password=False) in _created


# -- recognising a UDB: each check raises UnusableUdb with one line naming the UDB --------


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for another backend or an in-memory database)."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


#: The first 16 bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"


def check_sqlite_file(path: Path, create: bool) -> None:
    """Refuse, before SQLite opens it, a path that is not a UDB file: missing or empty
    (unless `create`), a directory, a FIFO or device (a FIFO would block), a file with
    more than one hard link (`refuse_hard_links`), a file that is not SQLite, or one
    whose size is not whole pages (truncated)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if create:
            return
        raise UnusableUdb(f"no UDB at {path}; create one with udbgen") from None
    except OSError as err:
        raise UnusableUdb(f"{path}: cannot use it: {err.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UnusableUdb(f"{path}: is a directory, not a UDB file")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device or socket"
        raise UnusableUdb(f"{path}: is {kind}, not a UDB file")
    refuse_hard_links(path, st)
    if st.st_size == 0:
        if create:
            return
        raise UnusableUdb(f"no UDB at {path} (the file is empty); create one with udbgen")
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError as err:
        raise UnusableUdb(f"{path}: cannot read it: {err.strerror}") from None
    if not head.startswith(SQLITE_HEADER):
        raise UnusableUdb(f"{path}: not a UDB: not an SQLite database file")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if len(head) < 100 or page < 512 or st.st_size % page:
        raise UnusableUdb(
            f"{path}: damaged SQLite file: its size ({st.st_size} bytes) is not a whole "
            f"number of {page}-byte pages (truncated?)"
        )


def refuse_hard_links(path: Path, st: os.stat_result) -> None:
    """UnusableUdb when the SQLite file `path` (status `st`) has more than one name.

    SQLite keys its -wal and -shm files, and its locks, on the name it was opened by:
    two processes using two hard links of one file each write a WAL of their own, and
    what one commits is lost to the other (and shrdaemon's lock, keyed on the file,
    would be found beside one name only).  A symbolic link is resolved, so it is safe."""
    if st.st_nlink > 1:
        raise UnusableUdb(
            f"{path}: the UDB file has {st.st_nlink} hard links: SQLite would keep a "
            "separate WAL for each name and lose writes; keep one name (a symbolic link "
            "is fine)"
        )


def connect(url: str, name: str) -> Engine:
    """An engine for `url` whose first connection worked; UnusableUdb naming the UDB (its
    password masked) for a backend without a driver or a server that cannot be reached."""
    try:
        engine = make_engine(url)
    except (NoSuchModuleError, ImportError) as err:
        backend = url.split("://", 1)[0]
        raise UnusableUdb(
            f"{name}: no database driver for {backend!r} is installed ({err}); "
            "the UDB can be SQLite or PostgreSQL (postgresql+psycopg://)"
        ) from None
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except DBAPIError as err:
        engine.dispose()
        raise UnusableUdb(f"cannot use the UDB {name}: {database_problem(err)}") from None
    return engine


def database_problem(err: DBAPIError) -> str:
    """The first line of what the database driver said, for a one-line message."""
    orig = getattr(err, "orig", None) or err
    lines = [line.strip() for line in str(orig).strip().splitlines() if line.strip()]
    return mask_url(" ".join(lines[:2]) if lines else type(orig).__name__)


def known_revisions() -> list[str]:
    """Every schema revision this version knows, oldest first (by the number that starts
    each migration's file name)."""
    files = sorted((MIGRATIONS / "versions").glob("[0-9]*_*.py"), key=lambda p: p.name)
    return [_revision_of(p) for p in files]


def recognise(engine: Engine, name: str, create: bool = False) -> str | None:
    """The UDB's schema revision (None for an empty database, allowed only with
    `create`).  UnusableUdb for another program's database (tables but no UDB schema
    revision), a newer or unknown revision, or a UDB at head with a table missing."""
    with engine.connect() as conn:
        present = set(inspect(conn).get_table_names())
        revision = None
        if "alembic_version" in present:
            revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    if revision is None:
        others = sorted(t for t in present if t != "alembic_version")
        if others:
            listed = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
            raise UnusableUdb(
                f"{name}: not a UDB: it holds tables ({listed}) but no UDB schema revision; "
                "left untouched"
            )
        if not create:
            raise UnusableUdb(f"no UDB at {name} (the database is empty); create one with udbgen")
        return None
    known = known_revisions()
    if revision not in known:
        if revision > known[-1]:
            raise UnusableUdb(
                f"{name}: UDB schema revision {revision} is newer than this fairshare knows "
                f"(up to {known[-1]}); it needs a fairshare with schema revision {revision}"
            )
        raise UnusableUdb(f"{name}: unknown UDB schema revision {revision!r}")
    if revision == head_revision():
        missing = sorted(set(tables.metadata.tables) - present)
        if missing:
            raise UnusableUdb(f"{name}: damaged UDB: table {', '.join(missing)} missing")
    return revision


def quick_check(engine: Engine, name: str | None = None) -> None:
    """SQLite's PRAGMA quick_check, once per engine: UnusableUdb naming the first problem
    of a damaged file.  Writers call it (through `write_session`) before their first
    write, so no run writes into a damaged UDB."""
    if engine.dialect.name != "sqlite" or id(engine) in _checked:
        return
    name = name or display_name(engine.url.render_as_string(hide_password=False))
    try:
        with engine.connect() as conn:
            result = [r[0] for r in conn.exec_driver_sql("PRAGMA quick_check(5)")]
    except DBAPIError as err:
        raise UnusableUdb(f"{name}: damaged SQLite file: {database_problem(err)}") from None
    if result != ["ok"]:
        first = " ".join(str(result[0]).replace("*** in database main ***", "").split())
        raise UnusableUdb(f"{name}: damaged SQLite file ({first}); nothing written")
    _checked.add(id(engine))


_checked: set[int] = set()  # ids of the engines quick_check passed


def last_opened() -> str:
    """The name of the UDB last opened (for the message of an unexpected database error)."""
    return _last_name


def dispose_all() -> None:
    """Close every cached engine (tests, and processes that fork)."""
    for engine in _engines.values():
        engine.dispose()
    _engines.clear()
    _checked.clear()


@contextmanager
def read_connection(engine: Engine) -> Iterator[Connection]:
    """A connection for reading with Core statements (udb.tables); nothing it does is
    committed.  What the displays and the daemon's reads use: no ORM is imported."""
    with engine.connect() as conn:
        yield conn


def core(session: Session | Connection) -> Connection:
    """The Core connection under `session` (itself when it is one), for the readers
    that serve both a caller's ORM session and a `read_connection`."""
    return session if isinstance(session, Connection) else session.connection()


@contextmanager
def read_session(engine: Engine) -> Iterator[Session]:
    """An ORM session for reading objects (udb.models); nothing it does is committed."""
    from sqlalchemy.orm import Session

    with Session(engine) as session:
        yield session


@contextmanager
def write_session(engine: Engine) -> Iterator[Session]:
    """One write transaction: committed when the block ends, rolled back on any error.

    On SQLite the write lock is taken at BEGIN, so concurrent writers queue
    (up to BUSY_TIMEOUT) rather than fail when they first write.
    """
    from sqlalchemy.orm import Session

    quick_check(engine)
    with Session(engine.execution_options(udb_write=True)) as session:
        with session.begin():
            yield session


@contextmanager
def write_connection(engine: Engine) -> Iterator[Connection]:
    """`write_session` for Core statements alone, on a connection without an ORM
    session (the daemon's publish, every cycle: the session's machinery cost it
    0.1-0.2 ms of CPU with the caches cold after the daemon's sleep)."""
    quick_check(engine)
    with engine.execution_options(udb_write=True).begin() as conn:
        yield conn


def mark_entries_changed(session: Session) -> None:
    """Bump the entries' change serial, in the caller's write transaction.  Every
    command that changes entries or accounts calls it, so a running daemon notices."""
    _bump(session, "entries")


def mark_consts_changed(session: Session) -> None:
    """Bump the constants' change serial, in the caller's write transaction: every
    change to the stored constants or shradmin's schedules calls it, so a running daemon
    reads them again (it reads only the serial otherwise)."""
    _bump(session, "consts")


def _bump(session: Session | Connection, name: str) -> None:
    serial = tables.serials.c
    bump = update(tables.serials).where(serial.name == name).values(value=serial.value + 1)
    session.execute(bump)


def entries_serial(session: Session | Connection) -> int:
    """The entries' change serial (grows with every transaction that changed them)."""
    serial = tables.serials.c
    return session.execute(select(serial.value).where(serial.name == "entries")).scalar() or 0
