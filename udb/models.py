"""The UDB's tables (udb.tables) as SQLAlchemy ORM classes, for the commands that edit
entries and settings as objects (udbgen, shrdist, newacct, shradmin...).

An `Entry` is one UDB entry, `Account` the account registry, `Const` one scheduling
constant; `LnodeCycle`, `PublishedLnode` and `LnodeCheckpoint` are shrdaemon's,
`ConstChange` and `Schedule` shradmin's, `ShareChange` shrdist's, `SyncRequest`
shrsync's and `Serial` the change counters: each class's table says what its columns
hold.  The displays and the daemon's reads use the tables themselves, without the ORM,
so this module (and SQLAlchemy's ORM with it) is imported only by the code that
handles entries and settings as objects (udbgen, udbsee, shradmin, shrdist...).
"""

from __future__ import annotations

from sqlalchemy.orm import DeclarativeBase, deferred

from udb import tables

# The flags, bounds and reserved uids are udb.rules' (pure); re-exported here beside the
# tables whose fields they bound.
from udb.rules import IDLE_UID, MAX_EPOCH, MAX_ID, MAX_SHARES, ROOT_UID, SHF_ACCOUNT, SHF_GROUP  # noqa: F401


class Base(DeclarativeBase):
    metadata = tables.metadata


class Entry(Base):
    """One UDB entry (a user, a resource group or a shareholder)."""

    __table__ = tables.entries

    @property
    def is_group(self) -> bool:
        return bool(self.shflags & SHF_GROUP)

    @property
    def is_account(self) -> bool:
        return bool(self.shflags & SHF_ACCOUNT)

    def __repr__(self) -> str:
        return f"Entry(name={self.name!r}, uid={self.uid}, resgrp={self.resgrp})"


class Account(Base):
    """The account registry (/etc/acid): account number <-> name."""

    __table__ = tables.accounts


class Const(Base):
    """One fair-share constant (sh_consts); absent rows mean the default."""

    __table__ = tables.consts


class LnodeCycle(Base):
    """The header of the lnode table a shrdaemon published (one row per host)."""

    __table__ = tables.lnode_cycles

    columnar = deferred(tables.lnode_cycles.c.columnar)  # read only by displays


class PublishedLnode(Base):
    """One active lnode as the daemon's last cycle left it."""

    __table__ = tables.lnodes


class LnodeCheckpoint(Base):
    """An active leaf lnode as last checkpointed."""

    __table__ = tables.lnode_checkpoints


class ConstChange(Base):
    """One change shradmin made to a constant."""

    __table__ = tables.const_changes


class Schedule(Base):
    """A named time-of-day settings set (shradmin's schedules)."""

    __table__ = tables.schedules


class ShareChange(Base):
    """One member's shares changed by shrdist."""

    __table__ = tables.share_changes


class SyncRequest(Base):
    """A shrsync request to the shrdaemon of `host`."""

    __table__ = tables.sync_requests


class Serial(Base):
    """A change counter (fairshare.daemon.reload.poll)."""

    __table__ = tables.serials
