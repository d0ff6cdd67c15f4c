"""The UDB's tables as SQLAlchemy 2 models.

An `Entry` is one UDB entry: a user, a resource group (shflags 040000) or a
shareholder/account (shflags 01000000).  `Account` is the account registry
(the guide's /etc/acid): account names and their numbers, which the acids
lists refer to.  A shareholder entry's uid is its account number.  `Const` is
one scheduling constant (the guide's sh_consts, set by shradmin): every command
and the daemon read the same values from here (see fairshare.consts).
`LnodeCycle`, `PublishedLnode` and `LnodeCheckpoint` are shrdaemon's: the lnode
table it publishes every cycle for shrview, and its checkpoint (fairshare.store).
`ConstChange` and `Schedule` are shradmin's history and time-of-day settings.
`ShareChange` is shrdist's change log, `SyncRequest` shrsync's requests to the daemon.
"""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Float, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# The flags, bounds and reserved uids are udb.rules' (pure); re-exported here beside the
# tables whose fields they bound.
from udb.rules import IDLE_UID, MAX_EPOCH, MAX_ID, MAX_SHARES, ROOT_UID, SHF_ACCOUNT, SHF_GROUP  # noqa: F401


class Base(DeclarativeBase):
    pass


class Entry(Base):
    """One UDB entry.  Units: shusage and shcharge in charge units, shextime
    in seconds since the epoch, cpuquota and cpuquotaused in CPU seconds."""

    __tablename__ = "entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    uid: Mapped[int] = mapped_column(Integer, unique=True, nullable=False)
    gids: Mapped[list[int]] = mapped_column(JSON, nullable=False, default=list)
    acids: Mapped[list[int]] = mapped_column(JSON, nullable=False, default=list)
    resgrp: Mapped[int] = mapped_column(Integer, nullable=False, default=0, index=True)
    shares: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    shflags: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    shusage: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    shcharge: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    shextime: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    cpuquota: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    cpuquotaused: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    nice: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    passwd: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    comment: Mapped[str] = mapped_column(Text, nullable=False, default="")

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

    __tablename__ = "accounts"

    acid: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)


class Const(Base):
    """One fair-share constant (sh_consts): `name` as in fairshare.consts.Consts, JSON value.

    Absent rows mean the default; fairshare.repository.load_consts/save_consts read and write them.
    """

    __tablename__ = "consts"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[object] = mapped_column(JSON, nullable=True)


class LnodeCycle(Base):
    """The header of the lnode table a shrdaemon published (one row per host).

    `time` (epoch s) is when the cycle ran, `delta` (s) the cycle length then,
    `started` (epoch s) when the daemon started, `enforcer` what enforced it.
    When the daemon stops cleanly it sets `running` false and `stopped` (epoch s)
    and leaves its last table in place, stale, for displays to label as such.
    """

    __tablename__ = "lnode_cycles"

    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    time: Mapped[float] = mapped_column(Float, nullable=False)
    delta: Mapped[float] = mapped_column(Float, nullable=False)
    enforcer: Mapped[str] = mapped_column(String(32), nullable=False)
    pid: Mapped[int] = mapped_column(Integer, nullable=False)
    cycle: Mapped[int] = mapped_column(Integer, nullable=False)
    mode: Mapped[str] = mapped_column(String(16), nullable=False)
    started: Mapped[float] = mapped_column(Float, nullable=False)
    running: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    stopped: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: Resource totals since the daemon started (cpu s, bio, sio, syscalls, mem, tty).
    counts: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    #: The host's CPUs, and the CPU s per s its lnodes received over the cycle (a lnode's
    #: published `cpu` fraction times this is its CPU rate there): for a site's displays
    #: and GLOBALUSAGE (fairshare.site).
    cpus: Mapped[float | None] = mapped_column(Float, nullable=True)
    delivered: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: The published lnodes again, one array per column (udb.columnar): what a display
    #: reads.  None in a header of nothing published yet.
    columnar: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)


class PublishedLnode(Base):
    """One active lnode as the daemon's last cycle left it (see fairshare.lnode for units).

    `node` is the tree node number (0 = root), `parent` the parent's node number
    (-1 for the root), `kind` one of root, group, user, account, idle.
    """

    __tablename__ = "lnodes"

    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    node: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(64), nullable=False)
    uid: Mapped[int] = mapped_column(Integer, nullable=False)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    parent: Mapped[int] = mapped_column(Integer, nullable=False)
    level: Mapped[int] = mapped_column(Integer, nullable=False)
    shares: Mapped[float] = mapped_column(Float, nullable=False)
    refs: Mapped[int] = mapped_column(Integer, nullable=False)
    nrun: Mapped[int] = mapped_column(Integer, nullable=False)
    usage: Mapped[float] = mapped_column(Float, nullable=False)
    #: The part of `usage` already stored in the UDB (groups: their leaves'); the rest
    #: is what this host still owes it (fairshare.lnode).
    stored: Mapped[float | None] = mapped_column(Float, nullable=True)
    charge: Mapped[float] = mapped_column(Float, nullable=False)
    cpu_seconds: Mapped[float] = mapped_column(Float, nullable=False)
    rate: Mapped[float] = mapped_column(Float, nullable=False)
    m_share: Mapped[float] = mapped_column(Float, nullable=False)
    e_share: Mapped[float] = mapped_column(Float, nullable=False)
    cpu: Mapped[float] = mapped_column(Float, nullable=False)
    adj: Mapped[float] = mapped_column(Float, nullable=False)
    priority: Mapped[float] = mapped_column(Float, nullable=False)
    background: Mapped[bool] = mapped_column(Boolean, nullable=False)
    demand: Mapped[bool] = mapped_column(Boolean, nullable=False)
    #: The cycle's due share (fairshare.lnode.LnodeTable.due); None in a table published
    #: before the daemon published it.
    due: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: The cycle's near-future proportion (LnodeTable.pri); None as `due`.
    pri: Mapped[float | None] = mapped_column(Float, nullable=True)


class LnodeCheckpoint(Base):
    """An active leaf lnode as last checkpointed (the guide's /etc/lnodes.chkpt).

    `uid` is the entry's uid, `usage` and `charge` in charge units, `cpu_seconds`
    CPU s since the lnode was created, `time` the checkpoint's epoch second.
    """

    __tablename__ = "lnode_checkpoints"

    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    uid: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(64), nullable=False)
    usage: Mapped[float] = mapped_column(Float, nullable=False)
    charge: Mapped[float] = mapped_column(Float, nullable=False)
    cpu_seconds: Mapped[float] = mapped_column(Float, nullable=False)
    time: Mapped[float] = mapped_column(Float, nullable=False)


class ConstChange(Base):
    """One change shradmin made to a constant: who, when (epoch s), old and new value.

    `schedule` names the time-of-day schedule changed, or is empty for the base settings;
    a schedule's definition and removal are recorded with name "schedule".
    """

    __tablename__ = "const_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float, nullable=False)
    who: Mapped[str] = mapped_column(String(64), nullable=False)
    schedule: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    name: Mapped[str] = mapped_column(String(64), nullable=False)
    old: Mapped[object] = mapped_column(JSON, nullable=True)
    new: Mapped[object] = mapped_column(JSON, nullable=True)


class Schedule(Base):
    """A named time-of-day settings set (the guide's prime / non-prime settings).

    It is in force on the weekdays in `days` (0 = Monday) during the hours in
    `hours` (0..23, local time); `settings` maps constant names to values that
    replace the base constants while it is.  The first schedule by `name` in force wins.
    """

    __tablename__ = "schedules"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    days: Mapped[list[int]] = mapped_column(JSON, nullable=False)
    hours: Mapped[list[int]] = mapped_column(JSON, nullable=False)
    settings: Mapped[dict] = mapped_column(JSON, nullable=False)


class ShareChange(Base):
    """One member's shares changed by shrdist: who, when (epoch s), in which resource
    group, the member's name and its shares before and after (fairshare.dist)."""

    __tablename__ = "share_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float, nullable=False)
    who: Mapped[str] = mapped_column(String(64), nullable=False)
    grp: Mapped[str] = mapped_column(String(64), nullable=False)
    member: Mapped[str] = mapped_column(String(64), nullable=False)
    old: Mapped[int] = mapped_column(Integer, nullable=False)
    new: Mapped[int] = mapped_column(Integer, nullable=False)


class SyncRequest(Base):
    """A shrsync request to the shrdaemon of `host` (fairshare.sync).

    `kind` is "update" (shrsync -u: write every active lnode's usage, charges and CPU
    seconds to the UDB) or "quota" (shrsync -q: take the UDB's cpuquotaused as the
    active lnodes' new base).  `requested` and `done` are epoch s; `done` is NULL
    until the daemon has handled it, then `lnodes` says how many lnodes it touched.
    """

    __tablename__ = "sync_requests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    host: Mapped[str] = mapped_column(String(255), nullable=False, index=True)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    who: Mapped[str] = mapped_column(String(64), nullable=False)
    requested: Mapped[float] = mapped_column(Float, nullable=False)
    done: Mapped[float | None] = mapped_column(Float, nullable=True)
    lnodes: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Serial(Base):
    """A change counter.  The row named "entries" is bumped by every transaction that
    changes entries or the account registry (udbgen, shrdist), the row named "consts"
    by every one that changes the stored constants or shradmin's schedules, so a
    running daemon sees any such change with one cheap read (fairshare.reload.poll)."""

    __tablename__ = "serials"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
