"""Nobody escapes the books and nothing is counted twice (issue 29): the pieces, without
root (the real machine's proof: tests/system/test_books_real.py).

- an orphan born in an lnode cgroup is known to be there (the kernel says so), so only
  the cgroup's counter charges it;
- the counters a write-back or checkpoint covered are stored, and a restarted daemon
  resumes from them, or says what it cannot charge;
- what a process used before it was moved into an lnode cgroup is charged once (the
  samples that saw it outside, the rest from its figures at the move), never as part
  of the counter's readings; a process that leaves its cgroup is not charged again
  what the counter charged.
"""

from __future__ import annotations

import errno
import logging

import pytest

from fairshare.collect import GroupReading
from fairshare.collect.procfs import ProcfsCollector
from fairshare.core.lnode import WriteBack, activate
from fairshare.daemon.writeback import follow_counters, resume_counters
from fairshare.store.published import Counters, LnodeStore
from integration.test_collect import STAT, STATUS
from integration.test_store import engine, tree_and_table  # noqa: F401 - the fixture


def proc_entry(tmp_path, pid: int, ppid: int, ticks: int) -> None:
    d = tmp_path / str(pid)
    d.mkdir(exist_ok=True)
    stat = STAT.replace(b"4242 (my", f"{pid} (my".encode()).replace(
        b") R 1 ", f") R {ppid} ".encode()
    )
    (d / "stat").write_bytes(stat.replace(b" 250 50 ", f" {ticks} 0 ".encode()))
    (d / "status").write_bytes(STATUS)


def test_an_orphan_in_an_lnode_cgroup_is_charged_by_the_counter_alone(tmp_path):
    """Its parent gone, an orphan (ppid 1) cannot inherit its parent's cgroup: the
    collector asks the kernel which one it is in, so its own CPU is not charged as well
    as the counter's (the +21% of a stream of overlapping orphans)."""
    pids = [4242]
    proc_entry(tmp_path, 4242, 1, 100)  # the user's shell, in lnode cgroup "u"
    counter = {"cpu": 1.0}

    def groups(full=True):
        return {"u": GroupReading(counter["cpu"], frozenset({4242}) if full else frozenset())}

    asked = []

    def group_of(pid):
        asked.append(pid)
        return "u"

    c = ProcfsCollector(proc=str(tmp_path), pids=lambda: list(pids), groups=groups,
                        group_of=group_of)  # fmt: skip
    c.sample(io=False, syscalls=False)
    c.sample(io=False, syscalls=False)  # no longer the full refresh
    proc_entry(tmp_path, 4300, 1, 50)  # double-forked: its parent exited, init adopted it
    pids.append(4300)
    counter["cpu"] = 3.0
    s = c.sample(io=False, syscalls=False)
    orphan = next(p for p in s.processes if p.pid == 4300)
    assert orphan.group == "u" and asked == [4300]
    assert s.groups == {"u": pytest.approx(2.0)}


def test_a_restart_resumes_from_the_counters_covered(tmp_path):
    counter = {"u": 10.0, "v": 4.0}
    c = ProcfsCollector(
        proc=str(tmp_path),
        pids=list,
        groups=lambda full=True: {n: GroupReading(v) for n, v in counter.items()},
    )
    c.sample(io=False, syscalls=False)  # the baseline
    gap, lost = c.resume({"u": 7.0, "v": 5.0, "w": 1.0})
    assert gap == {"u": 3.0} and sorted(lost) == ["v", "w"]  # v made anew, w gone
    counter["u"] = 12.0
    assert c.sample(io=False, syscalls=False).groups["u"] == pytest.approx(5.0)
    assert c.covered() == {"u": 12.0, "v": 4.0}


class Resumable:
    def __init__(self, boot, gap=None, lost=()):
        self.boot, self.gap, self.lost = boot, gap or {}, list(lost)

    def covered(self):
        return {"u": 1.0}

    def boot_time(self):
        return self.boot

    def resume(self, covered):
        return self.gap, self.lost


def test_resuming_says_what_the_counters_cannot_cover(caplog):
    caplog.set_level(logging.INFO, logger="shrdaemon")
    stored = Counters({"u": 1.0}, boot=1000.0, time=5000.0)
    resume_counters(stored, Resumable(1000.0, {"u": 2.5}, ["gone"]), 6000.0)
    text = caplog.text
    assert "lnode cgroup u: 2.500 CPU s used since" in text and "charged from its counter" in text
    assert "lnode cgroup gone: its counter is gone or was reset" in text
    caplog.clear()
    resume_counters(stored, Resumable(4000.0, {"u": 2.5}), 6000.0)  # rebooted since
    assert "the machine rebooted" in caplog.text and "cannot be charged" in caplog.text
    assert "charged from its counter" not in caplog.text


def test_write_backs_and_checkpoints_store_the_counters_they_covered(engine):  # noqa: F811
    from fairshare.daemon.writeback import WriteBacks

    store = LnodeStore(engine, host="h1")
    tree, table = tree_and_table(engine)
    activate(table, tree.node("alice"), 0.0)
    assert store.stored_counters() is None
    store.checkpoint(tree, table, 7000.0, Counters({"alice": 3.5}, 100.0, 7000.0))
    assert store.stored_counters() == Counters({"alice": 3.5}, 100.0, 7000.0)
    wb = WriteBack(1.0, 7001.0, 1.0, 1.0)
    store.write_back([(1001, wb)], 3600.0, counters=Counters({"alice": 4.0}, 100.0, 7001.0))
    assert store.stored_counters() == Counters({"alice": 4.0}, 100.0, 7001.0)
    assert LnodeStore(engine, host="h2").stored_counters() is None  # per host
    ledger = WriteBacks(store, 2.0)
    follow_counters(ledger, Resumable(100.0))
    assert ledger.covered(7002.0) == Counters({"u": 1.0}, 100.0, 7002.0)
    follow_counters(ledger := WriteBacks(store, 2.0), object())  # no counters
    assert ledger.covered(7002.0) is None


def test_a_spool_carries_the_counters_it_covers_and_its_replay_stores_them(engine, tmp_path):  # noqa: F811
    """A crash during an outage: the spool's increments include the CPU the counters
    counted up to the spool, so the restart must resume the counters from there, not
    from the last write-back before the outage (that would charge the outage twice)."""
    from fairshare.daemon.spool import Spool

    store = LnodeStore(engine, host="h1")
    store.claim()
    store.write_back([], 3600.0, counters=Counters({"alice": 3.0}, 100.0, 7000.0))
    spool = Spool(tmp_path / "h1.spool", "h1")
    owed = {1001: WriteBack(2.0, 7060.0, 2.0, 2.0)}
    assert spool.save(owed, Counters({"alice": 5.0}, 100.0, 7060.0))
    serial, back, counters = Spool(tmp_path / "h1.spool", "h1").load()
    assert back == list(owed.items()) and counters == Counters({"alice": 5.0}, 100.0, 7060.0)
    assert store.replay(back, serial, 3600.0, counters)
    assert store.stored_counters() == Counters({"alice": 5.0}, 100.0, 7060.0)
    assert not store.replay(back, serial, 3600.0, counters)  # once


def moved_in_world(tmp_path, busy: bool = False):
    """A cgroup v1 enforcer with cpuacct apart on a fake tree, over a fake /proc where
    process 7 (uid 61001) runs outside every lnode cgroup, and a collector reading both.
    `busy`: no cgroup can be removed (another daemon keeps moving processes in)."""
    from fairshare.enforce.cgroup1 import Cgroup1Enforcer
    from integration.test_enforce import FakeCgroupFs

    class Busy(FakeCgroupFs):
        def rmdir(self, path):
            raise OSError(errno.EBUSY, "busy", str(path))

    cpu, acct, proc = tmp_path / "cpu", tmp_path / "cpuacct", tmp_path / "proc"
    for m in (cpu, acct):
        m.mkdir()
        (m / "cgroup.procs").write_text("7")
    proc.mkdir()
    fs = (Busy if busy else FakeCgroupFs)([cpu, acct])
    e = Cgroup1Enforcer(cpu, fs, proc=str(proc), acct=acct)
    e.setup()
    return e, acct, proc


def run_for(proc, ticks: int) -> None:
    """Process 7 has used `ticks` CPU ticks (born at tick 12345, outside our cgroups
    as /proc/7/cgroup says)."""
    proc_entry(proc, 7, 1, ticks)
    (proc / "7" / "cgroup").write_text("2:cpuacct:/\n1:cpu:/\n")


def collector(e, proc, pids, clock):
    return ProcfsCollector(
        proc=str(proc), pids=lambda: list(pids), groups=e.read_groups, group_of=e.group_of,
        boot_clock=lambda: clock[0],
    )  # fmt: skip


def charged(sample) -> float:
    """CPU s a sample charges: the processes' own outside lnode cgroups, the counters'."""
    return sum(p.cpu for p in sample.processes if not p.group) + sum(sample.groups.values())


def test_a_process_sampled_outside_then_placed_is_charged_once(tmp_path):
    """A process the previous sample charged by its own figures (outside every lnode
    cgroup), then placed by its uid's event (handled late, under load) or by a cycle:
    the CPU it had used when moved was added to its cgroup's counter whole, charging
    again what the sample had (+1.0 of 2.0 s here).  Now only what no sample charged."""
    e, acct, proc = moved_in_world(tmp_path)
    pids, clock = [], [100.0]
    c = collector(e, proc, pids, clock)
    c.sample(io=False, syscalls=False)  # the baseline, before process 7 was born
    run_for(proc, 100)
    pids.append(7)
    clock[0] = 200.0
    s1 = c.sample(io=False, syscalls=False)
    assert charged(s1) == pytest.approx(1.0)  # born since the baseline: all of it
    run_for(proc, 150)
    e.place(7, "ta")  # its uid's event, after the sample: 1.5 s used by then
    assert (acct / "fairshare" / "ta" / "cgroup.procs").read_text() == "7"
    run_for(proc, 200)
    (acct / "fairshare" / "ta" / "cpuacct.usage").write_text("500000000\n")  # 0.5 s since
    clock[0] = 300.0
    s2 = c.sample(io=False, syscalls=False)
    assert charged(s2) == pytest.approx(1.0)  # 0.5 before the move no sample saw, 0.5 after
    assert c.covered() == {"ta": pytest.approx(0.5)}  # the counter itself: what a restart sees
    assert e.read_groups()["ta"].moved == ()  # handed out once


def test_a_restart_resumes_from_the_counter_not_the_cpu_moved_processes_had(tmp_path):
    """A process placed with CPU of its own: the counters a checkpoint stored held that
    CPU too, so a restarted daemon, reading the bare counter, found it gone backwards
    and charged nothing of what ran while no daemon did."""
    e, acct, proc = moved_in_world(tmp_path)
    pids, clock = [], [100.0]
    c = collector(e, proc, pids, clock)
    c.sample(io=False, syscalls=False)
    run_for(proc, 300)
    e.place(7, "ta")  # 3 s used before its uid changed to the user's
    pids.append(7)
    usage = acct / "fairshare" / "ta" / "cpuacct.usage"
    usage.write_text("1000000000\n")
    clock[0] = 200.0
    assert charged(c.sample(io=False, syscalls=False)) == pytest.approx(4.0)
    covered = c.covered()  # what a checkpoint stores; then kill -9
    usage.write_text("6000000000\n")  # 5 s more while no daemon ran
    e2 = type(e)(e.mount, e.actions, proc=str(proc), acct=acct)
    e2.setup()  # adopts the tree the killed daemon left
    c2 = collector(e2, proc, pids, clock)
    c2.sample(io=False, syscalls=False)  # the restarted daemon's baseline
    gap, lost = c2.resume(covered)
    assert gap == {"ta": pytest.approx(5.0)} and lost == []


def test_a_cgroup_that_could_not_be_removed_is_not_charged_again(tmp_path):
    """A cgroup whose removal failed (busy: another daemon on the machine moved a
    process in) stays, with its counter: its readings must not drop by the CPU its
    moved processes had, which the collector took for a counter made anew and charged
    whole again."""
    e, acct, proc = moved_in_world(tmp_path, busy=True)
    pids, clock = [7], [100.0]
    run_for(proc, 300)
    c = collector(e, proc, pids, clock)
    c.sample(io=False, syscalls=False)
    e.place(7, "ta")
    (acct / "fairshare" / "ta" / "cpuacct.usage").write_text("1000000000\n")
    clock[0] = 200.0
    c.sample(io=False, syscalls=False)
    e.apply([])  # nobody's now: ta should go, but cannot
    assert "ta" in e._weight
    clock[0] = 300.0
    assert charged(c.sample(io=False, syscalls=False)) == pytest.approx(0.0)


def test_a_process_that_leaves_its_lnode_cgroup_is_not_charged_again(tmp_path):
    """A process kept in an lnode cgroup is not read again every sample (its counter
    charges it): when it leaves (another daemon on the machine tore the tree down, or
    emptied the cgroup), its next reading's delta against the one kept from when it
    entered held all the CPU the counter had charged since (a PostgreSQL test's
    daemons over-charged when another daemon on the machine removed their cgroups)."""
    pids, state = [7], {"in": True, "cpu": 0.0}

    def run(ticks: int) -> None:  # at nice 0: not read again while in its cgroup
        proc_entry(tmp_path, 7, 1, ticks)
        stat = tmp_path / "7" / "stat"
        stat.write_bytes(stat.read_bytes().replace(b" 20 5 ", b" 20 0 "))

    run(100)

    def groups(full=True):
        if not state["in"]:
            return {}  # the cgroup is gone, its process moved out
        return {"ta": GroupReading(state["cpu"], frozenset({7}) if full else frozenset())}

    c = ProcfsCollector(proc=str(tmp_path), pids=lambda: list(pids), groups=groups)
    c.sample(io=False, syscalls=False)  # the baseline: 1 s used, in ta
    total = 0.0
    for ticks in (200, 300):  # 2 s more, counted by ta's counter
        run(ticks)
        state["cpu"] += 1.0
        total += charged(c.sample(io=False, syscalls=False))
    assert total == pytest.approx(2.0)
    state["in"] = False
    run(350)  # moved out, and 0.5 s since
    # A full sample (every STATUS_EVERY samples, or when system calls cost) sees it out.
    s = c.sample(io=False, syscalls=True)
    assert [p.group for p in s.processes] == [""]
    assert charged(s) <= 0.5 + 1e-9  # not the 2.5 s since it was last read
    run(400)
    assert charged(c.sample(io=False, syscalls=False)) == pytest.approx(0.5)  # its own now
