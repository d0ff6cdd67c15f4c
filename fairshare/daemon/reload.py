"""What the daemon reads from the UDB each cycle: one cheap poll (`poll`) and, when
it shows a change, the constants or the share tree.

The poll is one statement: the entries' fingerprint (their count, highest id and change
serial), the constants' change serial and how many shrsync requests wait for the host.
The constants and shradmin's schedules are read again when their serial moved (every
shradmin change and `save_consts` bump it) and every RELOAD_EVERY cycles; the schedule
in force is applied every cycle at the clock's local time (fairshare.core.schedule), so a
shradmin change acts within one delta.  The tree is rebuilt (`load_lnodes`) only when
there is a reason (`reload_reason`): SIGHUP, a change of share mode, every RELOAD_EVERY
cycles, or a change of the entries' fingerprint.  The daemon then keeps its lnode
table when the tree is the same and carries the lnodes over by name when not
(fairshare.daemon.state).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, bindparam, func, select

from fairshare.core.consts import Consts
from fairshare.core.schedule import effective_consts
from fairshare.core.tree import build_tree
from fairshare.daemon.state import Lnodes, lnodes_for
from fairshare.store.config import load_consts, schedules, tree_rows
from udb.models import Entry, Serial, SyncRequest
from udb.session import read_session

log = logging.getLogger("shrdaemon")

#: Rebuild the tree and read the constants at least this often (cycles) even when the
#: fingerprint and serial are unchanged, so quota changes and edits the fingerprint
#: cannot see are picked up.
RELOAD_EVERY = 15


def _serial(name: str):
    return select(Serial.value).where(Serial.name == name).scalar_subquery()


_FINGERPRINT = (func.count(Entry.id), func.max(Entry.id), _serial("entries"))
_POLL = select(
    *_FINGERPRINT,
    _serial("consts"),
    select(func.count(SyncRequest.id))
    .where(SyncRequest.host == bindparam("host"), SyncRequest.done.is_(None))
    .scalar_subquery(),
)


@dataclass(frozen=True)
class Poll:
    """What one poll of the UDB saw: the entries' `fingerprint` (see
    `entries_fingerprint`), the constants' change serial `consts` and the shrsync
    `requests` waiting for the host."""

    fingerprint: tuple
    consts: int
    requests: int


def poll(engine: Engine, host: str) -> Poll:
    """The daemon's one read of every cycle (see the module docstring); `host` is the
    one whose shrsync requests are counted.  One statement built once, run on a Core
    connection (no ORM session: 0.7 -> 0.5 ms of CPU with the caches cold after the
    daemon's sleep)."""
    with engine.connect() as conn:
        count, top, changes, consts, requests = conn.execute(_POLL, {"host": host}).one()
    return Poll((count, top, changes or 0), consts or 0, requests)


def entries_fingerprint(session) -> tuple:
    """A cheap summary of the entries that changes whenever udbgen or shrdist changed
    them (their change serial); count and highest id catch rows added by other means.
    Edits made behind the commands' back are found by the periodic reload (or SIGHUP)."""
    count, top, changes = session.connection().execute(select(*_FINGERPRINT)).one()
    return (count, top, changes or 0)


def load_lnodes(session, mode: str) -> Lnodes:
    """The share tree of the UDB in `mode`, an empty lnode table and the uid maps."""
    tree = build_tree(tree_rows(session), mode)
    acids = {}
    if mode == "account":
        for uid, ac in session.execute(select(Entry.uid, Entry.acids)).all():
            acids[int(uid)] = list(ac or [])
    return lnodes_for(tree, acids, entries_fingerprint(session))


def reload_reason(
    ln: Lnodes, consts: Consts, cycle: int, requested: bool, fingerprint: tuple
) -> str | None:
    """Why the tree of `ln` must be rebuilt before cycle `cycle + 1` (`requested`: a
    SIGHUP came; `fingerprint`: the entries' now), None when it need not."""
    if requested:
        return "SIGHUP"
    if consts.mode != ln.tree.mode:
        return f"share mode changed to {consts.mode}"
    if cycle % RELOAD_EVERY == 0:
        return "periodic"
    if fingerprint != ln.fingerprint:
        return "the UDB's entries changed"
    return None


class Reloader:
    """The daemon's reads of the constants and tree: the shradmin schedule in force
    (`schedule`, "" for the base settings), whether a SIGHUP asked for a reload, the
    shrsync requests the last poll saw waiting (`requests`), and the stored constants
    and schedules as of their change serial."""

    def __init__(self) -> None:
        self.schedule = ""
        self.requested = False
        self.requests = 0  # shrsync requests waiting, as of the last poll
        self._stored = None  # (consts serial, stored constants, schedules) last read
        self.speed: float | None = None  # shrdaemon --speed: this host's, over the UDB's

    def read(
        self, engine: Engine, host: str, ln: Lnodes, cycle: int, now: float
    ) -> tuple[Consts, tuple[Lnodes, str] | None]:
        """One cycle's reads: the poll (the shrsync requests waiting for `host`), the
        constants in force at `now` (epoch s), and the tree as new lnodes with the reason
        when it must be read again (`tree`); `cycle`: the cycles run."""
        self.requests = 0
        seen = poll(engine, host)
        self.requests = seen.requests
        consts = self.consts(engine, now, seen.consts, cycle)
        return consts, self.tree(engine, ln, consts, cycle, seen.fingerprint)

    def request(self) -> None:
        """Read the tree at the next cycle whatever the fingerprint says (SIGHUP)."""
        self.requested = True

    def consts(
        self, engine: Engine, now: float, serial: int | None = None, cycle: int = 0
    ) -> Consts:
        """The constants in force at `now` (epoch s): the stored ones with shradmin's
        schedule in force at that local time applied (logged when the schedule changes).
        The stored constants and schedules are read from `engine` again unless `serial`
        (the poll's constants serial; None: unknown) is the one they were read at, and
        at least every RELOAD_EVERY cycles (`cycle`: the cycles run)."""
        if (
            self._stored is None
            or serial is None
            or serial != self._stored[0]
            or cycle % RELOAD_EVERY == 0
        ):
            with read_session(engine) as s:
                self._stored = (serial, load_consts(s), schedules(s))
        _serial, stored, rows = self._stored
        consts, schedule = effective_consts(stored, rows, datetime.fromtimestamp(now))
        if self.speed is not None:
            consts = consts.replace(speed=self.speed)
        if schedule != self.schedule:
            log.info("schedule %s now in force", schedule or "(none: base settings)")
            self.schedule = schedule
        return consts

    def tree(
        self, engine: Engine, ln: Lnodes, consts: Consts, cycle: int, fingerprint: tuple
    ) -> tuple[Lnodes, str] | None:
        """The UDB's tree as new lnodes, and why it was read, when it must be (see
        `reload_reason`; `fingerprint`: the entries' now); None when the tree of `ln`
        still holds."""
        reason = reload_reason(ln, consts, cycle, self.requested, fingerprint)
        if reason is None:
            return None
        self.requested = False
        with read_session(engine) as s:
            return load_lnodes(s, consts.mode), reason


def log_tree(ln: Lnodes) -> None:
    """Say what the share tree holds, and what in the UDB it leaves out."""
    tree = ln.tree
    leaves = int(tree.leaf_mask.sum())
    log.info(
        "share tree: %d nodes, %d leaves, Share by %s",
        tree.size,
        leaves,
        "Account" if tree.mode == "account" else "User",
    )
    if ln.unknown is None:
        log.warning("no 'unknown' entry: processes of uids without an entry are not charged")
    for d in tree.detached:
        log.warning("entry %s (uid %d) is not in the share tree: %s", d.name, d.uid, d.reason)
