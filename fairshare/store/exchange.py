"""GLOBALUSAGE's per-cycle site exchange: what every host of a site adds to the site's
view, and the sums every host reads back, in one short transaction a cycle.

Each host's daemon keeps one row of `site_hosts` (udb.tables): its *contribution*, per
uid it has an lnode for or still owes usage to, as of its last cycle: whether it has an
lnode (`present`), whether that lnode wants CPU (`demand`), the usage it accrued and
has not written to the entry yet (`owed`, charge units), the CPU it receives there
(`rate`, CPU s per s) and the CPUs it would use (`want`).  `site_sums` holds the sum of
every row per uid, plus how many rows name the uid (`contributors`).

- `exchange`, every cycle: the host's new contribution replaces its row, and what
  changed (new minus old, per uid) is added to the sums in the same transaction; the
  rows of hosts silent since `live_after` (a daemon killed, a host cut off) are
  retracted the same way by whichever host sees them first (SKIP LOCKED: never two).
  Then the sums are read back, joined with the entries' stored usage: one row per uid
  active anywhere on the site, whatever the number of hosts.  The sums are exact
  because every change to them is the difference against the row it changes, in the
  row's own transaction.
- `settle`, in a write-back's transaction: the host's written increments leave its
  row's `owed` (and the sums), as they enter the entries: the site-wide usage (stored
  plus every host's owed) never counts them twice, nor drops them.
- `retract`, at a start (the recovery and the spool's replay, in their transactions:
  what the last daemon owed is written to the entries now) and at a clean stop.
- `site_view_of`: the sums as a `SiteView` of the other hosts over the tree, with the
  site-wide usage of every leaf (its stored usage aged to now plus what every other
  host owes it).

The view is as old as the oldest other host's last cycle: one delta, plus the time
between its exchange and this one's.  PostgreSQL gets one statement per step (arrays
through unnest, the read aggregated into arrays); SQLite, one writer at a time, the same
through plain statements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import Connection, delete, insert, select, text, update

from fairshare.core.consts import decay
from fairshare.core.tree import ShareTree
from udb import tables

if TYPE_CHECKING:  # the daemon's only: the displays that import the store skip the site
    from fairshare.core.site import SiteView

#: The fields of a contribution, in the order of its encoded rows (after the uid).
FIELDS = ("present", "demand", "owed", "rate", "want")
_SUMS = ("contributors", "hosts", "demand", "owed", "rate", "want")


@dataclass
class Contribution:
    """What one host adds to the site's sums: `uid` (sorted, unique) and `values`, one
    row per field of `FIELDS` (present and demand 0 or 1; owed in charge units; rate in
    CPU s per s; want in CPUs), one column per uid."""

    uid: np.ndarray
    values: np.ndarray

    @classmethod
    def empty(cls) -> Contribution:
        return cls(np.zeros(0, dtype=np.int64), np.zeros((len(FIELDS), 0)))

    @classmethod
    def of(cls, uid, **fields) -> Contribution:
        """A contribution from arrays by field name (missing fields are 0); several
        entries of one uid are summed."""
        uid = np.asarray(uid, dtype=np.int64)
        values = np.array([np.broadcast_to(fields.get(f, 0.0), uid.shape) for f in FIELDS])
        return _summed(uid, values.reshape(len(FIELDS), -1))

    def field(self, name: str) -> np.ndarray:
        return self.values[FIELDS.index(name)]

    def encode(self) -> bytes:
        """The bytes stored in the host's row: uid and fields as little-endian float64."""
        return np.vstack([self.uid.astype("<f8"), self.values]).astype("<f8").tobytes()

    @classmethod
    def decode(cls, blob: bytes | None) -> Contribution:
        if not blob:
            return cls.empty()
        rows = np.frombuffer(blob, dtype="<f8").reshape(1 + len(FIELDS), -1)
        return cls(rows[0].astype(np.int64), rows[1:].astype(float))


def _summed(uid: np.ndarray, values: np.ndarray) -> Contribution:
    """`values` (fields x len(uid)) summed per uid, uids sorted."""
    u, at = np.unique(uid, return_inverse=True)
    out = np.zeros((values.shape[0], len(u)))
    for i in range(values.shape[0]):
        out[i] = np.bincount(at, weights=values[i], minlength=len(u))
    return Contribution(u, out)


def change(old: Contribution, new: Contribution) -> tuple[np.ndarray, np.ndarray]:
    """What replacing `old` by `new` adds to the sums: (uids, one row per column of
    `site_sums`, contributors first), only the uids whose sums change."""
    uid = np.concatenate([old.uid, new.uid])
    ones = np.ones(len(uid))
    ones[: len(old.uid)] = -1.0
    values = np.hstack([-old.values, new.values])
    d = _summed(uid, np.vstack([ones, values]))
    moved = np.any(d.values != 0.0, axis=0)
    return d.uid[moved], d.values[:, moved]


@dataclass
class SiteSums:
    """The site's sums as read by `exchange`: per uid (sorted) every column of
    `site_sums` (`sums`, one row per column, contributors first) and its entry's stored
    usage (`shusage`, charge units, as of `shextime`, epoch s; 0 without an entry);
    `host_cpus`: the other live hosts' CPUs; `oldest`: the time of the oldest other
    live host's contribution (epoch s; None without one)."""

    uid: np.ndarray
    sums: np.ndarray
    shusage: np.ndarray
    shextime: np.ndarray
    host_cpus: dict[str, float] = field(default_factory=dict)
    oldest: float | None = None

    def column(self, name: str) -> np.ndarray:
        return self.sums[_SUMS.index(name)]


def exchange(
    conn: Connection, host: str, now: float, cpus: float, mine: Contribution, live_after: float
) -> SiteSums:
    """In the caller's write transaction: `mine` (as of `now`, epoch s, from a host of
    `cpus` CPUs) replaces `host`'s contribution, the hosts silent since `live_after`
    (epoch s) are retracted, and the site's sums are returned."""
    hosts = tables.site_hosts.c
    heads = conn.execute(select(hosts.host, hosts.time, hosts.cpus)).all()
    stale = sorted(h for h, t, _c in heads if h != host and t < live_after)
    if stale:
        query = select(hosts.host, hosts.columnar).where(
            hosts.host.in_(stale), hosts.time < live_after
        )
        for other, blob in conn.execute(query.with_for_update(skip_locked=True)).all():
            _replace(conn, other, Contribution.decode(blob), None)
    _replace(conn, host, _own(conn, host), mine, now, cpus)
    live = [(h, t, c) for h, t, c in heads if h != host and t >= live_after]
    sums = _read_sums(conn)
    sums.host_cpus = {h: float(c) for h, _t, c in live}
    sums.oldest = min((t for _h, t, _c in live), default=None)
    return sums


def settle(conn: Connection, host: str, uids) -> None:
    """In a write-back's transaction: `host`'s owed usage of `uids` is in their entries
    now, so it leaves the host's row and the sums."""
    old = _own(conn, host)
    if not len(old.uid):
        return
    written = np.isin(old.uid, np.asarray(list(uids), dtype=np.int64))
    values = old.values.copy()
    values[FIELDS.index("owed")][written] = 0.0
    keep = np.any(values != 0.0, axis=0)
    _replace(conn, host, old, Contribution(old.uid[keep], values[:, keep]))


def retract(conn: Connection, host: str) -> None:
    """In the caller's transaction: `host`'s contribution leaves the sums, its row goes."""
    old = _own(conn, host)
    if len(old.uid):
        _replace(conn, host, old, None)
    else:
        conn.execute(delete(tables.site_hosts).where(tables.site_hosts.c.host == host))


def _own(conn: Connection, host: str) -> Contribution:
    """`host`'s stored contribution, its row locked until the transaction ends."""
    hosts = tables.site_hosts.c
    query = select(hosts.columnar).where(hosts.host == host).with_for_update()
    return Contribution.decode(conn.scalar(query))


def _replace(
    conn: Connection,
    host: str,
    old: Contribution,
    new: Contribution | None,
    now: float | None = None,
    cpus: float | None = None,
) -> None:
    """Replace `host`'s row `old` by `new` (None: delete it) and add the difference to
    the sums; `now` and `cpus` stamp the row (None: kept)."""
    uid, values = change(old, new or Contribution.empty())
    if len(uid):
        _add_to_sums(conn, uid, values)
    table = tables.site_hosts
    if new is None:
        conn.execute(delete(table).where(table.c.host == host))
        return
    row = {"columnar": new.encode()}
    if now is not None:
        row |= {"time": now, "cpus": cpus}
    done = conn.execute(update(table).where(table.c.host == host).values(**row))
    if done.rowcount == 0:
        conn.execute(insert(table).values(host=host, **row))


#: contributors and hosts and demand are counts; a row no host contributes to any more
#: is reset to exact zeros (no rounding left over from the floats' sums).
_PG_ADD = text(
    "INSERT INTO site_sums AS s (uid, contributors, hosts, demand, owed, rate, want) "
    "SELECT * FROM unnest(CAST(:uid AS bigint[]), CAST(:contributors AS int[]), "
    "CAST(:hosts AS int[]), CAST(:demand AS int[]), CAST(:owed AS float8[]), "
    "CAST(:rate AS float8[]), CAST(:want AS float8[])) "
    "ON CONFLICT (uid) DO UPDATE SET contributors = s.contributors + excluded.contributors, "
    "hosts = s.hosts + excluded.hosts, demand = s.demand + excluded.demand, "
    "owed = CASE WHEN s.contributors + excluded.contributors > 0 "
    "THEN s.owed + excluded.owed ELSE 0 END, "
    "rate = CASE WHEN s.contributors + excluded.contributors > 0 "
    "THEN s.rate + excluded.rate ELSE 0 END, "
    "want = CASE WHEN s.contributors + excluded.contributors > 0 "
    "THEN s.want + excluded.want ELSE 0 END"
)


def _add_to_sums(conn: Connection, uid: np.ndarray, values: np.ndarray) -> None:
    """Add `values` (a row per column of site_sums, contributors first) to the sums of
    `uid` (sorted: concurrent hosts lock the rows in one order and never deadlock)."""
    counts = np.rint(values[:3]).astype(np.int64).tolist()
    params = {"uid": uid.tolist(), **dict(zip(_SUMS[:3], counts, strict=True))}
    params |= dict(zip(_SUMS[3:], values[3:].tolist(), strict=True))
    if conn.dialect.name == "postgresql":
        conn.execute(_PG_ADD, params)
        return
    from sqlalchemy.dialects.sqlite import insert as upsert  # SQLite: one writer at a time

    s = tables.site_sums
    stmt = upsert(s)
    alive = s.c.contributors + stmt.excluded.contributors > 0
    stmt = stmt.on_conflict_do_update(
        index_elements=[s.c.uid],
        set_={
            name: (
                s.c[name] + stmt.excluded[name]
                if i < 3
                else _if(alive, s.c[name] + stmt.excluded[name])
            )
            for i, name in enumerate(_SUMS)
        },
    )
    rows = [dict(zip(("uid", *_SUMS), r, strict=True)) for r in zip(*params.values(), strict=True)]
    conn.execute(stmt, rows)


def _if(condition, value):
    from sqlalchemy import case

    return case((condition, value), else_=0.0)


_PG_READ = text(
    "SELECT array_agg(s.uid ORDER BY s.uid), array_agg(s.contributors ORDER BY s.uid), "
    "array_agg(s.hosts ORDER BY s.uid), array_agg(s.demand ORDER BY s.uid), "
    "array_agg(s.owed ORDER BY s.uid), array_agg(s.rate ORDER BY s.uid), "
    "array_agg(s.want ORDER BY s.uid), array_agg(coalesce(e.shusage, 0) ORDER BY s.uid), "
    "array_agg(coalesce(e.shextime, 0) ORDER BY s.uid) "
    "FROM site_sums s LEFT JOIN entries e ON e.uid = s.uid WHERE s.contributors > 0"
)


def _read_sums(conn: Connection) -> SiteSums:
    """Every uid some host contributes to, with its sums and its entry's stored usage."""
    if conn.dialect.name == "postgresql":  # one row of arrays: no row object per uid
        cols = conn.execute(_PG_READ).one()
        if cols[0] is None:
            cols = [[]] * len(cols)
    else:
        s, e = tables.site_sums.c, tables.entries.c
        query = (
            select(*(s[c] for c in ("uid", *_SUMS)), e.shusage, e.shextime)
            .outerjoin(tables.entries, e.uid == s.uid)
            .where(s.contributors > 0)
            .order_by(s.uid)
        )
        rows = conn.execute(query).all()
        cols = list(zip(*rows, strict=True)) if rows else [[]] * (3 + len(_SUMS))
    uid = np.array(cols[0], dtype=np.int64)
    sums = np.array(cols[1 : 1 + len(_SUMS)], dtype=float).reshape(len(_SUMS), len(uid))
    stored = np.nan_to_num(np.array(cols[1 + len(_SUMS) :], dtype=float)).reshape(2, len(uid))
    return SiteSums(uid, sums, stored[0], stored[1])


def site_view_of(
    tree: ShareTree, sums: SiteSums, mine: Contribution, now: float, halflife: float
) -> tuple[SiteView, np.ndarray]:
    """The other hosts as `sums` hold them once `mine` (this host's contribution) is
    taken out: (their `SiteView` over `tree`'s nodes, every leaf's site-wide usage but
    what this host owes: its entry's stored usage aged to `now` with the node's
    half-life, or `halflife` s, plus what the other hosts owe it; charge units)."""
    from fairshare.core.site import SiteView

    n = tree.size
    others = np.zeros((len(_SUMS), n))
    nodes = nodes_of(tree, sums.uid)
    ok = nodes >= 0
    np.add.at(others.T, nodes[ok], sums.sums[:, ok].T)
    own = nodes_of(tree, mine.uid)
    has = own >= 0
    np.subtract.at(others[1:].T, own[has], mine.values[:, has].T)
    others = np.maximum(others, 0.0)
    usage = np.zeros(n)
    hl = tree.halflives(halflife)[nodes[ok]] if tree.own_halflives else halflife
    usage[nodes[ok]] = sums.shusage[ok] * decay(now - sums.shextime[ok], hl)
    usage += others[_SUMS.index("owed")]
    hosts = others[_SUMS.index("demand")]
    view = SiteView(
        active=others[_SUMS.index("hosts")] > 0.5,
        demand=hosts > 0.5,
        hosts=np.rint(hosts).astype(np.int64),
        rate=others[_SUMS.index("rate")],
        usage=np.zeros(n),
        want=others[_SUMS.index("want")],
        host_cpus=dict(sums.host_cpus),
    )
    view.usage = usage * view.active
    return view, usage


def nodes_of(tree: ShareTree, uids: np.ndarray) -> np.ndarray:
    """The leaf node of `tree` for each uid (acid in Share by Account), -1 for none."""
    leaves = np.flatnonzero(tree.leaf_mask)
    order = np.argsort(tree.ids[leaves], kind="stable")
    ids, nodes = tree.ids[leaves][order], leaves[order]
    if not len(ids):
        return np.full(len(uids), -1)
    at = np.clip(np.searchsorted(ids, uids), 0, len(ids) - 1)
    return np.where(ids[at] == uids, nodes[at], -1)
