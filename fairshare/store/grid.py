"""Usage records exchanged between the sites of a grid (seed 001), through PostgreSQL
itself: each site's UDB holds the records it exports (`grid_usage`), and every peer
pulls them over a read-only connection (a role with SELECT on grid_usage and
grid_peers: docs/grid.md), so no site ever writes another's database.

- `export`: inside a write-back's transaction (fairshare.store.published), the
  increments of the mounted leaves it charges become one record, identified by
  (this site's name, the next `grid_usage` serial).  The serial is taken by updating
  one row of `serials`, whose row lock is held to the commit, so records commit in
  serial order and a reader never sees serial n+1 before n.  A write-back the UDB did
  not take is spooled with the rest (fairshare.daemon.spool); its replay exports it in
  its own transaction, once.
- a site keeps its records `RETAIN` seconds (a month) from their usage time: `export`
  deletes older ones every `PRUNE_EVERY` serials.  A peer away longer than that finds
  the serials it missed gone; it says so, once, and goes on from the first one left
  (their usage, a month old, has decayed to nothing at any sane half-life).
- `pull`: a peer's records past the serial last applied from it are added to
  `grid_remote` (per site, policy and node: decayed usage, charges, CPU seconds) and the
  serial recorded, in one transaction that first locks the peer's row, so two hosts of
  one site pulling at once apply each record once.  An unreachable peer is simply
  pulled later: its records wait in its own UDB, which is its spool.
- `remote_usage`: what the scheduler consumes, the other sites' decayed usage of every
  mounted node, keyed by the node's name (groups: the sum of their leaves'); the
  daemon takes it into the policy model at every exchange (fairshare.daemon.grid,
  fairshare.core.steps.exchange_grid), never into a user's own usage.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, delete, func, insert, select, update
from sqlalchemy.exc import DBAPIError

from fairshare.core.consts import decay
from fairshare.core.lnode import WriteBack
from udb import tables
from udb.errors import UdbError
from udb.mounts import source_engine
from udb.session import database_problem, display_name, read_connection, write_connection

log = logging.getLogger("shrdaemon")

#: Serials pulled from a peer per transaction.
PULL_BATCH = 500
#: How long a site keeps the records it exported (s, from their usage time), and how
#: often it deletes older ones (serials).
RETAIN = 30 * 86_400.0
PRUNE_EVERY = 100


class GridError(UdbError):
    """A peer that cannot be pulled, or a grid setting that cannot be made."""


@dataclass(frozen=True)
class Peer:
    """A peer site (udb.tables.grid_peers): its name, its UDB's URL, the last serial
    applied from it, when it was last pulled and the last attempt (epoch s) with why it
    failed (None: it worked)."""

    site: str
    source: str
    applied: int
    pulled: float | None
    tried: float | None
    error: str | None


# -- this site and its peers ---------------------------------------------------------------


def site_name(conn) -> str | None:
    """This site's name (the grid_peers row without a source), None when not set."""
    p = tables.grid_peers.c
    return conn.execute(select(p.site).where(p.source.is_(None))).scalar()


def set_site(conn, name: str) -> None:
    """Name this site `name` (what its usage records carry); GridError when a peer has
    that name, or when records were exported under another name already."""
    p = tables.grid_peers.c
    was = site_name(conn)
    if was == name:
        return
    if conn.execute(select(p.site).where(p.site == name)).first() is not None:
        raise GridError(f"{name} is a peer's name, not free for this site")
    u = tables.grid_usage.c
    if was is not None and conn.execute(select(u.serial).where(u.site == was)).first():
        raise GridError(f"this site exported records as {was}: its peers know it by that name")
    conn.execute(delete(tables.grid_peers).where(p.source.is_(None)))
    conn.execute(insert(tables.grid_peers).values(site=name, source=None, applied=0))


def add_peer(conn, site: str, source: str) -> None:
    """Pull `site`'s records from the UDB at `source` (a URL without a password)."""
    from udb.mounts import check_source

    p = tables.grid_peers.c
    if site == site_name(conn):
        raise GridError(f"{site} is this site's own name")
    check_source(source)
    row = conn.execute(select(p.site).where(p.site == site)).first()
    if row is None:
        conn.execute(insert(tables.grid_peers).values(site=site, source=source, applied=0))
    else:
        conn.execute(update(tables.grid_peers).where(p.site == site).values(source=source))


def remove_peer(conn, site: str) -> None:
    """Stop pulling `site` and forget what was applied of it."""
    p = tables.grid_peers.c
    gone = conn.execute(delete(tables.grid_peers).where(p.site == site, p.source.isnot(None)))
    if gone.rowcount == 0:
        raise GridError(f"no peer named {site}")
    conn.execute(delete(tables.grid_remote).where(tables.grid_remote.c.site == site))


def peers(conn) -> list[Peer]:
    """The peers, by name."""
    p = tables.grid_peers.c
    query = select(p.site, p.source, p.applied, p.pulled, p.tried, p.error)
    return [Peer(*r) for r in conn.execute(query.where(p.source.isnot(None)).order_by(p.site))]


# -- exporting ------------------------------------------------------------------------------


def export(conn: Connection, released: Sequence[tuple[int, WriteBack]]) -> int:
    """Record the increments of the mounted leaves among `released` (by uid) as one usage
    record of this site, in the caller's write-back transaction; returns its serial (0:
    no site name, or no mounted leaf charged)."""
    if not released:
        return 0
    e, m = tables.entries.c, tables.grid_mounts.c
    if conn.execute(select(m.entry).limit(1)).first() is None:
        return 0  # no mount: one cheap read per write-back, nothing to export
    site = site_name(conn)
    if site is None:
        return 0
    # The mounted entries, far fewer than a write-back's uids at most sites: filtered here.
    leaves = {
        r.uid: (r.policy, r.name)
        for r in conn.execute(
            select(e.uid, e.name, m.policy)
            .join(tables.grid_mounts, m.entry == e.mount)
            .where(e.mount != 0)
        )
    }
    if not any(uid in leaves for uid, _wb in released):
        return 0
    sums: dict[tuple[str, str], list[float]] = {}
    for uid, wb in released:
        key = leaves.get(uid)
        if key is None:
            continue
        # Two increments of one leaf in one record: the usage aged to the later time is
        # the store's (fairshare.daemon.writeback.merge_into merged them already).
        row = sums.setdefault(key, [0.0, wb.shextime, 0.0, 0.0])
        row[0] += wb.shusage
        row[1] = max(row[1], wb.shextime)
        row[2] += wb.charge
        row[3] += wb.cpu_seconds
    serial = _next_serial(conn)
    rows = [
        {"site": site, "serial": serial, "policy": policy, "node": node, "usage": u,
         "time": t, "charge": ch, "cpu_seconds": cpu}
        for (policy, node), (u, t, ch, cpu) in sorted(sums.items())
    ]  # fmt: skip
    conn.execute(insert(tables.grid_usage), rows)
    if serial % PRUNE_EVERY == 0:
        u = tables.grid_usage.c
        old = max(row["time"] for row in rows) - RETAIN
        conn.execute(delete(tables.grid_usage).where(u.site == site, u.time < old))
    return serial


def _next_serial(conn: Connection) -> int:
    """The next record serial; the serials row stays locked until the caller commits."""
    s = tables.serials.c
    conn.execute(update(tables.serials).where(s.name == "grid_usage").values(value=s.value + 1))
    return int(conn.execute(select(s.value).where(s.name == "grid_usage")).scalar_one())


# -- pulling --------------------------------------------------------------------------------


def pull(engine: Engine, peer: Peer, now: float, halflife: float) -> int:
    """Apply `peer`'s records not applied yet (see the module docstring); returns how
    many records (serials) were applied.  GridError when the peer cannot be read, or
    its UDB names itself otherwise (nothing applied; recorded in `error`)."""
    applied = 0
    try:
        while True:
            first = _applied(engine, peer.site)
            rows = _read_records(peer, first)
            if not rows:
                break
            applied += _apply(engine, peer.site, rows, halflife)
            if len({r.serial for r in rows}) < PULL_BATCH:
                break
    except GridError as err:
        with write_connection(engine) as conn:
            _record(conn, peer.site, tried=now, error=str(err))
        raise
    with write_connection(engine) as conn:
        _record(conn, peer.site, tried=now, pulled=now, error=None)
    return applied


def _applied(engine: Engine, site: str) -> int:
    p = tables.grid_peers.c
    with read_connection(engine) as conn:
        return int(conn.execute(select(p.applied).where(p.site == site)).scalar() or 0)


def _read_records(peer: Peer, after: int) -> list:
    """The peer's own records past serial `after`, PULL_BATCH serials at most, from the
    first one it still keeps (one it pruned since is gone: said once)."""
    u, p = tables.grid_usage.c, tables.grid_peers.c
    try:
        with source_engine(peer.source).connect() as conn:
            named = conn.execute(select(p.site).where(p.source.is_(None))).scalar()
            if named != peer.site:
                raise GridError(
                    f"peer {peer.site}: {display_name(peer.source)} is site {named or '(unnamed)'}"
                )
            mine = u.site == peer.site
            first = conn.execute(select(func.min(u.serial)).where(mine, u.serial > after)).scalar()
            if first is None:
                return []
            if first > after + 1:
                log.warning(
                    "grid: peer %s no longer keeps its records %d to %d (older than %d days): "
                    "their usage is not applied here",
                    peer.site, after + 1, first - 1, RETAIN // 86_400,
                )  # fmt: skip
            return conn.execute(
                select(u.serial, u.policy, u.node, u.usage, u.time, u.charge, u.cpu_seconds)
                .where(mine, u.serial >= first, u.serial < first + PULL_BATCH)
                .order_by(u.serial)
            ).all()
    except DBAPIError as err:
        raise GridError(
            f"peer {peer.site}: {display_name(peer.source)}: {database_problem(err)}"
        ) from None
    except UdbError as err:
        if isinstance(err, GridError):
            raise
        raise GridError(f"peer {peer.site}: {err}") from None


def _apply(engine: Engine, site: str, rows: Sequence, halflife: float) -> int:
    """Add the records `rows` of `site` past the serial applied (read again under the
    peer row's lock) to grid_remote, and record the last serial; returns how many
    serials were applied."""
    p, r = tables.grid_peers.c, tables.grid_remote.c
    with write_connection(engine) as conn:
        query = select(p.applied).where(p.site == site)
        if conn.dialect.name == "postgresql":
            query = query.with_for_update()
        applied = conn.execute(query).scalar()
        if applied is None:  # the peer was removed meanwhile
            return 0
        fresh = [row for row in rows if row.serial > applied]
        if not fresh:
            return 0
        have = {
            (x.policy, x.node): x
            for x in conn.execute(select(tables.grid_remote).where(r.site == site))
        }
        for row in fresh:
            _add(conn, site, have, row, halflife)
        last = max(row.serial for row in fresh)
        conn.execute(update(tables.grid_peers).where(p.site == site).values(applied=last))
        return len({row.serial for row in fresh})


def _add(conn, site: str, have: dict, row, halflife: float) -> None:
    """Add one record row to grid_remote (`have`: its rows by (policy, node), kept up
    to date)."""
    key = (row.policy, row.node)
    was = have.get(key)
    r = tables.grid_remote
    if was is None:
        values = {"usage": row.usage, "time": row.time, "charge": row.charge,
                  "cpu_seconds": row.cpu_seconds, "serial": row.serial}  # fmt: skip
        conn.execute(insert(r).values(site=site, policy=row.policy, node=row.node, **values))
    else:
        late = max(was.time, row.time)
        usage = was.usage * decay(late - was.time, halflife) + row.usage * decay(
            late - row.time, halflife
        )
        values = {
            "usage": usage,
            "time": late,
            "charge": was.charge + row.charge,
            "cpu_seconds": was.cpu_seconds + row.cpu_seconds,
            "serial": row.serial,
        }
        where = (r.c.site == site) & (r.c.policy == row.policy) & (r.c.node == row.node)
        conn.execute(update(r).where(where).values(**values))
    have[key] = _Remote(**values)


@dataclass(frozen=True)
class _Remote:
    usage: float
    time: float
    charge: float
    cpu_seconds: float
    serial: int


def _record(conn, site: str, **values) -> None:
    p = tables.grid_peers
    conn.execute(update(p).where(p.c.site == site).values(**values))


def pull_all(engine: Engine, now: float, halflife: float) -> list[tuple[Peer, str]]:
    """Pull every peer, each on its own; returns each with a line saying what happened."""
    with read_connection(engine) as conn:
        every = peers(conn)
    out = []
    for peer in every:
        try:
            n = pull(engine, peer, now, halflife)
            out.append((peer, f"{n} records applied"))
        except GridError as err:
            out.append((peer, f"not pulled: {err}"))
    return out


# -- what the scheduler consumes ---------------------------------------------------------


def remote_usage(engine: Engine, now: float, halflife: float) -> dict[str, float]:
    """The other sites' usage of every mounted node of this UDB, decayed to `now` (epoch
    s) with `halflife` (s), in charge units, keyed by the local entry's name (which is
    the node's name in the VO's policy).  A leaf's is what its records said; a mounted
    group's and a mount point's the sum of their leaves'.  Empty without peers."""
    r, m, e = tables.grid_remote.c, tables.grid_mounts.c, tables.entries.c
    with read_connection(engine) as conn:
        rows = conn.execute(
            select(e.name, r.usage, r.time)
            .join(tables.grid_mounts, m.policy == r.policy)
            .join(tables.entries, (e.name == r.node) & (e.mount == m.entry))
        ).all()
        if not rows:
            return {}
        parent_of = _mounted_parents(conn)
    out: dict[str, float] = {}
    for name, usage, t in rows:
        u = usage * decay(now - t, halflife)
        node = name
        while node is not None:
            out[node] = out.get(node, 0.0) + u
            node = parent_of.get(node)
    return out


def _mounted_parents(conn) -> Mapping[str, str]:
    """Every mounted entry's parent by name (up to the mount point, which has none)."""
    e = tables.entries.c
    rows = conn.execute(select(e.name, e.uid, e.resgrp, e.mount).where(e.mount != 0)).all()
    points = dict(
        conn.execute(
            select(e.uid, e.name).join(tables.grid_mounts, tables.grid_mounts.c.entry == e.uid)
        ).all()
    )
    names = {r.uid: r.name for r in rows} | points
    return {r.name: names[r.resgrp] for r in rows if r.resgrp in names}
