"""Benchmark: shrsim on a one-week scenario of 50 users at delta 4 s (151,200 cycles).

Run as ``python tests/bench/bench_shrsim.py [--repeat N] [--days D]``.  Prints the median
wall time of the whole simulation (scenario loading included) and its ratio to the
goal, under 60 s for the week, with the time per simulated cycle, and the median CPU
time of the process (which other load on the machine inflates less than wall time).

The site: 5 resource groups of 10 users on 16 CPUs, ADJGROUPS and LIMSHARE set, a
one-hour half-life; every user has a daily working session (its start, length and
number of CPU-bound processes vary by user), a third also run a partly idle
background job all week, so lnodes come and go every day.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from fairshare.sim.run import run_scenario
from fairshare.sim.scenario import load_scenario

GOAL = 60.0  # s for one simulated week


def week_scenario(days: int = 7, policy: str = "unicos") -> str:
    """The scenario's TOML text, under `policy` (fairshare.core.policies.POLICIES)."""
    lines = [
        "cpus = 16",
        f'duration = "{days}d"',
        'delta = "4s"',
        'warmup = "4h"',
        'directives = """',
    ]
    for g in range(5):
        lines.append(f"create:org{g}:uid:{500 + g}:shflags:040000:shares:{10 * (g + 1)}:")
    for u in range(50):
        lines.append(f"create:user{u}:uid:{1000 + u}:resgrp:org{u % 5}:shares:{1 + u % 4}:")
    lines += ['"""', "[consts]", 'halflife = "1h"', 'flags = "ADJGROUPS,LIMSHARE"']
    lines.append(f'policy = "{policy}"')
    for u in range(50):
        for day in range(days):
            start = day * 24 + 8 + (u % 5)
            lines += [
                "[[workload]]",
                f'name = "user{u}"',
                f"procs = {1 + u % 6}",
                f'start = "{start}h"',
                f'stop = "{start + 2 + u % 7}h"',
            ]
        if u % 3 == 0:
            lines += ["[[workload]]", f'name = "user{u}"', "procs = 1", "demand = 0.3"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--days", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "week.toml"
        path.write_text(week_scenario(args.days))
        times, cpu = [], []
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            result = run_scenario(load_scenario(path))
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    median = statistics.median(times)
    goal = GOAL * args.days / 7
    print(
        f"{args.days} simulated days, 50 users, {result.cycles} cycles: median {median:.1f} s "
        f"({median / result.cycles * 1e6:.0f} us per cycle; goal {goal:.0f} s, "
        f"{median / goal:.2f} of it, {goal / median:.1f}x headroom); "
        f"CPU time {statistics.median(cpu):.1f} s; "
        f"largest deviation {result.max_deviation_pp:.2f} pp, "
        f"CPU utilisation {result.utilisation * 100:.0f}%"
    )


if __name__ == "__main__":
    main()
