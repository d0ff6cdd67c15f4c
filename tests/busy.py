"""A collector for tests that drive a Daemon on a simulated clock.

`BusyProcesses(clock, procs)` samples the processes in `procs` (ProcessSamples) as
if each had used one CPU the whole time since the last sample.  A test may put
other processes in `procs` between samples, even from another thread (the list
is read once per sample); `given` totals the CPU seconds handed to each pid.
"""

from __future__ import annotations

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
