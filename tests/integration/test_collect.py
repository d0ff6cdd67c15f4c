"""The procfs collector: parsing /proc text, deltas per (pid, create time), fake /proc trees.
On the real machine: tests/system/test_collect_real.py."""

from __future__ import annotations

import os

import psutil
import pytest

from fairshare.collect import GroupReading
from fairshare.collect.procfs import (
    CLK_TCK,
    PAGE,
    Counters,
    DeltaTracker,
    ProcfsCollector,
    parse_process,
)

# A command name with a space and a parenthesis, as /proc shows it: the parser must
# split after the last ')'.
STAT = (
    b"4242 (my (odd) cmd) R 1 4242 4242 0 -1 4194304 100 0 0 0 "
    b"250 50 0 0 20 5 1 0 12345 1000000 2560 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 "
    b"17 1 0 0 0 0 0\n"
)
STATUS = (
    b"Name:\tmy (odd) cmd\nState:\tR (running)\nUid:\t61001\t61001\t61001\t61001\n"
    b"Gid:\t61001\t61001\t61001\t61001\nvoluntary_ctxt_switches:\t7\n"
    b"nonvoluntary_ctxt_switches:\t3\n"
)
IO = (
    b"rchar: 999\nwchar: 999\nsyscr: 10\nsyscw: 5\nread_bytes: 8192\nwrite_bytes: 4096\n"
    b"cancelled_write_bytes: 0\n"
)


def test_parse_process_reads_every_counter():
    c = parse_process(4242, STAT, STATUS, IO, boot_time=1000.0)
    assert c.pid == 4242 and c.uid == 61001
    assert c.cpu == pytest.approx(300 / CLK_TCK)  # utime 250 + stime 50 ticks
    assert c.create_time == pytest.approx(1000.0 + 12345 / CLK_TCK)
    assert c.nice == 5
    assert c.runnable and not c.kernel
    assert c.io_blocks == 3.0  # (8192 + 4096) / 4096
    assert c.io_calls == 15.0  # syscr 10 + syscw 5
    assert c.ctx == 10.0  # 7 voluntary + 3 involuntary
    assert c.rss == pytest.approx(2560 * PAGE / 2**20)


def test_parse_process_without_io_and_sleeping_kernel_thread():
    stat = STAT.replace(b") R 1 ", b") S 2 ")
    c = parse_process(77, stat, STATUS, b"", boot_time=0.0)
    assert not c.runnable and c.kernel
    assert c.io_blocks == 0.0 and c.io_calls == 0.0


def test_zombie_is_seen_as_exited():
    c = parse_process(78, STAT.replace(b") R 1 ", b") Z 1 "), STATUS, b"", boot_time=0.0)
    assert c.zombie and not c.runnable
    assert not parse_process(4242, STAT, STATUS, IO, boot_time=0.0).zombie


def counters(pid, ctime, cpu, uid=1000, blocks=0.0, rss=0.0):
    return Counters(pid, ctime, uid, cpu, blocks, 0.0, 0.0, rss, True, 0, False)


def test_first_sample_is_a_baseline_then_deltas():
    t = DeltaTracker()
    s0 = t.update([counters(10, 100.0, 5.0)], idle=50.0, mono=0.0, now=1000.0)
    assert s0.elapsed == 0.0 and s0.idle == 0.0
    assert s0.processes[0].cpu == 0.0  # existed before we looked: nothing charged
    s1 = t.update([counters(10, 100.0, 7.5, rss=10.0)], idle=53.0, mono=4.0, now=1004.0)
    assert s1.elapsed == 4.0
    assert s1.idle == 3.0
    p = s1.processes[0]
    assert p.cpu == 2.5
    assert p.mem == 40.0  # 10 MiB over 4 s


def test_reused_pid_is_a_new_process_charged_from_zero():
    t = DeltaTracker()
    t.update([counters(10, 100.0, 50.0)], idle=0.0, mono=0.0, now=1000.0)
    # pid 10 exited and was reused by a process born at 1002 that has used 1 s.
    s = t.update([counters(10, 1002.0, 1.0)], idle=0.0, mono=4.0, now=1004.0)
    assert s.processes[0].cpu == 1.0  # not 1.0 - 50.0, not 0


def test_unseen_old_process_gives_only_a_baseline():
    t = DeltaTracker()
    t.update([], idle=0.0, mono=0.0, now=1000.0)
    # Born before the previous sample but not seen then (e.g. a race): no charge yet.
    s = t.update([counters(11, 900.0, 30.0)], idle=0.0, mono=4.0, now=1004.0)
    assert s.processes[0].cpu == 0.0
    s = t.update([counters(11, 900.0, 31.0)], idle=0.0, mono=8.0, now=1008.0)
    assert s.processes[0].cpu == 1.0


def test_a_process_born_just_after_a_sample_is_charged_all_it_used(tmp_path):
    """The boot time /proc gives is to the whole second, so a create time can fall up
    to a second before the sample that came before the birth: a session started just
    after the daemon's baseline was taken for one already there and its CPU until the
    next sample never charged (issue 29: 0.3-0.5 s of a 12 s run where no process
    events placed it at once).  The start tick against the boot clock tells."""
    boot = psutil.boot_time() + 0.7  # the true boot, 0.7 s after the second /proc gives
    clock = {"boot": 123.40}  # the baseline, 50 ms before the birth at tick 12345

    def wall():
        return boot + clock["boot"]

    pids: list[int] = []
    c = ProcfsCollector(
        wall=wall, proc=str(tmp_path), pids=lambda: list(pids), boot_clock=lambda: clock["boot"]
    )
    c.sample(io=False, syscalls=False, mem=False)
    fake_proc(tmp_path, 4242, 61001, ticks=50)  # born at 123.45 s after boot, used 0.5 s
    pids.append(4242)
    clock["boot"] = 124.40
    (p,) = c.sample(io=False, syscalls=False, mem=False).processes
    assert p.create_time < boot + 123.40  # what the create time alone said: already there
    assert p.cpu == pytest.approx(50 / CLK_TCK)
    # One born a tick before the previous sample began and not seen then: a baseline.
    fake_proc(tmp_path, 4243, 61001, ticks=50)
    (tmp_path / "4243" / "stat").write_bytes(
        (tmp_path / "4243" / "stat").read_bytes().replace(b" 12345 ", b" 12439 ")
    )
    pids.append(4243)
    clock["boot"] = 125.40
    s = c.sample(io=False, syscalls=False, mem=False)
    assert {q.pid: q.cpu for q in s.processes} == {4242: 0.0, 4243: 0.0}


def test_counters_going_backwards_never_charge_negative():
    t = DeltaTracker()
    t.update([counters(10, 100.0, 5.0, blocks=9.0)], idle=10.0, mono=0.0, now=1000.0)
    s = t.update([counters(10, 100.0, 4.0, blocks=1.0)], idle=5.0, mono=4.0, now=1004.0)
    assert s.processes[0].cpu == 0.0 and s.processes[0].bio == 0.0 and s.idle == 0.0


def fake_proc(tmp_path, pid: int, uid: int, ticks: int = 100):
    d = tmp_path / str(pid)
    d.mkdir(exist_ok=True)
    (d / "stat").write_bytes(STAT.replace(b" 250 50 ", f" {ticks} 0 ".encode()))
    (d / "status").write_bytes(STATUS.replace(b"Uid:\t61001", f"Uid:\t{uid}".encode()))
    return d


def test_status_is_read_for_new_processes_then_cached_until_the_owner_changes(tmp_path):
    fake_proc(tmp_path, 4242, 61001)
    c = ProcfsCollector(proc=str(tmp_path), pids=lambda: [4242])
    assert c.sample(io=False, syscalls=False).processes[0].uid == 61001
    # The real uid changes but /proc/PID keeps its owner: the cached uid stands until
    # the periodic refresh (every STATUS_EVERY samples) reads the status again.
    d = fake_proc(tmp_path, 4242, 61002, ticks=200)
    s = c.sample(io=False, syscalls=False)
    assert s.processes[0].uid == 61001
    assert s.processes[0].cpu == pytest.approx(100 / CLK_TCK)  # stat is read every time
    for _ in range(ProcfsCollector.STATUS_EVERY - 2):
        assert c.sample(io=False, syscalls=False).processes[0].uid == 61001
    assert c.sample(io=False, syscalls=False).processes[0].uid == 61002
    if os.geteuid() == 0:  # a changed owner of /proc/PID (a setuid) is seen at once
        fake_proc(tmp_path, 4242, 61003)
        os.chown(d, 61003, 61003)
        assert c.sample(io=False, syscalls=False).processes[0].uid == 61003


def test_context_switches_only_when_they_cost(tmp_path):
    fake_proc(tmp_path, 4242, 61001)
    c = ProcfsCollector(proc=str(tmp_path), pids=lambda: [4242])
    c.sample(syscalls=False)
    (tmp_path / "4242" / "status").write_bytes(STATUS.replace(b"\t7\n", b"\t17\n"))
    assert c.sample(syscalls=False).processes[0].syscalls == 0.0
    c.sample(syscalls=True)  # first reading with syscalls on: a baseline, not 17
    (tmp_path / "4242" / "status").write_bytes(STATUS.replace(b"\t7\n", b"\t20\n"))
    assert c.sample(syscalls=True).processes[0].syscalls == 3.0


def proc_counters(pid, ctime, cpu, ccpu=0.0, ppid=1, group=""):
    return Counters(
        pid, ctime, 1000, cpu, 0.0, 0.0, 0.0, 0.0, True, 0, False, ppid=ppid, ccpu=ccpu, group=group
    )


def test_children_born_and_reaped_between_samples_are_charged_to_the_parent():
    t = DeltaTracker()
    t.update([proc_counters(10, 100.0, 1.0, ccpu=5.0)], idle=0.0, mono=0.0, now=1000.0)
    # Between the samples shell 10 ran and reaped children that used 2.5 s: no sample
    # saw them, the shell's cutime + cstime did.
    s = t.update([proc_counters(10, 100.0, 1.5, ccpu=7.5)], idle=0.0, mono=4.0, now=1004.0)
    assert s.processes[0].cpu == pytest.approx(0.5 + 2.5)


def test_a_child_seen_by_a_sample_is_not_charged_twice_when_reaped():
    t = DeltaTracker()
    shell = proc_counters(10, 100.0, 1.0)
    t.update([shell, proc_counters(11, 999.0, 0.0, ppid=10)], idle=0.0, mono=0.0, now=1000.0)
    s = t.update(
        [proc_counters(10, 100.0, 1.0), proc_counters(11, 999.0, 3.0, ppid=10)],
        idle=0.0,
        mono=4.0,
        now=1004.0,
    )
    assert [p.cpu for p in s.processes] == [0.0, 3.0]
    # 11 used 0.5 s more, exited (a zombie is not listed) and then its parent reaped it:
    # the shell's cutime grows by all 3.5 s, of which only the last 0.5 s is new.
    s = t.update([proc_counters(10, 100.0, 1.0)], idle=0.0, mono=8.0, now=1008.0)
    assert s.processes[0].cpu == 0.0  # not reaped yet
    s = t.update([proc_counters(10, 100.0, 1.0, ccpu=3.5)], idle=0.0, mono=12.0, now=1012.0)
    assert s.processes[0].cpu == pytest.approx(0.5)
    # What was owed is used up: the next reaped child is charged in full.
    s = t.update([proc_counters(10, 100.0, 1.0, ccpu=4.5)], idle=0.0, mono=16.0, now=1016.0)
    assert s.processes[0].cpu == pytest.approx(1.0)


def test_a_child_counted_by_its_cgroup_forfeits_its_parents_next_reap():
    t = DeltaTracker()
    t.update(
        [proc_counters(10, 100.0, 1.0), proc_counters(11, 999.0, 2.0, ppid=10, group="u")],
        idle=0.0,
        mono=0.0,
        now=1000.0,
        groups={"u": 2.0},
    )
    s = t.update(
        [proc_counters(10, 100.0, 1.0, ccpu=9.0)], idle=0.0, mono=4.0, now=1004.0, groups={"u": 9.0}
    )
    assert s.processes[0].cpu == 0.0  # its cgroup's counter has it: 7 s
    assert s.groups == {"u": 7.0}


def test_group_counters_give_deltas_and_a_new_cgroup_counts_from_zero():
    t = DeltaTracker()
    s = t.update([], idle=0.0, mono=0.0, now=1000.0, groups={"a": 50.0})
    assert s.groups == {"a": 0.0}  # a baseline
    s = t.update([], idle=0.0, mono=4.0, now=1004.0, groups={"a": 53.0, "b": 1.5})
    assert s.groups == {"a": 3.0, "b": 1.5}  # b was made since the previous sample
    s = t.update([], idle=0.0, mono=8.0, now=1008.0, groups={"a": 0.5, "b": 2.0})
    assert s.groups == {"a": 0.5, "b": 0.5}  # a was removed and made again


def test_processes_in_lnode_cgroups_are_read_only_when_needed(tmp_path):
    fake_proc(tmp_path, 4242, 61001)
    fake_proc(tmp_path, 4243, 61001)
    nice_0 = STAT.replace(b" 20 5 1 0 ", b" 20 0 1 0 ")
    (tmp_path / "4242" / "stat").write_bytes(nice_0)  # (the fake STAT is at nice 5)
    reads = []
    members = {"u": GroupReading(10.0, frozenset({4242}))}
    c = ProcfsCollector(
        proc=str(tmp_path), pids=lambda: [4242, 4243], groups=lambda full=True: members
    )
    real = c._read

    def counting(pid, *a):
        reads.append(pid)
        return real(pid, *a)

    c._read = counting
    c.sample(io=False, syscalls=False)  # first sample: every process is read
    reads.clear()
    s = c.sample(io=False, syscalls=False)
    assert reads == [4243]  # 4242 is in a cgroup whose counter has its CPU
    assert {p.pid: p.group for p in s.processes} == {4242: "u", 4243: ""}
    assert s.groups == {"u": 0.0}
    members["u"] = GroupReading(12.0, frozenset({4242}))
    reads.clear()
    assert c.sample(io=True, syscalls=False).groups == {"u": 2.0}
    assert reads == [4242, 4243]  # I/O costs something: everything is read
    (tmp_path / "4242" / "stat").write_bytes(STAT)  # reniced to 5 (seen at the next read)
    c.sample(io=True, syscalls=False)
    reads.clear()
    c.sample(io=False, syscalls=False)
    assert reads == [4242, 4243]  # at nice 5 its CPU is graded: read every sample


def test_children_born_in_an_lnode_cgroup_are_counted_there_between_full_reads(tmp_path):
    fake_proc(tmp_path, 4242, 61001)
    pids = [4242]
    full_reads = []

    def groups(full: bool) -> dict:
        full_reads.append(full)
        return {"u": GroupReading(5.0, frozenset({4242}) if full else frozenset())}

    c = ProcfsCollector(proc=str(tmp_path), pids=lambda: list(pids), groups=groups)
    c.sample(io=False, syscalls=False)
    # 4243, forked by 4242 since, is in u's cgroup; 4244, a child of init, is not.
    fake_proc(tmp_path, 4243, 61001)
    (tmp_path / "4243" / "stat").write_bytes(STAT.replace(b") R 1 ", b") R 4242 "))
    fake_proc(tmp_path, 4244, 61001)
    pids += [4243, 4244]
    s = c.sample(io=False, syscalls=False)
    assert full_reads == [True, False]
    assert {p.pid: p.group for p in s.processes} == {4242: "u", 4243: "u", 4244: ""}


def test_with_sessions_placed_at_once_proc_is_listed_only_on_full_samples(tmp_path):
    """`placed` (the process events put new sessions in their lnode cgroups): a sample
    between the full ones lists no /proc and reads no process outside lnode cgroups;
    it sees the processes of the previous sample and those moved into a cgroup since,
    and a process outside is charged what it used at the next full sample."""
    nice_0 = STAT.replace(b" 20 5 1 0 ", b" 20 0 1 0 ")
    fake_proc(tmp_path, 4242, 61001)
    (tmp_path / "4242" / "stat").write_bytes(nice_0)
    fake_proc(tmp_path, 4243, 0, ticks=100)  # a system process, outside lnode cgroups
    alive, moved, listings = [4242, 4243], set(), []

    def pids():
        listings.append(list(alive))
        return list(alive)

    c = ProcfsCollector(
        proc=str(tmp_path),
        pids=pids,
        groups=lambda full=True: {"u": GroupReading(10.0, frozenset({4242} | moved))},
    )
    lean = {"io": False, "syscalls": False, "mem": False, "placed": True}
    c.sample(**lean)  # the first sample is a full one: /proc is listed
    assert len(listings) == 1
    fake_proc(tmp_path, 4243, 0, ticks=300)  # used 2 s more
    fake_proc(tmp_path, 4244, 61001)  # a new session, placed by the process events
    (tmp_path / "4244" / "stat").write_bytes(nice_0)
    alive.append(4244)
    moved.add(4244)
    charged = 0.0
    for _ in range(ProcfsCollector.STATUS_EVERY - 1):
        s = c.sample(**lean)
        assert {p.pid: p.group for p in s.processes} == {4242: "u", 4243: "", 4244: "u"}
        charged += next(p.cpu for p in s.processes if p.pid == 4243)
    assert len(listings) == 1 and charged == 0.0  # not listed, 4243 not read
    s = c.sample(**lean)  # the next full sample
    assert len(listings) == 2
    assert next(p.cpu for p in s.processes if p.pid == 4243) == pytest.approx(2.0)
    # Without `placed` (no process events, Share by Account), every sample lists /proc.
    c.sample(**{**lean, "placed": False})
    c.sample(**{**lean, "placed": False})
    assert len(listings) == 4


def schedstat(d, run_s: float, wait_s: float) -> None:
    (d / "schedstat").write_text(f"{int(run_s * 1e9)} {int(wait_s * 1e9)} 10\n")


def test_want_is_the_time_a_process_ran_or_waited_for_a_cpu(tmp_path):
    """A process's want over a sample is how long it ran or waited in a run queue
    (/proc/PID/schedstat), not whether the sample caught it runnable; a thread group's
    is its threads' (task/TID/schedstat)."""
    clock = iter([0.0, 2.0, 4.0])
    d = fake_proc(tmp_path, 4242, 61001, ticks=100)
    schedstat(d, 1.0, 0.5)
    many = fake_proc(tmp_path, 4243, 61001, ticks=100)
    threaded = STAT.replace(b" 20 5 1 0 ", b" 20 5 3 0 ")  # three threads
    (many / "stat").write_bytes(threaded.replace(b" 250 50 ", b" 100 0 "))
    for tid, (run, wait) in {4243: (1, 0), 4244: (1, 1), 4245: (0, 0)}.items():
        (many / "task" / str(tid)).mkdir(parents=True)
        schedstat(many / "task" / str(tid), run, wait)
    c = ProcfsCollector(proc=str(tmp_path), pids=lambda: [4242, 4243], mono=lambda: next(clock))
    c.sample(io=False, syscalls=False)
    (d / "stat").write_bytes(STAT.replace(b" 250 50 ", b" 150 0 "))  # 0.5 s of CPU
    schedstat(d, 1.5, 1.5)  # it ran 0.5 s and waited 1.0 s for a CPU
    (many / "stat").write_bytes(threaded.replace(b" 250 50 ", b" 300 0 "))
    for tid, (run, wait) in {4243: (2, 1), 4244: (2, 1), 4245: (1, 1)}.items():
        schedstat(many / "task" / str(tid), run, wait)  # 5 s more of running or waiting
    s = c.sample(io=False, syscalls=False)
    want = {p.pid: p.want for p in s.processes}
    assert want[4242] == pytest.approx(1.5)  # not the 0.5 s it got
    assert want[4243] == pytest.approx(5.0)  # three threads, at most 6 s in 2 s
    # Asleep since (state S, no CPU): its schedstat is not read again; it wanted nothing.
    (d / "stat").write_bytes(STAT.replace(b" 250 50 ", b" 150 0 ").replace(b") R 1 ", b") S 1 "))
    schedstat(d, 99.0, 99.0)  # (what a read would see)
    assert {p.pid: p.want for p in c.sample(io=False, syscalls=False).processes}[4242] == 0.0


def test_a_process_born_since_the_last_sample_and_runnable_wants_the_whole_interval(tmp_path):
    """A make's compilers mostly live less than a sample: the ones the sample sees,
    just born, have been busy a fraction of it, and how long those before them waited
    for a CPU was never read.  A newborn caught runnable wants a CPU over the interval;
    one caught asleep, what it was busy; the children its parent reaped, their CPU."""
    boot = psutil.boot_time() + 0.7
    clock = {"boot": 123.40, "mono": 0.0}
    pids: list[int] = []
    c = ProcfsCollector(
        wall=lambda: boot + clock["boot"], mono=lambda: clock["mono"], proc=str(tmp_path),
        pids=lambda: list(pids), boot_clock=lambda: clock["boot"],
    )  # fmt: skip
    c.sample(io=False, syscalls=False, mem=False)
    for pid, state in ((4242, b"R"), (4243, b"S")):  # both born at 123.45 s after boot
        d = fake_proc(tmp_path, pid, 61001, ticks=10)
        (d / "stat").write_bytes((d / "stat").read_bytes().replace(b") R 1 ", b") %s 1 " % state))
        schedstat(d, 0.1, 0.2)
        pids.append(pid)
    clock["boot"], clock["mono"] = 124.40, 1.0
    s = c.sample(io=False, syscalls=False, mem=False)
    assert {p.pid: p.want for p in s.processes} == pytest.approx({4242: 1.0, 4243: 0.3})


def test_a_process_kept_in_its_cgroup_is_wanting_only_when_its_counter_grew(tmp_path):
    """Between full reads, a process in an lnode cgroup is not read from /proc, but its
    busy time is whenever its cgroup used CPU: its runnable state at the last full read
    says nothing of now (issue 28: a light user caught running at a full read looked as
    if it wanted a whole CPU for 15 samples)."""
    clock = iter(float(t) for t in range(0, 20, 1))
    d = fake_proc(tmp_path, 4242, 61001)
    (d / "stat").write_bytes(STAT.replace(b" 20 5 1 0 ", b" 20 0 1 0 "))  # nice 0, R
    schedstat(d, 1.0, 0.0)
    members = {"u": GroupReading(10.0, frozenset({4242}))}
    c = ProcfsCollector(
        proc=str(tmp_path), pids=lambda: [4242], groups=lambda full=True: members,
        mono=lambda: next(clock),
    )  # fmt: skip
    c.sample(io=False, syscalls=False)
    c.sample(io=False, syscalls=False)  # its second reading: kept from now on
    schedstat(d, 1.01, 0.2)  # 10 ms of CPU after waiting 190 ms: a light user
    members["u"] = GroupReading(10.01, frozenset({4242}))
    (p,) = c.sample(io=False, syscalls=False).processes
    assert p.runnable  # its state as the full read saw it...
    assert p.want == pytest.approx(0.21)  # ...but it was busy 0.21 s of the second
    (p,) = c.sample(io=False, syscalls=False).processes  # the counter did not grow
    assert p.want == 0.0
    for _ in range(12):  # carried through samples whose counter did not grow
        c.sample(io=False, syscalls=False)
    schedstat(d, 30.0, 0.0)  # (its counter stood still: what it shows is not all new)
    members["u"] = GroupReading(10.5, frozenset({4242}))
    (p,) = c.sample(io=False, syscalls=False).processes
    assert p.want == pytest.approx(1.0)  # at most its one thread over the 1 s sample
