"""A collector and OS actions for tests that drive a Daemon on a simulated clock.

`BusyProcesses(clock, procs)` samples the processes in `procs` (ProcessSamples) as
if each had used one CPU the whole time since the last sample.  A test may put
other processes in `procs` between samples, even from another thread (the list
is read once per sample); `given` totals the CPU seconds handed to each pid.

`RecordedOs()` is the OsActions (fairshare.enforce.actions) of those made-up processes: it
records the signals sent and keeps each pid's nice, and has no kernel files, so a
daemon given it never reaches a real process.  It knows a pid's start time only when a
test says (`starts`: a pid given since to another process), else cannot tell.
"""

from __future__ import annotations

import errno
from collections import defaultdict
from dataclasses import replace

from fairshare.collect import ProcessSample, Sample


class BusyProcesses:
    def __init__(self, clock, procs: list[ProcessSample]):
        self.clock, self.procs = clock, procs
        self.last: float | None = None
        self.given: dict[int, float] = defaultdict(float)

    def sample(self, **_options) -> Sample:
        now = self.clock.time()
        elapsed = 0.0 if self.last is None else now - self.last
        self.last = now
        if not elapsed:
            return Sample(now, 0.0, [], 0.0)
        procs = [replace(p, cpu=elapsed) for p in self.procs]
        for p in procs:
            self.given[p.pid] += elapsed
        return Sample(now, elapsed, procs, 0.0)


class RecordedOs:
    name = "recorded"

    def __init__(self, nice: dict[int, int] | None = None, starts: dict[int, float] | None = None):
        self.sent: list[tuple[int, int]] = []  # (pid, signal)
        self.nice: dict[int, int] = dict(nice or {})  # pid -> nice (0 if never set)
        self.slice: dict[int, int] = {}  # pid -> time slice in ns (0: the kernel's default)
        self.starts: dict[int, float] = dict(starts or {})  # pid -> start time (epoch s)
        self.told: list[tuple[tuple[int, ...], str]] = []  # (pids, text) on their terminals

    def signal(self, pid: int, sig: int) -> None:
        self.sent.append((pid, int(sig)))

    def started(self, pid: int) -> float | None:
        return self.starts.get(pid)

    def tell(self, pids, text: str) -> list[str]:
        self.told.append((tuple(pids), text))
        return ["tty"] if pids else []

    def get_nice(self, pid: int) -> int:
        return self.nice.get(pid, 0)

    def set_nice(self, pid: int, nice: int) -> None:
        self.nice[pid] = nice

    def set_slice(self, pid: int, nice: int, slice_ns: int) -> None:
        self.nice[pid] = nice
        self.slice[pid] = slice_ns

    def write_file(self, path, text: str) -> None:
        raise OSError(errno.EROFS, "no kernel files here", str(path))

    def mkdir(self, path) -> None:
        raise OSError(errno.EROFS, "no kernel files here", str(path))

    def rmdir(self, path) -> None:
        raise OSError(errno.EROFS, "no kernel files here", str(path))
