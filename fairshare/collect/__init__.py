"""Collectors: what the machine says each lnode consumed since the last sample.

A collector's `sample()` returns a `Sample`: one `ProcessSample` per live
process with its resource deltas since the previous sample, plus the idle CPU
time, plus, where processes sit in per-lnode cgroups, each lnode cgroup's CPU
from the kernel's own counter (which includes every process that ever ran
there, however short-lived).  Two backends: `procfs.ProcfsCollector` (the real
machine, via psutil) and fairshare.sim.collector.SimCollector (the simulator's machine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

#: The weakest nice: processes there are not charged (the guide's rule), unless the
#: nice enforcer put them there itself.
WEAKEST_NICE = 19


@dataclass(frozen=True, slots=True)
class GroupReading:
    """One lnode cgroup as the kernel counts it: `cpu` the CPU seconds every process
    that ever ran in it used (cumulative), `pids` the processes in it now, and `moved`
    the processes moved into it from outside since the previous reading, each as (pid,
    start tick, CPU s it had used when moved): what it used before, which the counter
    never saw, and which only the collector knows how much of it a sample charged."""

    cpu: float
    pids: frozenset[int] = frozenset()
    moved: tuple[tuple[int, int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process and what it consumed since the previous sample.

    Units: `cpu` CPU seconds; `bio` 4 KiB blocks read or written on block
    devices; `sio` read/write system calls (the stream I/O of the guide);
    `syscalls` context switches (the nearest count Linux keeps per process
    of the system calls that made it wait or yield); `mem` MiB-seconds of
    resident memory; `runnable` whether it was running or runnable at
    sample time; `nice` its nice value.  `cpu` includes the CPU of the children
    it reaped since the previous sample that no sample saw (cutime + cstime).
    `group`: the lnode cgroup the process is in, whose kernel counter
    (`Sample.groups`) has its CPU; its own `cpu` is then not charged.  `want`: the CPU
    seconds it would have used unconstrained since the previous sample, where the
    collector knows it (the real machine's: how long its threads ran or waited to run,
    procfs.read_busy; the simulator's demand), else -1 (fairshare.core.delivery
    estimates it).
    """

    pid: int
    create_time: float
    uid: int
    cpu: float = 0.0
    bio: float = 0.0
    sio: float = 0.0
    syscalls: float = 0.0
    mem: float = 0.0
    runnable: bool = False
    nice: int = 0
    kernel: bool = False  # a kernel thread: charged, never moved or reniced
    sid: int = 0  # session id (field 6 of /proc/PID/stat; newacct's accounts are per session)
    group: str = ""  # the lnode cgroup counting its CPU ("" none: charge `cpu`)
    want: float = -1.0  # CPU s it would have used unconstrained (-1: not known)


@dataclass(frozen=True)
class Sample:
    """Everything one sample saw: `time` (epoch s), `elapsed` (s since the
    previous sample, 0 for the first), the processes, `idle` (CPU seconds
    no process used over `elapsed`, summed over all CPUs), and `groups`: CPU
    seconds each lnode cgroup's kernel counter grew by over `elapsed`, keyed by
    the cgroup's name (the enforcer's `safe_name` of the lnode)."""

    time: float
    elapsed: float
    processes: list[ProcessSample] = field(default_factory=list)
    idle: float = 0.0
    groups: dict[str, float] = field(default_factory=dict)


class Collector(Protocol):
    """A source of samples (the real machine or the simulator)."""

    def sample(
        self, io: bool = True, syscalls: bool = True, mem: bool = True, placed: bool = False
    ) -> Sample:
        """The processes alive now and their consumption since the previous call
        (`io` False: block and stream I/O, `syscalls` False: system calls, `mem` False:
        memory, may be left at 0 because nothing charges them; `placed` True: new
        sessions are put in their lnode cgroups as they appear, so a collector that
        lists every process may do so less often)."""
        ...
