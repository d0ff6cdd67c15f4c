"""No lost updates, with the daemon running: its write-back never overwrites the shares,
resgrp or acids an administrator changed meanwhile (and loses none of its own charges).
As root (shrdist) and two shrdist runs on one group serialising:
tests/system/test_no_lost_updates_root.py; on PostgreSQL: tests/system/test_postgresql.py.

Charges: with the default cost_tick (100 per tick, 100 ticks per CPU second) one CPU
second costs 10,000 charge units.
"""

from __future__ import annotations

import threading
import time

import pytest
from busy import BusyProcesses, RecordedOs
from click.testing import CliRunner
from sqlalchemy import select

from fairshare.collect import ProcessSample
from fairshare.core.consts import Consts
from fairshare.daemon.daemon import Daemon, Options
from fairshare.enforce.none import NoEnforcer
from fairshare.sim.machine import SimClock
from fairshare.store.config import save_consts
from fairshare.store.published import LnodeStore
from udb import directives
from udb.cli.udbgen import main as udbgen
from udb.models import Entry
from udb.session import open_udb, read_session, write_session

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
        clock.sleep(d.consts.delta, d.loop.wake)
        d.step()


def alice(engine):
    with read_session(engine) as s:
        return s.scalars(select(Entry).where(Entry.name == "alice")).one()


def admin(url, directive):
    r = CliRunner().invoke(udbgen, ["--udb", url, "-c", directive])
    assert r.exit_code == 0, r.output


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
