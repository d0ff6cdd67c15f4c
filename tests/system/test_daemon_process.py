"""shrdaemon as a process of its own on this machine (--enforcer none, the real procfs
collector): SIGTERM writes back and exits 0, a second start on its UDB is refused,
its metrics are scraped over loopback; and its lock refuses a daemon of another uid.
The daemon in this process: tests/integration/test_daemon.py, test_metrics.py.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from integration.test_daemon import engine, entry  # noqa: F401 - engine is a fixture
from integration.test_faults import template  # noqa: F401 - the fixture
from integration.test_metrics import families
from sqlalchemy import update

from fairshare.core.consts import Consts
from fairshare.daemon.lock import AlreadyRunning, DaemonLock
from fairshare.store.config import save_consts
from fairshare.store.published import LnodeStore
from udb.models import SHF_GROUP, Entry
from udb.session import open_udb, write_session


def term_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, so no daemon outlives a run."""
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_daemon(udb_url, *args, **kw):
    env = dict(os.environ, UDB_URL=udb_url)
    return subprocess.Popen(
        [sys.executable, "-m", "fairshare.cli.shrdaemon", "--enforcer", "none", *args],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=term_with_parent,
        **kw,
    )


def wait_for(predicate, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_sigterm_writes_back_and_exits_0_and_a_second_start_is_refused(engine):  # noqa: F811
    url = str(engine.url)
    with write_session(engine) as s:
        save_consts(s, Consts(delta=0.5))
        s.execute(update(Entry).where(Entry.uid == 1001).values(uid=os.getuid()))
    d = run_daemon(url)
    try:
        assert wait_for(lambda: LnodeStore(engine).read_published()[0] is not None)
        second = subprocess.run(
            [sys.executable, "-m", "fairshare.cli.shrdaemon", "--udb", url, "--once"],
            capture_output=True,
            text=True,
        )
        assert second.returncode == 2
        assert f"is already served by pid {d.pid} (lock " in second.stderr
        # Two more cycles, so that a sample has seen what the refused start used (a
        # process that came and went between two samples is charged to its parent once
        # reaped): since the commands start faster it can live between two 0.5 s cycles.
        after = LnodeStore(engine).published_cycle()
        assert wait_for(lambda: LnodeStore(engine).published_cycle() >= after + 2)
        d.send_signal(signal.SIGTERM)  # (how soon it exits: tests/bench/bench_responsiveness.py)
        assert d.wait(timeout=5) == 0
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()
    log = d.stderr.read()
    assert log.splitlines()[0].split(": ", 1)[1].startswith("enforcer none: ")
    assert "SIGTERM: stopping" in log
    me = entry(engine, "alice")  # the entry now carrying our uid: our python ran
    assert me.shcharge > 0 and me.shextime > 0
    assert not LnodeStore(engine).read_published()[0].running


# -- metrics -----------------------------------------------------------------------------------


def test_scrape_a_running_daemon_over_loopback(udb_url):
    engine = open_udb(udb_url)  # noqa: F811 - this test's own, not the fixture
    with write_session(engine) as s:
        save_consts(s, Consts(delta=0.5))
        s.add_all(
            [
                Entry(name="Idle", uid=11, shares=0),
                Entry(name="G", uid=500, shflags=SHF_GROUP, shares=1),
                Entry(name="unknown", uid=12, resgrp=500, shares=1),
            ]
        )
    d = run_daemon(udb_url, "--metrics", "127.0.0.1:0")
    try:
        line = d.stderr.readline()
        while "metrics on http://" not in line:
            assert line, "the daemon stopped before serving metrics"
            line = d.stderr.readline()
        url = re.search(r"http://\S+/metrics", line).group(0)

        def scrape() -> dict:
            with urllib.request.urlopen(url, timeout=10) as r:
                assert r.headers["Content-Type"].startswith("text/plain")
                return families(r.read().decode())

        assert wait_for(lambda: scrape().get("fairshare_cycles_total", {}).get((), 0) >= 2)
        fam = scrape()
        me = {dict(k)["name"]: (dict(k), v) for k, v in fam["fairshare_lnode_processes"].items()}
        # Every process here (this test's, the daemon's) has no entry: lnode unknown.
        labels, procs = me["unknown"]
        assert labels == {"name": "unknown", "kind": "user", "parent": "G"} and procs >= 2
        e_share = {
            dict(k)["name"]: v for k, v in fam["fairshare_lnode_effective_share_ratio"].items()
        }
        assert 0 < e_share["unknown"] <= 1
        assert fam["fairshare_lnode_entitled_share_ratio"][tuple(sorted(labels.items()))] > 0
        assert fam["fairshare_enforcer_info"] == {(("enforcer", "none"),): 1.0}
        assert fam["fairshare_cpus"][()] == os.cpu_count()
        fair = fam["fairshare_lnode_fair_share_ratio"]
        assert 0 <= fair[tuple(sorted(labels.items()))] <= 1
        # The CPU counter: the group's is its one member's (summed from the fractions of
        # the machine, so to rounding), and it never goes down.
        cpu = {dict(k)["name"]: v for k, v in fam["fairshare_lnode_cpu_seconds_total"].items()}
        assert cpu["G"] == pytest.approx(cpu["unknown"]) and cpu["unknown"] >= 0
        assert wait_for(
            lambda: scrape()["fairshare_cycles_total"][()] > fam["fairshare_cycles_total"][()]
        )
        later = scrape()["fairshare_lnode_cpu_seconds_total"]
        assert all(
            later.get(k, v) >= v for k, v in fam["fairshare_lnode_cpu_seconds_total"].items()
        )
        cycles = fam["fairshare_cycles_total"][()]
        assert fam["fairshare_cycle_duration_seconds_count"][()] in (cycles, cycles + 1)
        d.send_signal(signal.SIGTERM)
        assert d.wait(timeout=5) == 0
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()


# -- the lock, across uids ------------------------------------------------------------------------


@pytest.mark.requires("root")  # to run a second uid
def test_a_daemon_of_another_uid_is_refused_beside_roots(template):  # noqa: F811
    # Issue 18: a non-root shrdaemon kept its lock under /tmp, so it was not refused
    # beside a root daemon on the same UDB.  The lock now lives beside the database.
    directory = Path(tempfile.mkdtemp(prefix="fs-lock-", dir="/tmp"))
    try:
        os.chmod(directory, 0o755)
        db = directory / "c.sqlite"
        shutil.copy(template, db)
        os.chmod(db, 0o644)
        held = DaemonLock(f"sqlite:///{db}", "c")
        held.acquire()
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                code = 1
                try:
                    os.setgid(65534)
                    os.setuid(65534)
                    DaemonLock(f"sqlite:///{directory}/./c.sqlite", "c").acquire()
                    code = 0
                except AlreadyRunning:
                    code = 3
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 3
        finally:
            held.release()
    finally:
        shutil.rmtree(directory)
