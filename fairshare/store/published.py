"""What the daemon remembers in the UDB: the published lnode table, write-backs,
checkpoints and recovery.

- `publish`: every cycle the whole table of active lnodes replaces this host's
  previous one, with a header row (cycle time, delta, enforcer, daemon pid, the host's
  CPUs and the CPU it delivered, and the same table in columns: udb.columnar, what the
  displays read with `read_columns`), in one transaction, so shrview never sees half a
  cycle.  The rows are for SQL over every host's table (`read_site`).
  A daemon that stops cleanly leaves its last table, marked stopped (`mark_stopped`).
- `write_back`: lnodes' *increments* (fairshare.core.lnode.accrued: the usage they accrued
  since they were last written, their charges and CPU seconds) are added to their
  entries and to the entries of the resource groups above them, in one transaction:
  shusage becomes the stored shusage aged to the write's time plus the increment
  (fairshare.core.lnode.add_usage), shcharge and cpuquotaused grow.  Only those four
  columns are touched (an administrator's concurrent change to shares, resgrp or acids is never
  overwritten), the rows are locked in uid order first (SELECT ... FOR UPDATE on
  PostgreSQL; SQLite's write transaction locks the file), so any number of hosts writing
  back one user at once lose nothing; and the lnodes' checkpoint rows are deleted in
  the same transaction so that a later recovery cannot add the same charges twice.
- `checkpoint`: every active leaf lnode's unwritten increment replaces this host's
  previous checkpoint (the guide's /etc/lnodes.chkpt).
- `recover`: at start, whatever a crashed daemon checkpointed is written back as
  if those lnodes had been written at the checkpoint's time; what accrued after
  the checkpoint is lost, nothing more.
- `exchange`: GLOBALUSAGE's per-cycle exchange of what each host owes and receives, the
  other hosts' read back (fairshare.store.exchange); a write-back settles what it
  wrote there in its own transaction, a recovery or a spool's replay at start and a
  clean stop retract the host's row.

Every row is keyed by host name, so daemons on several hosts can share one UDB.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Row,
    any_,
    bindparam,
    delete,
    insert,
    select,
    text,
    update,
)

from fairshare.core.consts import TICKS_PER_SECOND, decay
from fairshare.core.lnode import LnodeTable, WriteBack, add_usage
from fairshare.core.tree import Kind, ShareTree
from fairshare.store import exchange, fence, grid
from udb import tables
from udb.columnar import Columns, row_columns
from udb.columnar import decode as decode_columns
from udb.columnar import encode as encode_columns
from udb.rules import SHF_GROUP
from udb.session import read_connection, write_connection

if TYPE_CHECKING:  # the cycle and the site's exchange only for the daemon: displays skip them
    from fairshare.core.cycle import Consumption
    from fairshare.store.exchange import Contribution, SiteSums


@dataclass(frozen=True)
class CycleHeader:
    """The published cycle's header: `time` (epoch s), `delta` (s), the enforcer in
    force, the daemon's pid, the cycle number and the share mode.  `counts`: resource
    totals since the daemon started, keyed like the costs (tick: CPU ticks, bio, sio,
    syscall, mem: MiB-seconds, tty), for shrview -ds."""

    time: float
    delta: float
    enforcer: str
    pid: int
    cycle: int
    mode: str
    started: float
    counts: dict[str, float] | None = None
    cpus: float | None = None  # the host's CPUs
    delivered: float | None = None  # CPU s per s the lnodes received over the last cycle


@dataclass(frozen=True)
class EntryState:
    """The UDB fields the daemon needs about the entry behind an lnode (units: udb.tables)."""

    uid: int
    shusage: float
    shextime: float
    cpuquota: float
    cpuquotaused: float
    nice: int = 0  # the entry's default nice (-20..19), a floor for its processes' nice


@dataclass(frozen=True)
class Recovered:
    """One lnode recovered from a checkpoint: its entry's uid and name, the usage it had
    accrued (charge units, added to shusage), charge added, CPU seconds added, and the
    checkpoint time (epoch s)."""

    uid: int
    name: str
    usage: float
    charge: float
    cpu_seconds: float
    time: float


@dataclass(frozen=True)
class Counters:
    """The lnode cgroups' CPU counters (CPU s, by cgroup name) a write-back or
    checkpoint covered, the machine's boot time (epoch s) and when they were read."""

    cpu: dict[str, float]
    boot: float
    time: float


def _insert_published(conn: Connection, host: str, cols: Columns) -> None:
    """`host`'s published rows of `cols` inserted, the fastest way each dialect has."""
    if not len(cols["node"]):
        return
    if conn.dialect.name == "sqlite":
        # The driver's executemany over plain tuples: SQLAlchemy's per-row parameter
        # processing cost 3 times the insert itself (212 rows: 2.4 of 3.1 ms CPU).
        conn.exec_driver_sql(_INSERT_PUBLISHED, published_tuples(host, cols))
    else:  # PostgreSQL's COPY: the rows formatted by psycopg's C code, streamed in one
        # statement (288 rows: 3.0 ms of CPU, multi-VALUES 10.7)
        _copy_rows(conn, tables.lnodes.name, PUBLISHED, published_tuples(host, cols))


class LnodeStore:
    """The daemon's rows in the UDB for one host."""

    def __init__(self, engine: Engine, host: str | None = None) -> None:
        self.engine = engine
        self.host = host or socket.gethostname()
        #: The host's generation this store writes under (fairshare.store.fence); None
        #: until `claim`: a store no daemon claimed is not fenced.
        self.generation: int | None = None

    def claim(self, retake: bool = False) -> int:
        """Take the host's rows for this store: bump the host's generation and write
        under it from now on (`retake`: only if it is still the one this store had,
        else Fenced).  Returns the new generation."""
        with write_connection(self.engine) as conn:
            ours = self.generation if retake else None
            self.generation = fence.claim(conn, self.host, ours)
        return self.generation

    # -- every cycle -----------------------------------------------------------------------

    def publish(self, tree: ShareTree, table: LnodeTable, header: CycleHeader) -> None:
        """Replace this host's published lnode table with `table`'s active lnodes."""
        cols = published_columns(tree, table, np.flatnonzero(table.active))
        head = {f.name: getattr(header, f.name) for f in dataclasses.fields(header)}
        head |= {"running": True, "stopped": None, "columnar": encode_columns(cols)}
        cycles = tables.lnode_cycles
        # Core statements built once on a Core connection, not the ORM: this runs every
        # cycle (building the header's UPDATE anew each time cost 0.3 of its 1.6 ms).
        with write_connection(self.engine) as conn:
            fence.check(conn, self.host, self.generation)
            conn.execute(_DELETE_PUBLISHED, {"this_host": self.host})
            _insert_published(conn, self.host, cols)
            done = conn.execute(_UPDATE_CYCLE, {"this_host": self.host, **head})
            if done.rowcount == 0:
                conn.execute(insert(cycles).values(host=self.host, **head))

    def mark_stopped(self, now: float) -> None:
        """Label this host's published table as the last one of a daemon that stopped
        at `now` (epoch s); the rows stay for displays to show as stale."""
        with write_connection(self.engine) as s:
            fence.check(s, self.host, self.generation)
            cycles = tables.lnode_cycles
            s.execute(update(cycles).where(self._here(cycles)).values(running=False, stopped=now))
            exchange.retract(s, self.host)  # everything it owed was written back

    def read_published(self, columns: Sequence[str] | None = None) -> tuple[Row | None, list[Row]]:
        """This host's published header (None if nothing was published) and lnodes,
        in node order, as rows of the published lnodes' `columns` (default: every
        column; attributes by name, or by position in that order)."""
        lnodes = tables.lnodes
        picked = lnodes.c if columns is None else [lnodes.c[c] for c in columns]
        query = select(*picked).where(self._here(lnodes)).order_by(lnodes.c.node)
        with read_connection(self.engine) as s:
            head = s.execute(self._head).first()
            rows = s.execute(query).all()
        return head, list(rows)

    def _here(self, table):
        """The condition that a row of `table` (keyed by host) is this host's."""
        return table.c.host == self.host

    @property
    def _head(self):
        """This host's published header but its columns (udb.tables.lnode_cycles)."""
        cycles = tables.lnode_cycles
        return select(*(c for c in cycles.c if c.name != "columnar")).where(self._here(cycles))

    def read_columns(self) -> tuple[Row | None, Columns]:
        """This host's published header (None if nothing was published) and lnodes in
        node order, as columns (udb.columnar.decode: one array per column, names and
        kinds as lists): one value read, no row per lnode.  Empty columns when the
        header has none (nothing published); a column the publishing daemon did not
        have yet (an older version's table) is all NaN."""
        cycles = tables.lnode_cycles
        with read_connection(self.engine) as s:  # the header and its columns in one row
            head = s.execute(select(cycles).where(self._here(cycles))).first()
        blob = None if head is None else head.columnar
        if blob is None:
            return head, row_columns((), [c for c in PUBLISHED if c != "host"])
        cols = decode_columns(blob)
        n = len(cols.get("node", ()))
        for name in PUBLISHED:
            if name not in cols and name != "host":
                cols[name] = np.full(n, np.nan)
        return head, cols

    def published_cycle(self) -> int | None:
        """This host's published cycle number (None if nothing was published): a cheap
        read for displays waiting for the next cycle."""
        with read_connection(self.engine) as s:
            cycles = tables.lnode_cycles
            return s.scalar(select(cycles.c.cycle).where(self._here(cycles)))

    def entry_states(self, uids: Iterable[int]) -> dict[int, EntryState]:
        """The usage, exit time, quota and nice fields of the entries with these uids."""
        uids = sorted(set(uids))
        if not uids:
            return {}
        e = tables.entries.c
        cols = (e.uid, e.shusage, e.shextime, e.cpuquota, e.cpuquotaused, e.nice)
        with read_connection(self.engine) as s:
            rows = s.execute(select(*cols).where(e.uid.in_(uids))).all()
        return {r.uid: EntryState(*r) for r in rows}

    # -- write-back, checkpoint, recovery ----------------------------------------------------

    def write_back(
        self,
        released: Sequence[tuple[int, WriteBack]],
        halflife: float,
        spool: int = 0,
        by_uid: Mapping[int, float] | None = None,
        counters: Counters | None = None,
    ) -> int:
        """Add lnodes' increments (entry uid, WriteBack) to their entries and their
        groups', in one transaction; `halflife` (s) ages the stored usage, or `by_uid`'s
        half-life for the entries it names (where groups set their own,
        fairshare.core.tree.ShareTree.halflives).  `spool`: the serial of the spool file
        these increments include (fairshare.daemon.spool), recorded as written in the
        same transaction.  `counters`: the lnode cgroups' counters the increments cover
        (None: left as they are).  Returns how many increments were written."""
        if not released and not spool and counters is None:
            return 0
        with write_connection(self.engine) as s:
            fence.check(s, self.host, self.generation)
            if spool:
                fence.mark_spooled(s, self.host, spool)
            _write_back(s, released, halflife, by_uid)
            _save_counters(s, self.host, counters)
            uids = sorted({uid for uid, _wb in released})
            if uids:  # what this host's exchange row says it owes is in the entries now
                exchange.settle(s, self.host, uids)
            pg = self.engine.dialect.name == "postgresql"
            checkpoints = tables.lnode_checkpoints
            s.execute(
                delete(checkpoints).where(
                    self._here(checkpoints), _uid_in(checkpoints.c.uid, uids, pg)
                )
            )
        return len(released)

    def replay(
        self,
        owed: Sequence[tuple[int, WriteBack]],
        serial: int,
        halflife: float,
        counters: Counters | None = None,
    ) -> bool:
        """Write back what a spool file (fairshare.daemon.spool) of serial `serial` owes,
        in one transaction, unless the UDB recorded that serial already; the checkpoint
        rows of its uids go with it (what they hold is part of what the spool owes: a
        checkpoint row is only ever left from before the outage), and the lnode cgroup
        counters it covered (`counters`) replace the stored ones, so that a restart
        charges the counters' growth from where the spool left off, not twice.  True
        when written now, False when it had been."""
        with write_connection(self.engine) as s:
            fence.check(s, self.host, self.generation)
            if fence.spooled(s, self.host) >= serial:
                return False
            _write_back(s, owed, halflife)
            uids = sorted({uid for uid, _wb in owed})
            pg = self.engine.dialect.name == "postgresql"
            checkpoints = tables.lnode_checkpoints
            here = self._here(checkpoints)
            s.execute(delete(checkpoints).where(here, _uid_in(checkpoints.c.uid, uids, pg)))
            _save_counters(s, self.host, counters)
            fence.mark_spooled(s, self.host, serial)
            exchange.retract(s, self.host)  # what the last daemon owed is in the entries
        return True

    def exchange(
        self,
        mine: Contribution,
        now: float,
        cpus: float,
        live_after: float,
        stored_of: list[int] | None = None,
    ) -> SiteSums:
        """GLOBALUSAGE's per-cycle exchange (fairshare.store.exchange): `mine`, this host's
        contribution as of `now` (epoch s, `cpus` CPUs), replaces its last one and the
        other hosts' that exchanged since `live_after` (epoch s) are read back, summed,
        with the stored usage of the entries of `stored_of` (None: all), in one
        transaction."""
        with write_connection(self.engine) as conn:
            fence.check(conn, self.host, self.generation)
            args = (conn, self.host, now, cpus, mine, live_after, stored_of)
            return exchange.exchange(*args)

    def checkpoint(
        self, tree: ShareTree, table: LnodeTable, now: float, counters: Counters | None = None
    ) -> int:
        """Replace this host's checkpoint with every active leaf lnode's unwritten
        increment (usage - stored, charge, CPU seconds), and the lnode cgroups' counters
        it covers (`counters`; None: left as they are); returns how many lnodes."""
        leaves = np.flatnonzero(table.active & tree.leaf_mask)
        rows = [
            {
                "host": self.host,
                "uid": int(tree.ids[n]),
                "name": tree.names[n],
                "usage": max(float(table.usage[n] - table.stored[n]), 0.0),
                "charge": float(table.charge[n] - table.charge_written[n]),
                "cpu_seconds": float(table.cpu_seconds[n] - table.cpu_written[n]),
                "time": float(now),
            }
            for n in leaves
        ]
        checkpoints = tables.lnode_checkpoints
        with write_connection(self.engine) as s:
            fence.check(s, self.host, self.generation)
            s.execute(delete(checkpoints).where(self._here(checkpoints)))
            if rows:
                s.execute(insert(checkpoints), rows)
            _save_counters(s, self.host, counters)
        return len(rows)

    def stored_counters(self) -> Counters | None:
        """The lnode cgroup counters this host's last write-back or checkpoint covered
        (None: none stored, as after a clean stop).  They stay until the next write-back
        or checkpoint replaces them: a daemon killed again before either resumes from
        them again."""
        table = tables.lnode_counters
        with read_connection(self.engine) as s:
            rows = s.execute(select(table).where(self._here(table))).all()
        if not rows:
            return None
        return Counters({r.name: r.cpu for r in rows}, rows[0].boot, rows[0].time)

    def recover(self, halflife: float) -> list[Recovered]:
        """Write back this host's checkpoint (left by a daemon that did not stop
        cleanly) and delete it, in one transaction; returns what was recovered.
        `halflife` (s) ages the stored usage (see `write_back`)."""
        with write_connection(self.engine) as s:
            fence.check(s, self.host, self.generation)
            checkpoints = tables.lnode_checkpoints
            rows = s.execute(select(checkpoints).where(self._here(checkpoints))).all()
            out = [Recovered(r.uid, r.name, r.usage, r.charge, r.cpu_seconds, r.time) for r in rows]
            _write_back(
                s,
                [(r.uid, WriteBack(r.usage, r.time, r.charge, r.cpu_seconds)) for r in out],
                halflife,
            )
            for table in (checkpoints, tables.lnodes, tables.lnode_cycles):
                s.execute(delete(table).where(self._here(table)))
            exchange.retract(s, self.host)  # the last daemon's row of the site's exchange
        return out


def _save_counters(s, host: str, counters: Counters | None) -> None:
    """Replace `host`'s lnode cgroup counters with `counters` (None: keep them), on
    connection `s`."""
    if counters is None:
        return
    table = tables.lnode_counters
    s.execute(delete(table).where(table.c.host == host))
    rows = [
        {"host": host, "name": name, "cpu": cpu, "boot": counters.boot, "time": counters.time}
        for name, cpu in counters.cpu.items()
    ]
    if rows:
        s.execute(insert(table), rows)


#: The resources counted for shrview -ds, named like their costs (Consts.cost_<name>),
#: with the Consumption field each comes from.
COUNTED = (
    ("syscall", "syscalls"),
    ("bio", "bio"),
    ("sio", "sio"),
    ("tick", "cpu"),
    ("mem", "mem"),
    ("tty", "tty"),
)


def add_counts(counts: dict[str, float], consumption: Consumption) -> None:
    """Add one cycle's `consumption` over all leaves to `counts` (in place): CPU ticks
    (CPU s x TICKS_PER_SECOND), block and stream I/O operations, system calls,
    MiB-seconds of memory and tty operations."""
    for name, field in COUNTED:
        amount = float(getattr(consumption, field).sum())
        if name == "tick":
            amount *= TICKS_PER_SECOND
        counts[name] = counts.get(name, 0.0) + amount


def group_chains(conn: Connection) -> dict[int, list[int]]:
    """For every entry that sits in a resource group, the uids of the groups above it,
    nearest first (from the entries' resgrp; a loop is cut where it closes)."""
    e = tables.entries.c
    query = select(e.uid, e.resgrp).where(e.shflags.op("&")(SHF_GROUP) != 0)
    groups = dict(conn.execute(query).all())
    chains: dict[int, list[int]] = {}

    def chain(resgrp: int) -> list[int]:
        out, seen = [], set()
        while resgrp in groups and resgrp not in seen:
            seen.add(resgrp)
            out.append(resgrp)
            resgrp = groups[resgrp]
        return out

    for uid, resgrp in conn.execute(select(e.uid, e.resgrp).where(e.resgrp != 0)):
        chains[uid] = chain(resgrp)
    return chains


def _write_back(
    conn: Connection,
    released: Sequence[tuple[int, WriteBack]],
    halflife: float,
    by_uid: Mapping[int, float] | None = None,
) -> None:
    """Add the increments to the entries of their uids and of the groups above them:
    shusage by `add_usage`, shextime the later time, shcharge and cpuquotaused (+=); the
    groups get the usage and charge, not the CPU seconds (quotas are per lnode)."""
    if not released:
        return
    chains = group_chains(conn)
    targets, usage, when, charge, cpu = [], [], [], [], []
    for uid, wb in released:
        for target in (uid, *chains.get(uid, ())):
            targets.append(target)
            usage.append(wb.shusage)
            when.append(wb.shextime)
            charge.append(wb.charge)
            cpu.append(wb.cpu_seconds if target == uid else 0.0)
    # Several increments for one entry (a group's members, a uid kept twice while the
    # UDB was away): aged to the latest of them and summed.
    uids, slot = np.unique(np.array(targets, dtype=np.int64), return_inverse=True)
    when_arr = np.array(when)
    latest = np.full(len(uids), -np.inf)
    np.maximum.at(latest, slot, when_arr)

    def halflives(entries) -> float | np.ndarray:  # each entry's, by uid
        if not by_uid:
            return halflife
        return np.array([by_uid.get(u, halflife) for u in entries], dtype=float)

    aged = np.array(usage) * decay(latest[slot] - when_arr, halflives(targets))
    inc_usage, inc_charge, inc_cpu = (
        np.bincount(slot, weights=w, minlength=len(uids)) for w in (aged, charge, cpu)
    )
    c = tables.entries.c
    pg = conn.dialect.name == "postgresql"
    # Lock the rows in uid order, so concurrent writers queue instead of deadlocking.
    query = select(c.uid, c.shusage, c.shextime).where(_uid_in(c.uid, uids.tolist(), pg))
    query = query.order_by(c.uid)
    if pg:
        query = query.with_for_update()
    rows = conn.execute(query).all()
    if not rows:
        return
    have = np.array([r.uid for r in rows], dtype=np.int64)
    at = np.searchsorted(uids, have)
    new_usage, new_time = add_usage(
        [r.shusage for r in rows],
        [r.shextime for r in rows],
        inc_usage[at],
        latest[at],
        halflives(have.tolist()),
    )
    values = {
        "uids": have.tolist(),
        "usage": new_usage.tolist(),
        "time": new_time.tolist(),
        "charge": inc_charge[at].tolist(),
        "cpu": inc_cpu[at].tolist(),
    }
    _update_entries(conn, values, pg)
    # A grid: the mounted leaves' increments become this site's usage record, in this
    # transaction, so the record exists exactly when the charges do (fairshare.store.grid).
    grid.export(conn, released)


def _update_entries(conn: Connection, values: dict[str, list], pg: bool) -> None:
    """Set the entries' usage and time and add their charge and CPU seconds, `values`
    by column (uids, usage, time, charge, cpu), one row each."""
    c = tables.entries.c
    if pg:  # one statement for all rows: much faster than one UPDATE per row
        conn.execute(
            text(
                "UPDATE entries SET shusage = v.usage, shextime = v.time, "
                "shcharge = entries.shcharge + v.charge, "
                "cpuquotaused = entries.cpuquotaused + v.cpu "
                "FROM unnest(CAST(:uids AS bigint[]), CAST(:usage AS float8[]), "
                "CAST(:time AS float8[]), CAST(:charge AS float8[]), CAST(:cpu AS float8[])) "
                "AS v(uid, usage, time, charge, cpu) WHERE entries.uid = v.uid"
            ),
            values,
        )
        return
    stmt = (
        update(tables.entries)
        .where(c.uid == bindparam("b_uid"))
        .values(
            shusage=bindparam("b_usage"),
            shextime=bindparam("b_time"),
            shcharge=c.shcharge + bindparam("b_charge"),
            cpuquotaused=c.cpuquotaused + bindparam("b_cpu"),
        )
    )
    conn.execute(
        stmt,
        [
            {"b_uid": u, "b_usage": us, "b_time": t, "b_charge": ch, "b_cpu": q}
            for u, us, t, ch, q in zip(*values.values(), strict=True)
        ],
    )


def _uid_in(column, uids: list[int], pg: bool):
    """`column IN uids`: as one array parameter on PostgreSQL (10,000 uids would
    otherwise be 10,000 parameters to compile and send)."""
    if pg:
        from sqlalchemy.dialects.postgresql import ARRAY  # only PostgreSQL's writers need it

        return column == any_(bindparam("uid_list", uids, type_=ARRAY(BigInteger)))
    return column.in_(uids)


#: The lnodes table's columns, in the order of `published_tuples`.
PUBLISHED = tuple(str(c.name) for c in tables.lnodes.columns)  # plain str (JSON keys)
_DELETE_PUBLISHED = delete(tables.lnodes).where(tables.lnodes.c.host == bindparam("this_host"))
#: The header's columns are SET from the parameters' names.
_UPDATE_CYCLE = update(tables.lnode_cycles).where(
    tables.lnode_cycles.c.host == bindparam("this_host")
)
_INSERT_PUBLISHED = (
    f"INSERT INTO {tables.lnodes.name} ({', '.join(PUBLISHED)}) "
    f"VALUES ({', '.join('?' * len(PUBLISHED))})"
)


def _copy_rows(conn: Connection, table: str, columns: Sequence[str], rows: list[tuple]) -> None:
    """Insert `rows` (tuples in `columns` order) into `table` with PostgreSQL's COPY, in
    the transaction of `conn`."""
    with (
        conn.connection.driver_connection.cursor() as cursor,
        cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)


def published_columns(tree: ShareTree, table: LnodeTable, nodes: np.ndarray) -> Columns:
    """The published lnodes' columns but host for `nodes` of `table`, in `PUBLISHED` order:
    arrays, names and kinds as lists of str."""
    from fairshare.core.tree import tree_index

    labels = {int(k): Kind(int(k)).label for k in np.unique(tree.kinds[nodes])}
    cols: Columns = {
        "node": nodes,
        "name": [tree.names[i] or "root" for i in nodes.tolist()],
        "uid": tree.ids[nodes],
        "kind": [labels[k] for k in tree.kinds[nodes].tolist()],
        "parent": tree.parent[nodes],
        "level": tree.level[nodes].astype(int),
        "shares": tree.shares[nodes],
        "stored": tree_index(tree).subtree_sum(table.stored)[nodes],
    }
    # Every other column is the table's array of that name.
    cols.update({c: getattr(table, c)[nodes] for c in PUBLISHED if c not in cols and c != "host"})
    return {c: cols[c] for c in PUBLISHED if c != "host"}


def published_tuples(host: str, cols: Columns) -> list[tuple]:
    """The published lnodes' rows of `host` with the columns `cols` (`published_columns`),
    as tuples of plain Python values in `PUBLISHED` order (numpy converts each column
    at once)."""
    n = len(cols["node"])
    lists = [[host] * n if c == "host" else _plain(cols[c]) for c in PUBLISHED]
    return list(zip(*lists, strict=True))


def _plain(values) -> list:
    return values.tolist() if isinstance(values, np.ndarray) else values
