"""The shrdaemon loop: collect, charge, run the cycle, enforce, publish, remember.

`Daemon` is driven by what it is given: a collector (the real machine or the
simulator), an enforcer, a store on the UDB, a clock, and the one OsActions object
(fairshare.actions) through which it and its enforcer change processes: signals,
nice values, cgroup files.  The simulated daemon gets the simulated machine's
actions, so it cannot reach a real process.  Each cycle it

1. re-reads the constants (so a shradmin change acts within one delta) and, when
   the UDB's entries changed (a cheap fingerprint query), or on SIGHUP, rebuilds
   the share tree and carries the lnodes over by name;
2. samples the processes and maps each to its leaf lnode: by uid (Share by User),
   or by account (Share by Account: the account the `account_of` hook gives, e.g.
   the one newacct set, else the user's default acid, the first of its acids);
   uids with no UDB entry go to `unknown`; idle CPU goes to the Idle lnode;
3. activates new lnodes with their stored usage aged since shextime, and runs the
   pure `fairshare.cycle.run_cycle`;
4. applies CPU quotas (SIGXCPU at the quota, SIGKILL past quota + threshold),
   hands the effective shares to the enforcer, applies the UDB's nice of each
   lnode to its processes as a floor (beside cgroup enforcement; the nice enforcer
   folds it into its own values; none changes nothing), and publishes the lnode table;
5. every `writeback` seconds adds what every lnode accrued to the UDB (increments, so
   hosts sharing one UDB never erase each other's charges) and releases the lnodes whose
   processes have all gone; with GLOBALUSAGE it then refreshes the site-wide usage and
   site factors (fairshare.site); every `checkpoint` seconds checkpoints every active
   lnode's unwritten increment.

When the UDB cannot be reached the daemon keeps scheduling from what it knows (the last
constants and tree; new lnodes start from usage 0), logs one line a minute, and keeps
what it owes the UDB until the UDB answers again, then writes it all back.

SIGTERM and SIGINT stop it: everything is written back, the enforcer undoes what
it did, the published table is marked stopped, and `run` returns.  The time comes
from the clock passed in, so the simulator runs the very same loop on simulated
seconds without sleeping.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

import numpy as np
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import InterfaceError, OperationalError

from fairshare.actions import OsActions
from fairshare.admin import load_effective_consts
from fairshare.collect import WEAKEST_NICE, Collector, ProcessSample, Sample
from fairshare.consts import GLOBALUSAGE, Consts, load_consts
from fairshare.cycle import Consumption, run_cycle
from fairshare.enforce.base import Enforcer, LnodeTarget, safe_name
from fairshare.enforce.renice import Renicer
from fairshare.lnode import (
    LnodeTable,
    WriteBack,
    accrued,
    activate,
    aged_usage,
    keep_finite,
    new_table,
    release,
)
from fairshare.nicetables import tick_rates
from fairshare.site import SiteState, apply_factors, refresh_usage, update_factors
from fairshare.store import CycleHeader, EntryState, LnodeStore, add_counts
from fairshare.sync import serve_requests
from fairshare.tree import TREE_COLUMNS, UNKNOWN_NAMES, Kind, ShareTree, build_tree
from udb.models import IDLE_UID, Entry, Serial
from udb.session import read_session

log = logging.getLogger("shrdaemon")

#: Processes at the weakest nice (fairshare.collect.WEAKEST_NICE) are not charged (the
#: guide's rule), unless the nice enforcer put them there itself.  Other nice values are
#: charged per CPU tick at the guide's graded rate (fairshare.nicetables.TICKS), except
#: under the nice enforcer, whose nice values are its own doing and are all charged at
#: nice 0's rate.
#: Rebuild the tree at least this often (cycles) even when the fingerprint is unchanged,
#: so quota changes and edits the fingerprint cannot see are picked up.
RELOAD_EVERY = 15
#: While the UDB cannot be reached, say so at most once per this many seconds.
UNREACHABLE_LOG_EVERY = 60.0
#: The errors that mean the UDB cannot be reached (server down, network, lock timeout).
UNREACHABLE = (OperationalError, InterfaceError)

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


@dataclass
class Lnodes:
    """The tree and the lnode table over it, plus what the daemon knows per leaf."""

    tree: ShareTree
    table: LnodeTable
    fingerprint: tuple
    acids: dict[int, list[int]]  # user uid -> acids (Share by Account)
    unknown: int | None  # the unknown leaf's node
    idle: int | None  # the Idle leaf's node
    leaf_of_id: dict[int, int] = field(default_factory=dict)  # uid (acid) -> its leaf node
    leaf_of_group: dict[str, int] = field(default_factory=dict)  # lnode cgroup -> leaf node
    entry: dict[int, EntryState] = field(default_factory=dict)  # active leaf -> its entry
    warned: set[int] = field(default_factory=set)  # leaves sent SIGXCPU this activation


def entries_fingerprint(session) -> tuple:
    """A cheap summary of the entries that changes whenever udbgen or shrdist changed
    them (their change serial); count and highest id catch rows added by other means.
    Edits made behind the commands' back are found by the periodic reload (or SIGHUP)."""
    serial = select(Serial.value).where(Serial.name == "entries").scalar_subquery()
    count, top, changes = session.execute(
        select(func.count(Entry.id), func.max(Entry.id), serial)
    ).one()
    return (count, top, changes or 0)


def same_tree(a: ShareTree, b: ShareTree) -> bool:
    """True when `a` and `b` have the same nodes, parents, shares and kinds."""
    return (
        a.mode == b.mode
        and a.names == b.names
        and np.array_equal(a.ids, b.ids)
        and np.array_equal(a.parent, b.parent)
        and np.array_equal(a.shares, b.shares)
        and np.array_equal(a.kinds, b.kinds)
    )


def load_lnodes(session, mode: str) -> Lnodes:
    """The share tree of the UDB in `mode`, an empty lnode table and the uid maps."""
    rows = session.execute(select(*TREE_COLUMNS)).all()
    tree = build_tree(rows, mode)
    acids = {}
    if mode == "account":
        for uid, ac in session.execute(select(Entry.uid, Entry.acids)).all():
            acids[int(uid)] = list(ac or [])
    unknown = next((n for name in UNKNOWN_NAMES if (n := tree.find(name)) is not None), None)
    idle = tree.find_id(IDLE_UID)
    if idle is not None and tree.kind(idle) != Kind.IDLE:
        idle = None
    leaves = np.flatnonzero(tree.leaf_mask).tolist()
    leaf_of_id = dict(zip(tree.ids[leaves].tolist(), leaves, strict=True))
    leaf_of_group = {safe_name(tree.names[n]): n for n in leaves}
    return Lnodes(
        tree,
        new_table(tree),
        entries_fingerprint(session),
        acids,
        unknown,
        idle,
        leaf_of_id,
        leaf_of_group,
    )


def carry_over(old: Lnodes, new: Lnodes, now: float) -> list[tuple[int, WriteBack]]:
    """Copy every active leaf lnode of `old` into `new` by name (in place).

    Returns the write-backs (released at `now`, epoch s) of active leaves that the
    new tree no longer has.
    """
    gone = []
    for n in np.flatnonzero(old.table.active & old.tree.leaf_mask):
        name = old.tree.names[n]
        m = new.tree.find(name)
        if m is None or not new.tree.leaf_mask[m]:
            gone.append((int(old.tree.ids[n]), release(old.table, int(n), now)))
            continue
        activate(new.table, m, 0.0)
        for f in dataclasses.fields(LnodeTable):
            if f.name in ("parent", "active"):
                continue
            getattr(new.table, f.name)[m] = getattr(old.table, f.name)[n]
        if n in old.entry:
            new.entry[m] = old.entry[n]
        if n in old.warned:
            new.warned.add(m)
    return gone


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
        account_of: Callable[[ProcessSample], int | None] | None = None,
        process_events=None,
        observers: Sequence[Observer] = (),
    ) -> None:
        theirs = getattr(enforcer, "actions", actions)
        if theirs is not actions:
            raise ValueError(
                f"the {enforcer.name} enforcer acts on the {theirs.name} machine, "
                f"the daemon on the {actions.name} one"
            )
        self.engine = engine
        self.collector = collector
        self.enforcer = enforcer
        self.store = store
        self.actions = actions
        self.user_nice = Renicer(actions)  # the UDB's nice beside cgroup enforcement
        self.clock = clock or SystemClock()
        self.options = options or Options()
        self.account_of = account_of
        # fairshare.enforce.events.ProcessEvents (or None): new sessions are placed as
        # soon as they change uid, not at the next cycle.
        self.process_events = process_events
        self.wake = threading.Event()
        self.stopping = False
        self.reload_requested = False
        self.cycle = 0
        self.started = self.clock.time()
        self.counts: dict[str, float] = {}  # resource totals since start (shrview -ds)
        self.lnodes: Lnodes | None = None
        self.consts: Consts | None = None
        self.schedule = ""  # the shradmin schedule in force ("" = the base settings)
        self.scheduling = True  # False while NOSCHED/NOSHARE keep the enforcer off
        self._pids: dict[int, list[ProcessSample]] = {}  # leaf -> its processes, last sample
        self._next_writeback = 0.0
        self._next_checkpoint = 0.0
        self._enforcer_is_set_up = False
        self.cpus = float(self.options.cpus or os.cpu_count() or 1)
        self.site: SiteState | None = None  # GLOBALUSAGE state (fairshare.site)
        self.pending: list[tuple[int, WriteBack]] = []  # increments the UDB has not taken
        self.unreachable_since: float | None = None  # monotonic s; None while it answers
        self._unreachable_logged = 0.0
        self.observers = list(observers)
        self.writebacks = 0  # lnodes written back since start
        self.checkpoints = 0  # checkpoints taken since start
        self.last_cycle_seconds = 0.0  # wall-clock seconds the last step took

    # -- signals ---------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop the loop, SIGHUP reloads the tree (main thread only)."""
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)

    def _on_stop(self, signum, _frame) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        self.stop()

    def _on_hup(self, signum, _frame) -> None:
        self.reload_requested = True
        self.wake.set()

    def stop(self) -> None:
        """Ask the loop to stop after the current step (safe from signal handlers)."""
        self.stopping = True
        self.wake.set()

    # -- the loop ---------------------------------------------------------------------------

    def run(self, cycles: int | None = None) -> int:
        """Run `cycles` cycles (None: until stopped), then shut down; returns cycles run."""
        done = 0
        try:
            self.start()
            self._tell("started")
            began = self.clock.monotonic()
            while not self.stopping and (cycles is None or done < cycles):
                # The baseline sample (or the previous cycle) was taken at `began`: wait
                # one delta so every cycle covers `delta` seconds of consumption.
                delay = self.consts.delta - (self.clock.monotonic() - began)
                if delay > 0:
                    self.wake.clear()
                    if self.stopping:
                        break
                    self.clock.sleep(delay, self.wake)
                    if self.stopping:
                        break
                began = self.clock.monotonic()
                self.step()
                done += 1
        finally:
            self.shutdown()
        return done

    def start(self) -> None:
        """Recover from a crash, load consts and tree, set the enforcer up, take a baseline."""
        with read_session(self.engine) as s:
            halflife = self._load_consts(s).halflife
        for r in self.store.recover(halflife):
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
        with read_session(self.engine) as s:
            self.consts = self._load_consts(s)
            self.lnodes = load_lnodes(s, self.consts.mode)
        self._log_tree()
        self.site = SiteState.new(self.lnodes.tree.size)
        self._sync_enforcer(self.consts)
        if self.process_events is not None and hasattr(self.enforcer, "place"):
            self.process_events.start(self.place_new)
        now = self.clock.monotonic()
        self._next_writeback = now + self.consts.writeback
        self._next_checkpoint = now + self.consts.checkpoint
        self.collector.sample()  # baseline: the next sample's deltas start here

    def step(self) -> None:
        """One cycle (see the module docstring)."""
        t0 = time.perf_counter()
        consts = self._udb("read the constants", self._read_consts) or self.consts
        self.consts = consts
        self._sync_enforcer(consts)
        wanted = {
            "io": consts.cost_bio > 0 or consts.cost_sio > 0,
            "syscalls": consts.cost_syscall > 0,
            "mem": consts.cost_mem > 0,
        }
        sample = self.collector.sample(**wanted)
        ln = self.lnodes
        refresh = getattr(self.account_of, "refresh", None)
        if refresh is not None:  # newacct's session records (fairshare.newacct)
            refresh(sample, ln.acids)
        consumption, procs = self._consumption(ln, sample, **wanted)
        add_counts(self.counts, consumption)
        self._activate(ln, consumption, sample.time)
        elapsed = sample.elapsed if sample.elapsed > 0 else consts.delta
        before = ln.table
        ln.table = run_cycle(ln.tree, before, consumption, consts, elapsed)
        self.site.add(consumption.cpu, elapsed)
        if consts.flags & GLOBALUSAGE:
            ln.table.e_share = apply_factors(ln.tree, ln.table, self.site.factor)
        self._keep_finite(ln, before, consts)
        self._pids = procs
        self.cycle += 1
        # shrsync -u / -q, before the quotas (fairshare.sync)
        self._udb("serve shrsync requests", serve_requests, self, sample.time)
        self._quotas(ln, consts)
        if self.scheduling:
            targets = self._targets(ln)
            self.enforcer.apply(targets)
            self._apply_user_nice(targets)
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
            delivered=float(consumption.cpu.sum()) / elapsed,
        )
        self._udb("publish the lnode table", self.store.publish, ln.tree, ln.table, header)
        now = self.clock.monotonic()
        if now >= self._next_writeback:
            self._next_writeback = now + consts.writeback
            self.write_back(sample.time, everything=False)
        if now >= self._next_checkpoint:
            self._next_checkpoint = now + consts.checkpoint
            n = self._udb("checkpoint", self.store.checkpoint, ln.tree, ln.table, sample.time)
            if n is not None:
                self.checkpoints += 1
            log.debug("checkpointed %s lnodes", n)
        self.last_cycle_seconds = time.perf_counter() - t0
        self._tell("cycled", self.last_cycle_seconds)

    def _read_consts(self) -> Consts:
        with read_session(self.engine) as s:
            consts = self._load_consts(s)
            self._maybe_reload(s, consts)
        return consts

    def _udb(self, what: str, fn: Callable, *args):
        """`fn(*args)`, or None when the UDB cannot be reached (logged once a minute)."""
        try:
            out = fn(*args)
        except UNREACHABLE as err:
            now = self.clock.monotonic()
            if self.unreachable_since is None:
                self.unreachable_since = now
            if self._unreachable_logged == 0.0 or now - self._unreachable_logged >= (
                UNREACHABLE_LOG_EVERY
            ):
                self._unreachable_logged = now
                reason = str(getattr(err, "orig", err) or err).strip().splitlines()[0]
                log.warning(
                    "UDB unreachable for %.0f s (could not %s: %s): scheduling from the last "
                    "known state, %d write-backs kept until it answers",
                    now - self.unreachable_since,
                    what,
                    reason,
                    len(self.pending),
                )
            return None
        if self.unreachable_since is not None:
            log.info(
                "UDB reachable again after %.0f s", self.clock.monotonic() - self.unreachable_since
            )
            self.unreachable_since = None
            self._unreachable_logged = 0.0
            self._next_writeback = 0.0  # write back what was kept, at the end of this cycle
        return out

    def shutdown(self) -> None:
        """Undo the enforcement, write every lnode back, drop the published table."""
        self._tell("stopping")
        if self.process_events is not None:
            self.process_events.stop()
        if self._enforcer_is_set_up:
            self.enforcer.teardown()
            self.user_nice.restore()
            self._enforcer_is_set_up = False
            log.debug("%s enforcement undone", self.enforcer.name)
        if self.lnodes is not None:
            now = self.clock.time()
            self.write_back(now, everything=True)
            if self.pending:
                log.error(
                    "UDB unreachable at exit: the increments of %d lnodes (usage %.6g, charge "
                    "%.6g) were not written back",
                    len(self.pending),
                    sum(wb.shusage for _u, wb in self.pending),
                    sum(wb.charge for _u, wb in self.pending),
                )
            self._udb("mark the published table stopped", self.store.mark_stopped, now)
        log.info("stopped after %d cycles; every lnode written back", self.cycle)

    @property
    def enforcer_name(self) -> str:
        return self.enforcer.name if self.scheduling else "none"

    # -- the pieces ----------------------------------------------------------------------

    def _tell(self, event: str, *args) -> None:
        """Call `event` on every observer; an observer's failure is logged, never fatal."""
        for o in self.observers:
            try:
                getattr(o, event)(self, *args)
            except Exception:
                log.exception("%s observer failed on %s", type(o).__name__, event)

    def _load_consts(self, session) -> Consts:
        """The constants in force now: the stored ones with shradmin's schedule in force
        at the clock's local time applied (logged when the schedule changes)."""
        when = datetime.fromtimestamp(self.clock.time())
        consts, schedule = load_effective_consts(session, when)
        if schedule != self.schedule:
            log.info("schedule %s now in force", schedule or "(none: base settings)")
            self.schedule = schedule
        return consts

    def _keep_finite(self, ln: Lnodes, before: LnodeTable, consts: Consts) -> None:
        """Keep every lnode's last finite value where the cycle produced NaN or infinity
        (the constants' ranges should make that impossible), and say which lnode and
        which constants were in play, so the site keeps its scheduler."""
        for node, name in keep_finite(before, ln.table):
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

    def _sync_enforcer(self, consts: Consts) -> None:
        """Keep the enforcer off while NOSCHED or NOSHARE is set, on otherwise."""
        wanted = consts.scheduling
        if wanted and not self._enforcer_is_set_up:
            self.enforcer.setup()
            self._enforcer_is_set_up = True
            if not self.scheduling:
                log.info("NOSCHED/NOSHARE cleared: %s enforcement resumes", self.enforcer.name)
        elif not wanted and self._enforcer_is_set_up:
            self.enforcer.teardown()
            self.user_nice.restore()
            self._enforcer_is_set_up = False
            log.info("NOSCHED/NOSHARE set: accounting only, %s undone", self.enforcer.name)
        self.scheduling = wanted

    def _maybe_reload(self, session, consts: Consts) -> None:
        ln = self.lnodes
        reason = None
        if self.reload_requested:
            reason = "SIGHUP"
        elif consts.mode != ln.tree.mode:
            reason = f"share mode changed to {consts.mode}"
        elif self.cycle % RELOAD_EVERY == 0:
            reason = "periodic"
        elif entries_fingerprint(session) != ln.fingerprint:
            reason = "the UDB's entries changed"
        if reason is None:
            return
        self.reload_requested = False
        new = load_lnodes(session, consts.mode)
        if same_tree(new.tree, ln.tree):
            # Same tree: keep the table, refresh what we know of the active entries.
            ln.acids = new.acids
            self._refresh_entries(ln)
            return
        gone = carry_over(ln, new, self.clock.time())
        self.pending.extend(gone)
        self.lnodes = new
        self.site = SiteState.new(new.tree.size)  # site factors restart on the new tree
        self._refresh_entries(new)
        log.info("share tree reloaded (%s)", reason)
        self._log_tree()

    def _refresh_entries(self, ln: Lnodes) -> None:
        active = np.flatnonzero(ln.table.active & ln.tree.leaf_mask)
        states = self.store.entry_states(int(ln.tree.ids[n]) for n in active)
        for n in active:
            st = states.get(int(ln.tree.ids[n]))
            if st is not None:
                ln.entry[int(n)] = st

    def _log_tree(self) -> None:
        ln = self.lnodes
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

    def leaf_of(self, ln: Lnodes, p: ProcessSample) -> int | None:
        """The leaf lnode process `p` is charged to (None: nowhere to charge it)."""
        if ln.tree.mode == "account":
            acid = self.account_of(p) if self.account_of else None
            if acid is None:
                acids = ln.acids.get(p.uid)
                acid = acids[0] if acids else None
            node = ln.leaf_of_id.get(acid) if acid is not None else None
            if node is None and p.uid == IDLE_UID:
                node = ln.idle
        else:
            node = ln.leaf_of_id.get(p.uid)
        return ln.unknown if node is None else node

    def place_new(self, pid: int, uid: int) -> None:
        """Put process `pid`, which has just become uid `uid`'s, in its lnode's cgroup now
        (called from the process-events thread).  Share by User only: in Share by
        Account the session's account is known from the next sample."""
        ln = self.lnodes
        if ln is None or not self.scheduling or uid < self.options.enforce_min_uid:
            return
        if ln.tree.mode == "account":
            return
        node = self.leaf_of(ln, ProcessSample(pid=pid, create_time=0.0, uid=uid))
        if node is not None:
            self.enforcer.place(pid, ln.tree.names[node])

    def _consumption(
        self, ln: Lnodes, sample: Sample, io: bool = True, syscalls: bool = True, mem: bool = True
    ) -> tuple[Consumption, dict[int, list[ProcessSample]]]:
        """Consumption per leaf and the processes of each leaf (`io`, `syscalls`, `mem`
        False: the collector did not read them, their totals stay 0)."""
        n = ln.tree.size
        c = Consumption.zeros(n)
        procs: dict[int, list[ProcessSample]] = {}
        charge_weakest = self.enforcer.name == "nice" and self.scheduling
        leaf_of = self.leaf_of
        mine = [(node, p) for p in sample.processes if (node := leaf_of(ln, p)) is not None]
        for node, p in mine:
            procs.setdefault(node, []).append(p)
        charged = [charge_weakest or p.nice < WEAKEST_NICE for _node, p in mine]
        # The guide's graded tick rate of each process (nice 0's under the nice enforcer).
        rate = tick_rates([0 if charge_weakest else p.nice for _node, p in mine])
        # CPU the kernel counted per lnode cgroup: a process in an lnode cgroup is
        # charged through the counter, not its own, less what the guide does not charge:
        # all of a nice-19 process's CPU, part of another niced one's (the collector
        # re-reads such processes every sample, so their own CPU is known).
        counted = dict(sample.groups)
        graded_counted = dict(counted)
        for (_node, p), ch, r in zip(mine, charged, rate, strict=True):
            if p.group in counted and p.cpu > 0:
                if not ch:
                    counted[p.group] = max(counted[p.group] - p.cpu, 0.0)
                graded_counted[p.group] = max(graded_counted[p.group] - p.cpu * (1 - r), 0.0)
        if mine:
            idx = np.array([node for node, _p in mine], dtype=np.int64)

            def total(values) -> np.ndarray:
                return np.bincount(idx, weights=np.asarray(values, dtype=float), minlength=n)

            pc = list(zip(mine, charged, strict=True))
            own = np.array([p.cpu if ch and not p.group else 0.0 for (_n, p), ch in pc])
            c.cpu = total(own)
            c.cpu_charged = total(own * rate)
            if io:
                c.bio = total([p.bio if ch else 0.0 for (_n, p), ch in pc])
                c.sio = total([p.sio if ch else 0.0 for (_n, p), ch in pc])
            if syscalls:
                c.syscalls = total([p.syscalls if ch else 0.0 for (_n, p), ch in pc])
            if mem:
                c.mem = total([p.mem if ch else 0.0 for (_n, p), ch in pc])
            c.refs = np.bincount(idx, minlength=n).astype(np.int64)
            c.nrun = total([p.runnable for _n, p in mine]).astype(np.int64)
        for name, used in counted.items():
            node = ln.leaf_of_group.get(name)
            if node is not None:
                c.cpu[node] += used
                if c.cpu_charged is not None:
                    c.cpu_charged[node] += graded_counted[name]
        if ln.idle is not None and sample.idle > 0:
            c.cpu[ln.idle] += sample.idle
            if c.cpu_charged is not None:
                c.cpu_charged[ln.idle] += sample.idle
        return c, procs

    def _activate(self, ln: Lnodes, c: Consumption, now: float) -> None:
        """Create the lnodes of leaves that got processes (or idle time) this cycle
        (from usage 0 while the UDB cannot be reached)."""
        new = np.flatnonzero(ln.tree.leaf_mask & ~ln.table.active & ((c.refs > 0) | (c.cpu > 0)))
        if len(new) == 0:
            return
        uids = [int(ln.tree.ids[n]) for n in new]
        states = self._udb("read the new lnodes' entries", self.store.entry_states, uids) or {}
        for n in new.tolist():
            st = states.get(int(ln.tree.ids[n]))
            usage = aged_usage(st.shusage, st.shextime, now, self.consts) if st else 0.0
            activate(ln.table, n, usage)
            if st is not None:
                ln.entry[n] = st
            ln.warned.discard(n)
            log.debug("lnode %s created, usage %.6g", ln.tree.names[n], usage)

    def _targets(self, ln: Lnodes) -> list[LnodeTarget]:
        """What the enforcer must do: every active leaf that has processes to place."""
        t = ln.table
        out = []
        min_uid = self.options.enforce_min_uid
        for node in sorted(self._pids):
            if not t.active[node]:
                continue
            procs = [p for p in self._pids[node] if p.uid >= min_uid and not p.kernel]
            if not procs:
                continue
            out.append(
                LnodeTarget(
                    name=ln.tree.names[node],
                    pids=tuple(p.pid for p in procs),
                    e_share=float(t.e_share[node]),
                    nrun=int(t.nrun[node]),
                    background=bool(t.background[node]),
                    runnable=frozenset(p.pid for p in procs if p.runnable),
                    nice=st.nice if (st := ln.entry.get(node)) is not None else 0,
                )
            )
        return out

    def _apply_user_nice(self, targets: list[LnodeTarget]) -> None:
        """Raise (or, from the default 0, set) every target process's nice to its
        lnode's UDB nice, where the enforcer leaves that to the daemon (see
        fairshare.enforce.renice for how it combines with a nice the user chose)."""
        if not getattr(self.enforcer, "udb_nice", False):
            return
        self.user_nice.forget({pid for t in targets for pid in t.pids})
        for t in targets:
            for pid in t.pids:
                # UDB nice 0 changes nothing, unless we set this process before (the
                # entry's nice was reset since): then its own nice comes back.
                if t.nice or pid in self.user_nice.changed:
                    self.user_nice.renice(pid, udb_nice=t.nice)

    def _quotas(self, ln: Lnodes, consts: Consts) -> None:
        """SIGXCPU to an lnode's processes at its CPU quota, SIGKILL past the threshold."""
        for node, st in ln.entry.items():
            if st.cpuquota <= 0 or not ln.table.active[node]:
                continue
            used = st.cpuquotaused + float(ln.table.cpu_seconds[node] - ln.table.cpu_written[node])
            if used < st.cpuquota:
                continue
            procs = [p for p in self._pids.get(node, ()) if not p.kernel]
            if not procs:
                continue
            name = ln.tree.names[node]
            if used >= st.cpuquota + consts.quota_threshold:
                sig = signal.SIGKILL
                log.warning(
                    "%s: CPU quota %.1f s exceeded by more than %.1f s (%.1f s used): SIGKILL "
                    "to %d processes",
                    name,
                    st.cpuquota,
                    consts.quota_threshold,
                    used,
                    len(procs),
                )
            elif node not in ln.warned:
                sig = signal.SIGXCPU
                ln.warned.add(node)
                log.warning(
                    "%s: CPU quota %.1f s reached (%.1f s used): SIGXCPU to %d processes",
                    name,
                    st.cpuquota,
                    used,
                    len(procs),
                )
            else:
                continue
            for p in procs:
                try:
                    self.actions.signal(p.pid, sig)
                except ProcessLookupError:
                    pass

    def write_back(self, now: float, everything: bool, release_gone: bool = True) -> int:
        """Add what every active leaf lnode accrued to the UDB, releasing those with no
        processes (all of them when `everything`, at shutdown; none unless
        `release_gone`); with GLOBALUSAGE, then refresh the site.  Returns how many
        lnodes were written.  Increments the UDB does not take are kept for the next try.
        """
        ln = self.lnodes
        t = ln.table
        leaves = t.active & ln.tree.leaf_mask
        gone = leaves & (t.refs == 0) if release_gone else np.zeros_like(leaves)
        if ln.idle is not None:
            gone[ln.idle] = False  # Idle never leaves while the daemon runs
        if everything:
            gone = leaves
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
            if st is not None:  # the CPU seconds move from the lnode to the entry
                ln.entry[n] = dataclasses.replace(st, cpuquotaused=st.cpuquotaused + wb.cpu_seconds)
        self.pending.extend(out)
        consts = self.consts
        if self._udb("write back", self.store.write_back, self.pending, consts.halflife) is None:
            return 0
        written, self.pending = len(self.pending), []
        self.writebacks += written
        if out:
            log.debug("wrote back %d lnodes", written)
        if not everything:
            self._udb("re-read the active entries", self._refresh_entries, ln)
            if consts.flags & GLOBALUSAGE:
                self._udb("refresh the site-wide usage", self.refresh_site, now)
        return written

    def refresh_site(self, now: float) -> None:
        """GLOBALUSAGE: the active lnodes take their site-wide usage from the UDB, the
        site view of the other live hosts is read, the site factors are updated."""
        ln, consts = self.lnodes, self.consts
        view, usage = self.store.site_view(
            ln.tree, now, consts.halflife, live_after=now - 3 * max(consts.writeback, consts.delta)
        )
        mine = np.flatnonzero(ln.table.active & ln.tree.leaf_mask)
        refresh_usage(ln.table, mine, usage)
        self.site.view = view
        self.site.factor = update_factors(ln.tree, ln.table, self.site, consts, self.cpus)


def simulated_daemon(
    engine: Engine,
    scenario: str,
    enforcer: str = "auto",
    host: str = "simulator",
    epoch: float | None = None,
    cycles: int | None = None,
) -> tuple[Daemon, str, int]:
    """The daemon's loop on the simulated machine of `scenario` (a shrsim TOML file).

    The daemon's UDB gives the tree: an empty UDB is first loaded with the
    scenario's `udb` or `directives`; the scenario's [consts] and delta are stored
    in the UDB (one transaction), so shradmin can still change them mid-run.
    `enforcer` picks the weight model: auto = the scenario's, cgroup1/cgroup2 =
    cgroup, nice, none.  Simulated second 0 is `epoch` (default: early enough that a
    run of `cycles`, else of the whole scenario, ends now, so displays show a fresh
    table).  Returns (daemon, model, cycles the scenario lasts).
    """
    import math
    import tomllib

    from fairshare.collect.sim import SimClock, SimCollector, SimOs, world_for
    from fairshare.consts import consts_from_mapping, from_user, save_consts
    from fairshare.enforce.sim import SimEnforcer
    from fairshare.sim import load_scenario
    from udb import directives
    from udb.errors import OptionError
    from udb.session import write_session

    path = Path(scenario)
    model = {"auto": None, "cgroup1": "cgroup", "cgroup2": "cgroup", "systemd": "cgroup"}.get(
        enforcer, enforcer
    )
    # The whole scenario is checked (TOML, ranges, its directives) before the UDB is touched.
    sc = load_scenario(path, model, udb=engine.url.render_as_string(hide_password=False))
    doc = tomllib.loads(path.read_text())
    with read_session(engine) as s:
        empty = s.execute(select(func.count()).select_from(Entry)).scalar_one() == 0
    if empty and ("udb" in doc or "directives" in doc):
        if "udb" in doc:
            src = path.parent / doc["udb"]
            text = src.read_text()
        else:
            src, text = path, doc["directives"]
        directives.run(engine, directives.parse(text, str(src)))
        log.info("loaded the scenario's UDB (%s) into the empty UDB", src)
    overrides = dict(doc.get("consts", {}))
    if "delta" in doc:
        overrides["delta"] = doc["delta"]
    with write_session(engine) as s:
        save_consts(s, consts_from_mapping(from_user(overrides), load_consts(s)))
        consts = load_consts(s)
    with read_session(engine) as s:
        tree = load_lnodes(s, consts.mode).tree
    missing = [w.name for w in sc.workloads if tree.find(w.name) is None]
    if missing:
        raise OptionError(
            f"{scenario}: workloads name lnodes the UDB does not have: {', '.join(missing)}"
        )
    workloads, cpus = site_part(sc, host)
    length = max(1, math.ceil(sc.duration / consts.delta - 1e-9))
    if epoch is None:  # the run of `cycles` (or the scenario's length) ends about now
        epoch = time.time() - (cycles or length) * consts.delta
    clock = SimClock(epoch)
    world = world_for(tree, workloads, cpus, sc.enforcer, clock, end=sc.duration)
    actions = SimOs(world)  # the daemon's only way to change a process: the simulated one
    daemon = Daemon(
        engine,
        SimCollector(world),
        SimEnforcer(actions),
        LnodeStore(engine, host),
        actions,
        clock=clock,
        options=Options(enforce_min_uid=0, cpus=cpus),
        account_of=(lambda p: p.uid) if consts.share_by_account else None,
    )
    return daemon, sc.enforcer, length


def site_part(sc, host: str) -> tuple[list, float]:
    """(workloads, CPUs) of host `host` in scenario `sc`: a site scenario's (its `hosts`
    table) for that host, else the whole scenario's machine."""
    from udb.errors import OptionError

    if not sc.hosts:
        return sc.workloads, sc.cpus
    if host not in sc.hosts:
        raise OptionError(
            f"{sc.source}: --host {host}: expected one of the scenario's hosts "
            f"{', '.join(sc.hosts)}"
        )
    return [w for w in sc.workloads if w.host == host], sc.hosts[host]
