"""The shrdaemon loop: `Daemon` holds what lives between cycles, and `Daemon.step`, one
cycle, calls the steps listed in fairshare.daemon's docstring top to bottom, each in
the module named after it.

`Daemon` is driven by what it is given: a collector (the real machine or the
simulator), an enforcer, a store on the UDB, a clock, and the one OsActions object
(fairshare.enforce.actions) through which it and its enforcer change processes: signals,
nice values, cgroup files.  The simulated daemon gets the simulated machine's
actions, so it cannot reach a real process.  Observers (sd_notify, metrics) are told
of its life and read it through `DaemonView`, nothing else.

When the UDB cannot be reached, or written (a full disk, a read-only database), the
daemon keeps scheduling from what it knows (the last constants and tree; new lnodes
start from usage 0), logs one line a minute, and keeps what it owes the UDB, merged per
lnode and spooled to a local file (fairshare.daemon.spool), until the UDB takes it
(fairshare.daemon.outage).  A SQLite UDB's WAL is kept small (udb.session.trim_wal).

Before each cycle's writes it makes sure it still holds its host's lock (`lock`: a
PostgreSQL restart drops it) and every write carries the host's generation
(fairshare.store.fence): a daemon whose lock another has taken writes nothing more,
says so and stops.

SIGTERM and SIGINT stop it: everything is written back, the enforcer undoes what
it did, the published table is marked stopped, and `run` returns.  The time comes
from the clock passed in, so the simulator runs the very same loop on simulated
seconds without sleeping.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from sqlalchemy import Engine

from fairshare.collect import Collector, ProcessSample
from fairshare.core.consts import GLOBALUSAGE, Consts
from fairshare.core.exits import SiteExit
from fairshare.core.lnode import LnodeTable
from fairshare.core.site import SiteState
from fairshare.core.tree import ShareTree
from fairshare.daemon.accounts import AccountLookup
from fairshare.daemon.charges import charge, resources_charged
from fairshare.daemon.decisions import enforcer_targets, send_quota_signals
from fairshare.daemon.enrol import Enrolment, NewUids
from fairshare.daemon.exchange import exchange
from fairshare.daemon.grid import GRID_INTERVAL, GridExchange
from fairshare.daemon.lock import HostLock, keep_lock
from fairshare.daemon.loop import Loop
from fairshare.daemon.outage import UdbCalls
from fairshare.daemon.placing import Placing, ProcessEvents
from fairshare.daemon.reload import Reloader, load_lnodes, log_tree
from fairshare.daemon.spool import Spool
from fairshare.daemon.state import (
    Lnodes,
    activate_arriving,
    advance_lnodes,
    carry_over,
    refresh_entries,
    same_tree,
)
from fairshare.daemon.sync import serve
from fairshare.daemon.writeback import (
    WriteBackMode,
    WriteBacks,
    follow_counters,
    resume_counters,
    writable_at_start,
)
from fairshare.enforce.actions import OsActions
from fairshare.enforce.base import Enforcer
from fairshare.enforce.switch import Enforcement
from fairshare.store.published import CycleHeader, LnodeStore, add_counts
from udb.session import read_session, trim_wal

log = logging.getLogger("shrdaemon")


class Clock(Protocol):
    """Where the daemon's time comes from."""

    def time(self) -> float:
        """Wall-clock time, epoch seconds (stored in shextime and the published header)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (timers)."""
        ...

    def sleep(self, seconds: float, wake: threading.Event) -> None:
        """Wait `seconds`, or less if `wake` is set."""
        ...


class DaemonView(Protocol):
    """What observers and tests read of a daemon, read-only (the tree and table are
    None before `start`)."""

    @property
    def cycle(self) -> int:
        """Cycles run since start."""
        ...

    @property
    def enforcer_name(self) -> str:
        """The enforcer in force ("none" while NOSCHED/NOSHARE keep it off)."""
        ...

    @property
    def tree(self) -> ShareTree | None:
        """The share tree in force."""
        ...

    @property
    def table(self) -> LnodeTable | None:
        """The lnode table after the last cycle."""
        ...

    @property
    def writebacks(self) -> int:
        """Lnodes written back to the UDB since start."""
        ...

    @property
    def checkpoints(self) -> int:
        """Checkpoints taken since start."""
        ...

    @property
    def clock(self) -> Clock:
        """The daemon's clock."""
        ...

    @property
    def cpus(self) -> float:
        """The machine's CPUs, which the cycle shares out (fractions of the machine are
        of these)."""
        ...

    @property
    def elapsed(self) -> float:
        """Seconds the last cycle covered (its sample's interval; 0 before the first)."""
        ...


class Observer(Protocol):
    """Told of the daemon's life (sd_notify, metrics): after start, after every cycle
    (with the wall-clock seconds it took) and when it begins to shut down."""

    def started(self, daemon: DaemonView) -> None: ...

    def cycled(self, daemon: DaemonView, seconds: float) -> None: ...

    def stopping(self, daemon: DaemonView) -> None: ...


class SystemClock:
    """The real clocks; sleeping wakes early when a signal sets `wake`."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float, wake: threading.Event) -> None:
        wake.wait(max(seconds, 0.0))


@dataclass(frozen=True)
class Options:
    """How the daemon runs.  `enforce_min_uid`: processes of lower uids (root, system
    daemons) are charged but never moved or reniced (nor enrolled).  `cpus`: the host's
    CPUs (default os.cpu_count()), published for a site's displays and GLOBALUSAGE.
    `site_exits`: the site's hooks (shrdaemon --site-hook)."""

    enforce_min_uid: int = 1000
    cpus: float | None = None
    #: The site's hooks run every cycle before the enforcer (fairshare.core.exits).
    site_exits: tuple[SiteExit, ...] = ()
    #: Uids without an entry (fairshare.daemon.enrol): None charges them to unknown.
    new_uids: NewUids | None = None
    #: This host's speed factor (shrdaemon --speed) over the UDB's (shradmin --speed).
    speed: float | None = None
    #: Seconds between a grid's fetches of mounted policies and pulls of peers' usage
    #: records (fairshare.daemon.grid; 0: never).
    grid_interval: float = GRID_INTERVAL
    #: Fetch and pull in a thread of their own, not in the cycle (the real daemon's).
    grid_background: bool = False


class Daemon:
    """The fair-share daemon's loop over injected collector, enforcer, store, clock and
    OS actions (there is no default for `actions`: whoever builds a daemon says which
    machine it changes, and its enforcer must change that same one).  `process_events`
    (None: none) report new processes to be placed at once (fairshare.daemon.placing).
    `lock`: the host's lock, checked before every cycle's writes (None: not checked);
    `spool`: where what the UDB does not take is kept (None: nowhere)."""

    def __init__(
        self,
        engine: Engine,
        collector: Collector,
        enforcer: Enforcer,
        store: LnodeStore,
        actions: OsActions,
        clock: Clock | None = None,
        options: Options | None = None,
        account_of: AccountLookup | None = None,
        process_events: ProcessEvents | None = None,
        observers: Sequence[Observer] = (),
        lock: HostLock | None = None,
        spool: Spool | None = None,
    ) -> None:
        same_machine(enforcer, actions)
        self.engine, self.collector, self.store, self.actions = engine, collector, store, actions
        self.clock = clock or SystemClock()
        self.options = options or Options()
        self.account_of = account_of
        self.observers = list(observers)
        self.enforcement = Enforcement(enforcer, actions)
        new_uids = self.options.new_uids
        self.enrolment = Enrolment(new_uids, self.options.enforce_min_uid) if new_uids else None
        self.placing = Placing(
            process_events, self.enforcement, self.options.enforce_min_uid, account_of
        )
        self.reloader = Reloader()  # the constants and tree read from the UDB
        self.reloader.speed = self.options.speed
        self.loop = Loop(self.clock, on_hup=self.reloader.request)
        self.cpus = float(self.options.cpus or os.cpu_count() or 1)
        self.lock = lock
        self.ledger = WriteBacks(store, self.cpus, spool)  # what the UDB is owed
        follow_counters(self.ledger, collector)
        self.grid = GridExchange(engine, self.options.grid_interval, self.options.grid_background)
        self.udb = UdbCalls(
            self.clock.monotonic, self.ledger.kept, self.ledger.due_now, self.loop.stop
        )
        self.cycle = 0
        self.elapsed = 0.0  # seconds the last cycle covered
        self.started = self.clock.time()
        self.counts: dict[str, float] = {}  # resource totals since start (shrview -ds)
        # Set by `start`, then by every cycle:
        self.consts: Consts | None = None
        self.site: SiteState | None = None  # GLOBALUSAGE and grid state (core.site, core.grid)
        self._lnodes: Lnodes | None = None
        self._pids: dict[int, list[ProcessSample]] = {}  # leaf -> its processes, last sample

    # -- what observers read (DaemonView) ---------------------------------------------------

    @property
    def tree(self) -> ShareTree | None:
        return None if self._lnodes is None else self._lnodes.tree

    @property
    def table(self) -> LnodeTable | None:
        return None if self._lnodes is None else self._lnodes.table

    @property
    def writebacks(self) -> int:
        return self.ledger.writebacks

    @property
    def checkpoints(self) -> int:
        return self.ledger.checkpoints

    @property
    def scheduling(self) -> bool:
        """False while NOSCHED/NOSHARE keep the enforcer off."""
        return self.enforcement.scheduling

    @property
    def enforcer_name(self) -> str:
        return self.enforcement.name

    @property
    def schedule(self) -> str:
        """The shradmin schedule in force ("" = the base settings)."""
        return self.reloader.schedule

    # -- the loop (fairshare.daemon.loop) ---------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop the loop, SIGHUP reloads the tree (main thread only)."""
        self.loop.install_signal_handlers()

    def stop(self) -> None:
        """Ask the loop to stop after the current step (safe from signal handlers)."""
        self.loop.stop()

    def run(self, cycles: int | None = None) -> int:
        """Run `cycles` cycles (None: until stopped), then shut down; returns cycles run."""
        try:
            return self.loop.run(
                cycles, self._start_told, self.step, self.shutdown, lambda: self.consts.delta
            )
        finally:
            gc.unfreeze()

    def _start_told(self) -> None:
        self.start()
        # What is alive once started (the modules, the engine, the tree) lives as long as
        # the loop: leave it out of the garbage collector's full collections while the
        # loop runs (`run` unfreezes), which otherwise walk all of it every few minutes
        # (68 ms of CPU with 1,000 processes; 33 ms every 150 cycles in bench_daemon
        # --fake, 0.22 -> 0.003 ms a cycle).
        gc.freeze()
        self._tell("started")

    def start(self) -> None:
        """Load the constants, recover from a crash, load the tree, set the enforcer up,
        take a baseline."""
        consts = self.consts = self.reloader.consts(self.engine, self.clock.time())
        with writable_at_start(self.store):
            generation = self.store.claim()  # from now on, no daemon before this one writes
            log.debug("host %s: generation %d", self.store.host, generation)
            self.ledger.recover(consts.halflife)
        with read_session(self.engine) as s:
            ln = self._lnodes = load_lnodes(s, consts.mode)
        log_tree(ln)
        self.site = SiteState.new(ln.tree.size)
        self.enforcement.sync(consts.scheduling)
        self.placing.start(lambda: self._lnodes)
        self.ledger.start(self.clock.monotonic(), consts)
        self.collector.sample()  # baseline: the next sample's deltas start here
        # what the lnodes used while no daemon ran, from the counters (a kill -9)
        stored = self.udb.call("read the lnode counters", self.store.stored_counters)
        resume_counters(stored, self.collector, self.clock.time())

    def step(self) -> None:
        """One cycle: the steps of fairshare.daemon's docstring, in that order."""
        t0 = time.perf_counter()
        if self.lock is not None:
            keep_lock(self.lock, self.udb, self.store)
        # reload: the poll, the constants in force, the tree when it changed
        consts = self.consts = self.udb.read("read the constants", self._reload) or self.consts
        self.enforcement.sync(consts.scheduling)
        ln = self._lnodes
        # charges: sample the processes, charge each to its leaf
        wanted = resources_charged(consts)
        sample = self.collector.sample(**wanted, placed=self.placing.skim(ln))
        caps = self.enforcement.enforcer.capabilities
        sets_nice = (caps.sets_nice or caps.nice_local) and self.scheduling
        c, self._pids = charge(ln, sample, self.account_of, sets_nice, wanted)
        c.cpus = self.cpus
        add_counts(self.counts, c)
        self._enrol(ln, sample)
        # state: the arriving leaves' lnodes, then the cycle on the lnode table
        read = partial(self.udb.read, "read the new lnodes' entries", self.store.entry_states)
        activate_arriving(ln, c, read, sample.time, consts)
        elapsed = sample.elapsed if sample.elapsed > 0 else consts.delta
        advance_lnodes(ln, c, consts, elapsed, self.site, self.options.site_exits)
        self.cycle += 1
        self.elapsed = elapsed
        # sync: shrsync's requests, when the poll saw some
        if self.reloader.requests:
            update = partial(self._write_back, sample.time, WriteBackMode.SYNC)
            args = (self.engine, self.store, ln, sample.time, update)
            self.udb.call("serve shrsync requests", serve, *args)
        # decisions: the CPU-quota signals, the enforcer's targets
        send_quota_signals(ln, self._pids, consts, self.actions)
        if self.scheduling:
            self.enforcement.apply(
                enforcer_targets(ln, self._pids, self.options.enforce_min_uid, self.cpus)
            )
        # publish the lnode table (fairshare.store.published)
        header = cycle_header(self, sample.time, consts, float(c.cpu.sum()) / elapsed)
        self.udb.call("publish the lnode table", self.store.publish, ln.tree, ln.table, header)
        # exchange: GLOBALUSAGE's site-wide usage and view of the other hosts, every cycle
        if consts.flags & GLOBALUSAGE:
            args = (self.store, ln, self.site, self.ledger.pending, sample.time, consts)
            writes_back = self.clock.monotonic() >= self.ledger.next_writeback
            exchange(self.udb, *args, self.cpus, everyone=writes_back)
        trim_wal(self.engine)  # a SQLite UDB's WAL stays small, even on a small disk
        # grid: the mounted policies fetched, the peers' usage records pulled and taken
        mono = self.clock.monotonic()
        self.grid.when_due(self.udb, ln, self.site, sample.time, mono, consts)
        # writeback: the write-back and the checkpoint when due
        self.ledger.when_due(self.udb, ln, self.site, sample.time, mono, consts)
        self._tell("cycled", time.perf_counter() - t0)

    def shutdown(self) -> None:
        """Undo the enforcement, write every lnode back, drop the published table."""
        self._tell("stopping")
        self.placing.stop()
        fenced = self.fenced
        if self.enforcement.set_up and not fenced:  # else the lock's holder enforces now
            self.enforcement.undo()
            log.debug("%s enforcement undone", self.enforcement.enforcer.name)
        if self._lnodes is not None and not fenced:
            now = self.clock.time()
            self._write_back(now, WriteBackMode.SHUTDOWN)
            self.udb.call("mark the published table stopped", self.store.mark_stopped, now)
        self.ledger.log_stopped(self.cycle, self._lnodes is not None, fenced)

    @property
    def fenced(self) -> bool:
        """True once another daemon has taken this host's lock: nothing more is written."""
        return self.udb.fenced is not None

    # -- the pieces -------------------------------------------------------------------------

    def _enrol(self, ln: Lnodes, sample) -> None:
        """Enrol the sample's uids without an entry (fairshare.daemon.enrol); the next
        cycle's poll sees the new entries and schedules them under their group."""
        if self.enrolment is not None and (new := self.enrolment.unseen(ln, sample, self.cycle)):
            self.udb.call("enrol new uids", self.enrolment.enrol, self.engine, new, self.cycle)

    def _reload(self) -> Consts:
        """The reload step's reads (fairshare.daemon.reload): the constants in force, and
        the tree taken when it was read again."""
        now, ln = self.clock.time(), self._lnodes
        consts, reloaded = self.reloader.read(self.engine, self.store.host, ln, self.cycle, now)
        if reloaded is not None:
            self._take_tree(*reloaded)
        return consts

    def _take_tree(self, new: Lnodes, reason: str) -> None:
        """Take the tree of `new` (read for `reason`): the same tree keeps the table and
        re-reads the active entries; another takes the active lnodes over by name."""
        ln = self._lnodes
        if same_tree(new.tree, ln.tree):
            ln.acids = new.acids
            refresh_entries(ln, self.store)
            return
        self.ledger.keep(carry_over(ln, new, self.clock.time()))
        self._lnodes = new
        self.site = SiteState.new(new.tree.size)  # site factors restart on the new tree
        self.grid.again()  # and the other sites' usage is taken again at the next cycle
        refresh_entries(new, self.store)
        log.info("share tree reloaded (%s)", reason)
        log_tree(new)

    def _write_back(self, now: float, mode: WriteBackMode) -> int:
        """A write-back of every lnode in `mode` (fairshare.daemon.writeback)."""
        return self.ledger.write_back(self.udb, self._lnodes, self.site, now, self.consts, mode)

    def _tell(self, event: str, *args) -> None:
        """Call `event` on every observer; an observer's failure is logged, never fatal."""
        for o in self.observers:
            try:
                getattr(o, event)(self, *args)
            except Exception:
                log.exception("%s observer failed on %s", type(o).__name__, event)


def same_machine(enforcer: Enforcer, actions: OsActions) -> None:
    """ValueError unless `enforcer` changes the machine of `actions`."""
    if enforcer.actions is not actions:
        raise ValueError(
            f"the {enforcer.name} enforcer acts on the {enforcer.actions.name} machine, "
            f"the daemon on the {actions.name} one"
        )


def cycle_header(d: Daemon, now: float, consts: Consts, delivered: float) -> CycleHeader:
    """The published header of daemon `d`'s cycle, sampled at `now` (epoch s)."""
    return CycleHeader(
        time=now,
        delta=consts.delta,
        enforcer=d.enforcer_name,
        pid=os.getpid(),
        cycle=d.cycle,
        mode=consts.mode,
        started=d.started,
        counts=dict(d.counts),
        cpus=d.cpus,
        delivered=delivered,
    )
