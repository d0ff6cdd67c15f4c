"""The daemon loop driven by a scripted collector, a recording enforcer and a simulated
clock, on a real SQLite UDB; the command through CliRunner.  As a process of its own:
tests/system/test_daemon_process.py."""

from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
from busy import RecordedOs
from click.testing import CliRunner
from sqlalchemy import select, update

from fairshare.cli.shrdaemon import main
from fairshare.collect import ProcessSample, Sample
from fairshare.core.consts import NOSCHED, SHAREBYACCT, TICKS_PER_SECOND, Consts
from fairshare.daemon.accounts import AccountsOf
from fairshare.daemon.daemon import Daemon, Options
from fairshare.daemon.grid import remote_now
from fairshare.enforce.base import Capabilities
from fairshare.sim.machine import SimClock
from fairshare.store.config import save_consts
from fairshare.store.published import LnodeStore
from udb.models import SHF_ACCOUNT, SHF_GROUP, Entry, LnodeCheckpoint
from udb.session import open_udb, read_session, write_session

EPOCH = 1_000_000.0
TICK_COST = 100.0  # the default cost_tick: charge units per CPU tick
PER_CPU_S = TICK_COST * TICKS_PER_SECOND  # 10,000 charge units per CPU second
ROOT_DIR = Path(__file__).resolve().parents[2]


class Script:
    """A collector whose samples are given by a function of the sample number."""

    def __init__(self, clock: SimClock, plan, idle: float = 0.0):
        self.clock, self.plan, self.idle = clock, plan, idle
        self.calls = 0
        self.last = None
        self.on_sample = None
        self.groups = lambda i: {}  # lnode cgroup counters' deltas of sample i
        self.placed = []  # each call's `placed`

    def sample(self, io=True, syscalls=True, mem=True, placed=False) -> Sample:
        self.placed.append(placed)
        now = self.clock.now
        elapsed = 0.0 if self.last is None else now - self.last
        procs = self.plan(self.calls) if self.last is not None else []
        groups = self.groups(self.calls) if self.last is not None else {}
        self.last = now
        self.calls += 1
        if self.on_sample:
            self.on_sample(self.calls)
        return Sample(self.clock.time(), elapsed, procs, self.idle if elapsed else 0.0, groups)


class Recorder:
    """An enforcer that remembers what it was asked to do."""

    name = "recorder"

    def __init__(self, actions=None):
        self.calls = []
        self.actions = actions
        self.capabilities = Capabilities()

    def setup(self):
        self.calls.append("setup")

    def apply(self, targets):
        self.calls.append(("apply", [(t.name, t.pids, round(t.e_share, 6)) for t in targets]))

    def teardown(self):
        self.calls.append("teardown")


def proc(pid, uid, cpu=0.0, runnable=True, nice=0):
    return ProcessSample(pid, EPOCH, uid, cpu=cpu, runnable=runnable, nice=nice)


@pytest.fixture
def engine(udb_url):
    e = open_udb(udb_url)
    with write_session(e) as s:
        s.add_all(
            [
                Entry(name="Idle", uid=11, shares=0),
                Entry(name="unknown", uid=12, shares=1),
                Entry(name="G", uid=500, shflags=SHF_GROUP, shares=1),
                Entry(name="alice", uid=1001, resgrp=500, shares=1),
                Entry(name="bob", uid=1002, resgrp=500, shares=1),
            ]
        )
    return e


def make(engine, plan, idle=0.0, actions=None, udb_nice=False, **kw):
    """A daemon on `plan` (Script) with a Recorder enforcer over `actions` (default a
    new RecordedOs); `udb_nice`: the enforcer leaves the UDB's nice to the daemon, as
    the cgroup enforcers do."""
    clock = SimClock(EPOCH)
    col = Script(clock, plan, idle)
    actions = actions or RecordedOs()
    enf = Recorder(actions)
    enf.capabilities = Capabilities(udb_nice=udb_nice)
    d = Daemon(
        engine,
        col,
        enf,
        LnodeStore(engine, host="test"),
        actions,
        clock=clock,
        **{"options": Options(enforce_min_uid=1000), **kw},
    )
    return d, clock, col, enf, actions.sent


def cycle(d, clock, n=1):
    for _ in range(n):
        clock.sleep(d.consts.delta, d.loop.wake)
        d.step()


def entry(engine, name):
    with read_session(engine) as s:
        return s.scalars(select(Entry).where(Entry.name == name)).one()


def published(d):
    head, rows = d.store.read_published()
    return head, {r.name: r for r in rows}


def set_consts(engine, **changes):
    with write_session(engine) as s:
        save_consts(s, Consts().replace(**changes))


# -- mapping processes to lnodes -----------------------------------------------------------


def test_processes_go_to_their_user_unknown_and_idle(engine):
    d, clock, *_ = make(engine, lambda i: [proc(7, 1001, 1.0), proc(8, 4444, 0.5)], idle=2.0)
    d.start()
    cycle(d, clock)
    head, rows = published(d)
    assert rows["alice"].cpu_seconds == 1.0 and rows["alice"].refs == 1
    assert rows["unknown"].cpu_seconds == 0.5  # uid 4444 has no entry
    assert rows["Idle"].cpu_seconds == 2.0
    assert "bob" not in rows  # no processes: no lnode
    assert rows["alice"].charge == 1.0 * PER_CPU_S
    assert head.cycle == 1 and head.time == EPOCH + 4.0


def test_weakest_nice_is_not_charged(engine):
    d, clock, *_ = make(engine, lambda i: [proc(7, 1001, 1.0, nice=19), proc(8, 1002, 1.0)])
    d.start()
    cycle(d, clock)
    _, rows = published(d)
    assert rows["alice"].charge == 0.0 and rows["alice"].refs == 1
    assert rows["bob"].charge == PER_CPU_S
    assert rows["alice"].cpu_seconds == 1.0  # its quota counts every CPU second


def test_under_a_cgroup_enforcer_nice_19_is_charged_like_any_other(engine):
    """In an lnode cgroup a nice value weighs a process only against its own lnode's:
    nice 19 is not background there, so it is charged at nice 0's rate (issue 29)."""
    d, clock, _col, enf, _sent = make(
        engine, lambda i: [proc(7, 1001, 1.0, nice=19), proc(8, 1002, 1.0, nice=10)]
    )
    enf.capabilities = Capabilities(udb_nice=True, nice_local=True)  # as cgroup1/2, systemd
    d.start()
    cycle(d, clock)
    _, rows = published(d)
    assert rows["alice"].charge == PER_CPU_S and rows["bob"].charge == PER_CPU_S


def test_cpu_is_charged_by_nice_as_the_guides_nice_ticks(engine):
    """The guide's -dn Nice Ticks: a tick at nice -20 costs 150%, at -1 102%, at 10 75%,
    at 18 55% of the tick cost (100% at 0); the CPU seconds counted stay real."""
    with write_session(engine) as s:
        s.add_all([Entry(name=f"u{n}", uid=2000 + n, resgrp=500, shares=1) for n in range(4)])
    nices = (-20, -1, 10, 18)
    d, clock, *_ = make(engine, lambda i: [proc(7 + k, 2000 + k, 1.0, nice=n)
                                           for k, n in enumerate(nices)])  # fmt: skip
    d.start()
    cycle(d, clock)
    _, rows = published(d)
    charged = [rows[f"u{k}"].charge / PER_CPU_S for k in range(4)]
    assert charged == pytest.approx([1.50, 1.02, 0.75, 0.55])
    assert [rows[f"u{k}"].cpu_seconds for k in range(4)] == [1.0] * 4


def test_under_the_nice_enforcer_every_nice_is_charged_at_nice_0s_rate(engine):
    """The nice enforcer sets the nice values itself: grading them would charge a user
    less the further the enforcer pushed it down."""
    d, clock, _col, enf, _sent = make(
        engine, lambda i: [proc(7, 1001, 1.0, nice=10), proc(8, 1002, 1.0, nice=19)]
    )
    enf.capabilities = Capabilities(sets_nice=True)  # as the nice enforcer
    d.start()
    cycle(d, clock)
    _, rows = published(d)
    assert rows["alice"].charge == PER_CPU_S and rows["bob"].charge == PER_CPU_S


class Listening:
    """Process events that report every new session (as fairshare.enforce.events does)."""

    listening = True

    def start(self, on_uid):
        return True

    def stop(self):
        self.listening = False


def test_the_collector_is_told_when_new_sessions_are_placed_as_they_appear(engine):
    """Only while the process events are heard, by an enforcer that places processes,
    scheduling in Share by User, may the collector skip looking for new processes."""
    events = Listening()
    d, clock, col, enf, _sent = make(engine, lambda i: [proc(7, 1001, 1.0)], process_events=events)
    enf.capabilities = Capabilities(places=True, counts=True)  # as the cgroup enforcers
    enf.place = lambda pid, name, groups=(): None
    d.start()
    cycle(d, clock, 3)
    # The baseline and the two cycles that place what already runs list every process.
    assert col.placed == [False, False, False, True]
    events.listening = False  # the listener failed: new processes are looked for again
    cycle(d, clock)
    events.listening = True
    cycle(d, clock, 3)
    assert col.placed[4:] == [False, False, False, True]
    enf.capabilities = Capabilities(counts=True)  # no place(): the cycle places
    cycle(d, clock, 3)
    assert col.placed[8:] == [False, False, False]
    d.shutdown()


def test_lnode_cgroup_counters_charge_what_no_process_sample_saw(engine):
    # alice's cgroup counted 3 s: her shell (0.2 s by its own counters, ignored) and
    # short-lived children no sample saw; 0.5 s of it was her nice-19 process's.
    # bob is not in a cgroup yet (a new session): his own counters charge him.
    def plan(i):
        return [
            ProcessSample(7, EPOCH, 1001, cpu=0.2, group="alice"),
            ProcessSample(9, EPOCH, 1001, cpu=0.5, nice=19, group="alice"),
            proc(8, 1002, 1.0),
        ]

    d, clock, col, *_ = make(engine, plan)
    col.groups = lambda i: {"alice": 3.0, "gone-lnode": 9.0}
    d.start()
    cycle(d, clock)
    _, rows = published(d)
    assert rows["alice"].cpu_seconds == pytest.approx(3.0) and rows["alice"].refs == 2
    assert rows["alice"].charge == pytest.approx(2.5 * PER_CPU_S)  # nice 19's not charged
    assert rows["bob"].cpu_seconds == 1.0
    assert "unknown" not in rows  # a cgroup of no leaf (gone-lnode) is charged to no one


def test_lnode_cgroup_counters_are_graded_by_the_nice_of_what_ran_there(engine):
    # Of alice's 4 s counted, 2 s were a nice-10 process's (75% a tick): 2 + 1.5 charged.
    def plan(i):
        return [
            ProcessSample(7, EPOCH, 1001, cpu=0.0, group="alice"),
            ProcessSample(9, EPOCH, 1001, cpu=2.0, nice=10, group="alice"),
        ]

    d, clock, col, *_ = make(engine, plan)
    col.groups = lambda i: {"alice": 4.0}
    d.start()
    cycle(d, clock)
    _, rows = published(d)
    assert rows["alice"].cpu_seconds == pytest.approx(4.0)
    assert rows["alice"].charge == pytest.approx(3.5 * PER_CPU_S)


def test_share_by_account_default_acid_and_the_newacct_hook(udb_url):
    engine = open_udb(udb_url)
    with write_session(engine) as s:
        s.add_all(
            [
                Entry(name="G", uid=500, shflags=SHF_GROUP, shares=1),
                Entry(name="acct1", uid=2001, resgrp=500, shflags=SHF_ACCOUNT, shares=1),
                Entry(name="acct2", uid=2002, resgrp=500, shflags=SHF_ACCOUNT, shares=1),
                Entry(name="alice", uid=1001, acids=[2002, 2001], shares=1),
            ]
        )
        save_consts(s, Consts(flags=SHAREBYACCT))
    procs = [proc(7, 1001, 1.0), proc(8, 1001, 2.0)]
    d, clock, *_ = make(
        engine, lambda i: procs, account_of=AccountsOf(lambda p: 2001 if p.pid == 8 else None)
    )
    d.start()
    cycle(d, clock)
    head, rows = published(d)
    assert head.mode == "account"
    assert rows["acct2"].cpu_seconds == 1.0  # alice's default account (first acid)
    assert rows["acct1"].cpu_seconds == 2.0  # the account newacct put pid 8 in
    assert "alice" not in rows


# -- lnode lifecycle ---------------------------------------------------------------------------


def test_new_lnode_starts_from_stored_usage_aged_by_its_absence(engine):
    # alice left one half-life (3600 s) before the first cycle with 1000 of usage.
    with write_session(engine) as s:
        s.execute(
            update(Entry)
            .where(Entry.name == "alice")
            .values(shusage=1000.0, shextime=EPOCH + 4.0 - 3600.0)
        )
    d, clock, *_ = make(engine, lambda i: [proc(7, 1001, 2.0)])
    d.start()
    cycle(d, clock)
    _, rows = published(d)
    k = 0.5 ** (4.0 / 3600.0)
    assert rows["alice"].usage == pytest.approx(500.0 * k + 2.0 * PER_CPU_S, rel=1e-12)


def test_gone_lnodes_are_written_back_at_the_write_back_interval(engine):
    set_consts(engine, writeback=8.0)
    with write_session(engine) as s:
        s.execute(update(Entry).where(Entry.name == "alice").values(shcharge=5.0))
    d, clock, *_ = make(engine, lambda i: [proc(7, 1001, 2.0)] if i == 1 else [])
    d.start()
    cycle(d, clock)  # t=4: alice runs
    assert entry(engine, "alice").shcharge == 5.0  # nothing written while active
    cycle(d, clock)  # t=8: alice has gone; the write-back interval is up
    a = entry(engine, "alice")
    k = 0.5 ** (4.0 / 3600.0)
    assert a.shcharge == 5.0 + 2.0 * PER_CPU_S
    assert a.cpuquotaused == 2.0
    assert a.shextime == EPOCH + 8.0
    assert a.shusage == pytest.approx(2.0 * PER_CPU_S * k, rel=1e-12)
    cycle(d, clock)
    _, rows = published(d)
    assert "alice" not in rows  # released


def test_consts_are_reread_every_cycle(engine):
    d, clock, *_ = make(engine, lambda i: [proc(7, 1001, 1.0)])
    d.start()
    cycle(d, clock)
    set_consts(engine, cost_tick=300.0)  # as shradmin -t 300 would
    cycle(d, clock)
    _, rows = published(d)
    assert rows["alice"].charge == 1.0 * PER_CPU_S + 3.0 * PER_CPU_S


def test_a_new_delta_sets_the_next_sleep(engine):
    d, clock, col, *_ = make(engine, lambda i: [])
    # shradmin -R 2 lands during cycle 1 (after its consts were read).
    col.on_sample = lambda n: set_consts(engine, delta=2.0) if n == 2 else None
    assert d.run(cycles=3) == 3
    # cycles at t=4 and t=8 (cycle 1 still planned with 4 s), then 2 s later.
    assert published(d)[0].time == EPOCH + 10.0


def test_the_loop_freezes_the_started_heap_out_of_the_collector_until_it_returns(engine):
    import gc

    frozen = []

    class Watch:
        def started(self, daemon):
            frozen.append(gc.get_freeze_count())

        def cycled(self, daemon, seconds):
            frozen.append(gc.get_freeze_count())

        def stopping(self, daemon):
            pass

    d, *_ = make(engine, lambda i: [proc(7, 1001, 1.0)], observers=[Watch()])
    assert gc.get_freeze_count() == 0
    assert d.run(cycles=2) == 2
    assert len(frozen) == 3 and min(frozen) > 1000  # the heap at start: modules, engine...
    assert gc.get_freeze_count() == 0  # collectable again once the loop has returned


def test_new_entry_is_picked_up_within_one_cycle(engine):
    d, clock, *_ = make(engine, lambda i: [proc(9, 1005, 1.0)])
    d.start()
    cycle(d, clock)
    assert published(d)[1]["unknown"].cpu_seconds == 1.0
    with write_session(engine) as s:
        s.add(Entry(name="carol", uid=1005, resgrp=500, shares=2))
    cycle(d, clock)
    _, rows = published(d)
    assert rows["carol"].cpu_seconds == 1.0 and rows["carol"].shares == 2.0
    assert rows["unknown"].cpu_seconds == 1.0  # kept its lnode (still active until released)


def test_cpu_quota_warns_on_the_terminals_without_a_signal_then_sigkill_past_the_threshold(
    engine, caplog, monkeypatch
):
    """The guide's 4.7: at the quota the user is warned and the processes keep running
    (SIGCPULIM "is ignored by default"); 3 s of CPU past it (the default threshold) they
    are killed.  By default the warning is a message on the user's terminals and in the
    log, with no signal: Linux's SIGXCPU would end a process that does not handle it."""
    with write_session(engine) as s:
        s.execute(update(Entry).where(Entry.name == "alice").values(cpuquota=5.0, cpuquotaused=1.0))
    actions = RecordedOs()
    d, clock, _col, _enf, sent = make(
        engine, lambda i: [proc(7, 1001, 2.0), proc(8, 1001, 0.0)], actions=actions
    )
    d.start()
    cycle(d, clock)  # 1 + 2 = 3 s used
    assert sent == [] and actions.told == []
    monkeypatch.setattr(logging.getLogger("shrdaemon"), "propagate", True)  # to caplog
    with caplog.at_level(logging.WARNING, logger="shrdaemon"):
        cycle(d, clock)  # 5 s: the quota
    assert sent == []  # no signal: nothing that could end a process
    ((pids, text),) = actions.told
    assert pids == (7, 8)
    assert "CPU quota of 5 s reached (5.0 s used)" in text
    assert "killed when they have used 3 CPU s more" in text
    assert "alice: CPU quota 5.0 s reached (5.0 s used): warned, no signal" in caplog.text
    cycle(d, clock)  # 7 s: below quota + 3 s, no second warning
    assert sent == [] and len(actions.told) == 1
    cycle(d, clock)  # 9 s >= 8 s
    assert sent == [(7, signal.SIGKILL), (8, signal.SIGKILL)]
    assert "being killed (SIGKILL)" in actions.told[1][1]
    d.shutdown()
    assert entry(engine, "alice").cpuquotaused == 1.0 + 8.0


def test_cpu_quota_sends_the_signal_shradmin_sets_as_the_warning(engine):
    with write_session(engine) as s:
        s.execute(update(Entry).where(Entry.name == "alice").values(cpuquota=5.0, cpuquotaused=1.0))
        save_consts(s, Consts(quota_signal="SIGURG"))
    actions = RecordedOs()
    d, clock, _col, _enf, sent = make(engine, lambda i: [proc(7, 1001, 4.0)], actions=actions)
    d.start()
    cycle(d, clock)  # 5 s: the quota
    assert sent == [(7, signal.SIGURG)]
    assert "(SIGURG sent to them)" in actions.told[0][1]
    d.shutdown()


def test_a_pid_given_to_another_process_since_the_sample_is_neither_signalled_nor_reniced(
    engine,
):
    """Between its full samples the collector keeps processes' last readings, so a pid
    it hands on may belong to a newer process by now: the daemon asks the machine when
    each pid's process started and leaves a pid whose start differs alone (here pid 8,
    alice's when sampled, someone else's since).  Her own process 7 is still hers."""
    with write_session(engine) as s:
        s.execute(
            update(Entry)
            .where(Entry.name == "alice")
            .values(cpuquota=1.0, cpuquotaused=1.0, nice=4)
        )
    actions = RecordedOs(starts={7: EPOCH, 8: EPOCH + 30.0})
    plan = [proc(7, 1001, 1.0), proc(8, 1001, 1.0)]
    d, clock, *_ = make(engine, lambda i: plan, actions=actions, udb_nice=True)
    d.start()
    cycle(d, clock)
    assert actions.told == [((7,), actions.told[0][1])]  # warned: pid 8 left alone
    assert actions.nice == {7: 4}
    actions.starts[8] = EPOCH  # the same pid, the sampled process again: it is acted on
    cycle(d, clock)
    assert actions.nice == {7: 4, 8: 4}
    d.shutdown()


def test_sighup_rereads_quotas_the_fingerprint_cannot_see(engine):
    d, clock, _c, _e, sent = make(engine, lambda i: [proc(7, 1001, 1.0)])
    d.start()
    cycle(d, clock)
    with write_session(engine) as s:
        s.execute(update(Entry).where(Entry.name == "alice").values(cpuquota=0.5))
    cycle(d, clock)
    assert d.actions.told == []  # not seen yet
    d.loop.hup(signal.SIGHUP, None)
    cycle(d, clock)
    assert [pids for pids, _text in d.actions.told] == [(7,)]


# -- enforcement -----------------------------------------------------------------------------


def test_the_udb_nice_is_applied_beside_a_cgroup_enforcer_and_undone(engine):
    """alice's entry says nice 4: her default-nice process gets 4, the one she started
    at 9 keeps 9; a root process and bob (no UDB nice) are left alone; NOSCHED and the
    daemon's stop put back what it set."""
    with write_session(engine) as s:
        s.execute(update(Entry).where(Entry.name == "alice").values(nice=4))
    plan = [proc(7, 1001, 1.0), proc(8, 1001, 1.0, nice=9), proc(9, 1002, 1.0), proc(3, 0)]
    actions = RecordedOs({8: 9})
    d, clock, *_ = make(engine, lambda i: plan, actions=actions, udb_nice=True)
    d.start()
    cycle(d, clock)
    assert actions.nice == {7: 4, 8: 9}  # 9 (bob) and 3 (root) never set
    set_consts(engine, flags=NOSCHED)
    cycle(d, clock)
    assert actions.nice == {7: 0, 8: 9}
    set_consts(engine)
    cycle(d, clock)
    assert actions.nice[7] == 4
    with write_session(engine) as s:  # the entry's nice goes back to the default
        s.execute(update(Entry).where(Entry.name == "alice").values(nice=0))
    d.loop.hup(signal.SIGHUP, None)
    cycle(d, clock)
    assert actions.nice == {7: 0, 8: 9}
    with write_session(engine) as s:
        s.execute(update(Entry).where(Entry.name == "alice").values(nice=4))
    d.loop.hup(signal.SIGHUP, None)
    cycle(d, clock)
    assert actions.nice[7] == 4
    d.shutdown()
    assert actions.nice == {7: 0, 8: 9}


def test_targets_leave_system_processes_alone_and_nosched_turns_enforcing_off(engine):
    d, clock, _c, enf, _s = make(
        engine, lambda i: [proc(7, 1001, 2.0), proc(8, 1002, 2.0), proc(9, 12, 1.0)]
    )
    d.start()
    cycle(d, clock)
    assert enf.calls[0] == "setup"
    kind, targets = enf.calls[1]
    # unknown (uid 12 < 1000) is charged but not enforced; alice and bob: equal shares,
    # equal usage, so equal effective shares, the ones the cycle published.
    assert [(n, p) for n, p, _e in targets] == [("alice", (7,)), ("bob", (8,))]
    _, rows = published(d)
    assert targets[0][2] == targets[1][2] == round(rows["alice"].e_share, 6) > 0
    assert rows["unknown"].cpu_seconds == 1.0
    set_consts(engine, flags=NOSCHED)
    cycle(d, clock)
    assert enf.calls[2:] == ["teardown"]
    assert published(d)[0].enforcer == "none"
    set_consts(engine, flags=0)
    cycle(d, clock)
    assert enf.calls[3] == "setup" and enf.calls[4][0] == "apply"
    assert published(d)[0].enforcer == "recorder"


# -- stopping and crashing -----------------------------------------------------------------


def test_run_stops_on_request_writes_everything_back_and_marks_the_table(engine):
    d, clock, col, enf, _s = make(engine, lambda i: [proc(7, 1001, 1.0)])
    col.on_sample = lambda n: d.stop() if n == 4 else None
    assert d.run() == 3  # the baseline, then cycles 1..3; the stop comes with the 4th sample
    assert enf.calls[-1] == "teardown"
    a = entry(engine, "alice")
    assert a.shcharge == 3.0 * PER_CPU_S and a.cpuquotaused == 3.0
    head, _rows = published(d)
    assert not head.running and head.stopped == EPOCH + 12.0


def test_run_counts_cycles(engine):
    d, *_ = make(engine, lambda i: [])
    assert d.run(cycles=5) == 5


def test_crash_then_restart_recovers_the_checkpoint(engine):
    set_consts(engine, checkpoint=8.0)
    d, clock, *_ = make(engine, lambda i: [proc(7, 1001, 1.0)])
    d.start()
    cycle(d, clock, 2)  # checkpoint at t=8
    with read_session(engine) as s:
        cp = s.scalars(select(LnodeCheckpoint).where(LnodeCheckpoint.name == "alice")).one()
        usage, charge, when = cp.usage, cp.charge, cp.time
    cycle(d, clock)  # t=12: accrues after the checkpoint, then "kill -9": no shutdown
    assert charge == 2.0 * PER_CPU_S and when == EPOCH + 8.0
    d2, clock2, *_ = make(engine, lambda i: [])
    d2.start()
    a = entry(engine, "alice")
    assert (a.shusage, a.shextime, a.shcharge, a.cpuquotaused) == (usage, when, charge, 2.0)


# -- the command -------------------------------------------------------------------------------


def test_simulate_acme_like_scenario_delivers_shares_2_to_1(udb_url):
    scenario = ROOT_DIR / "examples" / "scenarios" / "02_shares_2_to_1.toml"
    r = CliRunner().invoke(
        main,
        ["--udb", udb_url, "--simulate", str(scenario), "--cycles", "450", "--show", "--json"],
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["cycle"]["enforcer"] == "sim" and out["cycle"]["cycle"] == 450
    lnodes = {x["name"]: x for x in out["lnodes"]}
    # alice 2 shares, bob 1: after half an hour (two half-lives) of 2 vs 8 CPU-bound
    # processes, the CPU of the last cycle is split 2:1.
    assert lnodes["alice"]["cpu"] == pytest.approx(2 / 3, abs=0.02)
    assert lnodes["bob"]["cpu"] == pytest.approx(1 / 3, abs=0.02)
    assert lnodes["alice"]["m_share"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("enforcer", ["auto", "systemd", "nice"])
def test_simulate_delivers_a_group_its_share_under_every_enforcer(udb_url, enforcer):
    """Scenario 14 under the real daemon loop: Chem's u4 uses 1% of a CPU, and the
    share it leaves goes to u3 (its group's), so Chem still gets half the machine:
    through nested cgroups (the scenario's), systemd's flat slices and nice values
    (both weighed by the cycle's flat shares).  The table published says so: what
    each lnode got, over the cycle and the minute, against its fair target."""
    scenario = ROOT_DIR / "examples" / "scenarios" / "14_interactive_member.toml"
    args = ["--udb", udb_url, "--simulate", str(scenario), "--cycles", "900", "--show"]
    r = CliRunner().invoke(main, [*args, "--json", "--enforcer", enforcer])
    assert r.exit_code == 0, r.output
    lnodes = {x["name"]: x for x in json.loads(r.stdout)["lnodes"]}
    cpu = {name: x["cpu"] for name, x in lnodes.items()}
    assert cpu["u3"] + cpu["u4"] == pytest.approx(0.5, abs=0.02)
    assert cpu["u4"] == pytest.approx(0.005, abs=0.002)
    for name, fair in {"Physics": 0.5, "Chem": 0.5, "u3": 0.495, "u4": 0.005}.items():
        assert lnodes[name]["target"] == pytest.approx(fair, abs=1e-3)
        assert lnodes[name]["got_minute"] == pytest.approx(fair, abs=0.01)
    assert lnodes["u1"]["want"] == pytest.approx(8.0)
    text = CliRunner().invoke(main, [*args, "--enforcer", enforcer]).stdout
    assert "fair" in text and "minute" in text


def test_once_and_cycles_together_is_an_error(udb_url):
    r = CliRunner().invoke(main, ["--udb", udb_url, "--once", "--cycles", "3"])
    assert r.exit_code == 2
    assert "--once and --cycles" in r.stderr


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))


# -- a site of a grid ------------------------------------------------------------------


def test_the_daemons_speed_and_the_other_sites_usage(engine):
    """shrdaemon --speed doubles what a CPU second is charged; with G global, the other
    sites' usage the daemon takes (fairshare.core.steps.exchange_grid) splits G between
    alice and bob, and the socket's priority request gets it by name."""
    from fairshare.core.steps import exchange_grid

    with write_session(engine) as s:
        s.scalars(select(Entry).where(Entry.name == "G")).one().scope = "global"
    both = lambda i: [proc(7, 1001, 1.0), proc(8, 1002, 1.0)]  # noqa: E731
    d, clock, *_ = make(engine, both, options=Options(enforce_min_uid=1000, speed=2.0))
    d.start()
    cycle(d, clock)
    assert published(d)[1]["alice"].charge == 2.0 * PER_CPU_S
    assert remote_now(d) == {}
    ln = d._lnodes
    remote = np.zeros(ln.tree.size)
    remote[ln.tree.node("alice")] = remote[ln.tree.node("G")] = 1e9
    exchange_grid(ln.tree, ln.table, d.site.grid, remote, d.consts)
    assert remote_now(d)["alice"] == 1e9
    cycle(d, clock)
    e = d._lnodes.table.e_share
    assert e[ln.tree.node("bob")] > 10 * e[ln.tree.node("alice")]
