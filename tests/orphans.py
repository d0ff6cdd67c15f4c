"""A workload whose every process reports its own CPU time (system tests, issue 29).

Run by /usr/bin/python3 (any uid may run it; the default python3 lives under /root) as
``orphans.py MODE SECONDS OUT``: after 1 s asleep (so a daemon can place it first), for
SECONDS it starts workers, then waits for the last of them.  Every process it makes,
itself last, appends its own CPU seconds (user + system, children not included) to OUT,
so the lines sum to every CPU second the workload used, as the processes count it.

Modes:
- ``overlap``: double-forked orphans of about 100 ms CPU, one every 20 ms (several run at
  once); the middle child exits at once, so init (or the PID namespace's init) reaps them;
- ``serial``: the same orphans, one every 150 ms;
- ``storm``: double-forked orphans of about 4 ms, one after another;
- ``forks``: children of about 4 ms that the loop itself reaps (a fork storm).
In a PID namespace the workload is its init: it reaps the orphans itself.
"""

from __future__ import annotations

import os
import sys
import time

MODES = {"overlap": (0.1, 0.02, True), "serial": (0.1, 0.15, True),
         "storm": (0.004, 0.0, True), "forks": (0.004, 0.0, False)}  # fmt: skip


def report(fd: int) -> None:
    t = os.times()
    os.write(fd, f"{t.user + t.system:.6f}\n".encode())


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def worker(fd: int, cpu: float, orphan: bool) -> None:
    """In the child: (fork an orphan and) burn, report, exit without cleanup."""
    if orphan and os.fork() != 0:
        report(fd)  # the middle child
        os._exit(0)
    burn(cpu)
    report(fd)
    os._exit(0)


def main() -> None:
    mode, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    cpu, gap, orphan = MODES[mode]
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    time.sleep(1.0)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pid = os.fork()
        if pid == 0:
            worker(fd, cpu, orphan)
        os.waitpid(pid, 0)
        reap()
        if gap:
            time.sleep(gap)
    deadline = time.monotonic() + cpu * 10 + 1
    while time.monotonic() < deadline:  # the last orphans finish (and, as init, are reaped)
        time.sleep(0.05)
        reap()
    report(fd)


def reap() -> None:
    """Reap any child that exited (orphans, when this is a PID namespace's init)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


if __name__ == "__main__":
    main()
