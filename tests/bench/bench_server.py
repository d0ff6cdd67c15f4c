"""shrdaemon's socket: what a request costs, and what serving costs the cycle.

For UDBs of 1,000, 10,000 and 100,000 users, starts the socket server
(fairshare.server.server) in this process, as shrdaemon does, and prints medians of:
a `hello` and a `cycle` request (connect, ask, answer); a `udb` request (the
filtered image made, sent and opened by the client) with the image's size; and a
stand-in for the scheduling cycle (numpy work in the main thread) alone and while
a client process asks for the UDB without pause, with the ratio of the two (on a
2-core machine the client competes for the CPUs too, so the ratio is an upper bound
on what serving costs the cycle).
Run: python tests/bench/bench_server.py [--sizes 1000,10000]
"""

from __future__ import annotations

import argparse
import base64
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fairshare.daemon.sessions import SessionAccounts
from fairshare.server.server import Server
from udb import directives
from udb.image import open_image
from udb.remote import call
from udb.session import open_udb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tree import median_time  # noqa: E402

#: Client processes asking for the UDB without pause during the "under load" cycles.
CLIENTS = 1


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


def fake_cycle() -> float:
    """A stand-in for one scheduling cycle: numpy work in this thread; seconds taken."""
    t0 = time.perf_counter()
    a = np.random.default_rng(1).random(200_000)
    for _ in range(40):
        a = np.sort(a) * 1.0000001
    return time.perf_counter() - t0


def storm(sock: str, stop) -> None:
    """A client asking for the UDB without pause until `stop` is set."""
    while not stop.is_set():
        call(sock, "udb", wait=120)


def measure(users: int, repeat: int) -> tuple[float, ...]:
    """(hello s, cycle s, udb s, image bytes, cycle alone s, cycle under load s)."""
    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "udb.sqlite"
        make_udb(db, users)
        engine = open_udb(f"sqlite:///{db}")
        sock = str(Path(d) / "s.sock")
        srv = Server(sock, engine, "bench", SessionAccounts(), Path(d) / "auth")
        srv.start()
        try:
            hello = median_time(lambda: call(sock, "hello"), 50)
            cyc = median_time(lambda: call(sock, "cycle"), 50)
            size = len(base64.b64decode(call(sock, "udb")["image"]))
            udb = median_time(
                lambda: open_image(base64.b64decode(call(sock, "udb")["image"])).dispose(), repeat
            )
            alone = statistics.median(fake_cycle() for _ in range(repeat))
            # The clients are other processes, as they are for shrdaemon.
            ctx = multiprocessing.get_context("fork")
            stop = ctx.Event()
            clients = [ctx.Process(target=storm, args=(sock, stop)) for _ in range(CLIENTS)]
            for c in clients:
                c.start()
            time.sleep(0.5)
            loaded = statistics.median(fake_cycle() for _ in range(repeat))
            stop.set()
            for c in clients:
                c.join()
        finally:
            srv.stop()
    return hello, cyc, udb, size, alone, loaded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print("users    hello ms  cycle ms  udb ms   image MB  cycle alone s  under load s  ratio")
    for users in (int(x) for x in args.sizes.split(",")):
        hello, cyc, udb, size, alone, loaded = measure(users, args.repeat)
        print(
            f"{users:<8d} {1000 * hello:8.2f}  {1000 * cyc:8.2f}  {1000 * udb:7.1f}  "
            f"{size / 1e6:8.2f}  {alone:13.3f}  {loaded:12.3f}  {loaded / alone:5.2f}"
        )


if __name__ == "__main__":
    main()
