"""Benchmark: how quickly the daemon and the commands respond, the figures the pass/fail
suite no longer asserts (a test that fails when a loaded machine is slow is not a test of
the code).  Each figure is printed as the median and the worst of --repeats runs, beside
the limit a test used to assert (the goal):

- stop: SIGTERM to exit of `shrdaemon --enforcer none` (delta 0.5 s) that has published
  (goal < 2 s; tests/system/test_daemon_process.py, test_daemon_real.py);
- dead: shrview on a table whose daemon died, 64 s old (goal < 3 s: no waiting;
  tests/integration/test_shrview.py);
- repeat: `shrview -r 3 --json` while a daemon publishes a cycle every 0.3 s (goal < 6 s:
  each display after the next cycle, never the 1.5-delta timeout; test_shrview.py);
- readers: a read and `udbsee` while a writer holds its transaction (goal < 5 s;
  tests/integration/test_session.py);
- fuzz: 10,000 fuzzed directive lines parsed and applied in test mode (goal < 60 s;
  tests/integration/test_faults.py);
- refuse: shrsim refusing a scenario with delta 1e-300 (goal < 10 s; test_faults.py);
- hostile: a shrdaemon process (delta 1 s) under tests/system/test_access.py's hostile
  clients: the burst of 1,000 requests from 50 clients, and the worst gap between two
  published cycles meanwhile (goal <= 2 deltas).  Needs no root.

Run from the project directory:
``PYTHONPATH=$PWD python3 tests/bench/bench_responsiveness.py [--only stop,dead,...]
[--repeats N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the suite's helpers

from click.testing import CliRunner  # noqa: E402
from sqlalchemy import update  # noqa: E402

from fairshare.cli.shrsim import main as shrsim  # noqa: E402
from fairshare.cli.shrview import main as shrview  # noqa: E402
from fairshare.core.consts import Consts  # noqa: E402
from fairshare.store.config import save_consts  # noqa: E402
from fairshare.store.published import LnodeStore  # noqa: E402
from udb import directives  # noqa: E402
from udb.cli.udbsee import main as udbsee  # noqa: E402
from udb.errors import UdbError  # noqa: E402
from udb.models import Entry  # noqa: E402
from udb.session import dispose_all, open_udb, read_session, write_session  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ACME = ROOT / "examples" / "acme" / "acme.udb"


def acme_udb(directory: Path) -> str:
    url = f"sqlite:///{directory / 'udb.sqlite'}"
    directives.run(open_udb(url, create=True), directives.parse(ACME.read_text(), str(ACME)))
    return url


def wait_for(predicate, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


# -- one run of each figure: seconds (or a dict of figures) ----------------------------------


def stop(tmp: Path) -> float:
    url = acme_udb(tmp)
    engine = open_udb(url)
    with write_session(engine) as s:
        save_consts(s, Consts(delta=0.5))
    d = subprocess.Popen(
        [sys.executable, "-m", "fairshare.cli.shrdaemon", "--enforcer", "none", "--udb", url],
        env=dict(os.environ, FAIRSHARE_SOCKET=str(tmp / "s.sock")),
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert wait_for(lambda: LnodeStore(engine).published_cycle() is not None)
        t0 = time.monotonic()
        d.send_signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
        return time.monotonic() - t0
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()


def dead(tmp: Path) -> float:
    from integration.test_shrview import EPOCH, simulated

    url, daemon = simulated(tmp)
    daemon.start()
    daemon.step()  # cycle 1 at EPOCH, then it "dies"
    t0 = time.monotonic()
    r = CliRunner().invoke(shrview, ["--udb", url, "--now", str(EPOCH + 64)])
    took = time.monotonic() - t0
    assert r.exit_code == 0 and "did not stop cleanly" in r.stderr, r.output
    return took


def repeat(tmp: Path) -> float:
    from integration.test_shrview import EPOCH, simulated

    url, daemon = simulated(tmp)
    daemon.start()
    daemon.step()
    halt = threading.Event()

    def cycles() -> None:
        while not halt.wait(0.3):
            daemon.step()

    ticker = threading.Thread(target=cycles)
    ticker.start()
    try:
        t0 = time.monotonic()
        r = CliRunner().invoke(
            shrview, ["--udb", url, "--now", str(EPOCH + 4), "-r", "3", "--json"]
        )
        took = time.monotonic() - t0
    finally:
        halt.set()
        ticker.join()
        daemon.shutdown()
    assert r.exit_code == 0, r.output
    return took


def readers(tmp: Path) -> float:
    url = acme_udb(tmp)
    engine = open_udb(url)
    written, release = threading.Event(), threading.Event()

    def writer():
        with write_session(engine) as s:
            s.execute(update(Entry).where(Entry.name == "u1").values(shares=99))
            written.set()
            release.wait(30)

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert written.wait(10)
        t0 = time.monotonic()
        with read_session(engine) as s:
            s.query(Entry).filter(Entry.name == "u1").one()
        r = CliRunner().invoke(udbsee, ["--udb", url, "-f", "shares", "u1"])
        took = time.monotonic() - t0
        assert r.stdout == "create:u1:shares:25:\n", r.output
        return took
    finally:
        release.set()
        t.join()


def fuzz(tmp: Path) -> float:
    from integration.test_faults import fuzz_lines

    engine = open_udb(acme_udb(tmp))
    lines = fuzz_lines(2024, 10_000)
    t0 = time.monotonic()
    batch: list = []
    for n, line in enumerate(lines, 1):
        try:
            batch += directives.parse(line, "fuzz")
        except UdbError:
            pass
        if n % 25 == 0 and batch:
            try:
                directives.run(engine, batch, test=True)
            except UdbError:
                pass
            batch = []
    return time.monotonic() - t0


def refuse(tmp: Path) -> float:
    from integration.test_faults import SMALL

    scenario = tmp / "s.toml"
    scenario.write_text(
        SMALL.format(cpus="1", duration="1h", delta="1e-300", cost="100", procs="1")
    )
    t0 = time.monotonic()
    r = CliRunner().invoke(shrsim, [str(scenario)])
    took = time.monotonic() - t0
    assert r.exit_code == 2, r.output
    return took


def hostile(tmp: Path) -> dict[str, float]:
    """The hostile clients of tests/system/test_access.py (with its short socket limits)
    against a shrdaemon process: the burst's seconds and the worst cycle gap."""
    from integration.test_server import _ask, _connect
    from system.test_access import CROWD, PEOPLE, CycleWatch, Site

    from fairshare.core.consts import consts_from_mapping
    from fairshare.store.config import load_consts

    (tmp / "private").mkdir()
    (tmp / "run").mkdir()
    site = Site(tmp)
    engine = open_udb(f"sqlite:///{site.db}", create=True)
    directives.run(engine, directives.parse(ACME.read_text() + PEOPLE + CROWD, "site"))
    with write_session(engine) as ses:
        save_consts(ses, consts_from_mapping({"delta": 1.0}, load_consts(ses)))
    dispose_all()
    site.auth.write_text("")
    site.start()
    try:
        with CycleWatch(site) as watch:
            slow = [_connect(site.sock) for _ in range(8)]
            for c in slow:
                c.sendall(b'{"v": 1, "request": "udb"}\n')
            crowd = [_connect(site.sock) for _ in range(200)]
            for c in crowd:
                c.sendall(b'{"v": 1, "request": "cycle"}\n')
            for c in crowd:
                json.loads(c.makefile("rb").readline())
                c.close()
            kinds = (["udb"] + ["cycle", "hello"] * 12) * 40
            t0 = time.monotonic()
            with ThreadPoolExecutor(50) as pool:
                replies = list(pool.map(lambda k: _ask(site.sock, k), kinds))
            burst = time.monotonic() - t0
            assert all(r["ok"] for r in replies)
            time.sleep(4.0)
            for c in slow:
                c.close()
        return {"burst of 1,000 requests (s)": burst, "worst cycle gap (s)": watch.worst_gap()}
    finally:
        site.stop()


FIGURES = {
    "stop": (stop, "SIGTERM to exit of a shrdaemon process (s)", "< 2"),
    "dead": (dead, "shrview on a dead daemon's table (s)", "< 3"),
    "repeat": (repeat, "shrview -r 3 with a cycle every 0.3 s (s)", "< 6"),
    "readers": (readers, "a read and udbsee beside a writer's transaction (s)", "< 5"),
    "fuzz": (fuzz, "10,000 fuzzed directive lines (s)", "< 60"),
    "refuse": (refuse, "shrsim refusing delta 1e-300 (s)", "< 10"),
    "hostile": (hostile, "hostile clients against a shrdaemon process", "gap <= 2 s"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(FIGURES), help="comma-separated figures")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    wanted = [w for w in a.only.split(",") if w]
    unknown = set(wanted) - set(FIGURES)
    if unknown:
        ap.error(f"unknown figures {sorted(unknown)}: expected some of {', '.join(FIGURES)}")
    print(f"{'figure':<52} {'median':>8} {'worst':>8}  goal")
    for name in wanted:
        fn, title, goal = FIGURES[name]
        runs = []
        for _ in range(a.repeats):
            tmp = Path(tempfile.mkdtemp(prefix=f"bench-{name}-", dir="/tmp"))
            tmp.chmod(0o755)
            try:
                runs.append(fn(tmp))
            finally:
                dispose_all()
                shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(runs[0], dict):
            for key in runs[0]:
                values = [r[key] for r in runs]
                print(
                    f"{name + ': ' + key:<52} {statistics.median(values):8.3f} "
                    f"{max(values):8.3f}  {goal if 'gap' in key else ''}"
                )
        else:
            print(f"{title:<52} {statistics.median(runs):8.3f} {max(runs):8.3f}  {goal}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
