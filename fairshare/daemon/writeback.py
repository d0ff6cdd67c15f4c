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
cannot be reached) are kept in `pending` and written with the next write-back that it
takes.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from fairshare.core.consts import GLOBALUSAGE, Consts
from fairshare.core.lnode import WriteBack, accrued, release
from fairshare.core.site import SiteState
from fairshare.core.steps import refresh_site as refresh_site_step
from fairshare.daemon.outage import UdbCalls
from fairshare.daemon.state import Lnodes, refresh_entries
from fairshare.store.published import Counters, LnodeStore, Recovered

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
    CPUs) from the UDB at `now` (epoch s; fairshare.core.steps.refresh_site)."""
    live_after = now - 3 * max(consts.writeback, consts.delta)  # hosts heard from since then
    view, usage = store.site_view(ln.tree, now, consts.halflife, live_after=live_after)
    refresh_site_step(ln.tree, ln.table, site, view, usage, consts, cpus)


class WriteBacks:
    """What the daemon owes `store` (a host of `cpus` CPUs, for the site factors): the
    write-back and checkpoint timers (monotonic s), the increments not yet written,
    and how many lnodes were written and checkpoints taken since start.  Its calls to
    the UDB go through the `UdbCalls` given (fairshare.daemon.outage), which is told of
    what is kept (`kept`) and calls `due_now` when the UDB answers again."""

    def __init__(self, store: LnodeStore, cpus: float) -> None:
        self.store, self.cpus = store, cpus
        self.pending: list[tuple[int, WriteBack]] = []  # by uid, the UDB has not taken
        self.writebacks = 0
        self.checkpoints = 0
        self.next_writeback = 0.0
        self.next_checkpoint = 0.0
        #: The lnode cgroups' counters a write-back or checkpoint at `now` covers (the
        #: daemon's collector; None: it has none).
        self.covered: Callable[[float], Counters | None] = lambda now: None

    def kept(self) -> int:
        """How many increments wait for the UDB."""
        return len(self.pending)

    def due_now(self) -> None:
        """Write back what was kept at the end of this cycle (the UDB answers again)."""
        self.next_writeback = 0.0

    def keep(self, owed: list[tuple[int, WriteBack]]) -> None:
        """Write `owed` (by uid) with the next write-back (released lnodes of an old tree)."""
        self.pending.extend(owed)

    def recover(self, halflife: float) -> None:
        """At start: write back what a crashed daemon checkpointed, each lnode logged."""
        for r in self.store.recover(halflife):
            log_recovered(r)

    def start(self, mono: float, consts: Consts) -> None:
        """The first write-back and checkpoint come one interval after `mono`."""
        self.next_writeback = mono + consts.writeback
        self.next_checkpoint = mono + consts.checkpoint

    def when_due(
        self, udb: UdbCalls, ln: Lnodes, site: SiteState, now: float, mono: float, consts: Consts
    ) -> None:
        """The PERIODIC write-back and the checkpoint, when their time has come at `mono`
        (`now`: epoch s)."""
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
        were written, 0 when the UDB did not take them (they are kept)."""
        out = leave(ln, now, mode)
        self.pending.extend(out)
        counters = self.covered(now)
        if counters is not None and mode is WriteBackMode.SHUTDOWN:  # nothing left to cover
            counters = dataclasses.replace(counters, cpu={})
        args = (self.pending, consts.halflife) + ((counters,) if counters is not None else ())
        if udb.call("write back", self.store.write_back, *args) is None:
            return 0
        written, self.pending = len(self.pending), []
        self.writebacks += written
        if out:
            log.debug("wrote back %d lnodes", written)
        if mode is not WriteBackMode.SHUTDOWN:
            udb.call("re-read the active entries", refresh_entries, ln, self.store)
            if consts.flags & GLOBALUSAGE:
                args = (self.store, ln, site, now, consts, self.cpus)
                udb.call("refresh the site-wide usage", refresh_site, *args)
        return written

    def log_unwritten(self) -> None:
        """Say what the UDB did not take before the daemon stopped (if anything)."""
        if self.pending:
            log.error(
                "UDB unreachable at exit: the increments of %d lnodes (usage %.6g, charge "
                "%.6g) were not written back",
                len(self.pending),
                sum(wb.shusage for _u, wb in self.pending),
                sum(wb.charge for _u, wb in self.pending),
            )


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
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.time)),
        r.usage,
        r.charge,
        r.cpu_seconds,
    )
