"""Benchmark: per-user fairness on this machine, the suite against what an administrator
would run instead, side by side in one invocation (docs/benchmarks.md).

Run as root from the project directory (it says why and stops otherwise):
``PYTHONPATH=$PWD python3 tests/bench/bench_real.py [--workloads ...] [--baselines ...]
[--seconds S] [--warmup W] [--alone A] [--repeats N] [--json PATH] [--plots DIR]``.

Baselines: `none` (plain Linux, no daemon); `weights` (a cgroup per user at equal
weight, as systemd's user slices give: v1 cpu.shares or v2 cpu.weight, under the
bench's own `fairbench` cgroup); `caps` (a cgroup per user whose CPU quota is an
equal fraction of the machine, --cap, a third by default as Brown's Arbiter sets:
cpu.cfs_quota_us or cpu.max); `suite-ENFORCER` (shrdaemon under each enforcer this
machine offers: systemd and cgroup2, or cgroup1; and nice).

Workloads (tests/fairbench.py WORKLOADS): steady, threads, build, churn, groups, tree3,
history, latency; and, when asked for, many (100 users: the daemon's cost at scale).
Each user is a process group forked from this process and setuid to a test uid
63000 + i with no passwd entry; its CPU is measured from the kernel (the sum of
utime + stime + cutime + cstime of its processes, zombies too), every second.
The figures, against the hierarchical max-min target of the workload's tree and
demands (fairshare.core.maxmin): the largest user and group deviation (pp), Jain's
index over delivered / target, the machine's CPU left idle while the users wanted
more, the light user's wake-up lateness, the daemon's own CPU, and for history the
largest gap per bin to shrsim's prediction (fairshare.sim) after the first bin.

Each case (workload, baseline, repeat) holds the host's real-machine test lock
(tests/machine_lock.py) while it runs, and refuses to start while another shrdaemon
enforces.  Every process, cgroup (the suite's and the baselines'), quota and nice value
is cleaned up at the end of each case, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import fairbench as fb  # noqa: E402  (tests/fairbench.py)
from machine_lock import (  # noqa: E402  (tests/machine_lock.py)
    cpu_by_uid,
    machine_lock,
    other_daemons,
    remove_fairshare_cgroups,
)

from fairshare.core.consts import Consts  # noqa: E402
from fairshare.enforce.detect import cgroup1_cpu, cgroup2_cpu, cgroup_mounts  # noqa: E402
from fairshare.store.config import save_consts  # noqa: E402
from udb.models import Entry  # noqa: E402
from udb.session import open_udb, write_session  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1
HALFLIFE = 10.0

# -- what the users run ------------------------------------------------------------------------


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


def busy(n: int) -> None:
    """`n` CPU-bound processes until the case kills the session (0: an idle login)."""
    for _ in range(n):
        child(lambda: burn(None))
    while True:
        signal.pause()


def churn(n: int, seed: int) -> None:
    """`n` CPU-bound processes, each replaced by a new one after 1 to 10 s."""
    rng = random.Random(seed)
    kids = {child(lambda: burn(None)): time.monotonic() + rng.uniform(1, 10) for _ in range(n)}
    while True:
        pid, due = min(kids.items(), key=lambda kv: kv[1])
        time.sleep(max(due - time.monotonic(), 0.0))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        del kids[pid]
        kids[child(lambda: burn(None))] = time.monotonic() + rng.uniform(1, 10)


def fork_loop(seed: int) -> None:
    """One short CPU-bound child (20 ms to 1 s) after another."""
    rng = random.Random(seed)
    while True:
        os.waitpid(child(lambda: burn(rng.uniform(0.02, 1.0))), 0)


def light(out: int, command: bool) -> None:
    """Sleep 10 ms again and again (with `command`, also 5 ms of CPU every half second,
    an interactive user's small commands); write (when, how late in ms) of each wake-up
    to fd `out` when SIGTERM comes."""
    late: list[tuple[float, float]] = []

    def report(*_):
        data = json.dumps(late).encode()
        while data:
            data = data[os.write(out, data) :]
        os._exit(0)

    signal.signal(signal.SIGTERM, report)
    next_command = time.monotonic()
    while True:
        if command and time.monotonic() >= next_command:
            burn(0.005)
            next_command += 0.5
        t = time.monotonic()
        time.sleep(fb.PROBE_SLEEP)
        now = time.monotonic()
        late.append((now, (now - t - fb.PROBE_SLEEP) * 1e3))


def build(project: Path) -> None:
    """`make -j8` of `project` from clean, again and again."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(project)}
    while True:
        subprocess.run(["make", "-s", "clean"], cwd=project, env=env, check=False)
        subprocess.run(["make", "-s", "-j8"], cwd=project, env=env, check=False)


SPIN_C = r"""
#include <pthread.h>
#include <stdlib.h>
static void *spin(void *arg) { volatile unsigned long x = 0; for (;;) x++; return arg; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    pthread_t t;
    for (int i = 1; i < n; i++) pthread_create(&t, 0, spin, 0);
    spin(0);
}
"""


def compile_spin(tools: Path) -> Path:
    """The thread spinner (`spin N`: N threads burning CPU in parallel; C, as Python's
    threads hold the GIL), built with the machine's gcc."""
    (tools / "spin.c").write_text(SPIN_C)
    subprocess.run(
        ["gcc", "-O1", "-pthread", "-o", str(tools / "spin"), str(tools / "spin.c")], check=True
    )
    return tools / "spin"


def make_project(where: Path, files: int, uid: int) -> Path:
    """A C project of `files` generated sources and a Makefile, owned by `uid`."""
    src = where / "src"
    src.mkdir(parents=True)
    for k in range(files):
        body = "\n".join(
            f"    for (int i{j} = 0; i{j} < n; i{j}++) acc = acc * {j + 3} + (acc >> {j % 7 + 1})"
            f" ^ (unsigned)i{j};"
            for j in range(12)
        )
        (src / f"f{k}.c").write_text(
            f"unsigned f{k}(unsigned n) {{\n    unsigned acc = {k};\n{body}\n    return acc;\n}}\n"
        )
    calls = "".join(f"unsigned f{k}(unsigned); " for k in range(files))
    total = " + ".join(f"f{k}(3)" for k in range(files))
    (src / "main.c").write_text(f"{calls}\nint main(void) {{ return (int)({total}) & 1; }}\n")
    (where / "Makefile").write_text(
        "OBJS := $(patsubst %.c,%.o,$(wildcard src/*.c))\n"
        "prog: $(OBJS)\n\tgcc -o $@ $^\n"
        "%.o: %.c\n\tgcc -O2 -c -o $@ $<\n"
        "clean:\n\trm -f src/*.o prog\n"
    )
    for here, _dirs, names in os.walk(where):
        os.chown(here, uid, uid)
        for n in names:
            os.chown(os.path.join(here, n), uid, uid)
    return where


# -- the baselines' cgroups -------------------------------------------------------------------


class BenchCgroups:
    """A cgroup per user under the bench's own `fairbench` cgroup: equal weights or equal
    CPU quotas, on cgroup v1's cpu hierarchy or v2 (whichever has the cpu controller)."""

    PERIOD = 100_000  # us

    def __init__(self) -> None:
        mounts = cgroup_mounts(Path("/proc/self/mounts").read_text())
        v2, _ = cgroup2_cpu(mounts)
        v1, _ = cgroup1_cpu(mounts)
        self.v2 = v2 is not None
        mount = v2 if v2 is not None else v1
        self.top = Path(mount) / "fairbench" if mount is not None else None

    def make(self, uid: int, quota: float | None) -> Path:
        """The cgroup of `uid`: equal weight, or a quota of `quota` CPUs."""
        if self.top is None:
            raise RuntimeError("no cgroup hierarchy with the cpu controller on this machine")
        self.top.mkdir(exist_ok=True)
        if self.v2:
            (self.top.parent / "cgroup.subtree_control").write_text("+cpu")
            (self.top / "cgroup.subtree_control").write_text("+cpu")
        cg = self.top / f"u{uid}"
        cg.mkdir(exist_ok=True)
        if self.v2:
            (cg / "cpu.weight").write_text("100")
            q = "max" if quota is None else str(int(quota * self.PERIOD))
            (cg / "cpu.max").write_text(f"{q} {self.PERIOD}")
        else:
            (cg / "cpu.shares").write_text("1024")
            (cg / "cpu.cfs_period_us").write_text(str(self.PERIOD))
            (cg / "cpu.cfs_quota_us").write_text(
                "-1" if quota is None else str(int(quota * self.PERIOD))
            )
        return cg

    def remove(self) -> None:
        """Every process back to the root cgroup, the cgroups removed."""
        if self.top is None or not self.top.is_dir():
            return
        for here, _dirs, _files in os.walk(self.top, topdown=False):
            cg = Path(here)
            for _ in range(3):
                try:
                    pids = (cg / "cgroup.procs").read_text().split()
                except OSError:
                    break
                for pid in pids:
                    try:
                        (self.top.parent / "cgroup.procs").write_text(pid)
                    except OSError:
                        pass
            try:
                cg.rmdir()
            except OSError as err:
                print(f"cannot remove {cg}: {err.strerror}", file=sys.stderr)


# -- one case ---------------------------------------------------------------------------------


@dataclass
class Case:
    """One workload under one baseline: its UDB, cgroups, daemon and sessions."""

    w: fb.Workload
    base: str
    tmp: Path
    a: argparse.Namespace
    tools: Path
    cgroups: BenchCgroups
    daemon: subprocess.Popen | None = None
    url: str = ""
    project: Path | None = None
    sessions: dict[str, int] = field(default_factory=dict)
    pipes: dict[str, int] = field(default_factory=dict)

    def udb(self) -> str:
        url = f"sqlite:///{self.tmp / 'udb.sqlite'}"
        engine = open_udb(url, create=True)
        with write_session(engine) as s:
            for r in self.w.rows():
                s.add(
                    Entry(
                        name=r.name, uid=r.uid, shares=r.shares, resgrp=r.resgrp, shflags=r.shflags
                    )
                )
            save_consts(s, consts(self.a))
        engine.dispose()
        return url

    def prepare(self) -> None:
        """What takes time before the clock starts: the UDB, the build's project."""
        self.url = self.udb()
        if self.w.name == "build":
            self.tmp.chmod(0o711)  # the builder (a test uid) passes through to its project
            self.project = make_project(self.tmp / "build", self.a.files, self.w.uid("r0"))

    def start_daemon(self) -> None:
        if not self.base.startswith("suite-"):
            return
        log = (self.tmp / "shrdaemon.log").open("a")
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "fairshare.cli.shrdaemon", "--udb", self.url]
            + ["--enforcer", self.base.removeprefix("suite-")],
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # as under systemd: not in a test session
            preexec_fn=lambda: _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM),
        )

    def program(self, user: str):
        """What `user` runs in this workload (a function run in its session)."""
        w, i, seed = self.w.name, self.w.users.index(user), self.a.seed
        if user == self.w.light:
            r, wfd = os.pipe()
            self.pipes[user] = r
            self.pipes["write"] = wfd
            return lambda: (os.close(r), light(wfd, command=w == "groups"))
        if w == "churn":
            return lambda: churn(fb.CHURN_PROCS[i], seed + i)
        if w == "threads" and user == "r0":
            spin = str(self.tools / "spin")
            return lambda: os.execv(spin, [spin, "16"])
        if w == "build" and user == "r0":
            return lambda: build(self.project)
        if w == "groups" and user == "r1":
            return lambda: fork_loop(seed)
        return lambda: busy(int(self.w.demand[user]))

    def start_session(self, user: str) -> None:
        uid, fn = self.w.uid(user), self.program(user)
        cg = None
        if self.base in ("weights", "caps"):
            quota = self.a.cap * (os.cpu_count() or 1) if self.base == "caps" else None
            cg = self.cgroups.make(uid, quota)
        pid = os.fork()
        if pid == 0:
            try:
                if cg is not None:
                    (cg / "cgroup.procs").write_text(str(os.getpid()))
                os.setsid() if self.a.sessions else os.setpgid(0, 0)
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                die_with_parent()
                fn()
            finally:
                os._exit(0)
        self.sessions[user] = pid
        if "write" in self.pipes:  # the light user's: only its session holds it
            os.close(self.pipes.pop("write"))

    def lateness(self, since: float) -> list[float]:
        """The light user's wake-up lateness (ms) from `since` (monotonic)."""
        user = self.w.light
        if user is None or user not in self.sessions:
            return []
        os.kill(self.sessions[user], signal.SIGTERM)
        with os.fdopen(self.pipes.pop(user)) as f:
            text = f.read()
        return [late for when, late in json.loads(text or "[]") if when >= since]

    def close(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        for pid in self.sessions.values():
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in self.sessions.values():
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        for fd in self.pipes.values():
            os.close(fd)
        self.pipes.clear()
        kill_uids({self.w.uid(u) for u in self.w.users})
        self.cgroups.remove()
        remove_fairshare_cgroups()
        restore_autogroup()


def restore_autogroup() -> None:
    """The bench's own session back at autogroup nice 0: without --sessions the users
    share it, and the nice enforcer renices sessions (its teardown restores them; this
    is for a daemon that died without one)."""
    group = Path("/proc/self/autogroup")
    try:
        if group.read_text().split()[-1] != "0":
            group.write_text("0")
    except OSError:
        pass


def kill_uids(uids: set[int], wait: float = 10.0) -> None:
    """SIGKILL every process left of the test uids (nothing else runs as them), again
    until none is left but zombies (up to `wait` s: a killed process takes a moment)."""
    end = time.monotonic() + wait
    while True:
        left = 0
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.stat(f"/proc/{name}").st_uid in uids:
                        os.kill(int(name), signal.SIGKILL)
                        stat = Path(f"/proc/{name}/stat").read_bytes()
                        left += stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"

                except OSError:
                    pass
        if not left or time.monotonic() > end:
            return
        time.sleep(0.1)


def consts(a: argparse.Namespace) -> Consts:
    """The suite's constants: the README's (`shradmin -F06 -X3.0 -Y.85 -Z .002`:
    ADJGROUPS and LIMSHARE, the groups' model) unless --flags says otherwise, at the
    bench's short half-life."""
    return Consts(
        flags=int(a.flags, 8),
        maxushare=3.0,
        mingshare=0.85,
        sharemin=0.002,
        delta=a.delta,
        halflife=HALFLIFE,
        policy=a.policy,
    )


def idle_cpu() -> float:
    """The machine's idle CPU seconds so far (/proc/stat: idle + iowait)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return (int(fields[4]) + int(fields[5])) / CLK_TCK


def process_cpu(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    rest = stat[stat.rindex(b")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def run_case(c: Case) -> dict:
    """Start the users (each at its start), the daemon, read every user's CPU every
    `--sample` s until the window ends; the figures and the series."""
    a, w = c.a, c.w
    begin = w.start.get("r1", 0.0) if w.name == "history" else a.warmup
    end = begin + a.seconds
    uids = {w.uid(u): u for u in w.users}
    t0 = time.monotonic()
    pending = sorted(w.users, key=lambda u: w.start.get(u, 0.0))
    series = fb.Series([], [], [], start=begin)
    daemon0 = None
    while True:
        now = time.monotonic() - t0
        while pending and w.start.get(pending[0], 0.0) <= now:
            c.start_session(pending.pop(0))
        if not series.times:  # after the first users: the daemon sees them from its start
            c.start_daemon()
        cpu = cpu_by_uid(set(uids))
        series.times.append(round(time.monotonic() - t0, 3))
        series.cpu.append({uids[k]: v for k, v in cpu.items()})
        series.idle.append(idle_cpu())
        if daemon0 is None and c.daemon is not None and now >= begin:
            daemon0 = (now, process_cpu(c.daemon.pid))
        if now >= end:
            break
        if c.daemon is not None and c.daemon.poll() is not None:
            raise RuntimeError(f"the daemon died: {(c.tmp / 'shrdaemon.log').read_text()[-2000:]}")
        time.sleep(max(min(a.sample, end - now), 0.05))
    out = fb.figures(w, series, os.cpu_count() or 1)
    if daemon0 is not None:
        out["daemon_pct"] = 100.0 * (process_cpu(c.daemon.pid) - daemon0[1]) / (now - daemon0[0])
    out.update(fb.lateness(c.lateness(t0 + begin)))
    step = min(60.0, max(a.seconds / 4, 1.0))
    ser = fb.binned(w, series, os.cpu_count() or 1, step)
    ser["start"] = begin
    if w.name == "history":
        sim = fb.simulate(w, os.cpu_count() or 1, end, consts(a), sim_enforcer(c.base))
        gaps = fb.sim_gap(ser, sim, begin + step)
        out["sim_gap_pp"] = max(gaps) if gaps else None
        ser["sim"] = sim
    return {"figures": out, "series": ser}


def sim_enforcer(base: str) -> str:
    """shrsim's enforcer model for the suite under `base` (the baselines are held to
    the suite's promise under cgroups)."""
    return "nice" if base == "suite-nice" else "cgroup"


# -- the run ----------------------------------------------------------------------------------


def offered_baselines() -> list[str]:
    """none, weights, caps, and the suite under each enforcer this machine offers."""
    mounts = cgroup_mounts(Path("/proc/self/mounts").read_text())
    out = ["none"]
    if cgroup2_cpu(mounts)[0] is not None or cgroup1_cpu(mounts)[0] is not None:
        out += ["weights", "caps"]
    if cgroup2_cpu(mounts)[0] is not None:
        if Path("/run/systemd/system").is_dir():  # systemd is PID 1 (detect.detect)
            out.append("suite-systemd")
        out.append("suite-cgroup2")
    if cgroup1_cpu(mounts)[0] is not None:
        out.append("suite-cgroup1")
    return out + ["suite-nice"]


def estimate(a: argparse.Namespace, workloads: list[str], baselines: list[str]) -> float:
    """Seconds the run should take: each case's warm-up (history: the alone phase) and
    window, plus about 4 s of starting and stopping."""
    per = sum((a.alone if w == "history" else a.warmup) + a.seconds + 4 for w in workloads)
    return per * len(baselines) * a.repeats


def duration(seconds: float) -> str:
    """`seconds` for a person: "40 s", "12 min", "2 h 41 min"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds // 3600:.0f} h {seconds % 3600 / 60:.0f} min"


def options() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--workloads",
        default=",".join(fb.DEFAULT_WORKLOADS),
        help=f"comma-separated, of {', '.join(fb.WORKLOADS)}",
    )
    ap.add_argument("--baselines", default="", help="comma-separated (default: all offered)")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window (s)")
    ap.add_argument("--warmup", type=float, default=10.0, help="before measuring (s)")
    ap.add_argument("--alone", type=float, default=60.0, help="history: r0 alone first (s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--delta", type=float, default=1.0, help="the daemon's delta (s)")
    ap.add_argument("--policy", default="unicos", help="the suite's fair-share policy")
    ap.add_argument(
        "--flags",
        default="006",
        help="the suite's shflags, octal (006: ADJGROUPS and LIMSHARE, as the README's "
        "shradmin -F06; 0 is Kay-Lauder's flat model, fair between users, not groups)",
    )
    ap.add_argument("--cap", type=float, default=1 / 3, help="caps: each user's fraction")
    ap.add_argument("--files", type=int, default=300, help="build: the project's C files")
    ap.add_argument("--sample", type=float, default=1.0, help="reading interval (s)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sessions", action="store_true", help="each user in its own session")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--plots", metavar="DIR", help="write a PNG chart per workload")
    a = ap.parse_args()
    a.workloads = a.workloads.split(",")
    for w in a.workloads:
        if w not in fb.WORKLOADS:
            ap.error(f"--workloads: expected some of {', '.join(fb.WORKLOADS)}, got {w!r}")
    return a


FIGURES = (  # (key, column, format)
    ("user_dev_pp", "user dev pp", ".1f"),
    ("group_dev_pp", "group dev pp", ".1f"),
    ("jain", "Jain", ".3f"),
    ("idle_pct", "idle while wanted %", ".1f"),
    ("p50_ms", "p50 late ms", ".2f"),
    ("p99_ms", "p99 late ms", ".2f"),
    ("daemon_pct", "daemon % core", ".2f"),
    ("sim_gap_pp", "vs shrsim pp", ".1f"),
)


def cell(s: dict, fmt: str) -> str:
    if not s:
        return ""
    if s["min"] == s["max"]:
        return format(s["median"], fmt)
    return f"{s['median']:{fmt}} [{s['min']:{fmt}}..{s['max']:{fmt}}]"


def table(doc: dict) -> None:
    """The results as one rich table: a row per workload and baseline, median [range]."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title="median [range] over the repeats", show_lines=False)
    t.add_column("workload")
    t.add_column("baseline")
    for _k, col, _f in FIGURES:
        t.add_column(col, justify="right")
    for wname, wl in doc["workloads"].items():
        for k, (base, b) in enumerate(wl["baselines"].items()):
            t.add_row(
                wname if k == 0 else "",
                base,
                *(cell(b["figures"].get(key, {}), f) for key, _c, f in FIGURES),
                end_section=k == len(wl["baselines"]) - 1,
            )
    Console(width=200).print(t)


def run_one(w: fb.Workload, base: str, a, tools: Path, cgroups: BenchCgroups) -> dict:
    """One case, holding the machine lock; everything it started cleaned up after.
    While another shrdaemon enforces, it lets the lock go and waits (up to 5 minutes)."""
    for _ in range(15):
        with machine_lock():
            if not other_daemons():
                return run_locked(w, base, a, tools, cgroups)
        print(f"    waiting: a shrdaemon enforces here ({other_daemons()[:1]})", flush=True)
        time.sleep(20)
    raise SystemExit(f"stopped: a shrdaemon still enforces here ({other_daemons()[:1]})")


def run_locked(w: fb.Workload, base: str, a, tools: Path, cgroups: BenchCgroups) -> dict:
    """One case (the caller holds the lock), cleaned up after, also when interrupted."""
    with tempfile.TemporaryDirectory(prefix="bench-real-") as tmp:
        c = Case(w, base, Path(tmp), a, tools, cgroups)
        try:
            c.prepare()
            return run_case(c)
        finally:
            c.close()


def main() -> int:
    a = options()
    if os.geteuid() != 0:
        print("bench_real.py: needs root (setuid sessions, cgroups, renicing); not run")
        return 0
    offered = offered_baselines()
    baselines = a.baselines.split(",") if a.baselines else offered
    for b in baselines:
        if b not in offered:
            print(f"--baselines: {b!r} is not offered here; expected some of {', '.join(offered)}")
            return 2
    if other_daemons():
        print(f"bench_real.py: a shrdaemon already enforces here ({other_daemons()[0]}); not run")
        return 0

    def on_term(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    started, load = time.time(), os.getloadavg()
    cpus = os.cpu_count() or 1
    print(
        f"{cpus} CPUs, load average {load[0]:.1f}; {len(a.workloads)} workloads x "
        f"{len(baselines)} baselines ({', '.join(baselines)}) x {a.repeats} repeats, "
        f"window {a.seconds:g} s after {a.warmup:g} s (history: {a.alone:g} s alone); "
        f"this should take about {duration(estimate(a, a.workloads, baselines))}",
        flush=True,
    )
    runs: dict[str, dict[str, list[dict]]] = {}
    cgroups = BenchCgroups()
    tools = Path(tempfile.mkdtemp(prefix="bench-real-tools-"))
    try:
        tools.chmod(0o755)
        if "threads" in a.workloads:
            compile_spin(tools)
        for wname in a.workloads:
            w = fb.WORKLOADS[wname]
            if wname == "history":
                w = fb.with_start(w, "r1", a.alone)
            for base in baselines:
                for rep in range(a.repeats):
                    r = run_one(w, base, a, tools, cgroups)
                    runs.setdefault(wname, {}).setdefault(base, []).append(r)
                    shown = {k: round(v, 3) for k, v in r["figures"].items() if v is not None}
                    print(f"  {wname} {base} #{rep + 1}: {shown}", flush=True)
            if a.plots:
                Path(a.plots).mkdir(parents=True, exist_ok=True)
                series = {b: rs[0]["series"] for b, rs in runs[wname].items()}
                fb.chart(Path(a.plots) / f"{wname}.png", wname, series, note(w))
    except KeyboardInterrupt:
        print("interrupted: everything the bench started is cleaned up", file=sys.stderr)
        return 130
    finally:
        cgroups.remove()
        remove_fairshare_cgroups()
        shutil.rmtree(tools, ignore_errors=True)
    settings = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
        "host": os.uname().nodename,
        "kernel": os.uname().release,
        "cpus": cpus,
        "load_average": [round(x, 2) for x in load],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "seconds": a.seconds,
        "warmup": a.warmup,
        "alone": a.alone,
        "repeats": a.repeats,
        "delta": a.delta,
        "halflife": HALFLIFE,
        "policy": a.policy,
        "flags": a.flags,
        "cap": a.cap,
        "baselines": baselines,
        "took_s": round(time.time() - started, 1),
    }
    doc = fb.document(settings, runs)
    table(doc)
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=1))
    print(f"took {duration(settings['took_s'])}; load average {os.getloadavg()[0]:.1f} at the end")
    return 0


def note(w: fb.Workload) -> str:
    return " (dotted: shrsim's prediction)" if w.name == "history" else ""


if __name__ == "__main__":
    sys.exit(main())
