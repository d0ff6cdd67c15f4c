"""Collectors: what the machine says each lnode consumed since the last sample.

A collector's `sample()` returns a `Sample`: one `ProcessSample` per live
process with its resource deltas since the previous sample, plus the idle CPU
time.  Two backends: `procfs.ProcfsCollector` (the real machine, via psutil)
and `sim.SimCollector` (the simulator's machine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process and what it consumed since the previous sample.

    Units: `cpu` CPU seconds; `bio` 4 KiB blocks read or written on block
    devices; `sio` read/write system calls (the stream I/O of the guide);
    `syscalls` context switches (the nearest count Linux keeps per process
    of the system calls that made it wait or yield); `mem` MiB-seconds of
    resident memory; `runnable` whether it was running or runnable at
    sample time; `nice` its nice value.
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


@dataclass(frozen=True)
class Sample:
    """Everything one sample saw: `time` (epoch s), `elapsed` (s since the
    previous sample, 0 for the first), the processes, and `idle` (CPU seconds
    no process used over `elapsed`, summed over all CPUs)."""

    time: float
    elapsed: float
    processes: list[ProcessSample] = field(default_factory=list)
    idle: float = 0.0


class Collector(Protocol):
    """A source of samples (the real machine or the simulator)."""

    def sample(self, io: bool = True, syscalls: bool = True) -> Sample:
        """The processes alive now and their consumption since the previous call
        (`io` False: block and stream I/O, `syscalls` False: system calls, may be left at
        0 because nothing charges them)."""
        ...
