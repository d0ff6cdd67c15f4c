"""Benchmark: share tree normalisation and `shrtree -l --json` on a large site.

Run as ``python tests/bench/bench_tree.py [--users N] [--groups N] [--repeat N]``.
Prints the sizes, the median times and their ratio to the goals:

- m_shares over 100,000 active leaves in 2,000 groups over 5 levels: < 0.5 s;
- ``shrtree -l --json`` end to end (process start, UDB read, tree, checks, JSON)
  on a UDB of that size: < 3 s.

The UDB is built with SQLAlchemy Core executemany (not udbgen) in a temporary
directory.  Levels: ROOT (0), three levels of groups (1..3), users at level 4,
so Maxgroups is set to 5 when the UDB has a constants table.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from sqlalchemy import insert

from fairshare.core.tree import build_tree
from udb import models
from udb.models import IDLE_UID, SHF_GROUP, Entry
from udb.session import dispose_all, open_udb, write_session

NORMALISE_GOAL = 0.5  # s
SHRTREE_GOAL = 3.0  # s


def site_rows(users: int, groups: int, seed: int = 1) -> list[dict]:
    """Entries of a site: `groups` groups over levels 1..3 (1 : 9 : 90 of them), users below."""
    rng = np.random.default_rng(seed)
    n1 = max(1, groups // 100)
    n2 = max(1, groups * 9 // 100)
    n3 = groups - n1 - n2
    rows = [
        dict(name="Idle", uid=IDLE_UID, resgrp=0, shares=0, passwd="*"),
    ]
    uid = 100_000
    level_uids: list[list[int]] = [[0]]
    for count in (n1, n2, n3):
        above = level_uids[-1]
        these = []
        for k in range(count):
            uid += 1
            parent = above[k % len(above)] if len(above) > 1 else above[0]
            rows.append(
                dict(
                    name=f"G{uid}",
                    uid=uid,
                    resgrp=parent,
                    shares=int(rng.integers(1, 1000)),
                    shflags=SHF_GROUP,
                    passwd="*",
                )
            )
            these.append(uid)
        level_uids.append(these)
    leaf_groups = level_uids[-1]
    rows.append(dict(name="unknown", uid=12, resgrp=leaf_groups[0], shares=1, passwd="*"))
    shares = rng.integers(1, 100, users).tolist()
    usage = (rng.random(users) * 1e6).tolist()
    for k in range(users):
        rows.append(
            dict(
                name=f"u{k}",
                uid=200_000 + k,
                resgrp=leaf_groups[k % len(leaf_groups)],
                shares=shares[k],
                shusage=usage[k],
                shextime=1_700_000_000.0,
                acids=[],
                passwd="x",
            )
        )
    return rows


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=2_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    rows = site_rows(args.users, args.groups)

    class Row:
        __slots__ = ("name", "uid", "resgrp", "shares", "shflags")

        def __init__(self, d):
            self.name, self.uid, self.resgrp = d["name"], d["uid"], d["resgrp"]
            self.shares, self.shflags = d["shares"], d.get("shflags", 0)

    tree_rows = [Row(d) for d in rows]
    t_build = median_time(lambda: build_tree(tree_rows), args.repeat)
    tree = build_tree(tree_rows)
    leaves = int(tree.leaf_mask.sum())
    groups = int((tree.kinds == 1).sum())
    print(f"tree: {tree.size} nodes, {groups} groups, {leaves} leaves, levels 0..{tree.depth}")
    print(f"build_tree            median {t_build:.3f} s")

    rng = np.random.default_rng(2)
    half = tree.leaf_mask & (rng.random(tree.size) < 0.5)
    t_all = median_time(lambda: tree.m_shares(), args.repeat)
    t_half = median_time(lambda: tree.m_shares(half), args.repeat)
    print(
        f"m_shares, all {leaves} leaves active   median {t_all:.4f} s  "
        f"goal {NORMALISE_GOAL} s  ratio {t_all / NORMALISE_GOAL:.3f}"
    )
    print(
        f"m_shares, {int(half.sum())} leaves active  median {t_half:.4f} s  "
        f"goal {NORMALISE_GOAL} s  ratio {t_half / NORMALISE_GOAL:.3f}"
    )

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "udb.sqlite"
        engine = open_udb(str(path), create=True)
        with write_session(engine) as s:
            s.execute(insert(Entry), rows)
            const = getattr(models, "Const", None)
            if const is not None:
                s.execute(insert(const), [dict(name="maxlevels", value=5)])
        dispose_all()
        exe = shutil.which("shrtree")
        prog = [exe] if exe else [sys.executable, "-m", "fairshare.cli.shrtree"]
        cmd = [*prog, "--udb", str(path), "-l", "--json"]
        cmd += ["--now", "1700003600"]
        out = subprocess.run(cmd, capture_output=True, check=False)
        if out.returncode not in (0, 1):
            sys.exit(f"shrtree failed: {out.stderr.decode()}")
        print(f"shrtree -l --json: {len(out.stdout) / 1e6:.1f} MB of JSON, exit {out.returncode}")
        walls, cpus = [], []
        for _ in range(args.repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
            walls.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        t_cli, t_cpu = statistics.median(walls), statistics.median(cpus)
        print(
            f"shrtree -l --json end to end  median {t_cli:.3f} s wall, {t_cpu:.3f} s CPU  "
            f"goal {SHRTREE_GOAL} s  ratio {t_cli / SHRTREE_GOAL:.3f} (wall), "
            f"{t_cpu / SHRTREE_GOAL:.3f} (CPU)"
        )
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs while measuring")


if __name__ == "__main__":
    main()
