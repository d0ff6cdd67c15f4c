"""Benchmark: a site of 100 hosts x 10,000 users on one PostgreSQL UDB under GLOBALUSAGE,
every host a shrdaemon process of its own on loopback.  Not a pass/fail test: it prints
figures.

Run as root (it starts a throwaway PostgreSQL 15 listening on 127.0.0.1, tests/pgserver.py),
or with UDB_TEST_PG_URL naming an empty database:
``python tests/bench/bench_site_fresh.py [--hosts 100] [--seconds 60] [--active 200]``.

The UDB holds `--users` users in `--groups` resource groups, GLOBALUSAGE set, delta 4 s,
write-back 60 s (the defaults).  The parent forks `--hosts` processes; each runs the real
daemon (fairshare.daemon.daemon.Daemon: its loop on the real clock, its reload poll,
cycle, publish, per-cycle site exchange, write-backs and checkpoints against the server,
over TCP on 127.0.0.1) with a scripted collector instead of /proc: `--active` users of
its own (drawn at random, so a user runs on `hosts x active / users` hosts on average),
1 to 3 processes each, sharing the host's `--cpus` CPUs, 2 users replaced every cycle (so
lnodes come, go and are written back), and the none enforcer on a recording OsActions:
no real load, so a hundred fit on a 2-CPU machine.  The hosts start spread over one
delta.

Once every host has run 3 cycles (its start-up, reading the 10,000 entries and creating
its lnodes, is done) and `--warmup` seconds more have passed, it measures for `--seconds`
and prints, over every host's cycles:

- the wall time of the cycle's calls to the database (everything the daemon sends
  through its UDB calls: the reload poll, new lnodes' entries, publish, the exchange and,
  every 15th cycle, the write-back and the checkpoint), median, p95 and mean, with the
  exchange and the publish alone; goal under 50 ms per cycle;
- the age of each host's view of the others when its cycle takes it (its cycle's time
  minus the oldest other live host's contribution), median, p95 and max; goal at most 2
  cycles (8 s);

then stops every host (SIGTERM: all written back) and checks the books: the CPU every
host's collector handed out equals the CPU seconds in the UDB's entries, and no host's
row is left in the site's exchange.  It loads the machine (the hosts' Python and the
server on 2 CPUs): run it on a quiet machine, and not often.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pgserver import PgServer  # noqa: E402  (tests/pgserver.py)
from sqlalchemy import func, insert, select  # noqa: E402

from fairshare.core.consts import GLOBALUSAGE, Consts  # noqa: E402
from fairshare.store.config import save_consts  # noqa: E402
from udb import tables  # noqa: E402
from udb.models import SHF_GROUP, Entry  # noqa: E402
from udb.session import dispose_all, open_udb, read_session, write_session  # noqa: E402

FIRST_UID = 100_000
DB_GOAL, AGE_CYCLES = 0.050, 2


def make_udb(url: str, users: int, groups: int, delta: float, writeback: float) -> None:
    engine = open_udb(url, create=True)
    with write_session(engine) as s:
        s.execute(
            insert(Entry),
            [{"name": "Idle", "uid": 11, "shares": 0}, {"name": "unknown", "uid": 12, "shares": 1}]
            + [
                {"name": f"G{g}", "uid": 50_000 + g, "shflags": SHF_GROUP, "shares": 1}
                for g in range(groups)
            ]
            + [
                {"name": f"u{i}", "uid": FIRST_UID + i, "resgrp": 50_000 + i % groups, "shares": 1}
                for i in range(users)
            ],
        )
        save_consts(s, Consts(flags=GLOBALUSAGE, delta=delta, writeback=writeback))
    dispose_all()


class ScriptedHost:
    """A host's processes as a scripted sample: `active` users of `users` (seeded by the
    host's number), 1 to 3 processes each, all runnable, splitting `cpus` CPUs; every
    sample 2 users leave and 2 others come.  `handed` counts the CPU s it gave out."""

    def __init__(self, number: int, users: int, active: int, cpus: float) -> None:
        self.rng = random.Random(number)
        self.users, self.cpus = users, cpus
        self.on = self.rng.sample(range(users), active)
        self.procs = {u: self.rng.randint(1, 3) for u in self.on}
        self.last: float | None = None
        self.handed = 0.0

    def sample(self, io=True, syscalls=True, mem=True, placed=False):
        from fairshare.collect import ProcessSample, Sample

        now = time.time()
        elapsed = 0.0 if self.last is None else now - self.last
        self.last = now
        for _ in range(2):  # churn: two users leave, two others come
            gone = self.on.pop(self.rng.randrange(len(self.on)))
            del self.procs[gone]
            new = self.rng.randrange(self.users)
            while new in self.procs:
                new = self.rng.randrange(self.users)
            self.on.append(new)
            self.procs[new] = self.rng.randint(1, 3)
        total = sum(self.procs.values())
        each = elapsed * self.cpus / total
        out = []
        for u, n in self.procs.items():
            for k in range(n):
                pid = 10_000 + u * 4 + k
                out.append(ProcessSample(pid, 0.0, FIRST_UID + u, cpu=each, runnable=True))
        self.handed += each * total
        return Sample(now, elapsed, out, 0.0, {})


def host_main(url: str, number: int, args, out: Path) -> None:
    """One host's daemon, in a forked child, until SIGTERM; its figures go to `out`."""
    import fairshare.daemon.daemon as daemon_module
    from fairshare.enforce.none import NoEnforcer
    from fairshare.store.published import LnodeStore

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from busy import RecordedOs  # tests/busy.py

    dispose_all()
    time.sleep(random.Random(number).uniform(0, args.delta))  # spread over one delta
    engine = open_udb(url)
    actions = RecordedOs()
    host = ScriptedHost(number, args.users, args.active, args.cpus)
    d = daemon_module.Daemon(
        engine,
        host,
        NoEnforcer(actions),
        LnodeStore(engine, f"h{number:03d}"),
        actions,
        options=daemon_module.Options(cpus=args.cpus),
    )
    spent: dict[str, float] = {}
    cpu = [0.0]

    def timed(method):
        def call(what, fn, *a, **kw):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return method(what, fn, *a, **kw)
            finally:
                spent[what] = spent.get(what, 0.0) + time.perf_counter() - t0
                cpu[0] += time.thread_time() - c0

        return call

    d.udb.call, d.udb.read = timed(d.udb.call), timed(d.udb.read)
    cycles = []
    step = d.step

    def measured_step():
        spent.clear()
        cpu[0] = 0.0
        step()
        if len(cycles) == 3:  # started, past its first lnodes' arrival: steady from here
            out.with_suffix(".ready").touch()
        view = d.site.view
        age = None if view.time is None else d.collector.last - view.time
        cycles.append(
            {
                "t": time.time(),
                "db": sum(spent.values()),
                "db_cpu": cpu[0],
                "exchange": spent.get("exchange the site's usage", 0.0),
                "publish": spent.get("publish the lnode table", 0.0),
                "writeback": spent.get("write back", 0.0),
                "age": age,
                "others": len(view.host_cpus),
            }
        )

    d.step = measured_step
    signal.signal(signal.SIGTERM, lambda *_: d.stop())
    d.run()
    out.write_text(json.dumps({"cycles": cycles, "handed": host.handed}))


def spawn_hosts(url: str, args, where: Path) -> list[int]:
    pids = []
    for h in range(args.hosts):
        pid = os.fork()
        if pid == 0:  # the host
            code = 0
            try:
                host_main(url, h, args, where / f"h{h:03d}.json")
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        pids.append(pid)
    return pids


def server_cpu(server: PgServer | None) -> float:
    """CPU s the server's processes used so far (utime + stime of the postmaster's
    children: the backends live as long as the hosts' connections); 0 without one."""
    if server is None:
        return 0.0
    try:
        master = int(Path(server.data, "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError):
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == master:  # ppid
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def report(args, results: list[dict], t0: float, t1: float, load: tuple, pg_cpu: float) -> None:
    cycles = [c for r in results for c in r["cycles"] if t0 <= c["t"] <= t1]
    db = [c["db"] for c in cycles]
    cpu = [c["db_cpu"] for c in cycles]
    ex = [c["exchange"] for c in cycles]
    pub = [c["publish"] for c in cycles]
    ages = [c["age"] for c in cycles if c["age"] is not None]
    wbs = [c["db"] for c in cycles if c["writeback"] > 0]
    goal_age = AGE_CYCLES * args.delta
    print(
        f"site: {args.hosts} hosts x {args.active} active users each of {args.users:,} "
        f"({args.groups} groups), delta {args.delta:g} s, PostgreSQL on 127.0.0.1"
    )
    print(
        f"load average {', '.join(f'{x:.1f}' for x in load)} at the start, "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end, on {os.cpu_count()} "
        f"CPUs; {len(cycles)} cycles measured over {t1 - t0:.0f} s "
        f"({len(cycles) / args.hosts / (t1 - t0) * args.delta:.2f} of the cycles due)"
    )
    med = statistics.median(db)
    print(
        f"DB time per cycle per host: median {med * 1e3:.1f} ms, p95 {pct(db, 0.95) * 1e3:.1f}"
        f" ms, mean {statistics.fmean(db) * 1e3:.1f} ms; median {med / DB_GOAL:.2f} of the "
        f"{DB_GOAL * 1e3:.0f} ms goal (p95 {pct(db, 0.95) / DB_GOAL:.2f})"
    )
    print(
        f"  its CPU in the host's process: median {statistics.median(cpu) * 1e3:.1f} ms, mean "
        f"{statistics.fmean(cpu) * 1e3:.1f} ms; the server's CPU: {pg_cpu / len(cycles) * 1e3:.1f}"
        f" ms per cycle ({pg_cpu / (t1 - t0):.3f} CPUs); the rest of the wall time is waiting "
        "for a CPU"
    )
    print(
        f"  the exchange alone: median {statistics.median(ex) * 1e3:.1f} ms, p95 "
        f"{pct(ex, 0.95) * 1e3:.1f} ms; publish: median {statistics.median(pub) * 1e3:.1f} ms;"
        f" cycles with a write-back ({len(wbs)}): median "
        f"{(statistics.median(wbs) if wbs else 0) * 1e3:.1f} ms"
    )
    if ages:
        am = statistics.median(ages)
        print(
            f"age of a host's view of the others: median {am:.2f} s, p95 {pct(ages, 0.95):.2f} s,"
            f" max {max(ages):.2f} s; median {am / goal_age:.2f} of the {goal_age:g} s goal "
            f"(p95 {pct(ages, 0.95) / goal_age:.2f}, max {max(ages) / goal_age:.2f}); others "
            f"seen: median {statistics.median(c['others'] for c in cycles):.0f} of "
            f"{args.hosts - 1}"
        )


def check_books(url: str, results: list[dict]) -> None:
    engine = open_udb(url)
    handed = sum(r["handed"] for r in results)
    with read_session(engine) as s:
        charged = s.scalar(select(func.sum(Entry.cpuquotaused)))
        left = s.scalar(select(func.count()).select_from(tables.site_hosts))
    print(
        f"books: {handed:.3f} CPU s handed out by the hosts' collectors, {charged:.3f} in the "
        f"UDB ({(charged - handed) / handed:+.2e}); after the stop {left} hosts' rows left in "
        "the site's exchange"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--active", type=int, default=200, help="users active on each host")
    ap.add_argument("--cpus", type=float, default=16.0, help="each host's CPUs")
    ap.add_argument("--delta", type=float, default=4.0)
    ap.add_argument("--writeback", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=20.0, help="s after every host started")
    ap.add_argument("--start-timeout", type=float, default=600.0, help="s for all to start")
    ap.add_argument("--seconds", type=float, default=60.0, help="s measured")
    args = ap.parse_args()
    server = None
    url = os.environ.get("UDB_TEST_PG_URL")
    if not url:
        server = PgServer(tcp=True, settings={"max_connections": str(args.hosts * 2 + 20)})
        server.start()
        url = server.url
    pids: list[int] = []
    try:
        make_udb(url, args.users, args.groups, args.delta, args.writeback)
        load = os.getloadavg()
        with tempfile.TemporaryDirectory(prefix="bench-site-") as tmp:
            began = time.time()
            pids = spawn_hosts(url, args, Path(tmp))
            while len(list(Path(tmp).glob("*.ready"))) < args.hosts:
                time.sleep(0.5)
                if time.time() - began > args.start_timeout:
                    break
            ready = len(list(Path(tmp).glob("*.ready")))
            print(f"{ready} of {args.hosts} hosts started in {time.time() - began:.0f} s")
            time.sleep(args.warmup)
            t0, pg0 = time.time(), server_cpu(server)
            time.sleep(args.seconds)
            t1, pg_cpu = time.time(), server_cpu(server) - pg0
            for pid in pids:
                os.kill(pid, signal.SIGTERM)
            failed = sum(os.waitpid(pid, 0)[1] != 0 for pid in pids)
            pids = []
            results = [json.loads(p.read_text()) for p in sorted(Path(tmp).glob("h*.json"))]
        if failed or len(results) != args.hosts:
            print(f"{failed} hosts failed, {len(results)} of {args.hosts} reported")
        report(args, results, t0, t1, load, pg_cpu)
        check_books(url, results)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        dispose_all()
        if server is not None:
            server.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
