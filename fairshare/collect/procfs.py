"""The real machine's collector: per-process deltas read from /proc.

psutil lists the processes and gives the machine's boot time and idle CPU;
the per-process counters are parsed here from /proc/PID/stat, status and io
directly, the way psutil's Linux backend does, because psutil's per-process
objects cost about 170 us a process (4% of a core for 1,000 processes every
4 s) against about 50 us for the three reads.

Counters are cumulative in /proc, so the collector keeps the previous reading
of every process keyed by (pid, create time): a pid the kernel reuses for a
new process is a new key, so nothing is charged twice and nothing is charged
from another process's counters.  A process that already existed at the
previous sample but was not seen then (the collector's first sample) gives
only a baseline; a process created since the previous sample is charged for
everything it used.  Which of the two a process is, is told by its start tick
against the boot-clock time (CLOCK_BOOTTIME, the clock of /proc/PID/stat's start
time) at which the previous sample began to list the processes: its create time
is the boot time, which the kernel gives to the whole second, plus its start, so
up to a second early against the wall clock, and a process born in that second
after a sample was taken for one already there, its CPU until the next sample
never charged (issue 29: a session started just after the daemon's baseline lost
its first half second, where the process events did not place it at once).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

import psutil

from fairshare.collect import GroupReading, ProcessSample, Sample

MIB = 1024.0 * 1024.0
BLOCK = 4096.0

CLK_TCK = float(os.sysconf("SC_CLK_TCK"))
PAGE = float(os.sysconf("SC_PAGE_SIZE"))


class Counters(NamedTuple):
    """Cumulative counters of one process as /proc reports them (raw units).  A named
    tuple, not a frozen dataclass: one is made per process read, and it is built in a
    third of the time."""

    pid: int
    create_time: float
    uid: int
    cpu: float  # CPU s (user + system, children not included)
    io_blocks: float  # bytes read + written on block devices / 4096
    io_calls: float  # read + write system calls
    ctx: float  # voluntary + involuntary context switches
    rss: float  # MiB resident now
    runnable: bool
    nice: int
    kernel: bool
    sid: int = 0  # session id (newacct's per-session accounts)
    zombie: bool = False  # exited, not yet reaped: no longer attached to its lnode
    ppid: int = 0
    ccpu: float = 0.0  # CPU s of its reaped children (cutime + cstime)
    group: str = ""  # the lnode cgroup whose kernel counter has its CPU ("" none)
    start: int = 0  # start tick after boot (with pid, the key of its status cache)
    busy: float = -1.0  # s its threads ran or waited to run (read_busy; -1: not read)
    threads: int = 1


class StatFields(NamedTuple):
    """What /proc/PID/stat gives: state letter, ppid, session id, CPU ticks
    (user + system), CPU ticks of its reaped children (cutime + cstime), nice,
    start tick after boot, resident pages, threads."""

    state: bytes
    ppid: int
    sid: int
    ticks: int
    nice: int
    start: int
    rss_pages: int
    child_ticks: int = 0
    threads: int = 1


def parse_stat(stat: bytes) -> StatFields:
    """The fields of /proc/PID/stat's text that the collector uses."""
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    rest = stat[stat.rindex(b")") + 2 :].split()
    return StatFields(
        state=rest[0],
        ppid=int(rest[1]),
        sid=int(rest[3]),
        ticks=int(rest[11]) + int(rest[12]),
        nice=int(rest[16]),
        start=int(rest[19]),
        rss_pages=int(rest[21]),
        child_ticks=int(rest[13]) + int(rest[14]),
        threads=int(rest[17]),
    )


def read_busy(base: str, threads: int) -> float:
    """The seconds the threads of the process at `base` (/proc/PID) have spent on a CPU
    or waiting in a run queue for one: the first two fields of each thread's schedstat
    (ns; the process's own file has its main thread's only).  -1 when not shown (a
    kernel without CONFIG_SCHED_INFO).  What a process was runnable for is the CPU it
    would have used had nothing held it back: its want (fairshare.core.delivery)."""
    files = [f"{base}/schedstat"]
    if threads > 1:
        try:
            files = [f"{base}/task/{tid}/schedstat" for tid in os.listdir(f"{base}/task")]
        except OSError:
            return -1.0
    ns = 0
    for f in files:
        try:
            run, wait = read_bytes(f).split()[:2]
            ns += int(run) + int(wait)
        except (OSError, ValueError):
            if len(files) == 1:
                return -1.0
    return ns / 1e9


def parse_status(status: bytes) -> tuple[int, int]:
    """(real uid, voluntary + involuntary context switches) from /proc/PID/status's text."""
    uid = _status_field(status, b"\nUid:")
    ctx = _status_field(status, b"\nvoluntary_ctxt_switches:") + _status_field(
        status, b"\nnonvoluntary_ctxt_switches:"
    )
    return uid, ctx


def parse_io(io: bytes) -> tuple[float, float]:
    """(4 KiB blocks read + written, read + write calls) from /proc/PID/io's text."""
    blocks = calls = 0.0
    for line in io.splitlines():
        key, _, value = line.partition(b":")
        if key in (b"read_bytes", b"write_bytes"):
            blocks += int(value) / BLOCK
        elif key in (b"syscr", b"syscw"):
            calls += int(value)
    return blocks, calls


def make_counters(
    pid: int,
    st: StatFields,
    uid: int,
    ctx: float,
    io: tuple[float, float],
    boot_time: float,
    group: str = "",
    busy: float = -1.0,
) -> Counters:
    """The Counters of one process from its parsed files (`ctx` -1: not read), in lnode
    cgroup `group` ("" none), `busy` its read_busy (-1: not read)."""
    return Counters(
        pid=pid,
        create_time=boot_time + st.start / CLK_TCK,
        uid=uid,
        cpu=st.ticks / CLK_TCK,
        io_blocks=io[0],
        io_calls=io[1],
        ctx=float(ctx),
        rss=st.rss_pages * PAGE / MIB,
        runnable=st.state == b"R",
        nice=st.nice,
        kernel=pid == 2 or st.ppid == 2,
        sid=st.sid,
        zombie=st.state in (b"Z", b"X", b"x"),
        ppid=st.ppid,
        ccpu=st.child_ticks / CLK_TCK,
        start=st.start,
        group=group,
        busy=busy,
        threads=st.threads,
    )


def parse_process(pid: int, stat: bytes, status: bytes, io: bytes, boot_time: float) -> Counters:
    """The counters in the text of /proc/PID/stat, /proc/PID/status and /proc/PID/io.

    `io` may be empty (the file is unreadable without privileges); `boot_time`
    is the epoch second the machine booted, to turn the start tick into a
    create time.
    """
    uid, ctx = parse_status(status)
    return make_counters(pid, parse_stat(stat), uid, ctx, parse_io(io), boot_time)


def _status_field(status: bytes, key: bytes) -> int:
    """The first number after `key` (which starts with a newline) in /proc/PID/status."""
    i = status.find(key)
    if i < 0:
        return 0
    return int(status[i + len(key) :].split(None, 1)[0])


def read_bytes(path: str) -> bytes:
    """The whole of a small kernel file (/proc, cgroupfs)."""
    # os.open/os.read: half the cost of open().read() for these small files.
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.read(fd, 65536)
        if len(data) == 65536:  # rare: a large cgroup.procs
            parts = [data]
            while chunk := os.read(fd, 65536):
                parts.append(chunk)
            data = b"".join(parts)
        return data
    finally:
        os.close(fd)


def read_process(
    pid: int, boot_time: float, proc: str = "/proc", io: bool = True
) -> Counters | None:
    """The counters of process `pid`; None if it vanished before it could be read or
    has exited and awaits its parent (a zombie charges nothing and holds no lnode)."""
    base = f"{proc}/{pid}"
    try:
        stat = read_bytes(f"{base}/stat")
        status = read_bytes(f"{base}/status")
    except OSError:
        return None
    io_text = b""
    if io:
        try:
            io_text = read_bytes(f"{base}/io")
        except OSError:
            pass
    try:
        c = parse_process(pid, stat, status, io_text, boot_time)
    except (ValueError, IndexError):
        return None
    return None if c.zombie else c


def machine_idle() -> float:
    """CPU seconds all CPUs have spent idle since boot (idle + iowait)."""
    t = psutil.cpu_times()
    return t.idle + getattr(t, "iowait", 0.0)


class Deltas(NamedTuple):
    """What one process used between two readings (CPU s, its reaped children's CPU s,
    blocks, I/O calls, context switches, MiB-seconds, and the s its threads ran or
    waited to run: -1 when either reading lacks it)."""

    cpu: float
    reaped: float
    blocks: float
    calls: float
    ctx: float
    mem: float
    busy: float = -1.0


NOTHING = Deltas(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _deltas(c: Counters, old: Counters | None, born: bool, elapsed: float, now: float) -> Deltas:
    """What process `c` used since its previous reading `old` (None: not seen then;
    `born`: born since, all it used is new, else a baseline).  One that has left its
    lnode cgroup starts again from `c`: its CPU was the counter's to charge, and `old`
    may be the reading kept from when it entered (DeltaTracker.update)."""
    if old is not None:
        left = bool(old.group) and not c.group
        return Deltas(
            0.0 if left else max(c.cpu - old.cpu, 0.0),
            0.0 if left else max(c.ccpu - old.ccpu, 0.0),
            max(c.io_blocks - old.io_blocks, 0.0),
            max(c.io_calls - old.io_calls, 0.0),
            max(c.ctx - old.ctx, 0.0) if c.ctx >= 0 and old.ctx >= 0 else 0.0,
            c.rss * elapsed,
            max(c.busy - old.busy, 0.0) if c.busy >= 0 and old.busy >= 0 else -1.0,
        )
    if born:
        return Deltas(
            c.cpu, c.ccpu, c.io_blocks, c.io_calls, max(c.ctx, 0.0),
            c.rss * max(now - c.create_time, 0.0), c.busy,
        )  # fmt: skip
    return NOTHING


def _want(d: Deltas, reaped: float, most: float, new_and_runnable: bool, interval: float) -> float:
    """What a process would have used unconstrained over an `interval`: the time its
    threads ran or waited to run (d.busy), or its CPU if more, at most `most` (its
    threads times the interval: a reading passed again for some samples spans more than
    one, as a process kept in its cgroup spans 15 at its next full read), plus the
    CPU of the children it `reaped` (their wait for a CPU was never read); -1 when its
    busy time is not known.  One born since the previous sample and runnable at this
    one wants a CPU over the whole interval: the processes it took over from were
    never read, nor how long they waited (a make's compilers and a fork loop's
    children, which mostly live less than a cycle)."""
    if d.busy < 0:
        return -1.0
    want = min(max(d.busy, d.cpu), most) + reaped
    return max(want, interval) if new_and_runnable else want


class DeltaTracker:
    """Turns successive cumulative readings into per-interval deltas (pure bookkeeping).

    A process's charge for an interval is its own CPU since the previous reading plus
    the CPU of the children it reaped meanwhile (its cutime + cstime delta), less what
    those children had already been charged for: when a process we read disappears,
    its last reading (own and reaped-children CPU) is owed back by its parent, whose
    cutime + cstime grows by all of it when it reaps the child.  So a child that lived
    and died between two samples is charged to its parent's lnode, and a child we
    sampled is not charged twice.  The CPU of a child whose last reading is stale (a
    process counted by its cgroup's counter is not re-read every sample) is unknown:
    its parent's next reaped-children CPU is then not charged at all.
    """

    def __init__(self) -> None:
        self._prev: dict[tuple[int, float], Counters] = {}
        self._prev_idle: float | None = None
        self._prev_mono: float | None = None
        self._prev_time: float | None = None
        self._prev_listed: float | None = None
        self._owed: dict[tuple[int, float], float] = {}  # parent -> CPU s already charged
        self._groups: dict[str, float] = {}  # lnode cgroup -> its counter (CPU s)
        self._kept: dict[tuple[int, float], ProcessSample] = {}  # of readings passed again

    def update(
        self,
        readings: Iterable[Counters],
        idle: float,
        mono: float,
        now: float,
        groups: Mapping[str, float] | None = None,
        mem: bool = True,
        listed: float | None = None,
        moved: Mapping[str, Iterable[tuple[int, int, float]]] | None = None,
    ) -> Sample:
        """A Sample of the deltas between `readings` and the previous call's.

        `idle` is the machine's cumulative idle CPU seconds, `mono` a monotonic
        clock reading (s) and `now` the wall-clock time (epoch s); `groups` the
        cumulative CPU seconds of each lnode cgroup's kernel counter; `mem` False
        leaves memory at 0 (nothing charges it); `listed` the boot-clock time (s) at
        which the processes of `readings` began to be listed (None: a process's create
        time is set against the previous call's `now` instead; `born_since`); `moved`
        the processes moved into each lnode cgroup from outside since the previous call
        (GroupReading.moved), whose CPU until then no sample charged is added to the
        cgroup's growth (`_before_moved`).  A reading passed again (the very object of
        the previous call: a process not re-read) has used nothing new.  A process
        that has left its lnode cgroup (another daemon on the machine emptied it)
        starts again from this reading (`_deltas`): its previous one may be the one
        kept from when it entered, whose delta held all the counter charged since.
        """
        first = self._prev_mono is None
        elapsed = 0.0 if first else max(mono - self._prev_mono, 0.0)
        born = self.born_since(self._prev_time, self._prev_listed)
        current: dict[tuple[int, float], Counters] = {}
        for c in readings:
            current[(c.pid, c.create_time)] = c
        self._owe_for_the_gone(current)
        out: list[ProcessSample] = []
        owed = self._owed
        prev, kept, still = self._prev, self._kept, {}
        for key, c in current.items():
            old = prev.get(key)
            if c is old and not mem:  # the cheap path of most processes in lnode cgroups
                ps = kept.get(key)
                if ps is None:
                    # One in an lnode cgroup whose counter did not grow (the collector
                    # re-reads the busy time of the others') was never runnable: it
                    # wanted nothing.  An outside one not read: not known.
                    ps = ProcessSample(
                        c.pid, c.create_time, c.uid, runnable=c.runnable, nice=c.nice,
                        kernel=c.kernel, sid=c.sid, group=c.group,
                        want=0.0 if c.group else -1.0,
                    )  # fmt: skip
                still[key] = ps
                out.append(ps)
                continue
            d = _deltas(c, old, born(c), elapsed, now)
            reaped = d.reaped
            if reaped > 0 and key in owed:
                reaped = self._repay(key, reaped)
            out.append(
                ProcessSample(
                    pid=c.pid,
                    create_time=c.create_time,
                    uid=c.uid,
                    cpu=d.cpu + reaped,
                    bio=d.blocks,
                    sio=d.calls,
                    syscalls=d.ctx,
                    mem=d.mem if mem else 0.0,
                    runnable=c.runnable,
                    nice=c.nice,
                    kernel=c.kernel,
                    sid=c.sid,
                    group=c.group,
                    want=_want(d, reaped, c.threads * elapsed, old is None and c.runnable, elapsed),
                )
            )
        d_idle = 0.0 if self._prev_idle is None else max(idle - self._prev_idle, 0.0)
        d_groups = self._group_deltas(groups or {}, first)
        if moved and not first:
            self._before_moved(d_groups, moved)
        self._prev, self._kept = current, still
        self._prev_idle, self._prev_mono, self._prev_time = idle, mono, now
        self._prev_listed = listed
        return Sample(time=now, elapsed=elapsed, processes=out, idle=d_idle, groups=d_groups)

    @staticmethod
    def born_since(since: float | None, listed: float | None) -> Callable[[Counters], bool]:
        """Whether a process not seen at the previous sample was born since it began
        (all it used is then new) rather than before (a baseline): its start tick
        against `listed`, the boot-clock time the previous sample began listing, one
        tick's truncation allowed; without it, its create time against `since`, that
        sample's wall-clock time (to the second of the boot time).  None: the first
        sample, nothing is new."""
        if listed is not None:
            tick = int(listed * CLK_TCK)  # the kernel truncates the start to a tick
            return lambda c: c.start >= tick
        if since is None:
            return lambda c: False
        return lambda c: c.create_time >= since

    def group_readings(self) -> dict[str, float]:
        """Each lnode cgroup's counter (CPU s) at the last update: what the deltas so far
        handed out cover."""
        return dict(self._groups)

    def rebase(self, name: str, cpu: float) -> None:
        """Take `cpu` as lnode cgroup `name`'s previous reading: the next update hands out
        its counter's growth since (what a daemon before this one had not charged)."""
        self._groups[name] = cpu

    def _repay(self, key: tuple[int, float], reaped: float) -> float:
        """The part of `reaped` (CPU s of children process `key` reaped) not charged
        already, the rest repaid from what it owes; an unknown debt takes it all."""
        owed = self._owed
        back = min(reaped, owed[key])
        owed[key] -= back
        if owed[key] <= 0 or math.isinf(owed[key]):  # unknown: this reap forfeits
            del owed[key]
        return reaped - back

    def _before_moved(
        self, d_groups: dict[str, float], moved: Mapping[str, Iterable[tuple[int, int, float]]]
    ) -> None:
        """Add to each lnode cgroup's growth in `d_groups` (in place) the CPU that the
        processes `moved` into it from outside (pid, start tick, CPU s when moved) had
        used by then and no sample charged: all of it for one the previous sample did
        not see, what it used after that sample for one seen outside every lnode cgroup
        (its own CPU was charged up to there), none for one the previous sample took to
        be in one already (what it used is not known: never twice)."""
        last = {(c.pid, c.start): c for c in self._prev.values()}
        for name, procs in moved.items():
            extra = 0.0
            for pid, start, cpu in procs:
                old = last.get((pid, start))
                if old is None:
                    extra += cpu
                elif not old.group:
                    extra += max(cpu - old.cpu, 0.0)
            if extra > 0:
                d_groups[name] = d_groups.get(name, 0.0) + extra

    def _group_deltas(self, groups: Mapping[str, float], first: bool) -> dict[str, float]:
        """Each lnode cgroup's counter growth since the previous call (0 on the first)."""
        out = {}
        for name, v in groups.items():
            old = self._groups.get(name)
            if first:
                out[name] = 0.0
            else:  # a cgroup new (or made anew) since the previous sample: all of it is new
                out[name] = v - old if old is not None and v >= old else v
        self._groups = dict(groups)
        return out

    def _owe_for_the_gone(self, current: Mapping[tuple[int, float], Counters]) -> None:
        """Record what each process gone since the previous reading was charged, against
        its parent; forget what is owed by parents that are gone too."""
        owed = {k: v for k, v in self._owed.items() if k in current}
        gone = self._prev.keys() - current.keys()
        key_of = {c.pid: k for k, c in self._prev.items()} if gone else {}
        for key in gone:
            old = self._prev[key]
            parent = key_of.get(old.ppid)
            if parent is None or parent not in current:
                continue
            known = math.inf if old.group else old.cpu + old.ccpu
            owed[parent] = owed.get(parent, 0.0) + known
        self._owed = owed


class ProcfsCollector:
    """The real machine's processes, read from /proc, as deltas per sample.

    Cost per process and sample: /proc/PID/stat and a stat() of /proc/PID always;
    /proc/PID/status (the real uid, the context switches) only for a process not
    seen before, when the owner of /proc/PID changed (a setuid), when context
    switches cost something, and for every process every `STATUS_EVERY` samples
    (except a process kept in an lnode cgroup whose /proc/PID is still owned by the
    real uid it had: a setuid changes that owner); /proc/PID/io only when I/O costs
    something.

    With `groups` (the cgroup enforcers' `read_groups`: each lnode cgroup's CPU
    counter and the pids in it), the CPU of the processes in lnode cgroups comes
    from those counters, so when neither I/O nor system calls cost anything such a
    process is read from /proc only when first seen in its cgroup, while at a nice
    other than 0 (its CPU is charged at its nice's graded rate, so the daemon must
    know it), and every `STATUS_EVERY` samples; in between its last reading
    stands (its state, nice, memory and session), except its busy time (read_busy),
    read again whenever its cgroup's counter grew: its state at the last full read is
    no guide to what it wants now (an interactive user caught running then looked
    busy for 15 samples).  Everything else is read every sample.  Who is in which
    cgroup is read in full every `STATUS_EVERY` samples; in between it is what was read
    then, plus the processes the enforcer moved in, plus the children born since into
    their parent's cgroup (a fork inherits it).

    When new sessions are placed as they appear (`sample`'s `placed`: the kernel's
    process events, which the daemon answers by moving the process into its lnode
    cgroup), /proc is listed only on those full samples too: in between, the
    processes are those of the previous sample plus those the enforcer moved in, and
    a process outside lnode cgroups (the system's and kernel threads, below the
    enforcer's minimum uid) is not read again either, so what it used in between is
    charged at the next full sample.  A child born in an lnode cgroup, and an exit,
    are then seen at the next full sample (the cgroup's counter has the child's CPU
    at once).  Walking every process in /proc was most of a cycle's kernel time.
    """

    #: Re-read every process's status (its real uid) at least this often (samples).
    STATUS_EVERY = 15

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
        proc: str = "/proc",
        boot_clock: Callable[[], float] = lambda: time.clock_gettime(time.CLOCK_BOOTTIME),
        pids: Callable[[], list[int]] = psutil.pids,
        groups: Callable[[bool], Mapping[str, GroupReading]] | None = None,
        group_of: Callable[[int], str] | None = None,
    ) -> None:
        self._wall, self._mono, self._proc, self._pids = wall, mono, proc, pids
        self._boot_clock = boot_clock
        self._groups, self._group_of = groups, group_of
        self._tracker = DeltaTracker()
        self._uids: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, start) -> owner, uid
        self._kept: dict[int, Counters] = {}  # pid -> last reading, processes in lnode cgroups
        self._outside: dict[int, Counters] = {}  # pid -> last reading, the other processes
        self._member: dict[int, str] = {}  # pid -> the lnode cgroup it is in
        self._seen: set[int] = set()  # the pids of the previous sample
        self._samples = 0

    def sample(
        self, io: bool = True, syscalls: bool = True, mem: bool = True, placed: bool = False
    ) -> Sample:
        """Every live process with its consumption since the previous call.

        `io` False skips /proc/PID/io, `syscalls` False the context switches and
        `mem` False the memory (left at 0) when they cost nothing.  `placed`: new
        sessions are placed as they appear, /proc need not be listed (see the class).
        """
        boot = psutil.boot_time()
        self._samples += 1
        refresh = syscalls or self._samples % self.STATUS_EVERY == 1
        groups = self._groups(refresh) if self._groups is not None else {}
        member = {} if refresh else self._member
        for name, g in groups.items():
            for pid in g.pids:
                member[pid] = name
        lean = not (io or syscalls or refresh)
        skim = lean and placed and self._groups is not None
        before = self._tracker.group_readings()
        ran = {name for name, g in groups.items() if g.cpu != before.get(name)}
        listed = self._boot_clock()  # a process born from now on is new next sample
        pids = sorted(self._seen.union(member)) if skim else self._pids()
        uids: dict[tuple[int, int], tuple[int, int]] = {}
        kept: dict[int, Counters] = {}
        others: dict[int, Counters] = {}
        now_member: dict[int, str] = {}
        readings: list[Counters] = []
        outside: list[int] = []  # indexes of fresh readings in no known lnode cgroup
        for pid in pids:
            group = member.get(pid, "")
            last = self._kept.get(pid) if group else None
            c = last if lean else None
            if skim and not group:
                c = self._outside.get(pid)
            elif c is not None and (c.group != group or c.nice != 0):
                c = None
            elif c is not None and group in ran:  # its cgroup used CPU: did it, or wait?
                c = c._replace(busy=read_busy(f"{self._proc}/{pid}", c.threads))
            if c is None:
                same = (last.start, last.uid) if last is not None and not syscalls else None
                prev = last if group else self._outside.get(pid)
                c = self._read(pid, boot, io, syscalls, refresh, uids, group, same, prev)
                if c is None:
                    continue
                if not group:
                    outside.append(len(readings))
            if group:
                kept[pid] = c
                now_member[pid] = group
            else:
                others[pid] = c
            readings.append(c)
        if outside and self._seen:
            self._inherit(readings, outside, now_member, kept)
        if outside and self._group_of is not None:
            self._ask_kernel(readings, outside, now_member, kept)
        if skim:  # the uids of the processes not read stand
            uids = self._uids | uids
        self._uids, self._kept, self._member = uids, kept, now_member
        self._outside = others
        self._seen = {c.pid for c in readings}
        cpu = {name: g.cpu for name, g in groups.items()}
        moved = {name: g.moved for name, g in groups.items() if g.moved}
        return self._tracker.update(
            readings, machine_idle(), self._mono(), self._wall(), cpu, mem, listed, moved
        )

    def covered(self) -> dict[str, float]:
        """Each lnode cgroup's counter as of the last sample (CPU s): what the samples so
        far charged (a write-back or checkpoint stores it)."""
        return self._tracker.group_readings()

    def boot_time(self) -> float:
        """The epoch second the machine booted (a counter reading of another boot is void)."""
        return psutil.boot_time()

    def resume(self, covered: Mapping[str, float]) -> tuple[dict[str, float], list[str]]:
        """After the baseline sample: take each lnode cgroup's counter in `covered` (what
        the daemon before this one charged) as its previous reading, so the next sample
        charges what its processes used meanwhile.  Returns (cgroup name -> CPU s to be
        charged so, the names whose counter cannot cover it: gone, or made anew)."""
        now = self._tracker.group_readings()
        gap, lost = {}, []
        for name, cpu in covered.items():
            if name not in now or now[name] < cpu:
                lost.append(name)
                continue
            self._tracker.rebase(name, cpu)
            gap[name] = now[name] - cpu
        return gap, lost

    def _ask_kernel(self, readings, outside, member, kept) -> None:
        """Processes new since the previous sample that are still in no lnode cgroup:
        ask the kernel which they are in (an orphan, whose parent is gone, inherits
        nothing; one born after the cgroups were listed).  Charged by their own figures
        as well as by their cgroup's counter, they were charged twice (issue 29)."""
        for i in outside:
            c = readings[i]
            if c.group or c.pid in self._seen:
                continue
            group = self._group_of(c.pid)
            if group:
                readings[i] = c._replace(group=group)
                member[c.pid] = group
                kept[c.pid] = readings[i]

    def _inherit(self, readings, outside, member, kept) -> None:
        """Children born since the previous sample are in their parent's cgroup (every
        cgroup.procs is read only every STATUS_EVERY samples): mark them so."""
        born = {readings[i].pid: i for i in outside if readings[i].pid not in self._seen}
        changed = True
        while changed:  # a child's parent may itself be new this sample
            changed = False
            for pid, i in list(born.items()):
                group = member.get(readings[i].ppid)
                if group:
                    readings[i] = readings[i]._replace(group=group)
                    member[pid] = group
                    kept[pid] = readings[i]
                    del born[pid]
                    changed = True

    def _read(
        self, pid, boot, io, syscalls, refresh, uids, group="", same=None, prev=None
    ) -> Counters | None:
        """One process's Counters (None: gone or a zombie).  /proc/PID/status is read
        for a process not seen before, when the owner of /proc/PID changed, and on
        `refresh`, except for a process kept in an lnode cgroup whose (start, real uid)
        of its last reading, `same`, still match its start and its owner: its uid is
        known, and a setuid would have changed the owner.  Its schedstat (read_busy) is
        read unless its previous reading `prev` shows it has slept since: not runnable
        now, no CPU since (a process that waited for a CPU has run since, or waits)."""
        base = f"{self._proc}/{pid}"
        try:
            st = parse_stat(read_bytes(f"{base}/stat"))
            # A kernel thread is root's for good: no stat() of its /proc/PID.
            owner = 0 if pid == 2 or st.ppid == 2 else os.stat(base).st_uid
        except (OSError, ValueError, IndexError):
            return None
        if st.state in (b"Z", b"X", b"x"):
            return None
        key = (pid, st.start)
        known = self._uids.get(key)
        ctx = -1
        if same is not None and same == (st.start, owner):
            uid = owner
        elif refresh or known is None or known[0] != owner:
            try:
                uid, n = parse_status(read_bytes(f"{base}/status"))
            except (OSError, ValueError, IndexError):
                return None
            if syscalls:
                ctx = n
        else:
            uid = known[1]
        uids[key] = (owner, uid)
        counts = (0.0, 0.0)
        if io:
            try:
                counts = parse_io(read_bytes(f"{base}/io"))
            except (OSError, ValueError):
                pass
        asleep = (
            prev is not None
            and prev.start == st.start
            and prev.busy >= 0
            and st.state != b"R"
            and prev.cpu == st.ticks / CLK_TCK
        )
        busy = prev.busy if asleep else read_busy(base, st.threads)
        return make_counters(pid, st, uid, ctx, counts, boot, group, busy)
