"""A grid on SQLite files (seed 001): a VO's policy mounted read-only at two sites, and
usage records exchanged between the sites' UDBs, each applied once.  The same set-up on
three PostgreSQL servers, with an outage and a killed daemon: tests/system/test_grid_postgresql.py.

Charges: with the default cost_tick (100 per tick, 100 ticks per CPU second) one CPU
second costs 10,000 charge units.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from fairshare.cli.shrdist import main as shrdist
from fairshare.cli.shrgrid import main as shrgrid
from fairshare.core.lnode import WriteBack
from fairshare.daemon.grid import remote_now
from fairshare.daemon.spool import Spool
from fairshare.sim.daemon import simulated_daemon
from fairshare.store import grid
from fairshare.store.published import LnodeStore
from udb import directives, mounts, tables
from udb.cli.udbgen import main as udbgen
from udb.session import dispose_all, open_udb, read_connection

EPOCH = 1_700_000_000.0
CHARGE_PER_CPU_S = 10_000.0

#: The VO's policy: VO-A's two projects, P1 (u1, u2) and P2 (u3).
POLICY = """
create:VO-A:uid:900:shflags:040000:shares:1:
create:P1:uid:901:shflags:040000:shares:1:resgrp:VO-A:
create:P2:uid:902:shflags:040000:shares:1:resgrp:VO-A:
create:gu1:uid:5001:shares:1:resgrp:P1:
create:gu2:uid:5002:shares:1:resgrp:P1:
create:gu3:uid:5003:shares:1:resgrp:P2:
"""

#: A site: VO-A mounted at vo (half the machine), a local group beside it.
SITE = """
create:vo:uid:700:shflags:040000:shares:1:
create:Local:uid:701:shflags:040000:shares:1:
create:loc:uid:6001:shares:1:resgrp:Local:
"""


def load(url: str, text: str) -> None:
    engine = open_udb(url, create=True)
    directives.run(engine, directives.parse(text, "test"))


def run(cmd, *args) -> object:
    return CliRunner().invoke(cmd, list(args))


def make_grid(provider: str, sites: dict[str, str], reader=lambda url: url) -> None:
    """The VO's policy at `provider`; each site (name -> URL) with VO-A mounted at vo,
    fetched, and every other site as a peer, each reached at `reader(url)` (its
    read-only role's URL)."""
    load(provider, POLICY)
    for name, url in sites.items():
        load(url, SITE)
        r = run(shrgrid, "--udb", url, "--site", name)
        assert r.exit_code == 0, r.output
        source = reader(provider)
        r = run(shrgrid, "--udb", url, "--policy", "VO-A", "--mount", "vo", "--from", source)
        assert r.exit_code == 0, r.output
        for other, their in sites.items():
            if other != name:
                r = run(shrgrid, "--udb", url, "--peer", other, "--from", reader(their))
                assert r.exit_code == 0, r.output
        r = run(shrgrid, "--udb", url, "--fetch")
        assert "vo: 5 entries changed" in r.output, r.output


def entries(url: str) -> dict[str, tuple]:
    e = tables.entries.c
    with read_connection(open_udb(url)) as conn:
        rows = conn.execute(select(e.name, e.uid, e.resgrp, e.shares, e.shflags, e.mount))
        return {r.name: tuple(r[1:]) for r in rows}


@pytest.fixture
def urls(tmp_path) -> tuple[str, dict[str, str]]:
    yield (
        f"sqlite:///{tmp_path / 'vo.sqlite'}",
        {s: f"sqlite:///{tmp_path / f'{s}.sqlite'}" for s in ("A", "B")},
    )
    dispose_all()
    mounts._sources.clear()


# -- mounted policies ------------------------------------------------------------------------


def test_the_mounted_subtree_appears_at_both_sites_under_their_own_uids(urls):
    provider, sites = urls
    make_grid(provider, sites)
    for url in sites.values():
        got = entries(url)
        vo_uid = got["vo"][0]
        assert got["P1"][1] == vo_uid and got["P2"][1] == vo_uid  # under the mount point
        assert got["gu1"][1] == got["P1"][0] and got["gu3"][1] == got["P2"][0]
        assert all(got[n][4] == vo_uid for n in ("P1", "P2", "gu1", "gu2", "gu3"))
        assert got["loc"][4] == 0 and got["vo"][4] == 0  # local entries stay local
        assert min(got[n][0] for n in ("P1", "gu1")) >= mounts.GRID_UID_BASE


def test_mounted_entries_are_read_only_to_udbgen_and_shrdist(urls, tmp_path):
    provider, sites = urls
    make_grid(provider, sites)
    url = sites["A"]
    path = Path(url.removeprefix("sqlite:///"))
    before = entries(url)
    refusals = [
        (udbgen, "-c", "update:gu1:shares:5:"),
        (udbgen, "-c", "delete:P2:"),
        (udbgen, "-c", "create:new:uid:6100:resgrp:P1:"),
        (udbgen, "-c", "delete:vo:"),
        (shrdist, "-g", "P1", "-b", "gu1=3"),
        (shrdist, "-g", "vo", "-b", "P1=3"),
    ]
    for cmd, *args in refusals:
        r = run(cmd, "--udb", url, *args)
        assert r.exit_code == 2, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1, r.output
        assert "read-only" in r.output or "mount point" in r.output, r.output
    assert entries(url) == before
    # The mount point's own share is the site's to set; a replacement keeps the mounts,
    # and may not leave the mount point out.
    assert run(udbgen, "--udb", url, "-c", "update:vo:shares:3:").exit_code == 0
    assert path.exists()
    r = run(udbgen, "--udb", url, "--replace", "-c", "create:Local:uid:701:shflags:040000:")
    assert r.exit_code == 2 and "leaves out the mount point vo" in r.output, r.output
    keep = "create:vo:uid:700:shflags:040000:shares:2: create:Local:uid:701:shflags:040000:"
    assert run(udbgen, "--udb", url, "--replace", "-c", keep).exit_code == 0
    after = entries(url)
    assert {n: after[n] for n in ("P1", "gu1")} == {n: before[n] for n in ("P1", "gu1")}
    assert "loc" not in after
    # udbsee -a > saved; udbgen --replace saved: the backup's mounted entries are skipped.
    from udb.cli.udbsee import main as udbsee

    saved = tmp_path / "saved.udb"
    saved.write_text(run(udbsee, "--udb", url, "-a").output)
    r = run(udbgen, "--udb", url, "--replace", str(saved))
    assert r.exit_code == 0, r.output
    assert entries(url) == after


def test_a_policy_change_arrives_with_the_next_fetch_and_a_lost_source_keeps_the_last(urls):
    provider, sites = urls
    make_grid(provider, {"A": sites["A"]})
    url = sites["A"]
    directives.run(open_udb(provider), directives.parse("update:gu1:shares:7:", "vo"))
    r = run(shrgrid, "--udb", url, "--fetch")
    assert "vo: 1 entries changed" in r.output
    assert entries(url)["gu1"][2] == 7
    Path(provider.removeprefix("sqlite:///")).rename(provider.removeprefix("sqlite:///") + ".gone")
    mounts._sources.clear()
    r = run(shrgrid, "--udb", url, "--fetch")
    assert r.exit_code == 1
    assert "vo: not fetched, the last good version kept" in r.output, r.output
    assert entries(url)["gu1"][2] == 7  # the last good version
    r = run(shrgrid, "--udb", url)
    assert "mount vo: VO-A from" in r.output and "fetched 20" in r.output
    assert "failed, last good version kept" in r.output
    doc = run(shrgrid, "--udb", url, "--json")
    assert '"error": "' in doc.output


def test_a_name_a_local_entry_has_is_not_mounted_and_nothing_changes(urls):
    provider, sites = urls
    make_grid(provider, {"A": sites["A"]})
    directives.run(open_udb(provider), directives.parse("create:loc:uid:5009:resgrp:P2:", "vo"))
    r = run(shrgrid, "--udb", sites["A"], "--fetch")
    assert "VO-A's loc has the name of a local entry" in r.output, r.output
    assert entries(sites["A"])["loc"][4] == 0


# -- usage records --------------------------------------------------------------------------


def record(cpu: float, t: float) -> WriteBack:
    """A write-back of `cpu` CPU s as of `t` (usage and charge alike)."""
    return WriteBack(cpu * CHARGE_PER_CPU_S, t, cpu * CHARGE_PER_CPU_S, cpu)


def peer(url: str, site: str) -> grid.Peer:
    with read_connection(open_udb(url)) as conn:
        return next(p for p in grid.peers(conn) if p.site == site)


def test_a_write_back_of_a_mounted_leaf_is_one_record_applied_once(urls):
    provider, sites = urls
    make_grid(provider, sites)
    a, b = (open_udb(sites[s]) for s in "AB")
    uid = entries(sites["A"])["gu1"][0]
    local = entries(sites["A"])["loc"][0]
    store = LnodeStore(a, "host1")
    store.write_back([(uid, record(2.0, EPOCH)), (local, record(5.0, EPOCH))], 1e9)
    store.write_back([(uid, record(1.0, EPOCH + 60))], 1e9)
    with read_connection(a) as conn:
        rows = conn.execute(select(tables.grid_usage)).all()
    assert [(r.site, r.serial, r.node, r.cpu_seconds) for r in rows] == [
        ("A", 1, "gu1", 2.0),
        ("A", 2, "gu1", 1.0),
    ]  # the local user's charges stay at A
    assert grid.pull(b, peer(sites["B"], "A"), EPOCH + 60, 1e12) == 2
    assert grid.pull(b, peer(sites["B"], "A"), EPOCH + 60, 1e12) == 0  # applied once
    usage = grid.remote_usage(b, EPOCH + 60, 1e12)
    assert usage["gu1"] == pytest.approx(3.0 * CHARGE_PER_CPU_S)
    assert usage["P1"] == usage["vo"] == usage["gu1"]  # the groups: their leaves' sums
    assert "loc" not in usage
    with read_connection(b) as conn:
        assert conn.execute(select(func.count()).select_from(tables.grid_remote)).scalar() == 1


def test_a_site_prunes_old_records_and_a_peer_away_longer_says_what_it_missed(
    urls, monkeypatch, caplog
):
    """Records older than RETAIN go at every PRUNE_EVERY-th serial; a peer that had not
    pulled them goes on from the first one left, and says which it missed."""
    monkeypatch.setattr(grid, "PRUNE_EVERY", 3)
    provider, sites = urls
    make_grid(provider, sites)
    a, b = (open_udb(sites[s]) for s in "AB")
    uid = entries(sites["A"])["gu1"][0]
    store = LnodeStore(a, "host1")
    for cpu, t in ((1.0, EPOCH), (2.0, EPOCH + 60), (4.0, EPOCH + grid.RETAIN + 30)):
        store.write_back([(uid, record(cpu, t))], 1e9)
    with read_connection(a) as conn:
        kept = conn.execute(select(tables.grid_usage.c.serial)).scalars().all()
    assert kept == [2, 3]  # serial 3 pruned what was older than RETAIN before its time
    assert grid.pull(b, peer(sites["B"], "A"), EPOCH + grid.RETAIN + 30, 1e12) == 2
    assert "no longer keeps its records 1 to 1" in caplog.text
    usage = grid.remote_usage(b, EPOCH + grid.RETAIN + 30, 1e12)
    assert usage["gu1"] == pytest.approx(6.0 * CHARGE_PER_CPU_S)  # 2 + 4 CPU s applied


def test_the_real_daemons_exchange_runs_beside_the_cycle_not_in_it(monkeypatch, caplog):
    """With `background` a fetch that hangs (a peer's connection timing out) holds up no
    cycle: the cycles go on, and the one that finds the fetch and pull done takes what
    they brought, a failure included, through the cycle's UdbCalls."""
    import threading

    from fairshare.daemon import grid as exchange
    from fairshare.daemon.outage import UdbCalls

    gate, started = threading.Event(), threading.Event()

    def slow_fetch(engine, now):
        started.set()
        gate.wait(10)
        return []

    def failing_pull(engine, now, halflife):  # this site's own UDB went away
        raise OperationalError("pull", {}, Exception("connection refused"))

    monkeypatch.setattr(exchange, "fetch_all", slow_fetch)
    monkeypatch.setattr(exchange, "pull_all", failing_pull)
    udb = UdbCalls(lambda: 0.0, lambda: 0, lambda: None)
    g = exchange.GridExchange(None, interval=60.0, background=True)
    site, consts = type("Site", (), {"grid": None})(), type("C", (), {"halflife": 1.0})()
    assert not g.when_due(udb, None, site, EPOCH, 100.0, consts)  # started, not waited for
    assert started.wait(5)
    assert not g.when_due(udb, None, site, EPOCH + 1, 101.0, consts)  # still fetching
    assert g.exchanges == 0
    gate.set()
    assert isinstance(g._pending[1].exception(5), OperationalError)  # (the thread is done)
    assert udb.unreachable_since is None
    assert not g.when_due(udb, None, site, EPOCH + 2, 102.0, consts)
    assert g.exchanges == 1 and g._pending is None
    # The thread's failure is the cycle's: an outage of the UDB, said as such.
    assert udb.unreachable_since is not None
    assert "could not pull the peers' usage records: connection refused" in caplog.text
    assert not g.when_due(udb, None, site, EPOCH + 3, 103.0, consts)  # next one at 160
    assert g._pending is None


def test_a_peer_that_names_itself_otherwise_is_not_applied(urls):
    provider, sites = urls
    make_grid(provider, sites)
    r = run(shrgrid, "--udb", sites["B"], "--peer", "A", "--from", sites["B"])
    assert r.exit_code == 0
    r = run(shrgrid, "--udb", sites["B"], "--fetch")
    assert r.exit_code == 1 and "peer A: not pulled: peer A:" in r.output, r.output
    assert "is site B" in r.output


def scenario(tmp_path: Path, name: str, work: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(
        'cpus = 2\nduration = "2h"\ndelta = "4s"\n[consts]\nhalflife = "1000d"\n'
        f'writeback = "20s"\ncheckpoint = "4s"\n{work}'
    )
    return path


def workload(name: str, procs: int = 4) -> str:
    return f'[[workload]]\nname = "{name}"\nprocs = {procs}\n'


def grid_daemon(url: str, scenario_path: Path, host: str, epoch=EPOCH, interval=8.0, spool=None):
    """A simulated daemon of the site at `url` (host `host`, spooling to the file `spool`),
    started, and the tally (uid -> CPU s) of what its machine gave each uid."""
    d, _m, _n = simulated_daemon(
        open_udb(url), str(scenario_path), host=host, epoch=epoch, grid_interval=interval
    )
    if spool is not None:
        d.ledger.spool = Spool(spool, host)
    got = defaultdict(float)
    sample = d.collector.sample

    def counted(*args, **kw):
        out = sample(*args, **kw)
        for p in out.processes:
            got[p.uid] += p.cpu
        return out

    d.collector.sample = counted
    d.start()
    return d, got


def grid_daemons(sites: dict[str, str], tmp_path: Path, works: dict[str, str], interval=8.0):
    """A simulated daemon per site (host h<site>), started, with a tally of the CPU
    seconds its machine gave each uid."""
    daemons, tally = {}, {}
    for s, url in sites.items():
        sc = scenario(tmp_path, s, works[s])
        daemons[s], tally[s] = grid_daemon(url, sc, f"h{s}", interval=interval)
    return daemons, tally


def step(daemons, n=1) -> None:
    for _ in range(n):
        for d in daemons:
            d.clock.sleep(d.consts.delta, d.loop.wake)
            d.step()


def e_share(d, name: str) -> float:
    return float(d.table.e_share[d.tree.node(name)])


def test_a_user_burning_cpu_at_a_gets_less_at_b_within_one_exchange(urls, tmp_path):
    provider, sites = urls
    make_grid(provider, sites)
    works = {"A": workload("gu1"), "B": workload("gu1") + workload("gu2")}
    daemons, tally = grid_daemons(sites, tmp_path, works)
    a, b = daemons["A"], daemons["B"]
    step([a, b], 3)
    assert e_share(b, "gu1") == pytest.approx(e_share(b, "gu2"), rel=0.05)
    # One exchange: A's write-back (20 s) exports, B's next pull (8 s) applies.
    step([a, b], 20 // 4 + 8 // 4 + 1)
    assert b.grid.exchanges >= 2
    assert a.ledger.writebacks
    used_at_a = grid.remote_usage(open_udb(sites["B"]), b.clock.time(), 1e12)
    assert used_at_a["gu1"] > 0 and "gu2" not in used_at_a
    assert e_share(b, "gu1") < 0.8 * e_share(b, "gu2")
    # Counted once: B's grid state holds A's usage, gu1's own usage at B is B's alone.
    gu1 = b.tree.node("gu1")
    assert b.site.grid.remote[gu1] == pytest.approx(used_at_a["gu1"], rel=0.05)
    assert b.table.usage[gu1] < 0.75 * b.site.grid.remote[gu1]
    assert remote_now(b)["gu1"] == pytest.approx(b.site.grid.remote[gu1])
    # And the usage B holds of A is what A's machine gave gu1 and A wrote back.
    step([a, b], 10)
    a.shutdown()
    step([b], 3)
    with read_connection(open_udb(sites["B"])) as conn:
        cpu = conn.execute(select(tables.grid_remote.c.cpu_seconds)).scalar()
    uid = int(a.tree.ids[a.tree.node("gu1")])
    assert cpu == pytest.approx(tally["A"][uid], rel=1e-9)
    assert np.isfinite(e_share(b, "gu1"))


def test_a_mount_point_is_global_unless_its_scope_is_set(urls):
    from fairshare.store.config import load_tree

    provider, sites = urls
    make_grid(provider, {"A": sites["A"]})
    with read_connection(open_udb(sites["A"])) as conn:
        tree = load_tree(conn)
    measured = tree.measured_globally()
    assert measured[tree.node("P1")] and measured[tree.node("gu1")]
    assert not measured[tree.node("vo")] and not measured[tree.node("loc")]
    assert run(udbgen, "--udb", sites["A"], "-c", "update:vo:scope:local:").exit_code == 0
    with read_connection(open_udb(sites["A"])) as conn:
        assert not load_tree(conn).measured_globally().any()


def test_under_a_local_mount_point_the_other_sites_usage_changes_nothing(urls, tmp_path):
    provider, sites = urls
    make_grid(provider, sites)
    r = run(udbgen, "--udb", sites["B"], "-c", "update:vo:scope:local:")
    assert r.exit_code == 0, r.output
    works = {"A": workload("gu1"), "B": workload("gu1") + workload("gu2")}
    daemons, _tally = grid_daemons(sites, tmp_path, works)
    a, b = daemons["A"], daemons["B"]
    step([a, b], 20 // 4 + 8 // 4 + 4)
    assert b.grid.exchanges >= 2
    gu1 = b.tree.node("gu1")
    assert b.site.grid.remote[gu1] > 0  # B has A's usage of gu1, and does not count it
    assert e_share(b, "gu1") == pytest.approx(e_share(b, "gu2"), rel=0.05)
    a.shutdown()
    b.shutdown()


def test_shrtree_shows_where_each_mount_comes_from_and_when_it_was_fetched(urls):
    from fairshare.cli.shrtree import main as shrtree

    provider, sites = urls
    make_grid(provider, {"A": sites["A"]})
    r = run(shrtree, "--udb", sites["A"], "-l")
    assert "MOUNTED POLICIES (read-only here)" in r.output, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("vo: VO-A from "))
    assert provider.removeprefix("sqlite:///") in line and "last fetched 20" in line
    Path(provider.removeprefix("sqlite:///")).unlink()
    mounts._sources.clear()
    run(shrgrid, "--udb", sites["A"], "--fetch")
    r = run(shrgrid, "--udb", sites["A"])
    r = run(shrtree, "--udb", sites["A"], "-l")
    assert "failed, the last good version kept: " in r.output, r.output
    assert "gu1" in r.output  # still mounted
    doc = __import__("json").loads(run(shrtree, "--udb", sites["A"], "--json").output)
    (m,) = doc["mounts"]
    assert m["name"] == "vo" and m["policy"] == "VO-A" and m["fetched"] and m["error"]


def test_the_daemon_takes_a_changed_policy_and_says_once_when_it_cannot(urls, tmp_path, caplog):
    import logging

    provider, sites = urls
    make_grid(provider, {"A": sites["A"]})
    daemons, _tally = grid_daemons({"A": sites["A"]}, tmp_path, {"A": workload("gu1")})
    a = daemons["A"]
    step([a], 2)
    assert a.tree.find("gu4") is None
    directives.run(open_udb(provider), directives.parse("create:gu4:uid:5004:resgrp:P2:", "vo"))
    step([a], 4)  # one grid interval (8 s), then the next cycle's reload
    assert a.tree.find("gu4") is not None
    path = Path(provider.removeprefix("sqlite:///"))
    path.rename(f"{path}.gone")
    mounts._sources.clear()
    with caplog.at_level(logging.INFO, logger="shrdaemon"):
        logging.getLogger("shrdaemon").propagate = True
        step([a], 12)
    said = [r.getMessage() for r in caplog.records if "mount vo" in r.getMessage()]
    assert len(said) == 1 and "the last good version kept" in said[0], said
    assert a.tree.find("gu4") is not None  # still scheduled from the last good version
    a.shutdown()
