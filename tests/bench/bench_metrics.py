"""Benchmark: shrdaemon --metrics at 100,000 active lnodes.

Run as ``python tests/bench/bench_metrics.py [--repeat N]``.  On bench_cycle's
six-level tree of about 100,000 active leaves, prints the medians of

- the snapshot the cycle takes after each cycle (its whole cost to the cycle);
- the rendering of its per-lnode block alone (`lnode_text`), what the first scrape
  after a cycle spends in Python;
- one scrape over loopback HTTP (all lnodes exported, every per-lnode series), and its size:
  the first after a cycle (which renders the snapshot) and the next ones;
- run_cycle and the snapshot alone, then while a client scrapes without pause in
  another thread: the ratio is how much scraping slows the cycle (the GIL is
  shared; the cycle never waits for a scrape to finish).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

from fairshare.core.consts import ADJGROUPS, LIMSHARE, Consts
from fairshare.core.policies import run_cycle
from fairshare.core.steps import advance
from fairshare.daemon.metrics import LNODE_COUNTERS, LNODE_METRICS, Metrics, lnode_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cycle import scene, six_level_tree  # noqa: E402


def median(f, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    tree = six_level_tree(6, 13)
    table, c = scene(tree)
    consts = Consts(flags=ADJGROUPS | LIMSHARE, sharemin=1e-6)
    c.cpus = float(c.cpu.sum()) / 4.0  # the leaves' CPU is the whole machine's
    table, _ = advance(tree, table, c, consts, 4.0)  # the daemon's cycle: want, target, got
    daemon = SimpleNamespace(
        tree=tree,
        table=table,
        cycle=1,
        writebacks=0,
        checkpoints=0,
        enforcer_name="none",
        clock=SimpleNamespace(time=time.time),
        cpus=c.cpus,
        elapsed=4.0,
    )
    m = Metrics(("127.0.0.1", 0), max_lnodes=None)
    m.serve()
    url = "http://{}:{}/metrics".format(*m.bound)
    snap = median(lambda: m.cycled(daemon, 0.1), args.repeat)
    size = 0

    def scrape() -> None:
        nonlocal size
        with urllib.request.urlopen(url, timeout=60) as r:
            size = len(r.read())

    def first_scrape() -> float:
        m.cycled(daemon, 0.1)  # a new snapshot: the scrape renders it
        t0 = time.perf_counter()
        scrape()
        return time.perf_counter() - t0

    snapshot = m.collector.snapshot
    render = median(lambda: lnode_text(snapshot), args.repeat)
    first = statistics.median(first_scrape() for _ in range(args.repeat))
    again = median(scrape, args.repeat)
    n = tree.size
    series = len(LNODE_METRICS) + len(LNODE_COUNTERS)
    print(f"{n} active lnodes ({int(tree.leaf_mask.sum())} leaves), {series} series each")
    print(f"snapshot after a cycle: median {snap * 1e3:.1f} ms")
    print(
        f"per-lnode block rendered alone: median {render * 1e3:.0f} ms "
        f"({render * 1e3 / series:.0f} ms per series)"
    )
    print(
        f"scrape over loopback, {size / 1e6:.1f} MB: median {first:.2f} s the first after a "
        f"cycle (renders), {again:.2f} s the next ones (the same bytes)"
    )

    def cycle() -> None:
        run_cycle(tree, table, c, consts, 4.0)
        m.cycled(daemon, 0.1)

    alone = median(cycle, args.repeat * 3)
    stop = threading.Event()
    scrapes = 0

    def scraper() -> None:
        nonlocal scrapes
        while not stop.is_set():
            scrape()
            scrapes += 1

    t = threading.Thread(target=scraper, daemon=True)
    t.start()
    time.sleep(0.2)
    busy = median(cycle, args.repeat * 3)
    stop.set()
    t.join()
    m.stopping(daemon)
    print(
        f"run_cycle + snapshot: median {alone * 1e3:.0f} ms alone, {busy * 1e3:.0f} ms while "
        f"scraped without pause ({scrapes} scrapes, each rendering): {busy / alone:.2f}x "
        "(a Prometheus scrapes every 15 s or so, not back to back)"
    )


if __name__ == "__main__":
    main()
