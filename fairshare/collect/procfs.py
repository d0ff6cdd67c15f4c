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
everything it used.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

from fairshare.collect import ProcessSample, Sample

MIB = 1024.0 * 1024.0
BLOCK = 4096.0

CLK_TCK = float(os.sysconf("SC_CLK_TCK"))
PAGE = float(os.sysconf("SC_PAGE_SIZE"))


@dataclass(frozen=True, slots=True)
class Counters:
    """Cumulative counters of one process as /proc reports them (raw units)."""

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


@dataclass(frozen=True, slots=True)
class StatFields:
    """What /proc/PID/stat gives: state letter, ppid, session id, CPU ticks
    (user + system), nice, start tick after boot, resident pages."""

    state: bytes
    ppid: int
    sid: int
    ticks: int
    nice: int
    start: int
    rss_pages: int


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
    )


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
    pid: int, st: StatFields, uid: int, ctx: float, io: tuple[float, float], boot_time: float
) -> Counters:
    """The Counters of one process from its parsed files (`ctx` -1: not read)."""
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


def _read(path: str) -> bytes:
    # os.open/os.read: half the cost of open().read() for these small files.
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 65536)
    finally:
        os.close(fd)


def read_process(
    pid: int, boot_time: float, proc: str = "/proc", io: bool = True
) -> Counters | None:
    """The counters of process `pid`; None if it vanished before it could be read or
    has exited and awaits its parent (a zombie charges nothing and holds no lnode)."""
    base = f"{proc}/{pid}"
    try:
        stat = _read(f"{base}/stat")
        status = _read(f"{base}/status")
    except OSError:
        return None
    io_text = b""
    if io:
        try:
            io_text = _read(f"{base}/io")
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


class DeltaTracker:
    """Turns successive cumulative readings into per-interval deltas (pure bookkeeping)."""

    def __init__(self) -> None:
        self._prev: dict[tuple[int, float], Counters] = {}
        self._prev_idle: float | None = None
        self._prev_mono: float | None = None
        self._prev_time: float | None = None

    def update(self, readings: Iterable[Counters], idle: float, mono: float, now: float) -> Sample:
        """A Sample of the deltas between `readings` and the previous call's.

        `idle` is the machine's cumulative idle CPU seconds, `mono` a monotonic
        clock reading (s) and `now` the wall-clock time (epoch s).
        """
        first = self._prev_mono is None
        elapsed = 0.0 if first else max(mono - self._prev_mono, 0.0)
        since = self._prev_time
        current: dict[tuple[int, float], Counters] = {}
        out: list[ProcessSample] = []
        for c in readings:
            key = (c.pid, c.create_time)
            current[key] = c
            old = self._prev.get(key)
            if old is not None:
                d_cpu = max(c.cpu - old.cpu, 0.0)
                d_blocks = max(c.io_blocks - old.io_blocks, 0.0)
                d_calls = max(c.io_calls - old.io_calls, 0.0)
                d_ctx = max(c.ctx - old.ctx, 0.0) if c.ctx >= 0 and old.ctx >= 0 else 0.0
                mem = c.rss * elapsed
            elif since is not None and c.create_time >= since:
                # Born since the previous sample: all it used is new.
                d_cpu, d_blocks, d_calls, d_ctx = c.cpu, c.io_blocks, c.io_calls, max(c.ctx, 0.0)
                mem = c.rss * max(now - c.create_time, 0.0)
            else:
                d_cpu = d_blocks = d_calls = d_ctx = mem = 0.0
            out.append(
                ProcessSample(
                    pid=c.pid,
                    create_time=c.create_time,
                    uid=c.uid,
                    cpu=d_cpu,
                    bio=d_blocks,
                    sio=d_calls,
                    syscalls=d_ctx,
                    mem=mem,
                    runnable=c.runnable,
                    nice=c.nice,
                    kernel=c.kernel,
                    sid=c.sid,
                )
            )
        d_idle = 0.0 if self._prev_idle is None else max(idle - self._prev_idle, 0.0)
        self._prev = current
        self._prev_idle, self._prev_mono, self._prev_time = idle, mono, now
        return Sample(time=now, elapsed=elapsed, processes=out, idle=d_idle)


class ProcfsCollector:
    """The real machine's processes, read from /proc, as deltas per sample.

    Cost per process and sample: /proc/PID/stat and a stat() of /proc/PID always;
    /proc/PID/status (the real uid, the context switches) only for a process not
    seen before, when the owner of /proc/PID changed (a setuid), when context
    switches cost something, and for every process every `STATUS_EVERY` samples;
    /proc/PID/io only when I/O costs something.
    """

    #: Re-read every process's status (its real uid) at least this often (samples).
    STATUS_EVERY = 15

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
        proc: str = "/proc",
        pids: Callable[[], list[int]] = psutil.pids,
    ) -> None:
        self._wall, self._mono, self._proc, self._pids = wall, mono, proc, pids
        self._tracker = DeltaTracker()
        self._uids: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, start) -> owner, uid
        self._samples = 0

    def sample(self, io: bool = True, syscalls: bool = True) -> Sample:
        """Every live process with its consumption since the previous call.

        `io` False skips /proc/PID/io and `syscalls` False the context switches
        (left at 0) when they cost nothing.
        """
        boot = psutil.boot_time()
        self._samples += 1
        refresh = syscalls or self._samples % self.STATUS_EVERY == 1
        uids: dict[tuple[int, int], tuple[int, int]] = {}
        readings = []
        for pid in self._pids():
            c = self._read(pid, boot, io, syscalls, refresh, uids)
            if c is not None:
                readings.append(c)
        self._uids = uids
        return self._tracker.update(readings, machine_idle(), self._mono(), self._wall())

    def _read(self, pid, boot, io, syscalls, refresh, uids) -> Counters | None:
        base = f"{self._proc}/{pid}"
        try:
            st = parse_stat(_read(f"{base}/stat"))
            owner = os.stat(base).st_uid
        except (OSError, ValueError, IndexError):
            return None
        if st.state in (b"Z", b"X", b"x"):
            return None
        key = (pid, st.start)
        known = self._uids.get(key)
        ctx = -1
        if refresh or known is None or known[0] != owner:
            try:
                uid, n = parse_status(_read(f"{base}/status"))
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
                counts = parse_io(_read(f"{base}/io"))
            except (OSError, ValueError):
                pass
        return make_counters(pid, st, uid, ctx, counts, boot)
