"""The UDB's tables (udb.tables) as SQLAlchemy ORM classes, for the commands that edit
entries and settings as objects (udbgen, shrdist, newacct, shradmin...).

An `Entry` is one UDB entry, `Account` the account registry, `Const` one scheduling
constant; `LnodeCycle`, `PublishedLnode` and `LnodeCheckpoint` are shrdaemon's,
`ConstChange` and `Schedule` shradmin's, `ShareChange` shrdist's, `SyncRequest`
shrsync's and `Serial` the change counters: each class's table says what its columns
hold.  Reading needs no ORM: the displays and the daemon's cycle use the tables
themselves, so this module (and SQLAlchemy's ORM with it) is imported only by code
that writes objects.
"""

from __future__ import annotations

from sqlalchemy.orm import DeclarativeBase, Mapped, deferred

from udb import tables

# The flags, bounds and reserved uids are udb.rules' (pure); re-exported here beside the
# tables whose fields they bound.
from udb.rules import IDLE_UID, MAX_EPOCH, MAX_ID, MAX_SHARES, ROOT_UID, SHF_ACCOUNT, SHF_GROUP  # noqa: F401


class Base(DeclarativeBase):
    metadata = tables.metadata


class Entry(Base):
    """One UDB entry (a user, a resource group or a shareholder)."""

    __table__ = tables.entries

    id: Mapped[int]
    name: Mapped[str]
    uid: Mapped[int]
    gids: Mapped[list[int]]
    acids: Mapped[list[int]]
    resgrp: Mapped[int]
    shares: Mapped[int]
    shflags: Mapped[int]
    shusage: Mapped[float]
    shcharge: Mapped[float]
    shextime: Mapped[float]
    cpuquota: Mapped[float]
    cpuquotaused: Mapped[float]
    nice: Mapped[int]
    passwd: Mapped[str]
    comment: Mapped[str]

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

    acid: Mapped[int]
    name: Mapped[str]


class Const(Base):
    """One fair-share constant (sh_consts); absent rows mean the default."""

    __table__ = tables.consts

    name: Mapped[str]
    value: Mapped[object]


class LnodeCycle(Base):
    """The header of the lnode table a shrdaemon published (one row per host)."""

    __table__ = tables.lnode_cycles

    host: Mapped[str]
    time: Mapped[float]
    delta: Mapped[float]
    enforcer: Mapped[str]
    pid: Mapped[int]
    cycle: Mapped[int]
    mode: Mapped[str]
    started: Mapped[float]
    running: Mapped[bool]
    stopped: Mapped[float | None]
    counts: Mapped[dict | None]
    cpus: Mapped[float | None]
    delivered: Mapped[float | None]
    columnar = deferred(tables.lnode_cycles.c.columnar)  # read only by displays


class PublishedLnode(Base):
    """One active lnode as the daemon's last cycle left it."""

    __table__ = tables.lnodes

    host: Mapped[str]
    node: Mapped[int]
    name: Mapped[str]
    uid: Mapped[int]
    kind: Mapped[str]
    parent: Mapped[int]
    level: Mapped[int]
    shares: Mapped[float]
    refs: Mapped[int]
    nrun: Mapped[int]
    usage: Mapped[float]
    stored: Mapped[float | None]
    charge: Mapped[float]
    cpu_seconds: Mapped[float]
    rate: Mapped[float]
    m_share: Mapped[float]
    e_share: Mapped[float]
    cpu: Mapped[float]
    adj: Mapped[float]
    priority: Mapped[float]
    background: Mapped[bool]
    demand: Mapped[bool]
    due: Mapped[float | None]
    pri: Mapped[float | None]


class LnodeCheckpoint(Base):
    """An active leaf lnode as last checkpointed."""

    __table__ = tables.lnode_checkpoints

    host: Mapped[str]
    uid: Mapped[int]
    name: Mapped[str]
    usage: Mapped[float]
    charge: Mapped[float]
    cpu_seconds: Mapped[float]
    time: Mapped[float]


class ConstChange(Base):
    """One change shradmin made to a constant."""

    __table__ = tables.const_changes

    id: Mapped[int]
    time: Mapped[float]
    who: Mapped[str]
    schedule: Mapped[str]
    name: Mapped[str]
    old: Mapped[object]
    new: Mapped[object]


class Schedule(Base):
    """A named time-of-day settings set (shradmin's schedules)."""

    __table__ = tables.schedules

    name: Mapped[str]
    days: Mapped[list[int]]
    hours: Mapped[list[int]]
    settings: Mapped[dict]


class ShareChange(Base):
    """One member's shares changed by shrdist."""

    __table__ = tables.share_changes

    id: Mapped[int]
    time: Mapped[float]
    who: Mapped[str]
    grp: Mapped[str]
    member: Mapped[str]
    old: Mapped[int]
    new: Mapped[int]


class SyncRequest(Base):
    """A shrsync request to the shrdaemon of `host`."""

    __table__ = tables.sync_requests

    id: Mapped[int]
    host: Mapped[str]
    kind: Mapped[str]
    who: Mapped[str]
    requested: Mapped[float]
    done: Mapped[float | None]
    lnodes: Mapped[int | None]


class Serial(Base):
    """A change counter (fairshare.reload.poll)."""

    __table__ = tables.serials

    name: Mapped[str]
    value: Mapped[int]
