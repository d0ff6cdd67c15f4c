"""The shrdaemon loop: collect, charge, run the cycle, enforce, publish, remember.

`Daemon` is driven by what it is given: a collector (the real machine or the
simulator), an enforcer, a store on the UDB, a clock, and the one OsActions object
(fairshare.enforce.actions) through which it and its enforcer change processes: signals,
nice values, cgroup files.  The simulated daemon gets the simulated machine's
actions, so it cannot reach a real process.  `step` is one cycle; each of its steps
is a function of its own module, the daemon only holds the state between them:

1. poll the UDB (one cheap statement: fairshare.daemon.reload.poll); read the constants again
   when their change serial moved, and apply shradmin's schedule (fairshare.admin.shradmin), so
   a change acts within one delta; when the UDB's entries changed, periodically, or on
   SIGHUP, rebuild the share tree and carry the lnodes over by name (fairshare.daemon.state);
2. sample the processes (fairshare.collect) and charge each to its leaf lnode
   (fairshare.daemon.charges; Share by Account through fairshare.daemon.accounts);
3. create the lnodes of new leaves with their stored usage aged since shextime
   (fairshare.daemon.state), and run the pure cycle (fairshare.core.policies.run_cycle); with
   GLOBALUSAGE the site factors adjust the effective shares (fairshare.core.site);
4. serve shrsync's requests when the poll saw some (fairshare.daemon.sync), send the CPU-quota
   signals and hand the
   enforcer its targets (fairshare.daemon.decisions; fairshare.enforce.switch keeps the
   enforcer off under NOSCHED/NOSHARE and applies the UDB's nice beside it), and
   publish the lnode table (fairshare.store.published);
5. every `writeback` seconds add what every lnode accrued to the UDB (increments, so
   hosts sharing one UDB never erase each other's charges) and release the lnodes whose
   processes have all gone (fairshare.daemon.writeback.leave); with GLOBALUSAGE then refresh the
   site-wide usage and site factors; every `checkpoint` seconds checkpoint every active
   lnode's unwritten increment.

When the UDB cannot be reached the daemon keeps scheduling from what it knows (the last
constants and tree; new lnodes start from usage 0), logs one line a minute, and keeps
what it owes the UDB until the UDB answers again, then writes it all back
(fairshare.daemon.outage).

SIGTERM and SIGINT stop it: everything is written back, the enforcer undoes what
it did, the published table is marked stopped, and `run` returns.  The time comes
from the clock passed in, so the simulator runs the very same loop on simulated
seconds without sleeping.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from sqlalchemy import Engine

from fairshare.collect import Collector, ProcessSample, Sample
from fairshare.core.consts import GLOBALUSAGE, Consts
from fairshare.core.site import SiteState
from fairshare.core.steps import advance, refresh_site
from fairshare.daemon.accounts import AccountLookup
from fairshare.daemon.charges import consumption, leaf_of, resources_charged
from fairshare.daemon.decisions import enforcer_targets, quota_signals
from fairshare.daemon.loop import Loop
from fairshare.daemon.outage import UdbCalls
from fairshare.daemon.reload import Reloader, load_lnodes, poll
from fairshare.daemon.state import (
    Lnodes,
    activate_leaves,
    arriving,
    carry_over,
    refresh_entries,
    same_tree,
)
from fairshare.daemon.sync import QUOTA, UPDATE, reread_quotas, serve_requests
from fairshare.daemon.writeback import WriteBackMode, WriteBacks
from fairshare.enforce.actions import OsActions, same_process
from fairshare.enforce.base import Enforcer
from fairshare.enforce.switch import Enforcement
from fairshare.store.published import CycleHeader, LnodeStore, add_counts
from udb.session import read_session

log = logging.getLogger("shrdaemon")

_COSTS = ("cost_tick", "cost_bio", "cost_sio", "cost_syscall", "cost_mem", "percent")
#: The constants each lnode field is computed from, named when a value is not finite.
_CONSTS_OF = {
    "usage": (*_COSTS, "halflife", "delta"),
    "charge": _COSTS,
    "rate": (*_COSTS, "halflife", "delta"),
    "priority": (*_COSTS, "halflife", "sharemin"),
    "m_share": ("sharemin",),
    "e_share": ("sharemin", "maxushare", "mingshare", "maxusage"),
    "adj": ("mingshare",),
}


class Observer(Protocol):
    """Told of the daemon's life (sd_notify, metrics): after start, after every cycle
    (with the wall-clock seconds it took) and when it begins to shut down."""

    def started(self, daemon: Daemon) -> None: ...

    def cycled(self, daemon: Daemon, seconds: float) -> None: ...

    def stopping(self, daemon: Daemon) -> None: ...


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
    daemons) are charged but never moved or reniced.  `cpus`: the host's CPUs (default
    os.cpu_count()), published for a site's displays and GLOBALUSAGE."""

    enforce_min_uid: int = 1000
    cpus: float | None = None


class Daemon:
    """The fair-share daemon's loop over injected collector, enforcer, store, clock and
    OS actions (there is no default for `actions`: whoever builds a daemon says which
    machine it changes, and its enforcer must change that same one)."""

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
        process_events=None,
        observers: Sequence[Observer] = (),
    ) -> None:
        same_machine(enforcer, actions)
        self.engine, self.collector, self.store, self.actions = engine, collector, store, actions
        self.enforcer = enforcer
        self.enforcement = Enforcement(enforcer, actions)
        self.clock = clock or SystemClock()
        self.options = options or Options()
        self.account_of = account_of
        self.process_events = process_events  # places new sessions at once (or None)
        self._placing_for = 0  # cycles since they have been placing every new session
        self.config = Reloader()  # the constants and tree read from the UDB
        self.requests = 0  # shrsync requests waiting, as of the last poll
        self.loop = Loop(self.clock, on_hup=self.config.request)
        self.wake = self.loop.wake
        self.cycle = 0
        self.started = self.clock.time()
        self.counts: dict[str, float] = {}  # resource totals since start (shrview -ds)
        self.lnodes: Lnodes | None = None
        self.consts: Consts | None = None
        self._pids: dict[int, list[ProcessSample]] = {}  # leaf -> its processes, last sample
        self.cpus = float(self.options.cpus or os.cpu_count() or 1)
        self.site: SiteState | None = None  # GLOBALUSAGE state (fairshare.core.site)
        self.udb = UdbCalls(self.clock.monotonic, lambda: len(self.ledger.pending), self._udb_back)
        self.ledger = WriteBacks(store, self.udb)
        self.observers = list(observers)
        self.last_cycle_seconds = 0.0  # wall-clock seconds the last step took

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
        return self.config.schedule

    # -- the loop (fairshare.daemon.loop) ----------------------------------------------------------

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
        """Recover from a crash, load consts and tree, set the enforcer up, take a baseline."""
        halflife = self.config.consts(self.engine, self.clock.time()).halflife
        for r in self.store.recover(halflife):
            log_recovered(r)
        self.consts = self.config.consts(self.engine, self.clock.time())
        with read_session(self.engine) as s:
            self.lnodes = load_lnodes(s, self.consts.mode)
        log_tree(self.lnodes)
        self.site = SiteState.new(self.lnodes.tree.size)
        self.enforcement.sync(self.consts.scheduling)
        if self.process_events is not None and self.enforcer.capabilities.places:
            self.process_events.start(self.place_new)
        self.ledger.start(self.clock.monotonic(), self.consts)
        self.collector.sample()  # baseline: the next sample's deltas start here

    def step(self) -> None:
        """One cycle (see the module docstring)."""
        t0 = time.perf_counter()
        consts = self.udb.call("read the constants", self._read_consts) or self.consts
        self.consts = consts
        self.enforcement.sync(consts.scheduling)
        sample, used, elapsed = self._charge(consts)
        ln = self.lnodes
        self.cycle += 1
        if self.requests:
            self.udb.call("serve shrsync requests", self._serve_requests, sample.time)
        send_quota_signals(ln, self._pids, consts, self.actions)
        if self.scheduling:
            self.enforcement.apply(enforcer_targets(ln, self._pids, self.options.enforce_min_uid))
        header = CycleHeader(
            time=sample.time,
            delta=consts.delta,
            enforcer=self.enforcer_name,
            pid=os.getpid(),
            cycle=self.cycle,
            mode=consts.mode,
            started=self.started,
            counts=dict(self.counts),
            cpus=self.cpus,
            delivered=used / elapsed,
        )
        self.udb.call("publish the lnode table", self.store.publish, ln.tree, ln.table, header)
        self._timers(sample.time, consts)
        self.last_cycle_seconds = time.perf_counter() - t0
        self._tell("cycled", self.last_cycle_seconds)

    def _charge(self, consts: Consts) -> tuple[Sample, float, float]:
        """Sample, charge, activate and run the cycle on the lnode table; returns the
        sample, the CPU seconds it saw used and the seconds it covers."""
        wanted = resources_charged(consts)
        ln = self.lnodes
        # The cycles that place what is already running list /proc: skim from the third.
        self._placing_for = self._placing_for + 1 if self._placing_at_once(ln) else 0
        sample = self.collector.sample(**wanted, placed=self._placing_for > 2)
        if self.account_of is not None:  # e.g. newacct's sessions (fairshare.daemon.sessions)
            self.account_of.refresh(sample, ln.acids)
        sets_nice = self.enforcer.capabilities.sets_nice and self.scheduling
        c, self._pids = consumption(ln, sample, self.account_of, sets_nice, **wanted)
        add_counts(self.counts, c)
        self._activate(ln, arriving(ln, c), sample.time)
        elapsed = sample.elapsed if sample.elapsed > 0 else consts.delta
        ln.table, not_finite = advance(ln.tree, ln.table, c, consts, elapsed, self.site)
        log_not_finite(ln, not_finite, consts)
        return sample, float(c.cpu.sum()), elapsed

    def _placing_at_once(self, ln: Lnodes) -> bool:
        """Whether `place_new` puts every new session in its lnode cgroup as it appears,
        so that, once the processes already running are placed (by the first two cycles
        since, which list every process: children forked while their parent was being
        moved are found by the second), the collector need not look for unplaced
        processes every cycle."""
        return (
            self.process_events is not None
            and self.process_events.listening
            and self.enforcer.capabilities.places
            and self.scheduling
            and ln.tree.mode != "account"
        )

    def _timers(self, now: float, consts: Consts) -> None:
        """The write-back and checkpoint when their time has come (`now` epoch s)."""
        mono = self.clock.monotonic()
        if self.ledger.writeback_due(mono, consts):
            self.write_back(now, WriteBackMode.PERIODIC)
        self.ledger.checkpoint_if_due(self.lnodes, mono, now, consts)

    def _serve_requests(self, now: float) -> int:
        """shrsync -u / -q (fairshare.daemon.sync), before the quotas."""
        update = partial(self.write_back, now, WriteBackMode.SYNC)
        quota = partial(reread_quotas, self.lnodes, self.store)
        return serve_requests(self.engine, self.store.host, now, {UPDATE: update, QUOTA: quota})

    def _read_consts(self) -> Consts:
        """Poll the UDB; the constants in force, and the tree read again when due."""
        self.requests = 0
        seen = poll(self.engine, self.store.host)
        self.requests = seen.requests
        consts = self.config.consts(self.engine, self.clock.time(), seen.consts, self.cycle)
        reloaded = self.config.tree(self.engine, self.lnodes, consts, self.cycle, seen.fingerprint)
        if reloaded is not None:
            self._reload(*reloaded)
        return consts

    def _udb_back(self) -> None:
        self.ledger.next_writeback = 0.0  # write back what was kept, at the end of this cycle

    def shutdown(self) -> None:
        """Undo the enforcement, write every lnode back, drop the published table."""
        self._tell("stopping")
        if self.process_events is not None:
            self.process_events.stop()
        if self.enforcement.set_up:
            self.enforcement.undo()
            log.debug("%s enforcement undone", self.enforcer.name)
        if self.lnodes is not None:
            now = self.clock.time()
            self.write_back(now, WriteBackMode.SHUTDOWN)
            self.ledger.log_unwritten()
            self.udb.call("mark the published table stopped", self.store.mark_stopped, now)
        log.info("stopped after %d cycles; every lnode written back", self.cycle)

    # -- the pieces ----------------------------------------------------------------------

    def _tell(self, event: str, *args) -> None:
        """Call `event` on every observer; an observer's failure is logged, never fatal."""
        for o in self.observers:
            try:
                getattr(o, event)(self, *args)
            except Exception:
                log.exception("%s observer failed on %s", type(o).__name__, event)

    def _reload(self, new: Lnodes, reason: str) -> None:
        """Take the tree of `new` (read for `reason`): the same tree keeps the table and
        re-reads the active entries; another takes the active lnodes over by name."""
        ln = self.lnodes
        if same_tree(new.tree, ln.tree):
            ln.acids = new.acids
            refresh_entries(ln, self.store)
            return
        self.ledger.pending.extend(carry_over(ln, new, self.clock.time()))
        self.lnodes = new
        self.site = SiteState.new(new.tree.size)  # site factors restart on the new tree
        refresh_entries(new, self.store)
        log.info("share tree reloaded (%s)", reason)
        log_tree(new)

    def place_new(self, pid: int, uid: int) -> None:
        """Put process `pid`, which has just become uid `uid`'s, in its lnode's cgroup now
        (called from the process-events thread).  Share by User only: in Share by
        Account the session's account is known from the next sample."""
        ln = self.lnodes
        if ln is None or not self.scheduling or uid < self.options.enforce_min_uid:
            return
        if ln.tree.mode == "account":
            return
        node = leaf_of(ln, ProcessSample(pid=pid, create_time=0.0, uid=uid), self.account_of)
        if node is not None:
            self.enforcer.place(pid, ln.tree.names[node])

    def _activate(self, ln: Lnodes, new: list[int], now: float) -> None:
        """Create the lnodes of the leaves `new` (from usage 0 while the UDB cannot be
        reached)."""
        if not new:
            return
        uids = [int(ln.tree.ids[n]) for n in new]
        states = self.udb.call("read the new lnodes' entries", self.store.entry_states, uids)
        for n, usage in activate_leaves(ln, new, states or {}, now, self.consts):
            log.debug("lnode %s created, usage %.6g", ln.tree.names[n], usage)

    def write_back(self, now: float, mode: WriteBackMode) -> int:
        """Add what every active leaf lnode accrued to the UDB, releasing the lnodes `mode`
        releases (fairshare.daemon.writeback.WriteBackMode); then, unless SHUTDOWN,
        re-read the active entries and, with GLOBALUSAGE, refresh the site.  Returns how
        many lnodes were written.  Increments the UDB does not take are kept for the
        next try (fairshare.daemon.writeback)."""
        ln, consts = self.lnodes, self.consts
        written = self.ledger.write_back(ln, now, consts.halflife, mode)
        if written is None:
            return 0
        if mode is not WriteBackMode.SHUTDOWN:
            self.udb.call("re-read the active entries", refresh_entries, ln, self.store)
            if consts.flags & GLOBALUSAGE:
                self.udb.call("refresh the site-wide usage", self.refresh_site, now)
        return written

    def refresh_site(self, now: float) -> None:
        """GLOBALUSAGE: the site-wide usage and factors from the UDB (steps.refresh_site)."""
        ln, c = self.lnodes, self.consts
        live_after = now - 3 * max(c.writeback, c.delta)  # hosts heard from since then
        view, usage = self.store.site_view(ln.tree, now, c.halflife, live_after=live_after)
        refresh_site(ln.tree, ln.table, self.site, view, usage, c, self.cpus)


def same_machine(enforcer: Enforcer, actions: OsActions) -> None:
    """ValueError unless `enforcer` changes the machine of `actions`."""
    if enforcer.actions is not actions:
        raise ValueError(
            f"the {enforcer.name} enforcer acts on the {enforcer.actions.name} machine, "
            f"the daemon on the {actions.name} one"
        )


def send_quota_signals(
    ln: Lnodes, procs: dict[int, list[ProcessSample]], consts: Consts, actions: OsActions
) -> None:
    """SIGXCPU to an lnode's processes at its CPU quota, SIGKILL past the threshold
    (fairshare.daemon.decisions.quota_signals), through `actions`, each logged."""
    for q in quota_signals(ln, procs, consts.quota_threshold):
        if q.signal == signal.SIGKILL:
            log.warning(
                "%s: CPU quota %.1f s exceeded by more than %.1f s (%.1f s used): SIGKILL "
                "to %d processes",
                *(q.name, q.quota, consts.quota_threshold, q.used, len(q.pids)),
            )
        else:
            ln.warned.add(q.node)
            log.warning(
                "%s: CPU quota %.1f s reached (%.1f s used): SIGXCPU to %d processes",
                *(q.name, q.quota, q.used, len(q.pids)),
            )
        for pid, started in zip(q.pids, q.starts, strict=True):
            if not same_process(actions, pid, started):
                log.info("%s: pid %d is no longer the process sampled: not signalled", q.name, pid)
                continue
            try:
                actions.signal(pid, q.signal)
            except ProcessLookupError:
                pass


def log_recovered(r) -> None:
    """Say that lnode `r` (fairshare.store.published.Recovered) came back from a checkpoint."""
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


def log_not_finite(ln: Lnodes, not_finite: list[tuple[int, str]], consts: Consts) -> None:
    """Say which lnode kept its last finite value where the cycle produced NaN or
    infinity (fairshare.core.steps.advance; the constants' ranges should make that
    impossible) and which constants were in play, so the site keeps its scheduler."""
    for node, name in not_finite:
        names = [c for c in _CONSTS_OF.get(name, ()) if getattr(consts, c)]
        involved = ", ".join(f"{c}={getattr(consts, c):g}" for c in names)
        log.error(
            "lnode %s: %s was not finite after the cycle (constants in play: %s); "
            "its last finite value %g is kept",
            ln.tree.names[node],
            name,
            involved or "none",
            float(getattr(ln.table, name)[node]),
        )
