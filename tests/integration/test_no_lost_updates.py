"""No lost updates, with the daemon running: its write-back never overwrites the shares,
resgrp or acids an administrator changed meanwhile (and loses none of its own charges),
and two shrdist runs on one group serialise, each applying fully.

Charges: with the default cost_tick (100 per tick, 100 ticks per CPU second) one CPU
second costs 10,000 charge units.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from asuser import needs_root
from busy import BusyProcesses, RecordedOs
from click.testing import CliRunner
from conftest import ACME, ROOT, load
from sqlalchemy import select, text

from fairshare.admin.shrdist import Caller, redistribute
from fairshare.cli.shrdist import main as shrdist
from fairshare.collect import ProcessSample
from fairshare.core.consts import Consts
from fairshare.daemon.daemon import Daemon, Options
from fairshare.enforce.none import NoEnforcer
from fairshare.sim.daemon import simulated_daemon
from fairshare.sim.machine import SimClock
from fairshare.store.config import save_consts
from fairshare.store.published import LnodeStore
from integration.test_session import pg_url  # noqa: F401 - the throwaway PostgreSQL fixture
from udb import directives
from udb.cli.udbgen import main as udbgen
from udb.models import Entry, ShareChange
from udb.session import dispose_all, open_udb, read_session, write_session

CHARGE_PER_CPU_S = 10_000.0
NO_AUTH = "/nonexistent/shrdist.auth"

SITE = """
acid:x:3001:  acid:y:3002:  acid:z:3003:
create:Idle:uid:11:shares:0:
create:G:uid:500:shflags:040000:shares:1:
create:H:uid:600:shflags:040000:shares:1:
create:alice:uid:1001:resgrp:G:shares:10:acids:x:
create:bob:uid:1002:resgrp:G:shares:10:acids:x:
create:carol:uid:1003:resgrp:H:shares:10:acids:x:
"""


#: bob and carol run one CPU-bound process each all the time; alice comes and goes.
ALICE = ProcessSample(7, 0.0, 1001)
OTHERS = [ProcessSample(8, 0.0, 1002), ProcessSample(9, 0.0, 1003)]


@pytest.fixture
def running(udb_url):
    engine = open_udb(udb_url)
    directives.run(engine, directives.parse(SITE, "site"))
    with write_session(engine) as s:
        save_consts(s, Consts(writeback=4.0))  # release gone lnodes at every cycle
    clock = SimClock(1_000_000.0)
    col = BusyProcesses(clock, [*OTHERS, ALICE])
    actions = RecordedOs()
    d = Daemon(
        engine,
        col,
        NoEnforcer(actions),
        LnodeStore(engine, "test"),
        actions,
        clock=clock,
        options=Options(),
    )
    d.start()
    return engine, d, col, clock


def step(d, clock, n=1):
    for _ in range(n):
        clock.sleep(d.consts.delta, d.wake)
        d.step()


def alice(engine):
    with read_session(engine) as s:
        return s.scalars(select(Entry).where(Entry.name == "alice")).one()


def admin(url, directive):
    r = CliRunner().invoke(udbgen, ["--udb", url, "-c", directive])
    assert r.exit_code == 0, r.output


@needs_root  # shrdist as root needs no auth file
def test_write_back_keeps_the_admins_shares_resgrp_and_acids(running):
    engine, d, col, clock = running
    url = str(engine.url)
    step(d, clock, 3)  # alice active, 12 CPU s charged so far
    node = d.lnodes.tree.node("alice")
    assert d.lnodes.table.active[node]
    # While alice's lnode is active, administrators change her entry.
    r = CliRunner().invoke(shrdist, ["--udb", url, "--auth", NO_AUTH, "-g", "G", "-b", "alice=30"])
    assert r.exit_code == 0, r.output
    admin(url, "update:alice:resgrp:H:acids:y,z:")
    step(d, clock, 2)  # the tree reloads; alice keeps her lnode (16 + 4 = 20 CPU s)
    col.procs = OTHERS
    step(d, clock)  # no process: released and written back at this cycle
    assert not d.lnodes.table.active[d.lnodes.tree.node("alice")]
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


def test_admin_changes_racing_a_daemon_thread_are_all_kept(running):
    """The daemon steps in its own thread, alice comes and goes (so write-backs happen
    all the time) while the main thread changes her shares, resgrp and acids 40 times."""
    engine, d, col, clock = running
    url = str(engine.url)
    stop = threading.Event()
    errors = []

    def daemon_loop():
        i = 0
        try:
            while not stop.is_set():
                # two cycles on, one off: released every third
                col.procs = [*OTHERS, ALICE] if i % 3 != 2 else OTHERS
                step(d, clock)
                i += 1
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    t = threading.Thread(target=daemon_loop)
    t.start()
    try:
        for i in range(40):
            group = "G" if i % 2 else "H"
            acids = "x,y" if i % 3 else "z"
            admin(url, f"update:alice:shares:{100 + i}:resgrp:{group}:acids:{acids}:")
            time.sleep(0.005)
    finally:
        stop.set()
        t.join()
    assert errors == []
    d.shutdown()  # everything written back
    e = alice(engine)
    assert (e.shares, e.resgrp, e.acids) == (139, 500, [3003])  # the 40th change (i = 39)
    assert d.cycle > 10  # the daemon really ran meanwhile
    assert e.shcharge == pytest.approx(
        col.given[ALICE.pid] * CHARGE_PER_CPU_S
    )  # no charge lost either
    assert e.cpuquotaused == pytest.approx(col.given[ALICE.pid])


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


@needs_root  # shrdist as root needs no auth file
def test_two_shrdist_runs_on_one_group_serialise_and_both_apply(udb_url):
    engine = open_udb(udb_url)
    daemon, _model, _length = simulated_daemon(
        engine, str(ROOT / "examples" / "scenarios" / "06_acme.toml"), epoch=1_000_000.0
    )
    daemon.start()
    stop = threading.Event()

    def daemon_loop():
        while not stop.is_set():
            daemon.clock.sleep(daemon.consts.delta, daemon.wake)
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


def test_two_runs_serialise_on_postgresql_too(pg_url):  # noqa: F811
    """PostgreSQL takes no lock at BEGIN: shrdist locks the members' rows (FOR UPDATE), so
    a second run waits for the first and re-reads what it committed."""
    load(pg_url, ACME)
    engine = open_udb(pg_url)
    root = Caller("root", 0, "root")
    auth = Path(NO_AUTH)
    first_done, release, second_started = threading.Event(), threading.Event(), threading.Event()
    errors = []

    def first():
        try:
            with write_session(engine) as s:
                redistribute(s, root, "Proj2", {"u9": 60}, auth=auth, now=1.0)
                first_done.set()
                release.wait(20)  # hold the transaction open
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)
            first_done.set()

    def second():
        try:
            with write_session(engine) as s:
                second_started.set()
                redistribute(s, root, "Proj2", {"u9": 70, "u10": 20}, auth=auth, now=2.0)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    t1 = threading.Thread(target=first)
    t1.start()
    assert first_done.wait(20)
    t2 = threading.Thread(target=second)
    t2.start()
    assert second_started.wait(20)
    time.sleep(0.5)
    assert t2.is_alive()  # waiting for the first run's row locks
    release.set()
    t1.join(20)
    t2.join(20)
    assert errors == []
    with read_session(engine) as s:
        log = [
            (r.member, r.old, r.new)
            for r in s.scalars(select(ShareChange).order_by(ShareChange.time, ShareChange.member))
        ]
        u9 = s.scalar(select(Entry.shares).where(Entry.name == "u9"))
    assert log == [("u9", 50, 60), ("u10", 30, 20), ("u9", 60, 70)]
    assert u9 == 70
