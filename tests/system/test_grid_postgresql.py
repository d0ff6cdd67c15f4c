"""A grid on loopback (seed 001): three throwaway PostgreSQL servers, a VO's policy
provider and two sites, each site with its own shrdaemon on a simulated machine.
Every site reaches the others' databases only as the read-only role `grid_reader`,
with the grants docs/grid.md gives.

It shows that the mounted subtree appears at both sites; that a user who burns CPU at
site A gets a lower share at site B within one exchange (A's write-back interval plus
B's --grid-interval); and that stopping site B's database server for two (simulated)
minutes, with B's daemon killed in the middle and started again only once the server is
back, loses and doubles nothing: each site's usage of the other, after the spool's
replay and the pulls, is what the other's machine gave within 1% (here: exactly).

Twice: in-process daemons on simulated clocks, the outage GRID_OUTAGE_S simulated
seconds (default 120) and the daemon "killed" by dropping it without a shutdown (its
spool file and checkpoint all that remain of it), every figure exact; and shrdaemon
processes, the outage GRID_OUTAGE_WALL_S wall-clock seconds (default 20, for CI; 120
for the issue's two minutes) and site B's daemon killed with SIGKILL in the middle.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from integration.test_grid import (
    CHARGE_PER_CPU_S,
    e_share,
    entries,
    grid_daemon,
    make_grid,
    scenario,
    step,
    workload,
)
from pgserver import PgServer, drop_database, new_database, skip_unless_pg_possible
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.exc import DBAPIError

from fairshare.admin.shrgrid import fetch_now
from udb import mounts, tables
from udb.session import dispose_all, open_udb, read_connection

pytestmark = pytest.mark.requires("postgresql")

#: Simulated seconds site B's database is down.
OUTAGE_S = float(os.environ.get("GRID_OUTAGE_S", "120"))
WRITEBACK_S, GRID_S, DELTA_S = 20.0, 8.0, 4.0

#: What the VO's provider grants the sites, and what each site grants its peers.
PROVIDER_GRANTS = """
CREATE ROLE grid_reader LOGIN;
GRANT USAGE ON SCHEMA public TO grid_reader;
GRANT SELECT (name, uid, resgrp, shares, shflags, halflife) ON entries TO grid_reader;
GRANT SELECT ON serials TO grid_reader;
"""
SITE_GRANTS = """
CREATE ROLE grid_reader LOGIN;
GRANT USAGE ON SCHEMA public TO grid_reader;
GRANT SELECT ON grid_usage TO grid_reader;
GRANT SELECT (site, source) ON grid_peers TO grid_reader;
"""


def as_reader(url: str) -> str:
    return url.replace("postgres@", "grid_reader@", 1)


def grant(url: str, sql: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for stmt in filter(None, (s.strip() for s in sql.split(";"))):
                conn.execute(text(stmt))
    finally:
        engine.dispose()


@pytest.fixture
def servers():
    skip_unless_pg_possible()
    made = []
    try:
        for _ in range(3):
            made.append(PgServer())
            made[-1].start()
    except Exception as err:  # noqa: BLE001 - a machine that cannot start three says why
        for s in made:
            s.remove()
        pytest.skip(f"could not start three throwaway PostgreSQL servers: {err}")
    yield made
    dispose_all()
    mounts._sources.clear()
    for s in made:
        s.remove()


def remote_cpu(url: str, site: str) -> float:
    r = tables.grid_remote.c
    with read_connection(open_udb(url)) as conn:
        query = select(func.coalesce(func.sum(r.cpu_seconds), 0.0)).where(r.site == site)
        return float(conn.execute(query).scalar())


def local_cpu(url: str, names) -> tuple[float, float]:
    """The CPU s and charge the site's entries `names` hold."""
    e = tables.entries.c
    with read_connection(open_udb(url)) as conn:
        rows = conn.execute(select(e.cpuquotaused, e.shcharge).where(e.name.in_(names))).all()
    return sum(r[0] for r in rows), sum(r[1] for r in rows)


def test_a_grid_of_two_sites_and_a_vo_on_three_postgresql_servers(servers, tmp_path):
    vo_server, a_server, b_server = servers
    provider = new_database(vo_server)
    sites = {"A": new_database(a_server), "B": new_database(b_server)}
    open_udb(provider, create=True)
    for url in sites.values():
        open_udb(url, create=True)
    grant(provider, PROVIDER_GRANTS)
    for url in sites.values():
        grant(url, SITE_GRANTS)
    make_grid(provider, sites, reader=as_reader)

    # The role the others use reads and cannot write.
    with pytest.raises(DBAPIError, match="permission denied"):
        engine = create_engine(as_reader(sites["A"]))
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM grid_usage"))
    engine.dispose()

    # The mounted subtree at both sites.
    for url in sites.values():
        got = entries(url)
        assert {n for n, row in got.items() if row[4]} == {"P1", "P2", "gu1", "gu2", "gu3"}

    works = {"A": workload("gu1"), "B": workload("gu1") + workload("gu2")}
    paths = {s: scenario(tmp_path, s, works[s]) for s in sites}
    spool = tmp_path / "hB.spool"
    a, got_a = grid_daemon(sites["A"], paths["A"], "hA", interval=GRID_S)
    b, got_b = grid_daemon(sites["B"], paths["B"], "hB", interval=GRID_S, spool=spool)
    step([a, b], 2)
    assert e_share(b, "gu1") == pytest.approx(e_share(b, "gu2"), rel=0.05)

    # Within one exchange, gu1 (burning at A) gets less at B than gu2.
    cycles = 0
    while e_share(b, "gu1") >= 0.8 * e_share(b, "gu2"):
        step([a, b])
        cycles += 1
        assert cycles * DELTA_S <= WRITEBACK_S + GRID_S + 2 * DELTA_S, cycles
    assert remote_cpu(sites["B"], "A") > 0

    # Site B's database goes away; B's daemon is killed half-way through and comes back
    # with the server.
    outage = int(OUTAGE_S / DELTA_S)
    b_server.stop()
    try:
        step([a, b], outage // 2)
        assert b.ledger.kept() and spool.exists()
        killed_at = b.clock.time()
        step([a], outage - outage // 2)  # B's machine unwatched: no daemon charges it
    finally:
        b_server.start()
    before = dict(got_b)
    b, got_b = grid_daemon(sites["B"], paths["B"], "hB", killed_at, GRID_S, spool)
    assert not spool.exists()  # its start replayed it
    step([a, b], int((WRITEBACK_S + GRID_S) / DELTA_S) * 3)
    a.shutdown()
    b.shutdown()
    for url in sites.values():  # the last records, pulled now
        fetch_now(open_udb(url), b.clock.time())

    uid = {n: entries(sites["B"])[n][0] for n in ("gu1", "gu2")}
    b_gave = sum(before.get(uid[n], 0.0) + got_b.get(uid[n], 0.0) for n in uid)
    a_gave = sum(got_a.values())
    b_holds, b_charge = local_cpu(sites["B"], ("gu1", "gu2"))
    a_holds, a_charge = local_cpu(sites["A"], ("gu1",))
    a_of_b, b_of_a = remote_cpu(sites["A"], "B"), remote_cpu(sites["B"], "A")
    print(f"B gave {b_gave:.3f} CPU s, holds {b_holds:.3f}; A holds of B {a_of_b:.3f}")
    print(f"A gave {a_gave:.3f} CPU s, holds {a_holds:.3f}; B holds of A {b_of_a:.3f}")
    assert b_holds == pytest.approx(b_gave, rel=0.01)
    assert b_charge == pytest.approx(b_gave * CHARGE_PER_CPU_S, rel=0.01)
    assert remote_cpu(sites["A"], "B") == pytest.approx(b_gave, rel=0.01)
    assert a_holds == pytest.approx(a_gave, rel=0.01)
    assert remote_cpu(sites["B"], "A") == pytest.approx(a_gave, rel=0.01)
    # Each record once: as many serials applied as were exported.
    with read_connection(open_udb(sites["B"])) as conn:
        exported = conn.execute(select(func.max(tables.grid_usage.c.serial))).scalar()
    with read_connection(open_udb(sites["A"])) as conn:
        p = tables.grid_peers.c
        applied = conn.execute(select(p.applied).where(p.site == "B")).scalar()
    assert applied == exported


# -- the same with shrdaemon processes, site B's killed with SIGKILL -------------------------

#: Wall-clock seconds site B's server is down around the SIGKILL of its daemon process
#: (GRID_OUTAGE_WALL_S=120 for the issue's two minutes; 20 by default, for CI), and the
#: simulated length of each daemon's run (GRID_SCENARIO), long enough that B's first
#: daemon outlives half the outage: without its database a simulated cycle takes a few
#: ms, and with "2h" (1,800 cycles) it had ended before the SIGKILL; give more with a
#: two-minute outage.
OUTAGE_WALL_S = float(os.environ.get("GRID_OUTAGE_WALL_S", "20"))
SCENARIO = os.environ.get("GRID_SCENARIO", "6h")


def shrdaemon(url: str, scenario_path, host: str, *more: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fairshare.cli.shrdaemon", "--udb", url, "--simulate",
         str(scenario_path), "--host", host, "--grid-interval", str(GRID_S), *more],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def header(url: str, host: str):
    c = tables.lnode_cycles.c
    with read_connection(open_udb(url)) as conn:
        return conn.execute(select(tables.lnode_cycles).where(c.host == host)).first()


def wait_published(url: str, host: str, proc: subprocess.Popen, timeout=120.0) -> None:
    deadline = time.monotonic() + timeout
    while header(url, host) is None or header(url, host).cycle < 5:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_shrdaemon_processes_lose_and_double_nothing_through_an_outage_and_sigkill(
    servers, tmp_path
):
    vo_server, a_server, b_server = servers
    provider = new_database(vo_server)
    sites = {"A": new_database(a_server), "B": new_database(b_server)}
    for url in (provider, *sites.values()):
        open_udb(url, create=True)
    grant(provider, PROVIDER_GRANTS)
    for url in sites.values():
        grant(url, SITE_GRANTS)
    make_grid(provider, sites, reader=as_reader)
    # Long enough (simulated) for B's first daemon to outlive half the outage.
    length = f'"{SCENARIO}"'
    for s, work in (("A", workload("gu1")), ("B", workload("gu1") + workload("gu2"))):
        text_ = scenario(tmp_path, s, work).read_text()
        (tmp_path / f"{s}.toml").write_text(text_.replace('"2h"', length))
    spool = tmp_path / "hB.spool"
    a = shrdaemon(sites["A"], tmp_path / "A.toml", "hA")
    b = shrdaemon(sites["B"], tmp_path / "B.toml", "hB", "--spool", str(spool))
    wait_published(sites["B"], "hB", b)
    started = header(sites["B"], "hB").started
    b_server.stop()
    try:
        time.sleep(OUTAGE_WALL_S / 2)
        assert b.poll() is None, b.communicate()  # scheduling on without its database
        b.send_signal(signal.SIGKILL)
        b.communicate(timeout=60)
        left = json.loads(spool.read_text())  # what the killed daemon owed, to the cycle
        time.sleep(OUTAGE_WALL_S / 2)
    finally:
        b_server.start()
    spooled_to = max(row[2] for row in left["owed"])  # its last sample (epoch s)
    b1_gave = 2.0 * (spooled_to - started)  # two CPUs, always busy
    b = shrdaemon(sites["B"], tmp_path / "B.toml", "hB", "--spool", str(spool))
    out_b, err_b = b.communicate(timeout=900)
    out_a, err_a = a.communicate(timeout=900)
    assert (a.returncode, b.returncode) == (0, 0), (err_a[-2000:], err_b[-2000:])
    assert "wrote back the spool" in err_b, err_b[-2000:]
    assert not spool.exists()
    for url in sites.values():
        fetch_now(open_udb(url), time.time())

    b2_gave = header(sites["B"], "hB").counts["tick"] / 100.0
    a_gave = header(sites["A"], "hA").counts["tick"] / 100.0
    b_holds, b_charge = local_cpu(sites["B"], ("gu1", "gu2"))
    a_holds, _ = local_cpu(sites["A"], ("gu1",))
    a_of_b, b_of_a = remote_cpu(sites["A"], "B"), remote_cpu(sites["B"], "A")
    print(f"B's machine gave {b1_gave:.1f} + {b2_gave:.1f} CPU s; B holds {b_holds:.1f}")
    print(f"A holds {a_of_b:.1f} of B")
    print(f"A's machine gave {a_gave:.1f} CPU s; A holds {a_holds:.1f}, B of A {b_of_a:.1f}")
    assert b_holds == pytest.approx(b1_gave + b2_gave, rel=0.01)
    assert b_charge == pytest.approx(b_holds * CHARGE_PER_CPU_S, rel=1e-6)
    assert a_of_b == pytest.approx(b_holds, rel=1e-9)  # every record once
    assert a_holds == pytest.approx(a_gave, rel=1e-9)
    assert b_of_a == pytest.approx(a_holds, rel=1e-9)


def test_hosts_of_one_site_pulling_at_once_apply_each_record_once(pg_server):
    import threading

    from integration.test_grid import EPOCH, peer, record

    from fairshare.store import grid
    from fairshare.store.published import LnodeStore

    provider, sites = new_database(pg_server), {s: new_database(pg_server) for s in "AB"}
    for url in (provider, *sites.values()):
        open_udb(url, create=True)
    make_grid(provider, sites)
    a, b = open_udb(sites["A"]), open_udb(sites["B"])
    uid = entries(sites["A"])["gu1"][0]
    writers = [LnodeStore(a, f"h{i}") for i in range(4)]
    for n in range(50):  # 200 records from 4 hosts
        for w in writers:
            w.write_back([(uid, record(1.0, EPOCH + n))], 1e12)
    errors = []

    def pull() -> None:
        try:
            for _ in range(5):
                grid.pull(b, peer(sites["B"], "A"), EPOCH + 100, 1e12)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=pull) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert remote_cpu(sites["B"], "A") == pytest.approx(200.0)
    assert peer(sites["B"], "A").applied == 200
    for url in (provider, *sites.values()):
        dispose_all()
        drop_database(pg_server, url)
