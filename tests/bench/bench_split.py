"""Benchmark: the CPU split shrdaemon delivers on this machine to 2 against 8 busy
processes, the scenario of tests/system/test_daemon_real.py, with every variant the
pass/fail suite no longer runs: equal shares (50/50) beside 2:1 (67/33), for the cgroup
enforcer and for nice through autogroups (each user in a session of their own), each
after a baseline without the daemon; and how long SIGTERM takes to stop the daemon (the
suite once required under 2 s).  Prints one line per run and the median of the repeats.

Run as root from the project directory (it says why and stops otherwise):
``PYTHONPATH=$PWD python3 tests/bench/bench_split.py [--enforcers cgroup,nice]
[--shares 1:1,2:1] [--baseline 5] [--warmup 8] [--window 20] [--repeats 1]``.
It takes the host's real-machine test lock (tests/machine_lock.py); every child is
killed and every cgroup removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the suite's helpers

from machine_lock import machine_lock, other_daemons  # noqa: E402
from system.test_daemon_real import delivered  # noqa: E402

from fairshare.enforce.detect import detect  # noqa: E402
from fairshare.enforce.nice import autogroup_enabled  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--enforcers", default="cgroup,nice")
    ap.add_argument("--shares", default="1:1,2:1")
    ap.add_argument("--baseline", type=float, default=5.0, help="s without the daemon")
    ap.add_argument("--warmup", type=float, default=8.0, help="s with it before measuring")
    ap.add_argument("--window", type=float, default=20.0, help="s measured")
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root: setuid children, cgroups and renicing", file=sys.stderr)
        return 2
    with machine_lock():
        if other_daemons():
            print(f"a shrdaemon is running here: {other_daemons()[0]}", file=sys.stderr)
            return 2
        for name in a.enforcers.split(","):
            if name == "cgroup":
                choice = detect("auto")
                if choice.name not in ("cgroup1", "cgroup2"):
                    print(f"cgroup: skipped, {choice.reason}")
                    continue
                enforcer, session = choice.name, False
            elif name == "nice":
                if not autogroup_enabled():
                    print("nice: skipped, kernel autogroup is off")
                    continue
                enforcer, session = "nice", True
            else:
                ap.error(f"--enforcers: {name!r}: expected cgroup or nice")
            for text in a.shares.split(","):
                shares = tuple(int(x) for x in text.split(":"))
                target = 100.0 * shares[0] / sum(shares)
                got, took = [], []
                for _ in range(a.repeats):
                    tmp = Path(tempfile.mkdtemp(prefix="bench-split-"))
                    try:
                        run = delivered(
                            tmp, enforcer, shares, session, a.warmup, a.window, a.baseline
                        )
                    finally:
                        shutil.rmtree(tmp, ignore_errors=True)
                    (base, base_cpus), (split, cpus) = run["baseline"], run["got"]
                    got.append(split)
                    took.append(run["took"])
                    print(
                        f"{enforcer} shares {text}, 2 vs 8 busy processes: baseline "
                        f"{base:.1f}/{100 - base:.1f} ({base_cpus:.2f} CPUs), with shrdaemon "
                        f"{split:.1f}/{100 - split:.1f} ({cpus:.2f} CPUs), target "
                        f"{target:.1f}/{100 - target:.1f}; SIGTERM to exit {run['took']:.2f} s"
                    )
                    sys.stdout.flush()
                if a.repeats > 1:
                    print(
                        f"{enforcer} shares {text}: median {statistics.median(got):.1f} "
                        f"(off by {abs(statistics.median(got) - target):.1f} pp, range "
                        f"{min(got):.1f}..{max(got):.1f}); SIGTERM to exit median "
                        f"{statistics.median(took):.2f} s, worst {max(took):.2f} s"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
