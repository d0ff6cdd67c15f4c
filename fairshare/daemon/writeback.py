"""What the daemon owes the UDB, and when it pays: write-backs, checkpoints, recovery.

A write-back adds what every active leaf lnode accrued to its entry (`leave`:
increments, so hosts sharing one UDB never erase each other's charges; the CPU seconds
written move into the entry's cpuquotaused) and releases some lnodes, as its
`WriteBackMode` says:

- PERIODIC, every `writeback` seconds (shradmin -W): the lnodes whose processes have
  all gone are released (never Idle);
- SYNC, shrsync -u (fairshare.daemon.sync): every active lnode is written, none released;
- SHUTDOWN, when the daemon stops: every lnode is written and released.

After a PERIODIC or SYNC write-back the active entries are read again and, with
GLOBALUSAGE, the site-wide usage and site factors are refreshed (`refresh_site`,
fairshare.core.steps.refresh_site).  Every `checkpoint` seconds every active lnode's
unwritten increment is checkpointed, from which the next start recovers after a crash
(`WriteBacks.recover`, fairshare.store.published).  Increments the UDB does not take (it
cannot be reached, the disk is full, the database is read-only) are kept in `pending`,
merged per uid, spooled to a local file (fairshare.daemon.spool) and written with the
next write-back that it takes; a start writes back what a spool file left.  A daemon
that lost its host's lock (fairshare.store.fence) spools nothing: the daemon that took
the lock recovered this host's checkpoint.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import numpy as np
from sqlalchemy.exc import DBAPIError

from fairshare.core.consts import GLOBALUSAGE, Consts, decay
from fairshare.core.lnode import WriteBack, accrued, release
from fairshare.core.site import SiteState
from fairshare.core.steps import refresh_site as refresh_site_step
from fairshare.daemon.outage import UdbCalls
from fairshare.daemon.spool import Spool
from fairshare.daemon.state import Lnodes, refresh_entries
from fairshare.store.published import Counters, LnodeStore, Recovered
from udb.errors import UdbError
from udb.session import database_problem, display_name

log = logging.getLogger("shrdaemon")


class WriteBackMode(enum.Enum):
    """Which lnodes a write-back releases, and whether the entries are read after it."""

    PERIODIC = "periodic"  # the write-back interval: release the gone, read again
    SYNC = "sync"  # shrsync -u: release none, read again
    SHUTDOWN = "shutdown"  # the daemon stops: release every one, read nothing


def leave(ln: Lnodes, now: float, mode: WriteBackMode) -> list[tuple[int, WriteBack]]:
    """What every active leaf lnode accrued up to `now` (epoch s), by uid, releasing
    those `mode` releases: with no processes (PERIODIC; never Idle), none (SYNC), all
    (SHUTDOWN).  The CPU seconds of a lnode kept move into its entry's cpuquotaused, as
    the UDB will hold them once written."""
    t = ln.table
    leaves = t.active & ln.tree.leaf_mask
    if mode is WriteBackMode.SHUTDOWN:
        gone = leaves
    elif mode is WriteBackMode.PERIODIC:
        gone = leaves & (t.refs == 0)
        if ln.idle is not None:
            gone[ln.idle] = False
    else:
        gone = np.zeros_like(leaves)
    out = []
    for n in np.flatnonzero(leaves).tolist():
        uid = int(ln.tree.ids[n])
        if gone[n]:
            out.append((uid, release(t, n, now)))
            ln.entry.pop(n, None)
            ln.warned.discard(n)
            continue
        wb = accrued(t, n, now)
        out.append((uid, wb))
        st = ln.entry.get(n)
        if st is not None:
            ln.entry[n] = dataclasses.replace(st, cpuquotaused=st.cpuquotaused + wb.cpu_seconds)
    return out


def refresh_site(
    store: LnodeStore, ln: Lnodes, site: SiteState, now: float, consts: Consts, cpus: float
) -> None:
    """GLOBALUSAGE: the site-wide usage and factors of `ln` and `site` (a host of `cpus`
    CPUs) from the UDB at `now` (epoch s; fairshare.core.steps.refresh_site).  This
    site's usage only: the other sites' of a grid is the grid state's
    (fairshare.daemon.grid), counted where an entry's scope is global."""
    live_after = now - 3 * max(consts.writeback, consts.delta)  # hosts heard from since then
    view, usage = store.site_view(ln.tree, now, consts.halflife, live_after=live_after)
    refresh_site_step(ln.tree, ln.table, site, view, usage, consts, cpus)


@contextmanager
def writable_at_start(store: LnodeStore) -> Iterator[None]:
    """Around the daemon's first writes (its claim on the host, the recovery): a UDB it
    cannot write (immutable, read-only, or held by another writer past the busy
    timeout) is a UdbError in one line: the daemon cannot run on it."""
    try:
        yield
    except DBAPIError as err:
        name = display_name(store.engine.url.render_as_string(hide_password=False))
        raise UdbError(
            f"{name}: cannot write the UDB at start ({database_problem(err)}): the "
            "daemon must write it; is it immutable, read-only, or held by another writer?"
        ) from None


class WriteBacks:
    """What the daemon owes `store` (a host of `cpus` CPUs, for the site factors): the
    write-back and checkpoint timers (monotonic s), the increments not yet written
    (merged per uid, so a long outage holds one per lnode), and how many lnodes were
    written and checkpoints taken since start.  Its calls to the UDB go through the
    `UdbCalls` given (fairshare.daemon.outage), which is told of what is kept (`kept`)
    and calls `due_now` when the UDB answers again.  What the UDB does not take goes
    to `spool` (fairshare.daemon.spool) too, so a stop or a crash loses none of it."""

    def __init__(self, store: LnodeStore, cpus: float, spool: Spool | None = None) -> None:
        self.store, self.cpus = store, cpus
        self.spool = spool or Spool(None, store.host)
        self.pending: dict[int, WriteBack] = {}  # by uid, what the UDB has not taken
        self.halflife = 0.0  # s, to merge increments (the constants' last)
        self.writebacks = 0
        self.checkpoints = 0
        self.next_writeback = 0.0
        self.next_checkpoint = 0.0
        #: The lnode cgroups' counters a write-back or checkpoint at `now` covers (the
        #: daemon's collector; None: it has none).
        self.covered: Callable[[float], Counters | None] = lambda now: None

    def kept(self) -> int:
        """How many lnodes' increments wait for the UDB."""
        return len(self.pending)

    def due_now(self) -> None:
        """Write back what was kept at the end of this cycle (the UDB answers again)."""
        self.next_writeback = 0.0

    def keep(self, owed: list[tuple[int, WriteBack]]) -> None:
        """Write `owed` (by uid) with the next write-back (released lnodes of an old tree)."""
        merge_into(self.pending, owed, self.halflife)

    def recover(self, halflife: float) -> None:
        """At start: write back what a spool file left (once: fairshare.daemon.spool),
        then what a crashed daemon checkpointed, each logged."""
        self.halflife = halflife
        self._replay_spool(halflife)
        for r in self.store.recover(halflife):
            log_recovered(r)

    def _replay_spool(self, halflife: float) -> None:
        """Write back what a spool file left, once (fairshare.daemon.spool), and remove it."""
        left = self.spool.load()
        if left is None:
            return
        serial, owed, counters = left
        if self.store.replay(owed, serial, halflife, counters):
            log.info(
                "wrote back the spool %s: %d lnodes, %.3f CPU s owed since %s",
                self.spool.path,
                len(owed),
                sum(wb.cpu_seconds for _u, wb in owed),
                _when(min(wb.shextime for _u, wb in owed) if owed else 0.0),
            )
        else:
            log.info("spool %s: already written back; removed", self.spool.path)
        self.spool.remove()

    def start(self, mono: float, consts: Consts) -> None:
        """The first write-back and checkpoint come one interval after `mono`."""
        self.next_writeback = mono + consts.writeback
        self.next_checkpoint = mono + consts.checkpoint

    def when_due(
        self, udb: UdbCalls, ln: Lnodes, site: SiteState, now: float, mono: float, consts: Consts
    ) -> None:
        """The PERIODIC write-back and the checkpoint, when their time has come at `mono`
        (`now`: epoch s).  A checkpoint the UDB does not take is spooled with what is
        kept."""
        if mono >= self.next_writeback:
            self.next_writeback = mono + consts.writeback
            self.write_back(udb, ln, site, now, consts, WriteBackMode.PERIODIC)
        if mono >= self.next_checkpoint:
            self.next_checkpoint = mono + consts.checkpoint
            counters = self.covered(now)
            args = (ln.tree, ln.table, now) + ((counters,) if counters is not None else ())
            n = udb.call("checkpoint", self.store.checkpoint, *args)
            if n is not None:
                self.checkpoints += 1
            elif not udb.fenced:
                owed = dict(self.pending)
                merge_into(owed, unwritten(ln, now), self.halflife)
                self.spool.save(owed, counters)
            log.debug("checkpointed %s lnodes", n)

    def write_back(
        self,
        udb: UdbCalls,
        ln: Lnodes,
        site: SiteState,
        now: float,
        consts: Consts,
        mode: WriteBackMode,
    ) -> int:
        """Write what the lnodes of `ln` accrued up to `now` (epoch s) and what was kept,
        releasing as `mode` says (`leave`); then, unless SHUTDOWN, read the active
        entries again and, with GLOBALUSAGE, refresh `site`.  Returns how many lnodes
        were written, 0 when the UDB did not take them (they are kept, and spooled)."""
        self.halflife = consts.halflife
        merge_into(self.pending, leave(ln, now, mode), consts.halflife)
        owed = list(self.pending.items())
        by_uid = None
        if ln.tree.own_halflives:  # each entry's usage ages with its node's half-life
            hl = ln.tree.halflives(consts.halflife)
            by_uid = dict(zip(ln.tree.ids[1:].tolist(), hl[1:].tolist(), strict=True))
        counters = self.covered(now)
        if counters is not None and mode is WriteBackMode.SHUTDOWN:  # nothing left to cover
            counters = dataclasses.replace(counters, cpu={})
        args = (owed, consts.halflife, self.spool.serial, by_uid, counters)
        if udb.call("write back", self.store.write_back, *args) is None:
            if not udb.fenced:
                self.spool.save(self.pending, counters)
            return 0
        self.spool.remove()
        written, self.pending = len(owed), {}
        self.writebacks += written
        if owed:
            log.debug("wrote back %d lnodes", written)
        if mode is not WriteBackMode.SHUTDOWN:
            udb.read("re-read the active entries", refresh_entries, ln, self.store)
            self._refresh(udb, ln, site, now, consts)
        return written

    def _refresh(self, udb: UdbCalls, ln: Lnodes, site: SiteState, now: float, consts: Consts):
        """After a write-back, with GLOBALUSAGE: the site-wide usage and factors."""
        if consts.flags & GLOBALUSAGE:
            args = (self.store, ln, site, now, consts, self.cpus)
            udb.read("refresh the site-wide usage", refresh_site, *args)

    def log_stopped(self, cycles: int, started: bool, fenced: bool) -> None:
        """The daemon's last line, after `cycles` cycles: whether everything was written
        back, and if not, where what was not went (`started`: the daemon had a tree)."""
        unwritten = self.unwritten_line(fenced)
        if not started:
            log.info("stopped before the first cycle")
        elif unwritten is None and not fenced:
            log.info("stopped after %d cycles; every lnode written back", cycles)
        elif unwritten is None:
            log.error("stopped after %d cycles; the lock lost, nothing written back", cycles)
        else:
            log.error("stopped after %d cycles; %s", cycles, unwritten)

    def unwritten_line(self, fenced: bool) -> str | None:
        """What the UDB did not take before the daemon stopped, said as the end of its
        last line; None when it took everything."""
        if not self.pending:
            return None
        what = (
            f"the increments of {len(self.pending)} lnodes "
            f"({sum(wb.cpu_seconds for wb in self.pending.values()):.3f} CPU s, charge "
            f"{sum(wb.charge for wb in self.pending.values()):.6g})"
        )
        if fenced:
            return (
                f"{what} were not written: the daemon that holds the lock now recovered "
                "this host's checkpoint"
            )
        if self.spool.serial:
            return f"{what} were not written back: spooled to {self.spool.path}"
        return f"{what} were not written back and could not be spooled: lost"


def merge_into(
    owed: dict[int, WriteBack], more: Iterable[tuple[int, WriteBack]], halflife: float
) -> None:
    """Add the increments `more` (by uid) to `owed` in place, one per uid: the usage
    aged to the later of the two times (`halflife` s) and summed, the charges and CPU
    seconds summed (what fairshare.store.published would make of the two)."""
    for uid, wb in more:
        was = owed.get(uid)
        if was is None:
            owed[uid] = wb
            continue
        late = max(was.shextime, wb.shextime)
        usage = was.shusage * decay(late - was.shextime, halflife) + wb.shusage * decay(
            late - wb.shextime, halflife
        )
        owed[uid] = WriteBack(usage, late, was.charge + wb.charge, was.cpu_seconds + wb.cpu_seconds)


def unwritten(ln: Lnodes, now: float) -> list[tuple[int, WriteBack]]:
    """Every active leaf lnode's increment not yet written, as of `now` (epoch s), by
    uid, without marking it written (what a checkpoint holds)."""
    t = ln.table
    return [
        (
            int(ln.tree.ids[n]),
            WriteBack(
                max(float(t.usage[n] - t.stored[n]), 0.0),
                float(now),
                float(t.charge[n] - t.charge_written[n]),
                float(t.cpu_seconds[n] - t.cpu_written[n]),
            ),
        )
        for n in ln.active_leaves()
    ]


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


@runtime_checkable
class CounterSource(Protocol):
    """A collector that reads the lnode cgroups' counters (fairshare.collect.procfs)."""

    def covered(self) -> dict[str, float]: ...
    def boot_time(self) -> float: ...
    def resume(self, covered: dict[str, float]) -> tuple[dict[str, float], list[str]]: ...


def follow_counters(ledger: WriteBacks, collector) -> None:
    """Make every write-back and checkpoint of `ledger` store the counters `collector`
    covered (when it reads counters: fairshare.collect.procfs.ProcfsCollector)."""
    if isinstance(collector, CounterSource):
        ledger.covered = lambda now: Counters(collector.covered(), collector.boot_time(), now)


def resume_counters(stored: Counters | None, collector, now: float) -> None:
    """At start, after the baseline sample: charge with the next sample what each lnode
    cgroup's processes used since `stored` (what the last write-back or checkpoint of a
    daemon that did not stop cleanly covered), from the kernel's counters; say what
    cannot be charged so (the machine rebooted; a cgroup gone or made anew)."""
    if stored is None or not isinstance(collector, CounterSource):
        return
    since = _when(stored.time)
    if abs(collector.boot_time() - stored.boot) > 1.0:
        log.warning(
            "the machine rebooted (at %s) since the last write-back or checkpoint (%s): "
            "the CPU the lnodes used from %s until the reboot cannot be charged",
            *(_when(collector.boot_time()), since, since),
        )
        return
    gap, lost = collector.resume(stored.cpu)
    for name, cpu in sorted(gap.items()):
        log.info(
            "lnode cgroup %s: %.3f CPU s used since %s, while no daemon charged it, "
            "charged from its counter",
            *(name, cpu, since),
        )
    for name in sorted(lost):
        log.warning(
            "lnode cgroup %s: its counter is gone or was reset since %s: the CPU it used "
            "from %s until %s cannot be charged",
            *(name, since, since, _when(now)),
        )


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def log_recovered(r: Recovered) -> None:
    """Say that lnode `r` came back from a checkpoint."""
    log.info(
        "recovered lnode %s (uid %d) from the checkpoint of %s: usage %.6g, "
        "charge %.6g, %.3f CPU s",
        r.name,
        r.uid,
        _when(r.time),
        r.usage,
        r.charge,
        r.cpu_seconds,
    )
