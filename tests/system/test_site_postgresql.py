"""Many hosts, one UDB on PostgreSQL (a database of the test's own on the session's
throwaway server, tests/conftest.py): the tests of tests/integration/test_site.py and
tests/integration/test_site_exchange.py that run on either database, a daemon that
outlives its database, two shrdaemon processes.

Charges: with the default cost_tick (100 per tick, 100 ticks per CPU second) one CPU
second costs 10,000 charge units.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from conftest import ROOT
from integration import test_site, test_site_exchange
from integration.test_site import CHARGE_PER_CPU_S, USERS, entry, site_daemons, slow_site, step_all
from sqlalchemy import select

from fairshare.store.published import LnodeStore
from udb.models import Entry
from udb.session import open_udb, read_session

pytestmark = pytest.mark.requires("postgresql")


@pytest.fixture(params=["postgresql"])
def any_udb(request, pg_db):
    """The UDB of the tests written for either database: PostgreSQL here."""
    return pg_db


# -- the tests of tests/integration/test_site.py on PostgreSQL ---------------------------------

test_concurrent_write_backs_lose_nothing = test_site.test_concurrent_write_backs_lose_nothing
test_the_shared_user_holds_both_hosts_charges_within_one_write_back = (
    test_site.test_the_shared_user_holds_both_hosts_charges_within_one_write_back
)
# the site's per-cycle exchange (fairshare.store.exchange): one statement's snapshot, upserts
test_each_host_reads_the_others_summed = test_site_exchange.test_each_host_reads_the_others_summed
test_a_silent_host_is_left_out_until_it_exchanges_again = (
    test_site_exchange.test_a_silent_host_is_left_out_until_it_exchanges_again
)
test_a_write_back_moves_what_it_wrote_from_the_exchange_to_the_entries = (
    test_site_exchange.test_a_write_back_moves_what_it_wrote_from_the_exchange_to_the_entries
)
test_concurrent_hosts_exchange_and_write_back_without_waiting_for_each_other = (
    test_site_exchange.test_concurrent_hosts_exchange_and_write_back_without_waiting_for_each_other
)


# -- the database goes away and comes back ------------------------------------------------


class Lines(logging.Handler):
    """The messages logged to the daemon's logger (which shrdaemon keeps from
    propagating, so caplog would not see them)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def daemon_log():
    log = logging.getLogger("shrdaemon")
    handler, level = Lines(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield handler.lines
    log.removeHandler(handler)
    log.setLevel(level)


def test_a_daemon_outlives_its_database(pg_server, pg_db, tmp_path, daemon_log):
    engine, daemons, tally = site_daemons(pg_db, slow_site(tmp_path), hosts=("a",))
    (a,) = daemons
    step_all(daemons, 20)
    pg_server.stop()
    try:
        step_all(daemons, 45)  # 3 simulated minutes without a database
        lines = [line for line in daemon_log if "unreachable" in line]
        assert len(lines) == 3, lines  # one line a minute
        assert a.ledger.pending  # what it owes is kept
        assert a.table.active[a.tree.node("z")]  # still scheduling
        assert (a.table.e_share > 0).any()
    finally:
        pg_server.start()
    step_all(daemons, 2)
    assert any("reachable again" in line for line in daemon_log)
    assert a.ledger.pending == {}
    a.shutdown()
    for uid, name in ((1001, "x"), (1003, "z")):
        e = entry(engine, name)
        assert e.cpuquotaused == pytest.approx(tally["a"][uid])  # nothing lost
        assert e.shcharge == pytest.approx(tally["a"][uid] * CHARGE_PER_CPU_S)


# -- the real commands on PostgreSQL ----------------------------------------------------------


def shrdaemon(*args, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "fairshare.cli.shrdaemon", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_two_shrdaemons_on_postgresql(pg_db, tmp_path):
    from udb.cli.udbgen import main as udbgen

    r = CliRunner().invoke(udbgen, ["--udb", pg_db, "-c", USERS])
    assert r.exit_code == 0, r.output
    from fairshare.cli.shradmin import main as shradmin

    r = CliRunner().invoke(shradmin, ["--udb", pg_db, "-F", "GLOBALUSAGE", "-K", "1000d"])
    assert r.exit_code == 0, r.output
    for host, user in (("a", "x"), ("b", "y")):  # scenarios naming no directives
        (tmp_path / f"{host}.toml").write_text(
            f'cpus = 2\nduration = "2h"\n[[workload]]\nname = "{user}"\nprocs = 4\n'
            '[[workload]]\nname = "z"\nprocs = 4\n'
        )
    procs = [
        shrdaemon("--udb", pg_db, "--simulate", str(tmp_path / f"{h}.toml"), "--host", h)
        for h in ("a", "b")
    ]
    # A second daemon for host a, while the first runs, is refused.  The first has
    # published (so it runs) and has most of its 1,800 cycles to go (a few seconds: 450
    # took under 2 s, and a twin started after a fixed second found host a done).
    store = LnodeStore(open_udb(pg_db), "a")
    deadline = time.monotonic() + 60
    while store.published_cycle() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    twin = shrdaemon("--udb", pg_db, "--simulate", str(tmp_path / "a.toml"), "--host", "a")
    out, err = twin.communicate(timeout=120)
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert twin.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert "already served" in err and "host a" in err
    engine = open_udb(pg_db)
    with read_session(engine) as s:
        rows = {e.name: e for e in s.scalars(select(Entry))}
        from udb.models import LnodeCycle

        heads = {h.host: h for h in s.scalars(select(LnodeCycle))}
    # Every CPU second charged on either host is in the UDB: the sum of the hosts' counts.
    ticks = sum(heads[h].counts["tick"] for h in ("a", "b"))
    charged = sum(rows[n].shcharge for n in "xyz")
    assert charged == pytest.approx(ticks * 100.0)
    # z ran on both: its usage is the sum of both hosts' increments, not one overwrite.
    assert rows["z"].shusage == pytest.approx(rows["z"].shcharge, rel=1e-3)
    assert rows["z"].shcharge > 1.2 * max(rows["x"].shcharge, rows["y"].shcharge) / 2
