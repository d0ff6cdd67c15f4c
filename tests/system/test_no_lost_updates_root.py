"""No lost updates, as root (shrdist as root needs no auth file): the daemon's
write-back keeps what an administrator changed meanwhile, and two shrdist processes
on one group serialise, each applying fully.  The rest (administrators racing a
daemon thread): tests/integration/test_no_lost_updates.py.

Charges: with the default cost_tick (100 per tick, 100 ticks per CPU second) one CPU
second costs 10,000 charge units.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner
from conftest import ROOT
from integration.test_no_lost_updates import (
    ALICE,
    CHARGE_PER_CPU_S,
    NO_AUTH,
    OTHERS,
    admin,
    alice,
    running,  # noqa: F401 - the fixture the first test uses
    step,
)
from sqlalchemy import select, text

from fairshare.cli.shrdist import main as shrdist
from fairshare.sim.daemon import simulated_daemon
from udb.models import Entry, ShareChange
from udb.session import dispose_all, open_udb, read_session, write_session

pytestmark = pytest.mark.requires("root")


def test_write_back_keeps_the_admins_shares_resgrp_and_acids(running):  # noqa: F811
    engine, d, col, clock = running
    url = str(engine.url)
    step(d, clock, 3)  # alice active, 12 CPU s charged so far
    node = d.tree.node("alice")
    assert d.table.active[node]
    # While alice's lnode is active, administrators change her entry.
    r = CliRunner().invoke(shrdist, ["--udb", url, "--auth", NO_AUTH, "-g", "G", "-b", "alice=30"])
    assert r.exit_code == 0, r.output
    admin(url, "update:alice:resgrp:H:acids:y,z:")
    step(d, clock, 2)  # the tree reloads; alice keeps her lnode (16 + 4 = 20 CPU s)
    col.procs = OTHERS
    step(d, clock)  # no process: released and written back at this cycle
    assert not d.table.active[d.tree.node("alice")]
    e = alice(engine)
    assert (e.shares, e.resgrp, e.acids) == (30, 600, [3002, 3003])
    assert col.given[ALICE.pid] == pytest.approx(20.0)
    assert e.shcharge == pytest.approx(20.0 * CHARGE_PER_CPU_S)
    assert e.cpuquotaused == pytest.approx(20.0)
    assert e.shusage > 0 and e.shextime == pytest.approx(clock.time())
    d.shutdown()
    e = alice(engine)
    assert (e.shares, e.resgrp, e.acids) == (30, 600, [3002, 3003])
    assert e.shcharge == pytest.approx(20.0 * CHARGE_PER_CPU_S)


# -- two shrdist runs on one group, at once, with a daemon running -------------------------------


def has_open(pid: int, path: str) -> bool:
    """Whether process `pid` has the file `path` open."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                return True
        except OSError:
            pass
    return False


def test_two_shrdist_runs_on_one_group_serialise_and_both_apply(udb_url):
    engine = open_udb(udb_url)
    daemon, _model, _length = simulated_daemon(
        engine, str(ROOT / "examples" / "scenarios" / "06_acme.toml"), epoch=1_000_000.0
    )
    daemon.start()
    stop = threading.Event()

    def daemon_loop():
        while not stop.is_set():
            daemon.clock.sleep(daemon.consts.delta, daemon.loop.wake)
            daemon.step()

    t = threading.Thread(target=daemon_loop)
    t.start()
    cmd = [sys.executable, "-m", "fairshare.cli.shrdist", "--udb", udb_url, "--auth", NO_AUTH]
    try:
        # Hold the UDB's write lock so that both runs start, then queue, at the same time.
        with write_session(engine) as holder:
            holder.connection()  # BEGIN IMMEDIATE: the write lock is ours
            runs = [
                subprocess.Popen(
                    [*cmd, "-g", "Proj2", "-b", batch],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for batch in ("u9=60,u10=20", "u9=70,u11=5")
            ]
            db = udb_url.removeprefix("sqlite:///")
            deadline = time.monotonic() + 30
            while not all(has_open(p.pid, db) for p in runs) and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.3)  # both have the UDB open: now they wait for the lock
            assert all(p.poll() is None for p in runs)
        outs = [p.communicate(timeout=60) for p in runs]
        assert [p.returncode for p in runs] == [0, 0], outs
        # The daemon, queued behind the lock (SQLite's busy wait backs off to 100 ms
        # naps, so both runs may take it first), cycles on once they are done.
        deadline = time.monotonic() + 30
        while daemon.cycle <= 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        t.join()
    daemon.shutdown()
    with read_session(engine) as s:
        log = [
            (r.member, r.old, r.new)
            for r in s.scalars(select(ShareChange).order_by(ShareChange.id))
        ]
        final = dict(
            s.execute(
                select(Entry.name, Entry.shares).where(Entry.name.in_(["u9", "u10", "u11", "u12"]))
            ).all()
        )
        assert s.execute(text("PRAGMA integrity_check")).scalar() == "ok"
    first_u9 = log[0][2] if log[0][0] == "u9" else log[1][2]
    # Whichever ran second re-read u9 inside its transaction: its "old" is the first's "new".
    if first_u9 == 60:
        assert sorted(log[:2]) == [("u10", 30, 20), ("u9", 50, 60)]
        assert sorted(log[2:]) == [("u11", 10, 5), ("u9", 60, 70)]
        assert final == {"u9": 70, "u10": 20, "u11": 5, "u12": 10}
    else:
        assert sorted(log[:2]) == [("u11", 10, 5), ("u9", 50, 70)]
        assert sorted(log[2:]) == [("u10", 30, 20), ("u9", 70, 60)]
        assert final == {"u9": 60, "u10": 20, "u11": 5, "u12": 10}
    assert daemon.cycle > 5  # the daemon published (and so wrote) all along
    dispose_all()
