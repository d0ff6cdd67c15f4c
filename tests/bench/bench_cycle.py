"""Benchmark: one scheduling cycle (fairshare.core.policies.run_cycle) on large trees.

Run as ``python tests/bench/bench_cycle.py [--repeat N]``.  Prints the tree sizes, the
median time of one cycle and its ratio to the goals:

- 10,000 active leaf lnodes over 6 levels: < 50 ms;
- 100,000 active leaf lnodes over 6 levels: < 0.5 s.

The trees have resource groups at levels 1 to 5 (fan-out 4, or 6 for the large one)
and users at level 6, every user active, 80% of them busy with random CPU, the rest
logged in but idle, 1% newcomers with zero usage (so the edge-effect water-filling
runs), with ADJGROUPS and LIMSHARE set and sharemin 1e-6 (every step of the policy
runs).  The first cycle (which builds the tree's level index) is not timed.

Then the same cycles without ADJGROUPS (Kay-Lauder's flat model: one split over all
leaves, fairshare.core.split) and with the even idle-share rule, each with the median of
its ratios to the first, the variants timed in turn within each repeat.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace as Row

import numpy as np

from fairshare.core.consts import ADJGROUPS, LIMSHARE, Consts
from fairshare.core.cycle import Consumption
from fairshare.core.lnode import new_table
from fairshare.core.policies import run_cycle
from fairshare.core.tree import build_tree
from udb.models import SHF_GROUP

GOALS = {10_000: 0.050, 100_000: 0.5}  # s per cycle


def six_level_tree(fanout: int, users_per_group: int, seed: int = 1):
    """Groups at levels 1..5 with `fanout` children each, users at level 6."""
    rng = np.random.default_rng(seed)
    rows, uid, parents = [], 100, [0]
    for _level in range(5):
        nxt = []
        for p in parents:
            for _ in range(fanout):
                uid += 1
                rows.append(Row(name=f"g{uid}", uid=uid, resgrp=p,
                                shares=int(rng.integers(1, 100)), shflags=SHF_GROUP))  # fmt: skip
                nxt.append(uid)
        parents = nxt
    user = 100_000
    for p in parents:
        for _ in range(users_per_group):
            user += 1
            rows.append(Row(name=f"u{user}", uid=user, resgrp=p,
                            shares=int(rng.integers(1, 100)), shflags=0))  # fmt: skip
    return build_tree(rows)


def scene(tree, seed: int = 2):
    """A table with every leaf active, and one cycle's consumption."""
    rng = np.random.default_rng(seed)
    leaf = tree.leaf_mask
    n = tree.size
    table = new_table(tree)
    table.active[:] = True
    table.usage = np.where(leaf, rng.uniform(1e5, 1e8, n), 0.0)
    table.usage[leaf & (rng.random(n) < 0.01)] = 0.0  # newcomers
    busy = leaf & (rng.random(n) < 0.8)
    c = Consumption.zeros(n)
    c.cpu = np.where(busy, rng.uniform(0.0, 4.0, n), 0.0)
    c.nrun = np.where(busy, rng.integers(1, 5, n), 0)
    c.refs = np.where(leaf, c.nrun + 1, 0)
    return table, c


#: The variants timed: name -> constants (the first is the goals' case).
VARIANTS = {
    "groups": Consts(flags=ADJGROUPS | LIMSHARE, sharemin=1e-6),
    "flat": Consts(flags=LIMSHARE, sharemin=1e-6),
    "flat, even idle share": Consts(flags=LIMSHARE, sharemin=1e-6, idleshare="even"),
    "groups, even idle share": Consts(flags=ADJGROUPS | LIMSHARE, sharemin=1e-6, idleshare="even"),
}


def bench(fanout: int, per_group: int, repeat: int) -> tuple[object, dict[str, list[float]]]:
    """(the tree, {variant: cycle times in s}).  The variants run in turn within each
    repeat, each on its own copy of the tree (its memo holds one variant's results), so
    a busy machine slows them alike and the paired ratios stay meaningful."""
    runs = {}
    for name, consts in VARIANTS.items():
        tree = six_level_tree(fanout, per_group)
        table, c = scene(tree)
        table = run_cycle(tree, table, c, consts, 4.0)  # warm: builds the level index
        runs[name] = (tree, table, c, consts)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(repeat):
        for name, (tree, table, c, consts) in runs.items():
            t0 = time.perf_counter()
            out = run_cycle(tree, table, c, consts, 4.0)
            times[name].append(time.perf_counter() - t0)
            assert abs(out.e_share[tree.leaf_mask & out.demand].sum() - 1.0) < 1e-9
    return runs["groups"][0], times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    results = {}
    for leaves, (fanout, per_group) in ((10_000, (4, 10)), (100_000, (6, 13))):
        tree, times = bench(fanout, per_group, args.repeat)
        nleaves = int(tree.leaf_mask.sum())
        base = times["groups"]
        median = results[leaves] = statistics.median(base)
        goal = GOALS[leaves]
        print(
            f"{nleaves:>7} active leaves + {tree.size - nleaves - 1:>5} groups, "
            f"depth {tree.depth}: median {median * 1e3:8.2f} ms per cycle "
            f"(goal {goal * 1e3:.0f} ms, {median / goal:.2f} of it, {goal / median:.1f}x headroom)"
        )
        for name, t in list(times.items())[1:]:
            ratio = statistics.median(a / b for a, b in zip(t, base, strict=True))
            print(
                f"{'':>8}{name:>24}: median {statistics.median(t) * 1e3:8.2f} ms, "
                f"median paired ratio {ratio:.2f} x groups"
            )
    print(f"100k / 10k time ratio: {results[100_000] / results[10_000]:.1f}")


if __name__ == "__main__":
    main()
