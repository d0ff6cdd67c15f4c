"""The daemon's pure steps alone: which leaf a process is charged to (fairshare.daemon.charges,
fairshare.daemon.accounts), the quota signals and enforcer targets (fairshare.daemon.decisions), and
the write-back's modes: which lnodes each releases and what it reads after
(fairshare.daemon.writeback)."""

from __future__ import annotations

import signal
from dataclasses import dataclass

import numpy as np
import pytest
from sqlalchemy.exc import OperationalError

from fairshare.collect import ProcessSample, Sample
from fairshare.core.consts import GLOBALUSAGE, Consts
from fairshare.core.lnode import activate
from fairshare.core.site import SiteState
from fairshare.core.tree import build_tree, default_acid
from fairshare.daemon import writeback
from fairshare.daemon.accounts import AccountsOf, account_of
from fairshare.daemon.charges import consumption, leaf_of
from fairshare.daemon.decisions import enforcer_targets, quota_signals
from fairshare.daemon.outage import UdbCalls
from fairshare.daemon.state import lnodes_for
from fairshare.daemon.writeback import WriteBackMode, WriteBacks, leave
from fairshare.store.published import EntryState
from udb.models import IDLE_UID, SHF_ACCOUNT, SHF_GROUP


@dataclass
class Row:
    name: str
    uid: int
    resgrp: int = 0
    shares: int = 1
    shflags: int = 0


def user_tree():
    rows = [
        Row("Idle", IDLE_UID, shares=0),
        Row("unknown", 12),
        Row("G", 500, shflags=SHF_GROUP),
        Row("alice", 1001, 500),
        Row("bob", 1002, 500),
    ]
    return lnodes_for(build_tree(rows, "user"), {}, ())


def account_tree():
    rows = [
        Row("Idle", IDLE_UID, shares=0),
        Row("unknown", 12),
        Row("a1", 3001, shflags=SHF_ACCOUNT),
        Row("a2", 3002, shflags=SHF_ACCOUNT),
        Row("carol", 1003),
    ]
    return lnodes_for(build_tree(rows, "account"), {1003: [3001, 3002], 1004: []}, ())


def p(pid, uid, cpu=0.0, **kw):
    return ProcessSample(pid, 0.0, uid, cpu=cpu, **kw)


def test_share_by_user_charges_the_uids_leaf_and_unknown_uids_to_unknown():
    ln = user_tree()
    assert ln.tree.names[leaf_of(ln, p(1, 1001), None)] == "alice"
    assert ln.tree.names[leaf_of(ln, p(2, 4242), None)] == "unknown"
    assert ln.tree.names[leaf_of(ln, p(3, IDLE_UID), None)] == "Idle"


def test_share_by_account_takes_the_chosen_account_else_the_first_acid():
    ln = account_tree()
    chosen = AccountsOf(lambda q: 3002 if q.sid == 7 else None)
    assert ln.tree.names[leaf_of(ln, p(1, 1003), chosen)] == "a1"  # default: first acid
    assert ln.tree.names[leaf_of(ln, p(2, 1003, sid=7), chosen)] == "a2"  # newacct's
    assert ln.tree.names[leaf_of(ln, p(3, 1004), chosen)] == "unknown"  # no acids
    assert ln.tree.names[leaf_of(ln, p(4, IDLE_UID), None)] == "Idle"
    assert default_acid([3001, 3002]) == 3001 and default_acid([]) is None
    assert account_of(p(5, 1003), None, {1003: [3002]}) == 3002


def test_consumption_grades_nice_unless_the_enforcer_set_it():
    """A nice-19 process is not charged; a nice-10 one at the guide's graded rate; when the
    enforcer sets nice values itself, both are charged at nice 0's rate.  The CPU
    counted (for quotas) is every second, whatever the nice (issue 29)."""
    ln = user_tree()
    alice, bob = ln.tree.node("alice"), ln.tree.node("bob")
    sample = Sample(0.0, 4.0, [p(1, 1001, 1.0, nice=19), p(2, 1002, 1.0, nice=10)], idle=0.5)
    c, procs = consumption(ln, sample)
    assert c.cpu[alice] == 1.0 and c.cpu_charged[alice] == 0.0 and c.cpu[bob] == 1.0
    assert 0 < c.cpu_charged[bob] < 1.0
    assert c.cpu[ln.idle] == 0.5 and sorted(procs) == sorted([alice, bob])
    c, _ = consumption(ln, sample, enforcer_nice=True)
    assert c.cpu[alice] == c.cpu_charged[alice] == 1.0 and c.cpu_charged[bob] == 1.0


def quota_lnodes(used_before: float, ran: float):
    ln = user_tree()
    a = ln.tree.node("alice")
    activate(ln.table, a, 0.0)
    ln.table.cpu_seconds[a] = ran
    ln.entry[a] = EntryState(1001, 0.0, 0.0, cpuquota=10.0, cpuquotaused=used_before)
    return ln, a


def test_quota_signals_warn_once_then_kill_past_the_threshold():
    procs_of = {}
    ln, a = quota_lnodes(8.0, 1.5)  # 9.5 s of 10: nothing yet
    procs_of[a] = [p(7, 1001), p(8, 1001, kernel=True)]
    assert quota_signals(ln, procs_of, threshold=5.0) == []
    ln.table.cpu_seconds[a] = 2.0  # 10 s: the warning to the process (never a kernel thread)
    (q,) = quota_signals(ln, procs_of, threshold=5.0)
    # by default no signal at all: the warning is the message (guide 4.7: ignored)
    assert (q.signal, q.kill, q.pids, q.used, q.quota) == (None, False, (7,), 10.0, 10.0)
    (q,) = quota_signals(ln, procs_of, threshold=5.0, warning=signal.SIGURG)
    assert (q.signal, q.kill) == (signal.SIGURG, False)
    ln.warned.add(a)  # sent: not again while between the quota and the threshold
    assert quota_signals(ln, procs_of, threshold=5.0) == []
    ln.table.cpu_seconds[a] = 7.0  # 15 s = quota + threshold: SIGKILL, every cycle
    kills = quota_signals(ln, procs_of, threshold=5.0)
    assert [(q.signal, q.kill) for q in kills] == [(signal.SIGKILL, True)]


def test_targets_are_active_leaves_with_processes_the_enforcer_may_touch():
    ln = user_tree()
    alice, bob = ln.tree.node("alice"), ln.tree.node("bob")
    activate(ln.table, alice, 0.0)
    ln.table.e_share[alice] = 0.25
    ln.entry[alice] = EntryState(1001, 0.0, 0.0, 0.0, 0.0, nice=4)
    procs_of = {
        alice: [p(7, 1001, runnable=True), p(8, 1001), p(9, 1001, kernel=True)],
        bob: [p(10, 1002)],  # no lnode (not active): no target
        ln.unknown: [p(11, 12)],  # below the enforce_min_uid: charged, never moved
    }
    ln.table.want[alice], ln.table.target[alice] = 1.0, 0.5
    (t,) = enforcer_targets(ln, procs_of, min_uid=1000, cpus=2.0)
    assert (t.name, t.pids, t.runnable, t.e_share, t.nice, t.light) == (
        "alice",
        (7, 8),
        frozenset({7}),
        0.25,
        4,
        True,  # it wants 1 CPU, its fair target is half of 2
    )
    ln.table.want[alice] = 1.5
    (t,) = enforcer_targets(ln, procs_of, min_uid=1000, cpus=2.0)
    assert not t.light


def test_leave_releases_the_gone_keeps_idle_and_moves_cpu_into_the_quota_base():
    ln = user_tree()
    alice, bob = ln.tree.node("alice"), ln.tree.node("bob")
    for n in (alice, bob, ln.idle):
        activate(ln.table, n, 1.0)
    ln.table.refs[alice] = 2  # alice still has processes; bob and Idle none
    ln.table.cpu_seconds[alice] = 3.0
    ln.entry[alice] = EntryState(1001, 0.0, 0.0, cpuquota=10.0, cpuquotaused=1.0)
    out = dict(leave(ln, 100.0, WriteBackMode.PERIODIC))
    assert set(out) == {1001, 1002, IDLE_UID}
    assert not ln.table.active[bob] and ln.table.active[alice] and ln.table.active[ln.idle]
    assert ln.entry[alice].cpuquotaused == pytest.approx(4.0)
    assert out[1001].cpu_seconds == pytest.approx(3.0)
    leave(ln, 101.0, WriteBackMode.SHUTDOWN)
    assert not np.any(ln.table.active & ln.tree.leaf_mask)


def test_each_write_back_mode_releases_what_it_says():
    """PERIODIC releases the leaves with no processes but Idle, SYNC (shrsync -u) none,
    SHUTDOWN every one; each writes what every active leaf accrued."""

    def written(mode):
        ln = user_tree()
        alice, bob = ln.tree.node("alice"), ln.tree.node("bob")
        for n in (alice, bob, ln.idle):
            activate(ln.table, n, 1.0)
            ln.table.cpu_seconds[n] = 2.0
        ln.table.refs[alice] = 1  # alice still has processes; bob and Idle none
        ln.entry[bob] = EntryState(1002, 0.0, 0.0, cpuquota=10.0, cpuquotaused=1.0)
        ln.warned.add(bob)
        out = dict(leave(ln, 100.0, mode))
        left = {ln.tree.names[n] for n in ln.active_leaves()}
        return out, left, ln.entry.get(bob), bob in ln.warned

    out, left, bob_entry, warned = written(WriteBackMode.PERIODIC)
    assert set(out) == {1001, 1002, IDLE_UID} and left == {"alice", "Idle"}
    assert bob_entry is None and not warned  # released: forgotten
    out, left, bob_entry, warned = written(WriteBackMode.SYNC)
    assert set(out) == {1001, 1002, IDLE_UID} and left == {"alice", "bob", "Idle"}
    assert bob_entry.cpuquotaused == pytest.approx(3.0) and warned  # kept: CPU moved in
    assert out[1002].cpu_seconds == pytest.approx(2.0)
    out, left, bob_entry, warned = written(WriteBackMode.SHUTDOWN)
    assert set(out) == {1001, 1002, IDLE_UID} and left == set()
    assert bob_entry is None and not warned


class EntryStore:
    """A store that records the write-back and the reads that follow it; `down`: the
    write-back finds the UDB unreachable."""

    host = "h"

    def __init__(self, down=False):
        self.calls, self.down = [], down

    def write_back(self, pending, halflife, spool=0, by_uid=None, counters=None):
        if self.down:
            raise OperationalError("UPDATE", {}, Exception("connection refused"))
        self.calls.append(("write_back", sorted(uid for uid, _wb in pending)))
        return len(pending)

    def entry_states(self, uids):
        self.calls.append(("entry_states", sorted(uids)))
        return {}


def test_a_write_back_reads_the_entries_and_updates_the_site_factors_unless_it_stops(
    monkeypatch,
):
    """The site factors come from the view the cycle's exchange keeps (no read of the
    site at the write-back: fairshare.daemon.exchange)."""
    updated = []

    def update_factors(tree, table, site, consts, cpus):
        updated.append(consts.flags)
        return site.factor

    monkeypatch.setattr(writeback, "update_factors", update_factors)
    for mode, after, factors in (
        (WriteBackMode.PERIODIC, [("entry_states", [1001])], [GLOBALUSAGE]),
        (WriteBackMode.SYNC, [("entry_states", [1001])], [GLOBALUSAGE]),
        (WriteBackMode.SHUTDOWN, [], []),
    ):
        ln = user_tree()
        activate(ln.table, ln.tree.node("alice"), 1.0)
        ln.table.refs[ln.tree.node("alice")] = 1
        store = EntryStore()
        ledger = WriteBacks(store, cpus=2.0)
        udb = UdbCalls(lambda: 0.0, ledger.kept, ledger.due_now)
        site = SiteState.new(ln.tree.size)
        updated.clear()
        assert ledger.write_back(udb, ln, site, 100.0, Consts(flags=GLOBALUSAGE), mode) == 1
        assert store.calls == [("write_back", [1001]), *after], mode
        assert updated == factors, mode
        updated.clear()  # without GLOBALUSAGE the factors are not updated
        ledger.write_back(udb, ln, site, 101.0, Consts(), mode)
        assert updated == []


def test_what_the_udb_does_not_take_is_kept_and_written_when_it_answers_again():
    ln = user_tree()
    activate(ln.table, ln.tree.node("alice"), 1.0)
    ln.table.refs[ln.tree.node("alice")] = 1
    store = EntryStore(down=True)
    ledger = WriteBacks(store, cpus=2.0)
    udb = UdbCalls(lambda: 0.0, ledger.kept, ledger.due_now)
    ledger.start(0.0, Consts())
    site, mode = SiteState.new(ln.tree.size), WriteBackMode.PERIODIC
    assert ledger.write_back(udb, ln, site, 100.0, Consts(), mode) == 0
    assert ledger.kept() == 1 and store.calls == []  # nothing read after a failed write
    assert ledger.next_writeback > 0.0
    store.down = False
    assert udb.read("read", lambda: 1) == 1  # a read works: a failed write is not over
    assert ledger.next_writeback > 0.0
    assert udb.call("write", lambda: 1) == 1  # the UDB takes writes: write back at once
    assert ledger.next_writeback == 0.0
    assert ledger.write_back(udb, ln, site, 101.0, Consts(), mode) == 1  # kept + new, merged
    assert ledger.kept() == 0 and ledger.writebacks == 1


def test_a_long_write_outage_keeps_one_increment_per_lnode_and_logs_once_a_minute(caplog):
    """Writes fail, reads work (a full disk, a read-only UDB): the outage must not end
    and begin again every cycle (one line a minute), and what is kept stays one merged
    increment per lnode however many write-backs fail."""
    ln = user_tree()
    alice = ln.tree.node("alice")
    activate(ln.table, alice, 1.0)
    ln.table.refs[alice] = 1
    store = EntryStore(down=True)
    ledger = WriteBacks(store, cpus=2.0)
    clock = [0.0]
    udb = UdbCalls(lambda: clock[0], ledger.kept, ledger.due_now)
    site, mode = SiteState.new(ln.tree.size), WriteBackMode.PERIODIC
    caplog.set_level("WARNING", "shrdaemon")
    for cycle in range(1, 31):  # 30 cycles of 4 s: two minutes
        clock[0] = 4.0 * cycle
        ln.table.cpu_seconds[alice] += 1.0
        ln.table.charge[alice] += 2.0
        assert udb.read("read the constants", lambda: 1) == 1
        ledger.write_back(udb, ln, site, 100.0 + cycle, Consts(), mode)
    assert ledger.kept() == 1
    assert ledger.pending[1001].cpu_seconds == pytest.approx(30.0)
    assert ledger.pending[1001].charge == pytest.approx(60.0)
    lines = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(lines) == 2, [r.getMessage() for r in caplog.records]  # at 4 s and 64 s
    assert not any("reachable again" in r.getMessage() for r in caplog.records)


def test_merged_increments_age_the_older_usage_to_the_later_time():
    from fairshare.core.lnode import WriteBack
    from fairshare.daemon.writeback import merge_into

    owed = {}
    merge_into(owed, [(7, WriteBack(8.0, 100.0, 1.0, 0.5))], 50.0)
    merge_into(owed, [(7, WriteBack(2.0, 150.0, 3.0, 1.5)), (8, WriteBack(1, 1, 1, 1))], 50.0)
    assert owed[7] == WriteBack(8.0 * 0.5 + 2.0, 150.0, 4.0, 2.0)
    assert owed[8] == WriteBack(1, 1, 1, 1)


def test_a_udb_that_fails_answers_and_fails_again_is_said_once_a_minute(caplog):
    """A full disk whose checkpoint freed a page takes one write, then fails again: the
    outage is said at most once a minute across those flips, and the answer between
    them is not said either (the system tier's 1 MB tmpfs saw three lines in 15 s)."""
    caplog.set_level("DEBUG", "shrdaemon")
    clock = [0.0]
    udb = UdbCalls(lambda: clock[0], lambda: 0, lambda: None)

    def full():
        raise OperationalError("INSERT", {}, Exception("database or disk is full"))

    for t in (0.0, 6.0, 13.0, 59.0):
        clock[0] = t
        assert udb.call("publish", full) is None
        clock[0] = t + 0.5
        assert udb.call("publish", lambda: 1) == 1
    clock[0] = 61.0
    udb.call("publish", full)

    def said(text, level="WARNING"):
        return [r for r in caplog.records if text in r.getMessage() and r.levelname == level]

    assert len(said("unreachable")) == 2  # at 0 s and at 61 s
    assert len(said("reachable again", "INFO")) == 1  # only after the outage it said
