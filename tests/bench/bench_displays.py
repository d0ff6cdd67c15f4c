"""Benchmark: the displays end to end, as processes, at 100,000 users.

Run as ``python tests/bench/bench_displays.py [--users N] [--repeat N]``.  Builds a
UDB of bench_tree's site (100,000 users in 2,000 groups over 3 levels), publishes a
table with every user active (as a stopped daemon would leave it), then times as
separate processes, medians of --repeat runs with output to /dev/null:

- ``shrtree -l --json``            goal < 1 s
- ``shrview -dm``                  goal < 0.5 s
- ``shrview -dm --json``           goal < 0.5 s
- ``shrview -dm | head -1``: time to the first line of a large display (a pager).

Measured 2026-11-23 on the shared 2-CPU machine (load 1.8-2.4, medians of 5-7,
--baseline = main before the speed branch, CPU s): shrview -dm 1.93/1.80 -> 1.73/1.61
(1.1x), -dm --json 1.83/1.79 -> 1.79/1.71 (1.0-1.05x), first line on a pipe 0.81-0.86
-> 0.74-0.84 s.  In process (-dm): imports 0.43 s, the SQLite read 0.36 s (0.30 of it
sqlite3's own fetchall of 100,101 rows x 21 columns), view_lnodes 0.28 s, lines 0.27
s: the 0.5 s goal needs a read that builds no row tuples (a columnar publication)
and no 100,000 ViewLnode objects.

Also the bare interpreter start (``python -c pass``) and ``import fairshare.cli.X``
(-X importtime's top entries with --imports), the floor under every figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tree import site_rows  # noqa: E402

from fairshare.lnode import new_table  # noqa: E402
from fairshare.store import CycleHeader, LnodeStore  # noqa: E402
from fairshare.tree import build_tree  # noqa: E402
from udb.models import Entry  # noqa: E402
from udb.session import dispose_all, open_udb, write_session  # noqa: E402

GOALS = {"shrtree -l --json": 1.0, "shrview -dm": 0.5, "shrview -dm --json": 0.5}
NOW = 1_700_003_600.0


def make_udb(path: Path, users: int, groups: int) -> None:
    """The site's UDB with a published, stopped table of every user active."""
    rows = site_rows(users, groups)
    engine = open_udb(str(path), create=True)
    with write_session(engine) as s:
        s.execute(insert(Entry), rows)
    tree = build_tree([SimpleNamespace(**({"shflags": 0} | r)) for r in rows])
    rng = np.random.default_rng(3)
    t = new_table(tree)
    leaf = tree.leaf_mask
    t.active[:] = True
    t.usage[:] = np.where(leaf, rng.uniform(1e3, 1e6, tree.size), 0.0)
    t.charge[:] = t.usage * 2
    t.rate[:] = t.usage / 100
    t.refs[:] = np.where(leaf, rng.integers(0, 4, tree.size), 0)
    t.nrun[:] = np.where(leaf, rng.integers(0, 3, tree.size), 0)
    t.demand[:] = t.nrun > 0
    m = tree.m_shares(leaf)
    t.m_share[:] = m
    t.e_share[:] = m
    t.cpu[:] = m
    t.adj[:] = 1.0
    t.priority[:] = np.where(leaf, t.usage / np.maximum(m, 1e-12) ** 2, 0.0)
    store = LnodeStore(engine, "bench")
    store.publish(tree, t, CycleHeader(NOW - 10, 4.0, "none", 1, 7, "user", NOW - 600))
    store.mark_stopped(NOW - 5)
    dispose_all()


def command(name: str) -> list[str]:
    # This checkout's code (an installed script may point at another).
    return [sys.executable, "-m", f"fairshare.cli.{name}"]


def timed(cmd: list[str], repeat: int, env: dict | None = None) -> tuple[float, float]:
    """Median wall and CPU (user + system) seconds of `cmd` as a process."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
            env=env,
            cwd=env["PYTHONPATH"] if env else None,
        )
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def first_line(cmd: list[str], repeat: int, env: dict | None = None) -> float:
    """Seconds from start to the first line on a pipe (what a pager shows first)."""
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=env["PYTHONPATH"]
        )
        p.stdout.readline()
        walls.append(time.perf_counter() - t0)
        p.kill()
        p.wait()
    return statistics.median(walls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=2_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--udb", help="reuse this UDB (made by an earlier run with --keep)")
    ap.add_argument("--keep", help="build the UDB here and keep it")
    ap.add_argument(
        "--baseline",
        metavar="DIR",
        help="also time another checkout's code (PYTHONPATH=DIR) and print the ratios: "
        "the fair comparison on a loaded machine",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.udb or args.keep or Path(tmp) / "udb.sqlite").resolve()
        if not args.udb:
            make_udb(path, args.users, args.groups)
        udb = ["--udb", str(path)]
        now = ["--now", str(NOW)]
        cases = {
            "shrtree -l --json": [*command("shrtree"), *udb, "-l", "--json", *now],
            "shrview -dm": [*command("shrview"), *udb, "-dm", *now],
            "shrview -dm --json": [*command("shrview"), *udb, "-dm", "--json", *now],
        }
        here = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        base = dict(os.environ, PYTHONPATH=args.baseline) if args.baseline else None
        bare = timed([sys.executable, "-c", "pass"], args.repeat)[0]
        print(
            f"{args.users} users; medians of {args.repeat} runs, load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; python -c pass {bare:.3f} s"
        )
        for label, cmd in cases.items():
            goal = GOALS[label]
            wall, cpu = timed(cmd, args.repeat, here)
            line = (
                f"  {label:20s} {wall:6.3f} s wall {cpu:6.3f} s CPU  goal {goal} s  "
                f"ratio {wall / goal:.2f} (wall) {cpu / goal:.2f} (CPU)"
            )
            if base:
                bwall, bcpu = timed(cmd, args.repeat, base)
                line += f"  baseline {bwall:.3f} s wall {bcpu:.3f} s CPU: {bcpu / cpu:.1f}x"
            print(line)
        cmd = cases["shrview -dm"]
        t = first_line(cmd, args.repeat, here)
        line = f"  shrview -dm, first line on a pipe after {t:.3f} s"
        if base:
            line += f" (baseline {first_line(cmd, args.repeat, base):.3f} s)"
        print(line)


if __name__ == "__main__":
    main()
