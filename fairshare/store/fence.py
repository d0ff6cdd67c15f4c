"""The fencing token that keeps a host's rows to the one daemon holding its lock.

The lock itself (fairshare.daemon.lock) can be lost without the daemon noticing: a
PostgreSQL restart drops every advisory lock, and a second daemon for the same host
may then take it.  So the database itself decides who writes: `host_generations` holds
one generation number per host (udb.tables), which a daemon bumps when it takes the
lock (`claim`, at start) and again when it takes the lock back after its connection
was lost (`claim` with the generation it had: refused if another daemon bumped it
meanwhile).  Every write of the host's rows (publish, write-back, checkpoint,
recovery) calls `check` in its own transaction first, which raises `Fenced` when the
generation is no longer the writer's, so nothing it wrote is committed.

The same row holds `spooled`, the serial of the last spool file applied
(fairshare.daemon.spool), read and set in the transaction that writes its increments.
"""

from __future__ import annotations

from sqlalchemy import Connection, insert, select, update

from udb import tables


class Fenced(Exception):
    """Another daemon has taken this host's lock: this one may no longer write."""


def claim(conn: Connection, host: str, ours: int | None = None) -> int:
    """Bump `host`'s generation (in the caller's write transaction) and return it.
    `ours`: the generation this daemon had (a retake); Fenced when it is no longer the
    stored one.  None: a daemon starting, which takes whatever is stored."""
    g = tables.host_generations
    stored = _stored(conn, host)
    if stored is None:
        if ours is not None:
            raise Fenced(f"host {host}: no generation stored, this daemon had {ours}")
        conn.execute(insert(g).values(host=host, generation=1, spooled=0))
        return 1
    if ours is not None and stored != ours:
        raise Fenced(_taken(host, stored, ours))
    conn.execute(update(g).where(g.c.host == host).values(generation=stored + 1))
    return stored + 1


def check(conn: Connection, host: str, generation: int | None) -> None:
    """Fenced unless `host`'s stored generation is `generation` (None: not fenced, for a
    store no daemon claimed, such as a test's).  On PostgreSQL the row is locked until
    the caller's transaction ends, so a `claim` waits for the write it would fence."""
    if generation is None:
        return
    stored = _stored(conn, host)
    if stored != generation:
        raise Fenced(_taken(host, stored, generation))


def spooled(conn: Connection, host: str) -> int:
    """The serial of the last spool file of `host` whose increments were written."""
    g = tables.host_generations.c
    return conn.scalar(select(g.spooled).where(g.host == host)) or 0


def mark_spooled(conn: Connection, host: str, serial: int) -> None:
    """Record (in the caller's transaction) that spool `serial` of `host` is written."""
    g = tables.host_generations
    conn.execute(update(g).where(g.c.host == host).values(spooled=serial))


def _stored(conn: Connection, host: str) -> int | None:
    g = tables.host_generations.c
    query = select(g.generation).where(g.host == host)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    return conn.scalar(query)


def _taken(host: str, stored: int | None, ours: int) -> str:
    return (
        f"host {host}'s lock was taken by another shrdaemon (generation {stored}, this "
        f"daemon's {ours})"
    )
