"""shrsync -u / -q against the daemon's own loop on the simulated machine, and the guide's
4.7 procedure for clearing an active user's CPU quota, end to end.

The machine: 2 CPUs, alice and bob with one CPU-bound process each, so each gets exactly
one CPU: 4.0 CPU s per 4 s cycle, i.e. 400 ticks x 100 (the default cost_tick) = 40,000
charge units per cycle.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from fairshare.admin.shrsync import NoDaemon, pending, submit, wait
from fairshare.cli.shrsync import main as shrsync
from fairshare.daemon.sync import QUOTA, UPDATE
from fairshare.sim.daemon import simulated_daemon
from udb.cli.udbgen import main as udbgen
from udb.models import Entry, SyncRequest
from udb.session import open_udb, read_session

CPU_PER_CYCLE = 4.0
CHARGE_PER_CPU_S = 10_000.0

SCENARIO = """
cpus = 2
duration = "10m"
delta = "4s"
directives = '''
create:Idle:uid:11:shares:0:
create:alice:uid:1001:shares:1:cpuquota:30:
create:bob:uid:1002:shares:1:
'''

[consts]
halflife = "1h"
quota_signal = "SIGURG"

[[workload]]
name = "alice"
procs = 1

[[workload]]
name = "bob"
procs = 1
"""


@pytest.fixture
def sim(tmp_path, udb_url):
    path = tmp_path / "quota.toml"
    path.write_text(SCENARIO)
    engine = open_udb(udb_url)
    daemon, _model, _length = simulated_daemon(engine, str(path), epoch=1_000_000.0)
    daemon.start()
    return engine, daemon, Signals(daemon.actions.world)


class Signals:
    """The signals the simulated processes received, in order (the pids left out)."""

    def __init__(self, world):
        self.world = world

    def __eq__(self, other):
        return [sig for _pid, sig in self.world.signals] == list(other)

    def __repr__(self):
        return repr([signal.Signals(sig).name for _pid, sig in self.world.signals])


def cycles(daemon, n=1):
    for _ in range(n):
        daemon.clock.sleep(daemon.consts.delta, daemon.loop.wake)
        daemon.step()


def entry(engine, name):
    with read_session(engine) as s:
        return s.scalars(select(Entry).where(Entry.name == name)).one()


def node(daemon, name):
    return daemon.tree.node(name)


def test_update_writes_active_lnodes_and_marks_their_accumulators_written(sim):
    engine, d, _sent = sim
    cycles(d, 5)
    a = node(d, "alice")
    assert d.table.cpu_seconds[a] == pytest.approx(5 * CPU_PER_CYCLE)
    rid, delta = submit(engine, "simulator", UPDATE, "admin", time.time())
    assert delta == 4.0
    cycles(d)  # the daemon serves the request in its next cycle (the 6th)
    done = wait(engine, rid, timeout=0)
    assert done.kind == UPDATE and done.lnodes == 2  # alice and bob (no idle CPU: no Idle)
    e = entry(engine, "alice")
    assert e.cpuquotaused == pytest.approx(6 * CPU_PER_CYCLE)
    assert e.shcharge == pytest.approx(6 * CPU_PER_CYCLE * CHARGE_PER_CPU_S)
    assert e.shusage == pytest.approx(float(d.table.usage[a]))
    assert e.shextime == pytest.approx(d.clock.time())
    t = d.table  # Muse still counts from creation; what was written is marked
    assert t.cpu_written[a] == t.cpu_seconds[a] and t.charge_written[a] == t.charge[a]
    assert t.stored[a] == t.usage[a]
    # Nothing is counted twice: the release adds only what came after the update.
    cycles(d, 2)
    d.shutdown()
    e = entry(engine, "alice")
    assert e.cpuquotaused == pytest.approx(8 * CPU_PER_CYCLE)
    assert e.shcharge == pytest.approx(8 * CPU_PER_CYCLE * CHARGE_PER_CPU_S)


def test_the_guides_quota_clearing_procedure(sim):
    """4.7: shrsync -u; udbgen -c 'update:alice:cpuquotaused:0:'; shrsync -q."""
    engine, d, sent = sim
    url = str(engine.url)
    cycles(d, 7)  # 28 CPU s: under the 30 s quota
    assert sent == []
    threads = []

    def shrsync_in_background(*args):
        # The command waits for the daemon, which steps here meanwhile.
        result = {}
        t = threading.Thread(
            target=lambda: result.update(r=CliRunner().invoke(shrsync, ["--udb", url, *args]))
        )
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 10
        while not pending(engine) and t.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        cycles(d)
        t.join(10)
        return result["r"]

    r = shrsync_in_background("-u", "--host", "simulator", "--timeout", "10")
    assert r.exit_code == 0, r.output
    assert "UDB updated from 2 active lnode(s) of simulator" in r.output
    assert entry(engine, "alice").cpuquotaused == pytest.approx(8 * CPU_PER_CYCLE)
    assert sent == [signal.SIGURG]  # 32 s in that 8th cycle: the quota is reached
    r = CliRunner().invoke(udbgen, ["--udb", url, "-c", "update:alice:cpuquotaused:0:"])
    assert r.exit_code == 0, r.output
    r = shrsync_in_background("-q", "--host", "simulator", "--timeout", "10")
    assert r.exit_code == 0, r.output
    # The quota counts again from 0 after the update (the cycle serving -q is the first):
    # no SIGKILL at 36 s, and the warning (SIGURG) again only when 30 more CPU s are used.
    assert sent == [signal.SIGURG]
    cycles(d, 6)  # 7 cycles since the update: 28 s
    assert sent == [signal.SIGURG]
    cycles(d)  # 32 s
    assert sent == [signal.SIGURG, signal.SIGURG]
    d.shutdown()
    e = entry(engine, "alice")
    assert e.cpuquotaused == pytest.approx(8 * CPU_PER_CYCLE)  # nothing from before the clear
    # ... and no charge was lost: 16 cycles of one CPU in all.
    assert e.shcharge == pytest.approx(16 * CPU_PER_CYCLE * CHARGE_PER_CPU_S)


def test_without_the_procedure_the_quota_kills(sim):
    _engine, d, sent = sim
    cycles(d, 9)  # 36 s >= 30 + the 3 s threshold
    assert sent == [signal.SIGURG, signal.SIGKILL]


def test_a_request_is_served_by_a_daemon_stepping_in_another_thread(sim):
    engine, d, _sent = sim
    cycles(d)  # published: the daemon runs
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            cycles(d)
            time.sleep(0.02)

    t = threading.Thread(target=loop)
    t.start()
    try:
        r = CliRunner().invoke(
            shrsync, ["--udb", str(engine.url), "-u", "-q", "--host", "simulator", "--json"]
        )
    finally:
        stop.set()
        t.join()
    assert r.exit_code == 0, r.output
    assert '"kind": "update"' in r.output and '"kind": "quota"' in r.output
    assert pending(engine) == []


def test_no_daemon_answers_exit_2_and_the_request_is_withdrawn(sim):
    engine, d, _sent = sim
    cycles(d)  # published once, then it never steps again
    r = CliRunner().invoke(
        shrsync, ["--udb", str(engine.url), "-u", "--host", "simulator", "--timeout", "0.3"]
    )
    assert r.exit_code == 2
    assert "no running shrdaemon on host simulator answered within 0.3 s" in r.output
    assert pending(engine) == []
    with read_session(engine) as s:
        assert s.scalars(select(SyncRequest)).all() == []


def test_no_daemon_ever_or_a_stopped_one(udb_url, sim):
    r = CliRunner().invoke(shrsync, ["--udb", udb_url, "-q", "--host", "elsewhere"])
    assert r.exit_code == 2
    assert "no shrdaemon has run on host elsewhere" in r.output
    engine, d, _sent = sim
    cycles(d)
    d.shutdown()
    with pytest.raises(NoDaemon, match="is not running"):
        submit(engine, "simulator", QUOTA, "admin", 0.0)


def test_no_option_is_an_error(udb_url):
    r = CliRunner().invoke(shrsync, ["--udb", udb_url])
    assert r.exit_code == 2 and "give -u" in r.output
