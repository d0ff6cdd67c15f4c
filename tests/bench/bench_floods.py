"""shrdaemon's socket under floods, as an unprivileged user makes them (run as root: the
clients are setuid children, tests/asuser.py; tests/floods.py).

Starts `shrdaemon --enforcer none` on a UDB of --users users, and prints:
- another user's latency for `hello` (median and worst of 15, and how many failed)
  alone, and while one uid connects and hangs up as fast as it can for --seconds,
  with the ratio of the medians; the connections the flood made and the bytes it
  added to the daemon's log;
- the daemon's RSS before, at its peak and after one uid asked for the UDB on 64
  connections and read no reply (the size of one reply too).
Run: python tests/bench/bench_floods.py [--users 100000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from asuser import UIDS, forked, remove, shared_dir  # noqa: E402
from floods import ask, flood, unread_udb  # noqa: E402

from udb import directives  # noqa: E402
from udb.remote import call  # noqa: E402
from udb.session import dispose_all, open_udb  # noqa: E402

FLOODER, OTHER = UIDS[0], UIDS[1]


def make_udb(path: Path, users: int) -> None:
    groups = max(1, users // 1000)
    text = "".join(
        f"create:g{g}:uid:{100000 + g}:shflags:040000:shares:1:\n" for g in range(groups)
    )
    text += "".join(
        f"create:u{i}:uid:{200000 + i}:resgrp:g{i % groups}:shares:1:comment:user {i}:\n"
        for i in range(users)
    )
    directives.run(open_udb(f"sqlite:///{path}", create=True), directives.parse(text, "bench"))
    dispose_all()


def start(base: Path) -> subprocess.Popen:
    sock, db, log = base / "run" / "s.sock", base / "private" / "udb.sqlite", base / "log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fairshare.cli.shrdaemon", "--enforcer", "none"]
        + ["--udb", str(db), "--socket", str(sock), "--log-file", str(log)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            call(str(sock), "hello", wait=2)
            return proc
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.2)
    raise SystemExit("shrdaemon did not come up")


def latencies(sock: str, seconds: float) -> tuple[list[float | None], int]:
    """The other user's 15 requests while FLOODER floods for `seconds` (0: no flood),
    and the connections the flood made."""
    made = [0]
    flooder = threading.Thread(
        target=lambda: made.__setitem__(0, forked(lambda: flood(sock, seconds), uid=FLOODER))
    )
    if seconds:
        flooder.start()
        time.sleep(0.5)
    took = forked(lambda: ask(sock, 15, max(seconds - 1, 3) / 15), uid=OTHER)
    if seconds:
        flooder.join()
    return took, made[0]


def summary(took: list[float | None]) -> str:
    ok = [t for t in took if t is not None]
    med = statistics.median(ok) if ok else float("nan")
    worst = max(ok) if ok else float("nan")
    failed = len(took) - len(ok)
    return f"median {1000 * med:8.2f} ms  worst {1000 * worst:8.2f} ms  failed {failed}"


def rss_under_unread(proc: subprocess.Popen, sock: str, hold: float) -> tuple[int, int, int]:
    """The daemon's RSS (bytes) before, at its peak while FLOODER holds 64 unread `udb`
    replies for `hold` s, and 2 s after it let go."""
    p = psutil.Process(proc.pid)
    before = p.memory_info().rss
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], p.memory_info().rss)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()

    def hog():
        held = unread_udb(sock, 64)
        time.sleep(hold)
        for s in held:
            s.close()
        return 0

    forked(hog, uid=FLOODER)
    time.sleep(2)
    done.set()
    sampler.join()
    return before, peak[0], p.memory_info().rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=20000)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the flooder and the other user are setuid children")
    base = shared_dir()
    base.chmod(0o755)
    (base / "private").mkdir(mode=0o700)
    (base / "run").mkdir(mode=0o755)
    make_udb(base / "private" / "udb.sqlite", args.users)
    proc = start(base)
    sock, log = str(base / "run" / "s.sock"), base / "log"
    try:
        size = len(base64.b64decode(call(sock, "udb")["image"]))
        alone, _ = latencies(sock, 0)
        logged = log.stat().st_size
        flooded, made = latencies(sock, args.seconds)
        grew = log.stat().st_size - logged
        ratio = statistics.median([t for t in flooded if t] or [float("nan")]) / statistics.median(
            [t for t in alone if t]
        )
        print(f"other user's hello alone:        {summary(alone)}")
        print(f"other user's hello under flood:  {summary(flooded)}  ratio {ratio:.2f}")
        print(
            f"flood: {made} connections in {args.seconds:g} s, log +{grew} bytes "
            f"({grew / args.seconds * 10:.0f} bytes per 10 s)"
        )
        before, peak, after = rss_under_unread(proc, sock, 12.0)
        print(
            f"udb reply {size / 1e6:.1f} MB ({args.users} users); daemon RSS before "
            f"{before / 1e6:.0f} MB, peak under 64 unread replies {peak / 1e6:.0f} MB "
            f"({peak / before:.2f}x), after {after / 1e6:.0f} MB"
        )
    finally:
        proc.terminate()
        proc.wait(30)
        remove(base)


if __name__ == "__main__":
    main()
