"""GLOBALUSAGE's per-cycle site exchange: what every host of a site tells the others,
and what it reads back, in one short transaction a cycle.

Each host's daemon keeps one row of `site_hosts` (udb.tables): its *contribution*, per
uid it has an lnode for or still owes usage to, as of its last cycle: whether it has an
lnode and whether that lnode wants CPU, the usage it accrued and has not written to the
entry yet (`owed`, charge units), the CPU it receives there (`rate`, CPU s per s) and
the CPUs it would use (`want`), packed in 25 bytes a uid.

- `exchange`, every cycle: the host's new contribution replaces its row (no other
  host's row is written, so hosts never wait for each other's locks), then every other
  live host's row is read with the entries' stored usage, in one statement (one
  snapshot: a write-back committing meanwhile is seen in both or in neither).  Each
  host sums the rows itself (`SiteSums.of`): the server only hands out bytes, the
  arithmetic is spread over the hosts.
- `settle`, in a write-back's transaction: the host's written increments leave its
  row's `owed` as they enter the entries, so the site-wide usage (stored plus every
  host's owed) never counts them twice, nor drops them.
- `retract`, at a start (the recovery and the spool's replay, in their transactions:
  what the last daemon owed is in the entries now) and at a clean stop.
- `site_view_of`: the sums as a `SiteView` of the other hosts over the tree, with the
  site-wide usage of every leaf (its stored usage aged to now plus what every other
  host owes it).

A host whose row is older than `live_after` (a daemon killed, a host cut off) is left
out; its row goes when its daemon starts again.  The view is as old as the oldest other
host's last cycle: one delta, plus the time between its exchange and this one's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import Connection, delete, select, text

from fairshare.core.consts import decay
from fairshare.core.tree import ShareTree
from udb import tables

if TYPE_CHECKING:  # the daemon's only: the displays that import the store skip the site
    from fairshare.core.site import SiteView

#: One uid of a host's contribution, as stored: flags bit 0 an lnode there, bit 1 it
#: wants CPU there; owed in charge units; rate in CPU s per s; want in CPUs.
PACKED = np.dtype(
    [("uid", "<i8"), ("flags", "u1"), ("owed", "<f8"), ("rate", "<f4"), ("want", "<f4")]
)
PRESENT, DEMAND = 1, 2


@dataclass
class Contribution:
    """What one host tells the others: one packed record per uid (`PACKED`)."""

    rows: np.ndarray

    @classmethod
    def empty(cls) -> Contribution:
        return cls(np.zeros(0, dtype=PACKED))

    @classmethod
    def of(cls, uid, present=False, demand=False, owed=0.0, rate=0.0, want=0.0) -> Contribution:
        """A contribution from arrays over uids; several entries of one uid are merged
        (present and demand or-ed, the figures summed), uids sorted."""
        uid = np.asarray(uid, dtype=np.int64)
        u, at = np.unique(uid, return_inverse=True)
        rows = np.zeros(len(u), dtype=PACKED)
        rows["uid"] = u
        flags = np.zeros(len(u), dtype=np.uint8)
        np.bitwise_or.at(flags, at, np.where(np.broadcast_to(present, uid.shape), PRESENT, 0))
        np.bitwise_or.at(flags, at, np.where(np.broadcast_to(demand, uid.shape), DEMAND, 0))
        rows["flags"] = flags
        for name, v in (("owed", owed), ("rate", rate), ("want", want)):
            rows[name] = np.bincount(at, weights=np.broadcast_to(v, uid.shape), minlength=len(u))
        return cls(rows)

    def encode(self) -> bytes:
        return self.rows.tobytes()

    @classmethod
    def decode(cls, blob: bytes | None) -> Contribution:
        return cls(np.frombuffer(blob or b"", dtype=PACKED))


@dataclass
class SiteSums:
    """The other live hosts' contributions summed per uid (sorted): on how many hosts it
    has an lnode (`hosts`) and wants CPU (`demand`), and the sums of `owed`, `rate`
    and `want`; its entry's stored usage (`shusage`, charge units, as of `shextime`,
    epoch s; 0 without one); `host_cpus`: the other live hosts' CPUs; `oldest`: the
    time of the oldest one's contribution (epoch s; None without one)."""

    uid: np.ndarray
    hosts: np.ndarray
    demand: np.ndarray
    owed: np.ndarray
    rate: np.ndarray
    want: np.ndarray
    stored_uid: np.ndarray
    shusage: np.ndarray
    shextime: np.ndarray
    host_cpus: dict[str, float] = field(default_factory=dict)
    oldest: float | None = None

    @classmethod
    def of(cls, parts: list[Contribution], stored: tuple, host_cpus, oldest) -> SiteSums:
        """The sums of `parts`, with the entries' stored usage `stored` (uids, shusage,
        shextime)."""
        rows = np.concatenate([p.rows for p in parts]) if parts else Contribution.empty().rows
        u, at = np.unique(rows["uid"], return_inverse=True)
        n = len(u)

        def total(values) -> np.ndarray:
            return np.bincount(at, weights=values, minlength=n)

        flags = rows["flags"]
        uid_s, shusage, shextime = (np.asarray(c, dtype=float) for c in stored)
        return cls(
            u,
            total((flags & PRESENT) > 0),
            total((flags & DEMAND) > 0),
            total(rows["owed"]),
            total(rows["rate"].astype(float)),
            total(rows["want"].astype(float)),
            uid_s.astype(np.int64),
            np.nan_to_num(shusage),
            np.nan_to_num(shextime),
            dict(host_cpus),
            oldest,
        )


def exchange(
    conn: Connection,
    host: str,
    now: float,
    cpus: float,
    mine: Contribution,
    live_after: float,
    stored_of: list[int] | None = None,
) -> SiteSums:
    """In the caller's write transaction: `mine` (as of `now`, epoch s, from a host of
    `cpus` CPUs) replaces `host`'s contribution; returns the sums of the other hosts
    that exchanged since `live_after` (epoch s), with the stored usage of the entries
    of `stored_of` (uids; None: every entry that has some)."""
    _upsert(conn, host, {"time": now, "cpus": cpus, "columnar": mine.encode()})
    params = {"me": host, "live_after": live_after}
    if conn.dialect.name == "postgresql":
        if stored_of is None:
            rows = conn.execute(_PG_READ, params).all()
        else:
            rows = conn.execute(_PG_READ_OF, params | {"uids": stored_of}).all()
        others = [r for r in rows if r.host is not None]
        stored = next((r.uid, r.shusage, r.shextime) for r in rows if r.host is None)
        stored = tuple(c or [] for c in stored)
    else:  # SQLite: the write transaction is one snapshot already
        h, e = tables.site_hosts.c, tables.entries.c
        live = (h.host != host) & (h.time >= live_after)
        others = conn.execute(select(h.host, h.time, h.cpus, h.columnar).where(live)).all()
        which = e.shusage > 0
        if stored_of is not None:
            which = which & e.uid.in_(stored_of)
        got = conn.execute(select(e.uid, e.shusage, e.shextime).where(which)).all()
        stored = tuple(zip(*got, strict=True)) if got else ((), (), ())
    parts = [Contribution.decode(r.columnar) for r in others]
    cpus_of = {r.host: float(r.cpus) for r in others}
    oldest = min((float(r.time) for r in others), default=None)
    return SiteSums.of(parts, stored, cpus_of, oldest)


#: The other live hosts' rows and the entries' stored usage in one statement: one
#: snapshot under READ COMMITTED, and one round trip.
_PG_READ = text(
    "SELECT host, time, cpus, columnar, NULL::bigint[] AS uid, NULL::float8[] AS shusage, "
    "NULL::float8[] AS shextime FROM site_hosts WHERE host <> :me AND time >= :live_after "
    "UNION ALL SELECT NULL, NULL, NULL, NULL, array_agg(uid::bigint), array_agg(shusage), "
    "array_agg(shextime) FROM entries WHERE shusage > 0"
)
_PG_READ_OF = text(_PG_READ.text + " AND uid = ANY(CAST(:uids AS int[]))")


def _upsert(conn: Connection, host: str, row: dict) -> None:
    """Insert or replace `host`'s row with `row`, in one statement."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    stmt = insert(tables.site_hosts).values(host=host, **row)
    conn.execute(stmt.on_conflict_do_update(index_elements=["host"], set_=row))


def settle(conn: Connection, host: str, uids) -> None:
    """In a write-back's transaction: `host`'s owed usage of `uids` is in their entries
    now, so it leaves the host's row."""
    h = tables.site_hosts.c
    blob = conn.scalar(select(h.columnar).where(h.host == host).with_for_update())
    if blob is None:
        return
    rows = Contribution.decode(blob).rows.copy()
    rows["owed"][np.isin(rows["uid"], np.fromiter(uids, dtype=np.int64))] = 0.0
    keep = ((rows["flags"] & PRESENT) > 0) | (rows["owed"] != 0.0)
    conn.execute(
        tables.site_hosts.update().where(h.host == host).values(columnar=rows[keep].tobytes())
    )


def retract(conn: Connection, host: str) -> None:
    """In the caller's transaction: `host`'s contribution goes."""
    conn.execute(delete(tables.site_hosts).where(tables.site_hosts.c.host == host))


def site_view_of(
    tree: ShareTree, sums: SiteSums, now: float, halflife: float
) -> tuple[SiteView, np.ndarray]:
    """The other hosts as `sums` hold them: (their `SiteView` over `tree`'s nodes, every
    leaf's site-wide usage but what this host owes: its entry's stored usage aged to
    `now` with the node's half-life, or `halflife` s, plus what the other hosts owe it;
    charge units)."""
    from fairshare.core.site import SiteView

    n = tree.size
    usage = np.zeros(n)
    at = nodes_of(tree, sums.stored_uid)
    ok = at >= 0
    hl = tree.halflives(halflife)[at[ok]] if tree.own_halflives else halflife
    usage[at[ok]] = sums.shusage[ok] * decay(now - sums.shextime[ok], hl)
    nodes = nodes_of(tree, sums.uid)
    ok = nodes >= 0

    def over_nodes(values: np.ndarray) -> np.ndarray:
        out = np.zeros(n)
        out[nodes[ok]] = values[ok]
        return out

    usage += np.maximum(over_nodes(sums.owed), 0.0)
    hosts = over_nodes(sums.demand)
    view = SiteView(
        active=over_nodes(sums.hosts) > 0,
        demand=hosts > 0,
        hosts=np.rint(hosts).astype(np.int64),
        rate=over_nodes(sums.rate),
        usage=np.zeros(n),
        want=over_nodes(sums.want),
        host_cpus=dict(sums.host_cpus),
    )
    view.usage = usage * view.active
    return view, usage


def nodes_of(tree: ShareTree, uids: np.ndarray) -> np.ndarray:
    """The leaf node of `tree` for each uid (acid in Share by Account), -1 for none."""
    leaves = np.flatnonzero(tree.leaf_mask)
    order = np.argsort(tree.ids[leaves], kind="stable")
    ids, nodes = tree.ids[leaves][order], leaves[order]
    if not len(ids) or not len(uids):
        return np.full(len(uids), -1)
    at = np.clip(np.searchsorted(ids, uids), 0, len(ids) - 1)
    return np.where(ids[at] == uids, nodes[at], -1)
