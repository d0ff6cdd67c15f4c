"""Benchmark: every registered policy (fairshare.core.policies.POLICIES) against the issue's
speed goals, side by side.

Run as ``python tests/bench/bench_policies.py [--repeat N] [--days D] [--policies a,b]``.
For each policy it prints:

- the median time of one cycle on 100,000 active leaf lnodes over 6 levels (the tree
  and the load of bench_cycle.py: 80% busy, 1% newcomers, ADJGROUPS and LIMSHARE set)
  and its ratio to the unicos cycle's median, goal at most 2;
- the median wall time of bench_shrsim.py's week (50 users in 5 groups on 16 CPUs,
  151,200 cycles) under that policy, goal under 60 s, with its CPU time.

The machine's load inflates wall times; the cycle ratio is measured with the policies
interleaved repeat by repeat, so a busy spell slows them alike.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench_cycle import scene, six_level_tree
from bench_shrsim import GOAL, week_scenario

from fairshare.core.consts import ADJGROUPS, LIMSHARE, Consts
from fairshare.core.policies import POLICIES, run_cycle
from fairshare.sim.run import run_scenario
from fairshare.sim.scenario import load_scenario

RATIO_GOAL = 2.0  # a policy's cycle time / the unicos cycle's


def cycle_medians(names: list[str], repeat: int) -> dict[str, float]:
    """Median seconds per cycle of each policy on the 100,000-leaf tree."""
    tree = six_level_tree(6, 13)
    table, c = scene(tree)
    tables, times = {}, {name: [] for name in names}
    for name in names:
        consts = Consts(flags=ADJGROUPS | LIMSHARE, sharemin=1e-6, policy=name)
        tables[name] = (run_cycle(tree, table, c, consts, 4.0), consts)  # warm
    for _ in range(repeat):
        for name in names:
            warm, consts = tables[name]
            t0 = time.perf_counter()
            out = run_cycle(tree, warm, c, consts, 4.0)
            times[name].append(time.perf_counter() - t0)
            assert abs(out.e_share[tree.leaf_mask & out.demand].sum() - 1.0) < 1e-6, name
    print(f"{int(tree.leaf_mask.sum()):,} active leaves, depth {tree.depth}, {repeat} repeats")
    return {name: statistics.median(t) for name, t in times.items()}


def week(name: str, days: int, repeat: int) -> tuple[float, float, int, float]:
    """(median wall s, median CPU s, cycles, largest deviation pp) of the week under `name`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "week.toml"
        path.write_text(week_scenario(days, name))
        times, cpu = [], []
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            result = run_scenario(load_scenario(path))
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return statistics.median(times), statistics.median(cpu), result.cycles, result.max_deviation_pp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15, help="cycles timed per policy")
    ap.add_argument("--week-repeat", type=int, default=1, help="week simulations per policy")
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--policies", help="comma-separated names (default: every registered)")
    args = ap.parse_args()
    names = args.policies.split(",") if args.policies else list(POLICIES)
    if "unicos" not in names:
        names.insert(0, "unicos")
    medians = cycle_medians(names, args.repeat)
    base = medians["unicos"]
    for name in names:
        ratio = medians[name] / base
        verdict = "ok" if ratio <= RATIO_GOAL else "OVER"
        print(
            f"cycle  {name:<10} median {medians[name] * 1e3:8.1f} ms, "
            f"{ratio:.2f}x unicos (goal <= {RATIO_GOAL:g}x: {verdict})"
        )
    goal = GOAL * args.days / 7
    for name in names:
        wall, cpu, cycles, dev = week(name, args.days, args.week_repeat)
        verdict = "ok" if wall < goal else "OVER"
        print(
            f"week   {name:<10} {args.days} d, {cycles} cycles: median {wall:.1f} s wall "
            f"({wall / cycles * 1e6:.0f} us per cycle; goal {goal:.0f} s: {verdict}, "
            f"{goal / wall:.1f}x headroom), CPU {cpu:.1f} s, largest deviation {dev:.2f} pp"
        )


if __name__ == "__main__":
    main()
