"""The UDB reads and writes the pure core needs: the constants, their history and
schedules, and the share tree's rows.

fairshare.core computes; it imports no SQLAlchemy.  Every command and the daemon read
the constants (`load_consts`, `load_effective_consts` with the schedule in force) and
the share tree (`load_tree`, `tree_rows`) through this module, within the caller's
session, so they all agree on one stored state.  The lnode table's own tables (published rows,
checkpoint) are `fairshare.store.published`'s.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Row, case, insert, literal, select, update

from fairshare.core.consts import FIELDS, Consts, consts_from_stored, validate
from fairshare.core.schedule import effective_consts
from fairshare.core.tree import ShareTree, TreeRow, build_tree, build_tree_columns
from udb import tables
from udb.session import core, mark_consts_changed

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

_entry = tables.entries.c
_const = tables.consts.c
_schedule = tables.schedules.c
_change = tables.const_changes.c
#: An entry's usage scope as the tree takes it: its own, except that a grid's mount
#: point (udb.mounts) whose administrator set none is global, so a VO's mounted projects
#: divide the VO's share by what they used at every site (seed 001; docs/grid.md).
_SCOPE = case(
    (
        (_entry.scope == "") & _entry.uid.in_(select(tables.grid_mounts.c.entry)),
        literal("global"),
    ),
    else_=_entry.scope,
).label("scope")
#: The entry columns a tree is built from; `select(*TREE_COLUMNS)` gives rows for `build_tree`.
TREE_COLUMNS = (
    _entry.name, _entry.uid, _entry.resgrp, _entry.shares, _entry.shflags, _entry.halflife,
    _SCOPE, _entry.pooled,
)  # fmt: skip


def load_consts(session: Session | Connection) -> Consts:
    """The constants stored in the UDB (defaults for absent rows; unknown rows and values
    out of range ignored, see `consts_from_stored`)."""
    rows = session.execute(select(_const.name, _const.value)).all()
    stored = {name: value for name, value in rows if name in FIELDS and value is not None}
    return consts_from_stored(stored)


def save_consts(session: Session, consts: Consts) -> None:
    """Store every constant of `consts` in the UDB (within the caller's transaction) and
    bump the constants' change serial, so a running daemon reads them again."""
    validate(consts)
    existing = dict(session.execute(select(_const.name, _const.value)).all())
    for name in FIELDS:
        value = getattr(consts, name)
        if isinstance(value, tuple):
            value = list(value)
        if name not in existing:
            session.execute(insert(tables.consts).values(name=name, value=value))
        elif existing[name] != value:
            session.execute(update(tables.consts).where(_const.name == name).values(value=value))
    mark_consts_changed(session)


def tree_rows(session: Session | Connection) -> list[TreeRow]:
    """Every entry's TREE_COLUMNS, for `build_tree`."""
    return session.execute(select(*TREE_COLUMNS)).all()


def load_tree(session: Session | Connection, mode: str | None = None) -> ShareTree:
    """The UDB's share tree in `mode` (None: the mode the constants say, SHAREBYACCT or
    not), built column-wise from Core rows (no ORM objects)."""
    if mode is None:
        mode = load_consts(session).mode
    rows = core(session).execute(select(*TREE_COLUMNS)).all()
    if not rows:
        return build_tree([], mode)
    *cols, halflives, scopes, pooled = zip(*rows, strict=True)
    return build_tree_columns(*cols, mode=mode, halflives=halflives, scopes=scopes, pooled=pooled)


def history(session: Session | Connection, limit: int | None = None) -> list[Row]:
    """Recorded changes (rows of udb.tables.const_changes), oldest first (the last
    `limit` when given)."""
    query = select(tables.const_changes).order_by(_change.id.desc())
    if limit:
        query = query.limit(limit)
    return list(reversed(session.execute(query).all()))


def schedules(session: Session | Connection) -> list[Row]:
    """Every schedule (rows of udb.tables.schedules), by name (the order in which they
    are tried)."""
    return list(session.execute(select(tables.schedules).order_by(_schedule.name)))


def load_effective_consts(session: Session | Connection, when: datetime) -> tuple[Consts, str]:
    """The stored constants with the schedule in force at `when` applied, and its name."""
    return effective_consts(load_consts(session), schedules(session), when)
