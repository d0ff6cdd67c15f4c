"""Reading what the displays show: a host's published lnode table and the UDB facts
around it (the edge of the report layer; everything after it is pure).

`load_published` finds the host whose table to show (`pick_host`) and returns a
`Snapshot`: the daemon's last published lnode table (fairshare.store.published) with its age and
whether a daemon is still publishing it.  `Source` takes snapshots again and again for
shrview's repeat and continuous modes (through the daemon's socket or from the UDB)
and waits for the next cycle.  `load_site` reads the whole site (shrview --site);
`caller_own`, `tree_leaves`, `find_entry` and `default_account` answer the other
questions shrview and shrinfo ask the UDB.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Engine, Row, select

from fairshare.core.consts import Consts
from fairshare.core.site import SiteHost, SiteLnode
from fairshare.core.tree import ShareTree, default_acid
from fairshare.store.config import load_consts, load_effective_consts, load_tree
from fairshare.store.published import LnodeStore
from fairshare.store.site import published_hosts, read_site
from udb import tables
from udb.columnar import Columns
from udb.errors import NotFound
from udb.remote import Reader
from udb.rules import SHF_ACCOUNT
from udb.session import read_connection

_entry = tables.entries.c

#: A table is current when its header says running and it is at most this many deltas old.
FRESH_DELTAS = 3.0
#: Seconds between two looks at the published cycle number.
POLL = 0.1


@dataclass(frozen=True)
class Snapshot:
    """A host's published lnode table as a display sees it.

    time: when the cycle ran (epoch s); age: now - time (s); running: a daemon is
    publishing it (its header says running and it is at most FRESH_DELTAS deltas old);
    stopped: when the daemon stopped (epoch s), None if it did not stop cleanly;
    counts: resource totals since the daemon started (None if not published);
    consts: the constants in force now; lnodes: its columns (udb.columnar: one array per
    column, names and kinds lists) in node order (root first).
    """

    host: str
    cycle: int
    time: float
    delta: float
    age: float
    running: bool
    stopped: float | None
    started: float
    enforcer: str
    mode: str
    counts: dict[str, float] | None
    consts: Consts
    lnodes: Columns


def pick_host(hosts: Sequence[str], wanted: str | None, here: str) -> str:
    """The host whose table to show: `wanted` if given, else `here` if it published,
    else the only host that did.  Raises NotFound naming the hosts otherwise."""
    if wanted is not None:
        if wanted not in hosts:
            raise NotFound(f"--host {wanted}: nothing published for it; {_hosts_text(hosts)}")
        return wanted
    if here in hosts:
        return here
    if len(hosts) == 1:
        return hosts[0]
    if not hosts:
        raise NotFound("no lnode table has been published in this UDB: is shrdaemon running?")
    raise NotFound(f"several hosts published lnode tables: give --host; {_hosts_text(hosts)}")


def _hosts_text(hosts: Sequence[str]) -> str:
    return f"hosts: {', '.join(hosts)}" if hosts else "no host has published"


def load_published(
    engine: Engine, host: str | None, now: float, consts: Consts, here: str | None = None
) -> Snapshot:
    """The snapshot of `host`'s published table (see `pick_host`), aged to `now` (epoch s)."""
    name = pick_host(published_hosts(engine), host, here or socket.gethostname())
    head, columns = LnodeStore(engine, name).read_columns()
    if head is None:  # it stopped publishing between the two reads
        raise NotFound(f"--host {name}: nothing published for it")
    age = now - head.time
    return Snapshot(
        host=name,
        cycle=head.cycle,
        time=head.time,
        delta=head.delta,
        age=age,
        running=bool(head.running) and age <= FRESH_DELTAS * head.delta,
        stopped=head.stopped,
        started=head.started,
        enforcer=head.enforcer,
        mode=head.mode,
        counts=dict(head.counts) if head.counts is not None else None,
        consts=consts,
        lnodes=columns,
    )


class Source:
    """Where the displays' snapshots come from: the UDB (or the daemon's copy of it for
    the caller, fetched afresh for every snapshot), a host, and the time."""

    def __init__(self, reader: Reader, host: str | None, now: float | None) -> None:
        self.reader = reader
        self.engine = reader.engine
        self.host = host
        self.now = now

    def take(self) -> Snapshot:
        """The published table now (with the constants in force now)."""
        now = time.time() if self.now is None else self.now
        self.engine = self.reader.refresh()
        with read_connection(self.engine) as s:
            consts = load_effective_consts(s, datetime.fromtimestamp(now))[0]
        snap = load_published(self.engine, self.host, now, consts)
        self.host = snap.host
        return snap

    def cycle(self) -> int | None:
        """The published cycle number (a cheap read, for waiting)."""
        if self.reader.through_daemon:
            return self.reader.cycle(self.host)
        return LnodeStore(self.engine, self.host).published_cycle()

    def wait_for_cycle(self, after: int, timeout: float, stop: Callable[[], bool] = bool) -> bool:
        """Wait until the published cycle is no longer `after`, at most `timeout` seconds
        (or until `stop()` is true); True if a new cycle came."""
        deadline = time.monotonic() + timeout
        while True:
            if self.cycle() != after:
                return True
            left = deadline - time.monotonic()
            if left <= 0 or stop():
                return False
            time.sleep(min(POLL, left))


def load_site(engine: Engine, now: float) -> tuple[list[SiteHost], list[SiteLnode]]:
    """The site (fairshare.store.site.read_site: every host that published, every lnode
    active on any) with usage aged to `now` (epoch s); NotFound if no host published."""
    with read_connection(engine) as s:
        halflife = load_consts(s).halflife
    hosts, lnodes = read_site(engine, now, halflife)
    if not hosts:
        raise NotFound("no lnode table has been published in this UDB: is shrdaemon running?")
    return hosts, lnodes


def caller_own(engine: Engine, mode: str) -> frozenset[int]:
    """The uids of the caller's own lnodes: its uid, or in Share by Account mode the
    accounts (acids) of the caller's UDB entry."""
    uid = os.getuid()
    if mode != "account":
        return frozenset({uid})
    with read_connection(engine) as s:
        acids = s.scalar(select(_entry.acids).where(_entry.uid == uid)) or []
    return frozenset(acids)


def share_tree(engine: Engine, mode: str) -> ShareTree:
    """The UDB's share tree in `mode` ("user" or "account")."""
    with read_connection(engine) as s:
        return load_tree(s, mode)


def tree_leaves(engine: Engine, mode: str) -> int:
    """How many leaves (users, accounts, Idle, unknown) the UDB's share tree has."""
    return int(share_tree(engine, mode).leaf_mask.sum())


def find_entry(conn: Connection, name: str | None) -> Row:
    """The UDB entry called `name`, or the caller's (by uid), as a row of
    udb.tables.entries; NotFound if there is none."""
    if name is None:
        uid = os.getuid()
        entry = conn.execute(select(tables.entries).where(_entry.uid == uid)).first()
        if entry is None:
            raise NotFound(f"no UDB entry has your uid {uid}; give a USER")
        return entry
    entry = conn.execute(select(tables.entries).where(_entry.name == name)).first()
    if entry is None:
        raise NotFound(f"{name}: no such UDB entry")
    return entry


def default_account(conn: Connection, entry: Row) -> Row:
    """The shareholder entry of `entry`'s default account (the first of its acids)."""
    acid = default_acid(entry.acids)
    if acid is None:
        raise NotFound(f"{entry.name}: no account (acids is empty) in Share by Account mode")
    account = conn.execute(select(tables.entries).where(_entry.uid == acid)).first()
    if account is None or not account.shflags & SHF_ACCOUNT:
        raise NotFound(f"{entry.name}: its default account {acid} has no shareholder entry")
    return account
