"""Benchmark: fair under real load, on this machine, with and without the daemon.

Run as root from the project directory (it skips, saying why, otherwise):
``PYTHONPATH=$PWD python3 tests/bench/bench_real.py [--cases ...] [--enforcers ...]
[--seconds S] [--warmup W] [--repeats N] [--delta D]``.

Each user is a process group forked from this process and setuid to a test uid
63000 + i with no passwd entry, running Python workloads (with --sessions each user
leads a session of its own, as logins do; the kernel's autogroup then shares the CPU
per session already, so the baseline hides what a scheduler must fix):

1. churn: 10 users, equal shares, 1 to 8 CPU-bound processes each; every process
   is killed and replaced after a random 1 to 10 s.  Goal: every user within 3 pp.
2. fork: a user running 8 loops of short CPU-bound children (20 ms to 1 s of CPU
   each, like make -j8) against a user with 2 long CPU-bound processes.  Goal: 50/50
   within 3 pp.
3. many: 100 users with 2 CPU-bound processes each.  Goal: every user within 2 pp
   of 1%, the daemon under 1% of a core.
4. latency: a light user's probe sleeps 10 ms and measures how late it wakes, while
   a heavy user runs 32 CPU-bound processes.  Goal: p99 no worse than without the
   daemon and under 5 ms.
5. restart: case 1 with the daemon stopped (SIGTERM) and started again in the middle:
   no process left in a fair-share cgroup or at a changed nice value after the stop,
   and the seconds until the split is back within 3 pp (3 s windows, every 0.5 s, so
   3 s is the shortest it can show).  Churn also times how soon a new session of a
   user is in a fair-share cgroup (cgroup enforcers).
6. groups: the Groups issue's interactive member.  Two resource groups of equal shares:
   Physics (a user with 8 CPU-bound processes, a user with a fork-heavy loop) and Chem
   (a user with 1 CPU-bound process, a light interactive user: 5 ms of CPU every half
   second, with the latency probe between).  Goal: Physics within 2 pp of 50%, the
   light user's p99 wake-up lateness no worse than without the daemon.

A user's CPU is measured from the kernel, independently of the daemon: the sum over
its processes (zombies too) of utime + stime + cutime + cstime, whose growth over a
window counts every process, however short-lived, since each user's session reaps
its children.  Splits are fractions of the measured users' combined CPU.  Each case
runs first without the daemon (baseline), then with each enforcer asked for, each
`--repeats` times; medians and ranges are printed.  Every process, cgroup and nice
value is cleaned up at the end, also on Ctrl-C or SIGTERM.  It takes the host's
real-machine test lock (tests/machine_lock.py).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from machine_lock import (  # noqa: E402  (tests/machine_lock.py)
    CGROUP_MOUNTS,
    cpu_by_uid,
    machine_lock,
    other_daemons,
    remove_fairshare_cgroups,
)

from fairshare.core.consts import Consts  # noqa: E402
from fairshare.enforce.nice import read_slice  # noqa: E402
from fairshare.store.config import save_consts  # noqa: E402
from udb.models import SHF_GROUP, Entry  # noqa: E402
from udb.session import open_udb, write_session  # noqa: E402

FIRST_UID = 63000
#: The uids of the resource groups of a case with groups (CASE_GROUPS).
GROUP_UID = 62900
CLK_TCK = os.sysconf("SC_CLK_TCK")
_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


# -- sessions of test users ------------------------------------------------------------------


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (set after setuid, which clears it)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def burn(seconds: float | None) -> None:
    """Use `seconds` of CPU (None: forever), then return."""
    if seconds is None:
        while True:
            pass
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def child(fn) -> int:
    """Fork a child of this session that runs `fn()` and exits."""
    pid = os.fork()
    if pid == 0:
        die_with_parent()
        try:
            fn()
        finally:
            os._exit(0)
    return pid


def busy(n: int, seconds: float | None) -> None:
    """`n` CPU-bound processes for `seconds` (None: until the run kills the session)."""
    kids = [child(lambda: burn(None)) for _ in range(n)]
    if seconds is None:
        while True:
            signal.pause()
    time.sleep(seconds)
    for k in kids:
        os.kill(k, signal.SIGKILL)
        os.waitpid(k, 0)


def churn(n: int, seconds: float, seed: int) -> None:
    """`n` CPU-bound processes, each replaced by a new one after 1 to 10 s."""
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    kids = {child(lambda: burn(None)): time.monotonic() + rng.uniform(1, 10) for _ in range(n)}
    while time.monotonic() < end:
        pid, due = min(kids.items(), key=lambda kv: kv[1])
        time.sleep(max(min(due, end) - time.monotonic(), 0.0))
        if time.monotonic() >= end:
            break
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        del kids[pid]
        kids[child(lambda: burn(None))] = time.monotonic() + rng.uniform(1, 10)
    for pid in kids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def fork_loops(n: int, seconds: float, seed: int) -> None:
    """`n` loops, each running one short CPU-bound child (20 ms to 1 s) after another."""

    def loop(k: int) -> None:
        rng = random.Random(seed * 100 + k)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            c = child(lambda: burn(rng.uniform(0.02, 1.0)))
            os.waitpid(c, 0)

    loops = [child(lambda k=k: loop(k)) for k in range(n)]
    for pid in loops:
        os.waitpid(pid, 0)


def interactive(seconds: float, out: int) -> None:
    """A light interactive user: a small command (5 ms of CPU) every half second, with
    `probe`'s 10 ms sleeps between; writes how late each wake-up was (ms) to fd `out`."""
    late = []
    end = time.monotonic() + seconds
    next_command = time.monotonic()
    while time.monotonic() < end:
        if time.monotonic() >= next_command:
            burn(0.005)
            next_command += 0.5
        t = time.monotonic()
        time.sleep(0.010)
        late.append((time.monotonic() - t - 0.010) * 1e3)
    os.write(out, json.dumps(late).encode())


def probe(seconds: float, out: int) -> None:
    """Sleep 10 ms again and again; write how late each wake-up was (ms) to fd `out`."""
    late = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic()
        time.sleep(0.010)
        late.append((time.monotonic() - t - 0.010) * 1e3)
    os.write(out, json.dumps(late).encode())


#: Give each user a session (autogroup) of its own, as logins are (--sessions).  Off by
#: default: the kernel's autogroup then already splits the CPU per session and the
#: baseline hides what a scheduler must fix (one user's many processes).
SESSIONS = {"on": False}


def session(uid: int, fn) -> int:
    """Fork a user `uid` (no groups; own process group, own session with --sessions)
    running `fn()`."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid() if SESSIONS["on"] else os.setpgid(0, 0)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            die_with_parent()
            fn()
        finally:
            os._exit(0)
    return pid


# -- measuring -------------------------------------------------------------------------------


def split(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
    """Percent of the uids' combined CPU each got between readings `a` and `b`."""
    got = {u: max(b[u] - a[u], 0.0) for u in a}
    total = sum(got.values()) or 1.0
    return {u: 100.0 * g / total for u, g in got.items()}


def process_cpu(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    rest = stat[stat.rindex(b")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


# -- the daemon and cleaning up ------------------------------------------------------------


@dataclass
class Run:
    """One case run under one enforcer: its UDB, daemon and sessions."""

    enforcer: str
    tmp: Path
    uids: list[int]
    delta: float
    groups: dict[str, list[int]] = field(default_factory=dict)  # group -> its users' indices
    daemon: subprocess.Popen | None = None
    sessions: list[int] = field(default_factory=list)

    def udb(self) -> str:
        url = f"sqlite:///{self.tmp / 'udb.sqlite'}"
        engine = open_udb(url, create=True)
        with write_session(engine) as s:
            s.add(Entry(name="Idle", uid=11, shares=0))
            s.add(Entry(name="unknown", uid=12, shares=1))
            resgrp = {}
            for g, (name, members) in enumerate(self.groups.items()):
                s.add(Entry(name=name, uid=GROUP_UID + g, shares=1, shflags=SHF_GROUP))
                resgrp.update(dict.fromkeys(members, GROUP_UID + g))
            for i, uid in enumerate(self.uids):
                s.add(Entry(name=f"r{i}", uid=uid, shares=1, resgrp=resgrp.get(i, 0)))
            save_consts(s, Consts(delta=self.delta, halflife=10.0))
        engine.dispose()
        return url

    def start_daemon(self) -> None:
        if self.enforcer == "baseline":
            return
        url = f"sqlite:///{self.tmp / 'udb.sqlite'}"
        log = (self.tmp / "shrdaemon.log").open("a")
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "fairshare.cli.shrdaemon", "--udb", url]
            + ["--enforcer", self.enforcer],
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # as under systemd: not in a test session
            preexec_fn=lambda: _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM),
        )

    def stop_daemon(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        self.daemon = None

    def stop_sessions(self) -> None:
        for pid in self.sessions:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in self.sessions:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.sessions.clear()
        kill_uids(set(self.uids))

    def close(self) -> None:
        self.stop_daemon()
        self.stop_sessions()
        remove_fairshare_cgroups()


def kill_uids(uids: set[int]) -> None:
    """SIGKILL every process left of the test uids (nothing else runs as them)."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid in uids:
                    os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass


def stale_cgroups() -> list[str]:
    """Fair-share cgroups left on the machine."""
    return [str(m / "fairshare") for m in CGROUP_MOUNTS if (m / "fairshare").exists()]


def reniced(uids: set[int]) -> list[str]:
    """Processes of the test uids whose nice or autogroup nice is not 0, or whose time
    slice is not the kernel's default (the nice enforcer's long slices)."""
    out = []
    default = read_slice("self")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid not in uids:
                continue
            nice = os.getpriority(os.PRIO_PROCESS, int(name))
            group = Path(f"/proc/{name}/autogroup").read_text().split()
            slice_ns = read_slice(name)
        except OSError:
            continue
        if nice != 0 or (len(group) == 3 and group[2] != "0") or slice_ns != default:
            out.append(f"{name} nice {nice} autogroup {' '.join(group)} slice {slice_ns}")
    return out


# -- the cases -------------------------------------------------------------------------------


def measure(run: Run, uids: set[int], warmup: float, seconds: float) -> tuple[dict, float]:
    """The split over `seconds` after `warmup`, and the daemon's share of one core."""
    time.sleep(warmup)
    a = cpu_by_uid(uids)
    d0 = process_cpu(run.daemon.pid) if run.daemon else 0.0
    time.sleep(seconds)
    b = cpu_by_uid(uids)
    d1 = process_cpu(run.daemon.pid) if run.daemon else 0.0
    if run.daemon is not None and run.daemon.poll() is not None:
        raise RuntimeError(f"the daemon died: {(run.tmp / 'shrdaemon.log').read_text()[-2000:]}")
    return split(a, b), 100.0 * (d1 - d0) / seconds


def case_churn(run: Run, a) -> dict:
    counts = [1, 2, 3, 4, 5, 6, 7, 8, 2, 6]
    span = a.warmup + a.seconds + 5
    for i, (uid, n) in enumerate(zip(run.uids, counts, strict=True)):
        run.sessions.append(session(uid, lambda n=n, i=i: churn(n, span, a.seed + i)))
    run.start_daemon()
    got, daemon = measure(run, set(run.uids), a.warmup, a.seconds)
    dev = max(abs(v - 100.0 / len(counts)) for v in got.values())
    out = {"dev": dev, "daemon": daemon, "split": [round(got[u], 1) for u in run.uids]}
    if run.enforcer.startswith("cgroup"):
        out["placed after (ms)"] = placement(run.uids[0])
    return out


def placement(uid: int, tries: int = 10) -> float | None:
    """Median ms from a new session's setuid until it is in a fair-share cgroup (None:
    not placed within 3 s)."""
    took = []
    for _ in range(tries):
        r, w = os.pipe()

        def wait_placed(w: int = w) -> None:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 3.0:
                if "/fairshare/" in Path("/proc/self/cgroup").read_text():
                    os.write(w, str((time.monotonic() - t0) * 1e3).encode())
                    return
            os.write(w, b"-1")

        pid = session(uid, wait_placed)
        os.close(w)
        with os.fdopen(r) as f:
            ms = float(f.read() or -1)
        os.waitpid(pid, 0)
        if ms >= 0:
            took.append(ms)
    return statistics.median(took) if len(took) > tries // 2 else None


def case_fork(run: Run, a) -> dict:
    span = a.warmup + a.seconds + 5
    heavy, steady = run.uids
    run.sessions.append(session(heavy, lambda: fork_loops(8, span, a.seed)))
    run.sessions.append(session(steady, lambda: busy(2, span)))
    run.start_daemon()
    got, daemon = measure(run, {heavy, steady}, a.warmup, a.seconds)
    return {"dev": abs(got[heavy] - 50.0), "daemon": daemon, "fork-heavy %": got[heavy]}


def case_many(run: Run, a) -> dict:
    # The sessions run until the run ends: on a loaded machine, forking 100 of them
    # among their own busy processes took more than 10 s, and sessions given a fixed
    # lifetime from their start ended inside the window, taking their CPU with them
    # (a user "starved": 0% measured).
    for uid in run.uids:
        run.sessions.append(session(uid, lambda: busy(2, None)))
    run.start_daemon()
    got, daemon = measure(run, set(run.uids), a.warmup, a.seconds)
    dev = max(abs(v - 100.0 / len(run.uids)) for v in got.values())
    return {"dev": dev, "daemon": daemon, "min %": min(got.values()), "max %": max(got.values())}


def case_latency(run: Run, a) -> dict:
    light, heavy = run.uids
    span = a.warmup + a.seconds + 5
    run.sessions.append(session(heavy, lambda: busy(32, span)))
    run.start_daemon()
    time.sleep(a.warmup)
    r, w = os.pipe()
    pid = session(light, lambda: probe(a.seconds, w))
    os.close(w)
    with os.fdopen(r) as f:
        late = json.loads(f.read() or "[]")
    os.waitpid(pid, 0)
    if not late:
        raise RuntimeError("the probe reported nothing")
    q = statistics.quantiles(late, n=100)
    return {"p50": q[49], "p99": q[98], "max": max(late), "wakeups": len(late)}


def case_restart(run: Run, a) -> dict:
    counts = [1, 2, 3, 4, 5, 6, 7, 8, 2, 6]
    uids = set(run.uids)
    span = 2 * a.warmup + 2 * a.seconds + 10
    for i, (uid, n) in enumerate(zip(run.uids, counts, strict=True)):
        run.sessions.append(session(uid, lambda n=n, i=i: churn(n, span, a.seed + i)))
    run.start_daemon()
    time.sleep(a.warmup + a.seconds / 2)
    run.stop_daemon()  # SIGTERM in the middle of the run
    stale = stale_cgroups() + reniced(uids)
    run.start_daemon()
    t0 = time.monotonic()
    window = 3.0
    readings = [(time.monotonic(), cpu_by_uid(uids))]
    back = None
    while time.monotonic() - t0 < a.seconds + window:
        time.sleep(0.5)
        readings.append((time.monotonic(), cpu_by_uid(uids)))
        old = [r for r in readings if r[0] <= readings[-1][0] - window]
        if not old:
            continue
        got = split(old[-1][1], readings[-1][1])
        if max(abs(v - 100.0 / len(counts)) for v in got.values()) <= 3.0:
            back = readings[-1][0] - t0
            break
    return {"back within 3 pp after (s)": back, "stale after SIGTERM": len(stale)}


def case_groups(run: Run, a) -> dict:
    """The Groups issue's interactive member: Physics (r0 8 loops, r1 a fork-heavy loop)
    against Chem (r2 1 loop, r3 light and interactive), equal shares: the fair target is
    50/50 between the groups, r3 keeping what it uses."""
    span = a.warmup + a.seconds + 5
    u1, u2, u3, u4 = run.uids
    run.sessions.append(session(u1, lambda: busy(8, span)))
    run.sessions.append(session(u2, lambda: fork_loops(1, span, a.seed)))
    run.sessions.append(session(u3, lambda: busy(1, span)))
    run.start_daemon()
    r, w = os.pipe()
    run.sessions.append(session(u4, lambda: interactive(a.warmup + a.seconds, w)))
    os.close(w)
    got, daemon = measure(run, set(run.uids), a.warmup, a.seconds)
    with os.fdopen(r) as f:
        late = json.loads(f.read() or "[]")
    q = statistics.quantiles(late, n=100) if len(late) > 1 else [float("nan")] * 99
    physics = got[u1] + got[u2]
    return {
        "dev": abs(physics - 50.0),
        "Physics %": physics,
        "r3 %": got[u4],
        "p99": q[98],
        "daemon": daemon,
        "split": [round(got[u], 1) for u in run.uids],
    }


CASES = {
    "churn": (case_churn, 10),
    "fork": (case_fork, 2),
    "many": (case_many, 100),
    "latency": (case_latency, 2),
    "restart": (case_restart, 10),
    "groups": (case_groups, 4),
}
#: The groups of a case's UDB (group -> its users' indices); a case not listed has none.
CASE_GROUPS = {"groups": {"Physics": [0, 1], "Chem": [2, 3]}}


def summary(values: list[float | None]) -> str:
    v = [x for x in values if x is not None]
    if not v:
        return "n/a"
    return f"{statistics.median(v):.2f} [{min(v):.2f}..{max(v):.2f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    ap.add_argument("--enforcers", default="baseline,cgroup1,nice", help="baseline = no daemon")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window (s)")
    ap.add_argument("--warmup", type=float, default=10.0, help="before measuring (s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--delta", type=float, default=1.0, help="the daemon's delta (s)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sessions", action="store_true", help="each user in its own session")
    a = ap.parse_args()
    SESSIONS["on"] = a.sessions
    if os.geteuid() != 0:
        print("bench_real.py skipped: needs root (setuid sessions, cgroups, renicing)")
        return 0
    if other_daemons():
        print(f"bench_real.py skipped: a shrdaemon already enforces here ({other_daemons()[0]})")
        return 0
    stop = {"now": False}

    def on_term(signum, _frame):
        stop["now"] = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    load = os.getloadavg()
    print(
        f"{os.cpu_count()} CPUs, load average {load[0]:.1f} at start; window {a.seconds:g} s "
        f"after {a.warmup:g} s warm-up, {a.repeats} repeats, delta {a.delta:g} s, half-life 10 s, "
        f"users {'in sessions of their own' if a.sessions else 'in one session'}"
    )
    with machine_lock():
        for name in a.cases.split(","):
            fn, users = CASES[name]
            results: dict[str, list[dict]] = {}
            for enforcer in a.enforcers.split(","):
                if name == "restart" and enforcer == "baseline":
                    continue
                for rep in range(a.repeats):
                    with tempfile.TemporaryDirectory(prefix="bench-real-") as tmp:
                        uids = [FIRST_UID + k for k in range(users)]
                        groups = CASE_GROUPS.get(name, {})
                        run = Run(enforcer, Path(tmp), uids, a.delta, groups)
                        run.udb()
                        try:
                            results.setdefault(enforcer, []).append(fn(run, a))
                        finally:
                            run.close()
                    print(f"  {name} {enforcer} #{rep + 1}: {results[enforcer][-1]}", flush=True)
            print(f"{name}: median [range] over {a.repeats} repeats")
            for enforcer, rs in results.items():
                keys = [k for k in rs[0] if k != "split"]
                cells = ", ".join(f"{k} {summary([r[k] for r in rs])}" for k in keys)
                print(f"  {enforcer:<8} {cells}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
