"""Benchmark: a site of 16 hosts x 10,000 active lnodes on one PostgreSQL UDB.

Run as root (it starts a throwaway PostgreSQL 15 as the system tier does, tests/pgserver.py), or
with UDB_TEST_PG_URL naming an empty database: ``python tests/bench/bench_site.py``.

The UDB holds 10,000 users in 100 resource groups; every one of the 16 hosts has all
10,000 active (the worst case: every host writes back the same rows) and has
published its lnode table.  It times, as medians:

1. one host's write-back of all its lnodes (10,000 increments plus their 100 groups,
   one transaction), one host at a time (target < 1 s), and then all 16 hosts at
   once from 16 threads (each write-back's wall time under that contention);
2. one host's GLOBALUSAGE exchange (`LnodeStore.exchange`, every cycle: its own row of
   10,000 uids replaced, the other 15 hosts' rows, 150,000 uids, read and summed with
   the stored usage; target < 200 ms), after ANALYZE (as autovacuum keeps a site's
   statistics); the site of 100 hosts is tests/bench/bench_site_fresh.py's;
3. one host's publish of its table, for scale.

It checks that no increment was lost (every user's shcharge is the number of
write-backs) and prints the figures and their ratio to the targets.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pgserver import PgServer  # noqa: E402  (tests/pgserver.py)
from sqlalchemy import insert, select, text  # noqa: E402

from fairshare.core.lnode import WriteBack, activate, new_table  # noqa: E402
from fairshare.core.tree import build_tree  # noqa: E402
from fairshare.store.config import tree_rows  # noqa: E402
from fairshare.store.exchange import Contribution, site_view_of  # noqa: E402
from fairshare.store.published import CycleHeader, LnodeStore  # noqa: E402
from udb.models import SHF_GROUP, Entry  # noqa: E402
from udb.session import open_udb, read_session, write_session  # noqa: E402

HOSTS, USERS, GROUPS = 16, 10_000, 100
WRITE_BACK_TARGET, REFRESH_TARGET = 1.0, 0.2
NOW = 1_700_000_000.0


def make_udb(url: str):
    engine = open_udb(url, create=True)
    with write_session(engine) as s:
        groups = [
            {"name": f"G{g}", "uid": 50_000 + g, "shflags": SHF_GROUP, "shares": 1}
            for g in range(GROUPS)
        ]
        users = [
            {"name": f"u{i}", "uid": 100_000 + i, "resgrp": 50_000 + i % GROUPS, "shares": 1}
            for i in range(USERS)
        ]
        s.execute(insert(Entry), groups + users)
    with read_session(engine) as s:
        tree = build_tree(tree_rows(s))
    return engine, tree


def host_table(tree, rng):
    table = new_table(tree)
    for n in np.flatnonzero(tree.leaf_mask).tolist():
        activate(table, n, 0.0)
    leaves = tree.leaf_mask
    table.usage[leaves] = rng.uniform(1e3, 1e6, leaves.sum())
    table.cpu[leaves] = 1.0 / leaves.sum()
    table.demand[:] = table.active
    table.nrun[leaves] = 1
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    server = None
    url = os.environ.get("UDB_TEST_PG_URL")
    if not url:
        server = PgServer()
        server.start()
        url = server.url
    try:
        run(url, args.repeat)
    finally:
        if server is not None:
            server.remove()


def run(url: str, repeat: int) -> None:
    engine, tree = make_udb(url)
    rng = np.random.default_rng(1)
    uids = tree.ids[tree.leaf_mask].tolist()
    stores = [LnodeStore(engine, f"h{h:02d}") for h in range(HOSTS)]
    tables = [host_table(tree, rng) for _ in range(HOSTS)]
    publish = []
    for h, (store, table) in enumerate(zip(stores, tables, strict=True)):
        head = CycleHeader(NOW, 4.0, "none", 1000 + h, 1, "user", NOW, None, 8.0, 8.0)
        t0 = time.perf_counter()
        store.publish(tree, table, head)
        publish.append(time.perf_counter() - t0)
    increments = [(uid, WriteBack(1.0, NOW, 1.0, 0.01)) for uid in uids]
    with engine.connect() as conn:  # fresh statistics, as autovacuum keeps them on a site
        conn.execute(text("ANALYZE"))

    # 1. write-back, one host at a time, then all at once.
    alone = []
    for r in range(repeat):
        store = stores[r % HOSTS]
        t0 = time.perf_counter()
        store.write_back(increments, halflife=3600.0)
        alone.append(time.perf_counter() - t0)
    together: list[float] = []
    start = threading.Barrier(HOSTS)

    def host(store):
        start.wait()
        t0 = time.perf_counter()
        store.write_back(increments, halflife=3600.0)
        together.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=host, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    with read_session(engine) as s:
        charges = set(s.scalars(select(Entry.shcharge).where(Entry.uid >= 100_000)))
    written = repeat + HOSTS
    assert charges == {float(written)}, f"lost increments: shcharge values {sorted(charges)[:5]}"

    # 2. the GLOBALUSAGE exchange of one host: the other 15 hosts' rows.
    mine = Contribution.of(
        np.array(uids), present=True, demand=True, owed=1.0, rate=0.001, want=0.001
    )
    for store in stores:
        store.exchange(mine, NOW, 8.0, live_after=NOW - 180)
    refresh = []
    for r in range(repeat):
        store = stores[r % HOSTS]
        t0 = time.perf_counter()
        sums = store.exchange(mine, NOW, 8.0, live_after=NOW - 180)
        view, _usage = site_view_of(tree, sums, NOW, 3600.0)
        refresh.append(time.perf_counter() - t0)
        assert view.active.sum() == USERS and len(view.host_cpus) == HOSTS - 1

    wb, rf = statistics.median(alone), statistics.median(refresh)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"site: {HOSTS} hosts x {USERS:,} active lnodes ({GROUPS} groups), PostgreSQL")
    print(f"load average {load} on {os.cpu_count()} CPUs: medians are noisy, minima less so")
    print(
        f"write-back of one host ({USERS:,} increments + {GROUPS} groups): median {wb:.3f} s "
        f"(range {min(alone):.3f}..{max(alone):.3f}, {repeat} runs), {wb / WRITE_BACK_TARGET:.2f}"
        f" of the {WRITE_BACK_TARGET:g} s target"
    )
    print(
        f"write-back, all {HOSTS} hosts at once: median {statistics.median(together):.3f} s "
        f"each (max {max(together):.3f}), {wall:.3f} s wall for all; no increment lost"
    )
    print(
        f"GLOBALUSAGE exchange of one host ({(HOSTS - 1) * USERS:,} uids of other hosts): median "
        f"{rf * 1000:.0f} ms (range {min(refresh) * 1000:.0f}..{max(refresh) * 1000:.0f}), "
        f"{rf / REFRESH_TARGET:.2f} of the {REFRESH_TARGET * 1000:.0f} ms target"
    )
    print(f"publish of one host's table ({USERS + GROUPS + 1:,} rows): median "
          f"{statistics.median(publish):.3f} s")  # fmt: skip


if __name__ == "__main__":
    main()
