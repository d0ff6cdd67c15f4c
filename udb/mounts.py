"""Policy subtrees mounted from elsewhere (seed 001, sections 2-3): a local resource group
whose children are not defined here but copied from a VO's policy.

A VO's allocation authority publishes its policy as a UDB of its own (PostgreSQL,
normally): the VO's group there and everything under it, edited with udbgen and shrdist
as any UDB is.  A site mounts it at one of its own resource groups (the mount point,
which keeps its local shares: the site's share for the VO) with `declare`; `fetch`
reads the source through a read-only connection (a role with SELECT on the entries'
name, uid, resgrp, shares, shflags and halflife columns and on serials: docs/grid.md)
and copies the subtree in, in one transaction:

- every node under the policy's group becomes a local entry with the same name, shares,
  group flag and half-life, `mount` set to the mount point's uid; a user takes the uid
  of the local account of that name (the name service), a group or a user without a
  local account a uid of its own from `GRID_UID_BASE` up (kept across fetches);
- entries the policy no longer has are deleted, changed ones updated, and the entries'
  change serial bumped only when something changed, so the running daemons take the
  new tree with their next cycle's poll;
- a fetch that fails (the source unreachable, the policy's group missing, a name that
  a local entry already has) writes nothing to the entries: the last good version
  stays, and `grid_mounts.error` says why (shrtree shows it).

Mounted entries are read-only here: udbgen and shrdist refuse to change them
(`check_plan`, `refuse_group`), each in one line.  A SQLite UDB may mount a policy
too: the fetch needs only a connection to the source.
"""

from __future__ import annotations

import pwd
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, create_engine, delete, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from udb import tables
from udb.errors import OptionError, UdbError
from udb.rules import MAX_ID, SHF_GROUP
from udb.session import (
    database_problem,
    display_name,
    mark_entries_changed,
    open_readonly,
    read_connection,
    write_session,
)

if TYPE_CHECKING:  # the displays and the daemon's write-back import this module: no ORM
    from sqlalchemy.orm import Session

#: Uids given to mounted groups, and to mounted users without a local account: from
#: here up (far above any account's uid; a site may not use them for its own entries).
GRID_UID_BASE = 2_000_000_000
#: Seconds a fetch waits for the source's server to answer a connection, and a query.
CONNECT_TIMEOUT = 5
STATEMENT_TIMEOUT = 30


class MountError(UdbError):
    """A mount that cannot be declared, a policy that cannot be fetched, or a change to a
    mounted (read-only) entry."""


@dataclass(frozen=True)
class Mount:
    """One mounted policy (udb.tables.grid_mounts) and its mount point's name."""

    entry: int
    name: str
    source: str
    policy: str
    fetched: float | None
    serial: int
    tried: float | None
    error: str | None


@dataclass(frozen=True)
class PolicyNode:
    """One node of a fetched policy: its name, its parent's name (None: a child of the
    policy's group), shares, whether it is a group, and its own half-life (s, 0: none)."""

    name: str
    parent: str | None
    shares: int
    group: bool
    halflife: float


# -- declaring ------------------------------------------------------------------------------


def check_source(source: str) -> str:
    """`source` as a URL to store: MountError for one that does not parse or carries a
    password (which the UDB would then hold for anyone who can read it)."""
    try:
        url = make_url(source)
    except (ArgumentError, ValueError):
        raise MountError(f"cannot parse the source URL {source!r}") from None
    if url.password:
        raise MountError(
            f"{display_name(source)}: the source URL carries a password; keep it in "
            "~/.pgpass (or a libpq service file) instead"
        )
    return source


def declare(session: Session, name: str, source: str, policy: str) -> Mount:
    """Mount `policy` (a group's name at `source`) at the local resource group `name`,
    in the caller's transaction; its children arrive with the next fetch.  MountError
    when `name` is no local group, already a mount point, or has children of its own."""
    e = tables.entries.c
    row = session.execute(select(e.uid, e.shflags, e.mount).where(e.name == name)).first()
    if row is None:
        raise MountError(f"no entry named {name} to mount {policy} at")
    if not row.shflags & SHF_GROUP:
        raise MountError(f"{name} is not a resource group: only a group can be a mount point")
    if row.mount:
        raise MountError(f"{name} is itself mounted (read-only): mount at a local group")
    children = session.execute(select(e.name).where(e.resgrp == row.uid).limit(1)).first()
    if children is not None and not _mount_of(session, row.uid):
        raise MountError(
            f"{name} has local members ({children.name}...): a mount point's members all "
            "come from the policy"
        )
    m = tables.grid_mounts
    session.execute(delete(m).where(m.c.entry == row.uid))
    values = {"entry": row.uid, "source": check_source(source), "policy": policy, "serial": 0}
    session.execute(insert(m).values(**values))
    return Mount(row.uid, name, source, policy, None, 0, None, None)


def undeclare(session: Session, name: str) -> int:
    """Unmount the policy at `name`: its mounted entries are deleted, in the caller's
    transaction; returns how many.  MountError when nothing is mounted there."""
    e = tables.entries.c
    uid = session.execute(select(e.uid).where(e.name == name)).scalar()
    if uid is None or not _mount_of(session, uid):
        raise MountError(f"nothing is mounted at {name}")
    gone = session.execute(delete(tables.entries).where(e.mount == uid)).rowcount
    session.execute(delete(tables.grid_mounts).where(tables.grid_mounts.c.entry == uid))
    mark_entries_changed(session)
    return gone


def _mount_of(session: Session | Connection, uid: int) -> bool:
    m = tables.grid_mounts.c
    return session.execute(select(m.entry).where(m.entry == uid)).first() is not None


def mounts(conn: Session | Connection) -> list[Mount]:
    """Every mounted policy, by mount point name."""
    m, e = tables.grid_mounts.c, tables.entries.c
    rows = conn.execute(
        select(m.entry, e.name, m.source, m.policy, m.fetched, m.serial, m.tried, m.error)
        .join(tables.entries, e.uid == m.entry)
        .order_by(e.name)
    ).all()
    return [Mount(*r) for r in rows]


# -- fetching -------------------------------------------------------------------------------

_sources: dict[str, Engine] = {}


def source_engine(source: str) -> Engine:
    """An engine that reads `source` (cached per URL): SQLite read-only, PostgreSQL with
    a connection timeout."""
    engine = _sources.get(source)
    if engine is None:
        url = make_url(source)
        if url.get_backend_name() == "sqlite":
            engine = open_readonly(source)
        else:
            # A server that stops answering mid-query holds the daemon's cycle no longer
            # than this either.
            args = {
                "connect_timeout": CONNECT_TIMEOUT,
                "options": f"-c statement_timeout={STATEMENT_TIMEOUT * 1000}",
            }
            engine = create_engine(source, pool_pre_ping=True, connect_args=args)
        _sources[source] = engine
    return engine


def read_policy(source: str, policy: str) -> tuple[int, list[PolicyNode]]:
    """The source's entries serial and the nodes under its group `policy`, parents
    before children.  MountError when the source cannot be read or has no such group."""
    e, s = tables.entries.c, tables.serials.c
    try:
        with source_engine(source).connect() as conn:
            serial = conn.execute(select(s.value).where(s.name == "entries")).scalar() or 0
            rows = conn.execute(
                select(e.name, e.uid, e.resgrp, e.shares, e.shflags, e.halflife).order_by(e.name)
            ).all()
    except DBAPIError as err:
        raise MountError(f"{display_name(source)}: {database_problem(err)}") from None
    except UdbError as err:
        raise MountError(str(err)) from None
    by_uid = {r.uid: r for r in rows}
    root = next((r for r in rows if r.name == policy), None)
    if root is None or not root.shflags & SHF_GROUP:
        raise MountError(f"{display_name(source)} has no resource group named {policy}")
    children: dict[int, list] = {}
    for r in rows:
        if r.resgrp in by_uid and r.uid != r.resgrp:
            children.setdefault(r.resgrp, []).append(r)
    out: list[PolicyNode] = []
    stack = [(root.uid, None)]
    while stack:
        uid, parent = stack.pop()
        for r in children.get(uid, ()):
            group = bool(r.shflags & SHF_GROUP)
            out.append(PolicyNode(r.name, parent, int(r.shares), group, float(r.halflife or 0)))
            if group and len(out) <= 1_000_000:
                stack.append((r.uid, r.name))
    return int(serial), out


def fetch(engine: Engine, mount: Mount, now: float) -> int:
    """Fetch `mount`'s policy and copy it in (see the module docstring); returns how many
    entries changed.  On failure nothing but the mount's `tried` and `error` is written
    and MountError says why (the last good version stays)."""
    try:
        serial, nodes = read_policy(mount.source, mount.policy)
        with write_session(engine) as session:
            changed = apply_policy(session, mount, nodes)
            if changed:
                mark_entries_changed(session)
            _record(session, mount.entry, fetched=now, serial=serial, tried=now, error=None)
        return changed
    except MountError as err:
        with write_session(engine) as session:
            _record(session, mount.entry, tried=now, error=str(err))
        raise


def fetch_all(engine: Engine, now: float, names: Iterable[str] = ()) -> list[tuple[Mount, str]]:
    """Fetch every mount (or those at `names`), each in its own transaction; returns each
    mount with a line saying what happened ("3 entries changed", or why it failed)."""
    with read_connection(engine) as conn:
        every = mounts(conn)
    wanted = set(names)
    unknown = wanted - {m.name for m in every}
    if unknown:
        raise MountError(f"nothing is mounted at {', '.join(sorted(unknown))}")
    out = []
    for m in every:
        if wanted and m.name not in wanted:
            continue
        try:
            n = fetch(engine, m, now)
            out.append((m, f"{n} entries changed" if n else "unchanged"))
        except MountError as err:
            out.append((m, f"not fetched, the last good version kept: {err}"))
    return out


def _record(session: Session, entry: int, **values) -> None:
    m = tables.grid_mounts
    session.execute(update(m).where(m.c.entry == entry).values(**values))


def apply_policy(session: Session, mount: Mount, nodes: Sequence[PolicyNode]) -> int:
    """Make the entries mounted at `mount` the policy's `nodes`, in the caller's
    transaction; returns how many entries were created, changed or deleted.
    MountError (nothing written) when a node's name is a local entry's."""
    e = tables.entries.c
    rows = session.execute(select(e.id, e.name, e.uid, e.mount, e.shflags)).all()
    mine = {r.name: r for r in rows if r.mount == mount.entry}
    others = {r.name: r for r in rows if r.mount != mount.entry}
    taken = {r.uid for r in rows}
    clash = next((n.name for n in nodes if n.name in others), None)
    if clash is not None:
        owner = "a local entry" if not others[clash].mount else "another mount's entry"
        raise MountError(f"{mount.name}: {mount.policy}'s {clash} has the name of {owner}")
    uids = {n.name: _uid_for(n, mine.get(n.name), taken) for n in nodes}
    uids[None] = mount.entry  # the policy's group is the mount point
    wanted = {
        n.name: {
            "name": n.name, "uid": uids[n.name], "resgrp": uids[n.parent], "shares": n.shares,
            "shflags": SHF_GROUP if n.group else 0, "halflife": n.halflife, "mount": mount.entry,
        }
        for n in nodes
    }  # fmt: skip
    return _write_mounted(session, mine, wanted)


def _write_mounted(session: Session, mine: dict, wanted: dict[str, dict]) -> int:
    """Delete, update and create the mounted entries `mine` so they are `wanted`."""
    e = tables.entries
    gone = [r.id for name, r in mine.items() if name not in wanted]
    if gone:
        session.execute(delete(e).where(e.c.id.in_(gone)))
    cols = ("uid", "resgrp", "shares", "shflags", "halflife")
    have = {}
    if mine:
        query = select(e.c.name, *(e.c[c] for c in cols)).where(e.c.name.in_(list(mine)))
        have = {r.name: r for r in session.execute(query)}
    changed = len(gone)
    for name, row in wanted.items():
        old = have.get(name)
        if old is None:
            session.execute(insert(e).values(passwd="*", **row))
        elif any(getattr(old, c) != row[c] for c in cols):
            session.execute(update(e).where(e.c.name == name).values(**row))
        else:
            continue
        changed += 1
    return changed


def _uid_for(node: PolicyNode, had, taken: set[int]) -> int:
    """The uid of a mounted node: the one it had (same kind), else for a user its local
    account's, else the first free one from GRID_UID_BASE; `taken` grows with it."""
    if had is not None and bool(had.shflags & SHF_GROUP) == node.group:
        return had.uid
    if not node.group:
        try:
            uid = pwd.getpwnam(node.name).pw_uid
        except KeyError:
            uid = None
        if uid is not None and uid not in taken:
            taken.add(uid)
            return uid
    uid = GRID_UID_BASE
    while uid in taken:
        uid += 1
    if uid > MAX_ID:
        raise MountError(f"no free uid from {GRID_UID_BASE} for {node.name}")
    taken.add(uid)
    return uid


# -- read-only ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadOnly:
    """What udbgen and shrdist may not change: the mounted entries by name (with their
    mount point's name) and the mount points by name (with their source)."""

    mounted: dict[str, str]
    points: dict[str, str]
    uids: frozenset[int]

    def why(self, name: str) -> str | None:
        """Why the entry `name` may not be changed, or None when it may."""
        if name in self.mounted:
            point = self.mounted[name]
            return (
                f"{name} is mounted from {self.points.get(point, '?')} at {point} "
                "(read-only): change it in the VO's policy"
            )
        return None

    def refuse(self, d) -> None:
        """DirectiveError when directive `d` changes a mounted (read-only) entry."""
        why = self.why(d.name)
        if why:
            raise d.error(why)

    def refuse_point(self, d, why: str) -> None:
        """DirectiveError when `d` names a mount point: `why` it may not do that."""
        if d.name in self.points:
            raise d.error(f"{d.name} is a mount point: {why}")

    def refuse_parent(self, d, row: dict, entries: dict[str, dict]) -> None:
        """DirectiveError when `row` (of directive `d`) would join a mounted subtree (its
        members are the policy's); `entries` the run's entries by name."""
        if row["resgrp"] in self.uids:
            name = next((n for n, r in entries.items() if r["uid"] == row["resgrp"]), "")
            raise d.error(
                f"resgrp {name or row['resgrp']} is in a mounted subtree (read-only): its "
                "members come from the VO's policy"
            )

    def check_kept(self, entries: dict[str, dict], original: dict[str, dict]) -> None:
        """OptionError when a replacement run's `entries` leave out a mount point of
        `original`, or move its uid (its mounted entries, which a replacement keeps,
        would hang from nothing)."""
        gone = sorted(
            n for n in self.points if n not in entries or entries[n]["uid"] != original[n]["uid"]
        )
        if gone:
            raise OptionError(
                f"the replacement leaves out the mount point {gone[0]} (or moves its uid): "
                "keep it, or unmount it first (shrgrid --unmount)"
            )


def read_only(conn: Session | Connection) -> ReadOnly:
    """The mounted entries and mount points of the UDB (`ReadOnly`)."""
    e, m = tables.entries.c, tables.grid_mounts.c
    points = {
        r.name: f"{display_name(r.source)} ({r.policy})"
        for r in conn.execute(
            select(e.name, m.source, m.policy).join(tables.grid_mounts, m.entry == e.uid)
        )
    }
    by_uid = dict(conn.execute(select(e.uid, e.name).where(e.uid.in_(_point_uids(conn)))).all())
    rows = conn.execute(select(e.name, e.uid, e.mount).where(e.mount != 0)).all()
    mounted = {r.name: by_uid.get(r.mount, "?") for r in rows}
    uids = frozenset(r.uid for r in rows) | frozenset(by_uid)
    return ReadOnly(mounted, points, uids)


def _point_uids(conn) -> list[int]:
    return list(conn.execute(select(tables.grid_mounts.c.entry)).scalars())
