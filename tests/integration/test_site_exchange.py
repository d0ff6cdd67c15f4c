"""GLOBALUSAGE's per-cycle site exchange (fairshare.store.exchange,
fairshare.daemon.exchange): each host reads the other live hosts' rows summed, with the
entries' stored usage in the same snapshot; a write-back moves what it wrote from the
host's row to the entries at once; each daemon's view of the others is one cycle old and
counts what they owe before they write it back.  On PostgreSQL:
tests/system/test_site_postgresql.py runs the tests taking `any_udb`.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from sqlalchemy import func, select

from fairshare.core.lnode import WriteBack
from fairshare.store.exchange import Contribution
from fairshare.store.published import LnodeStore
from integration.test_site import USERS, entry, site_daemons, slow_site, step_all
from udb import directives, tables
from udb.session import open_udb, read_connection

EPOCH = 1_700_000_000.0
X, Y, Z = 1001, 1002, 1003


def part(rows: dict[int, tuple]) -> Contribution:
    """A contribution from {uid: (present, demand, owed, rate, want)}."""
    uids = sorted(rows)
    cols = list(zip(*(rows[u] for u in uids), strict=True)) if uids else [()] * 5
    present, demand, owed, rate, want = (np.array(c) for c in cols)
    return Contribution.of(uids, present.astype(bool), demand.astype(bool), owed, rate, want)


def summed(sums) -> dict[int, tuple]:
    """SiteSums as {uid: (hosts, demand, owed, rate, want)}."""
    cols = (sums.hosts, sums.demand, sums.owed, sums.rate, sums.want)
    return {int(u): tuple(float(c[i]) for c in cols) for i, u in enumerate(sums.uid)}


def stored_rows(engine) -> int:
    with read_connection(engine) as conn:
        return conn.scalar(select(func.count()).select_from(tables.site_hosts))


@pytest.fixture(params=["sqlite"])
def any_udb(request, udb_url):
    """SQLite here; tests/system/test_site_postgresql.py runs these on PostgreSQL."""
    return udb_url


def site(url: str):
    engine = open_udb(url)
    directives.run(engine, directives.parse(USERS, "site"))
    return engine


# -- the exchange -------------------------------------------------------------------------


def test_a_contribution_merges_its_uids_and_survives_its_bytes():
    c = Contribution.of([Z, X, Z], [True, False, False], [False, False, True], [1, 2, 3])
    assert c.rows["uid"].tolist() == [X, Z]
    assert c.rows["flags"].tolist() == [0, 3] and c.rows["owed"].tolist() == [2, 4]
    assert len(c.encode()) == 2 * 25
    assert Contribution.decode(c.encode()).rows.tolist() == c.rows.tolist()
    assert len(Contribution.decode(None).rows) == 0


def test_each_host_reads_the_others_summed(any_udb):
    engine = site(any_udb)
    a, b, c = (LnodeStore(engine, h) for h in "abc")
    a.exchange(part({X: (1, 1, 10, 1.5, 2), Z: (1, 1, 5, 0.5, 2)}), EPOCH, 2, 0)
    b.exchange(part({Y: (1, 1, 7, 2, 2), Z: (1, 0, 3, 0, 0)}), EPOCH + 1, 2, 0)
    sums = c.exchange(part({Z: (0, 0, 4, 0, 0)}), EPOCH + 2, 4, 0)  # owes z, no lnode
    assert summed(sums) == {
        X: (1, 1, 10, 1.5, 2),
        Y: (1, 1, 7, 2, 2),
        Z: (2, 1, 8, 0.5, 2),
    }
    assert sums.host_cpus == {"a": 2.0, "b": 2.0} and sums.oldest == EPOCH
    # What a reads: b and c, not itself; the stored usage comes with it.
    sums = a.exchange(part({Z: (1, 1, 6, 1.0, 1)}), EPOCH + 4, 2, 0)
    assert summed(sums) == {Y: (1, 1, 7, 2, 2), Z: (1, 0, 7, 0, 0)}
    assert sums.host_cpus == {"b": 2.0, "c": 4.0} and sums.oldest == EPOCH + 1
    # b stops cleanly: its row goes.
    b.mark_stopped(EPOCH + 5)
    assert summed(a.exchange(part({}), EPOCH + 6, 2, 0)) == {Z: (0, 0, 4, 0, 0)}


def test_a_silent_host_is_left_out_until_it_exchanges_again(any_udb):
    engine = site(any_udb)
    a, b = LnodeStore(engine, "a"), LnodeStore(engine, "b")
    a.exchange(part({X: (1, 1, 10, 1, 1)}), EPOCH, 2, 0)
    assert summed(b.exchange(part({}), EPOCH + 100, 2, EPOCH))[X][0] == 1
    sums = b.exchange(part({}), EPOCH + 200, 2, EPOCH + 50)
    assert summed(sums) == {} and sums.host_cpus == {} and sums.oldest is None
    a.exchange(part({X: (1, 1, 11, 1, 1)}), EPOCH + 201, 2, EPOCH + 50)
    assert summed(b.exchange(part({}), EPOCH + 202, 2, EPOCH + 50)) == {X: (1, 1, 11, 1, 1)}


def test_a_write_back_moves_what_it_wrote_from_the_exchange_to_the_entries(any_udb):
    engine = site(any_udb)
    a, b, c = (LnodeStore(engine, h) for h in "abc")
    a.exchange(part({X: (1, 1, 10, 1, 1), Z: (1, 1, 4, 1, 1)}), EPOCH, 2, 0)
    b.exchange(part({Z: (0, 0, 3, 0, 0)}), EPOCH, 2, 0)  # b owes z only

    def site_usage() -> dict[int, float]:  # as c sees it (half-life 1e12 s: no decay)
        sums = c.exchange(part({}), EPOCH, 2, 0)
        stored = dict(zip(sums.stored_uid.tolist(), sums.shusage.tolist(), strict=True))
        return {u: stored.get(u, 0.0) + summed(sums).get(u, (0, 0, 0))[2] for u in (X, Z)}

    before = site_usage()
    assert before == {X: 10, Z: 7}
    a.write_back([(X, WriteBack(10.0, EPOCH, 1.0, 0.1))], halflife=1e12)
    assert site_usage() == pytest.approx(before)
    b.write_back([(Z, WriteBack(3.0, EPOCH, 1.0, 0.1))], halflife=1e12)
    assert site_usage() == pytest.approx(before)
    sums = c.exchange(part({}), EPOCH, 2, 0)
    assert summed(sums) == {X: (1, 1, 0, 1, 1), Z: (1, 1, 4, 1, 1)}  # b's row is empty
    assert entry(engine, "x").shusage == 10 and entry(engine, "z").shusage == 3


def test_concurrent_hosts_exchange_and_write_back_without_waiting_for_each_other(any_udb):
    engine = site(any_udb)
    hosts, rounds = 12, 15
    start = threading.Barrier(hosts)
    errors, last, written = [], {}, []

    def host(i: int) -> None:
        store = LnodeStore(engine, f"h{i}")
        rng = np.random.default_rng(i)
        try:
            start.wait(30)
            for r in range(rounds):
                uids = [u for u in (X, Y, Z) if rng.random() < 0.7]
                rows = {u: (1, 1, *rng.uniform(0, 10, 3)) for u in uids}
                store.exchange(part(rows), EPOCH + r, 2, 0)
                last[i] = rows
                if r % 5 == 4:
                    store.write_back([(u, WriteBack(1.0, EPOCH + r, 1, 0)) for u in uids], 1e12)
                    written.extend(uids)
                    last[i] = {u: (v[0], v[1], 0.0, *v[3:]) for u, v in rows.items()}
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=host, args=(i,)) for i in range(hosts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert stored_rows(engine) == hosts
    got = summed(LnodeStore(engine, "reader").exchange(part({}), EPOCH, 2, 0))
    for uid in (X, Y, Z):
        rows = [r[uid] for r in last.values() if uid in r]
        want = tuple(sum(r[k] for r in rows) for k in range(5)) if rows else None
        assert got.get(uid) == (pytest.approx(want, rel=1e-6) if want else None), uid
    assert entry(engine, "z").shcharge == written.count(Z)


# -- the daemons ---------------------------------------------------------------------------


def test_each_daemons_view_is_one_cycle_old_and_counts_what_the_others_owe(udb_url, tmp_path):
    engine, daemons, tally = site_daemons(udb_url, slow_site(tmp_path))
    a, b = daemons
    step_all(daemons, 3)  # 12 s: long before the first write-back (60 s)
    step_all([a])  # a's exchange now reads b's last cycle
    y, z = a.tree.node("y"), a.tree.node("z")
    view = a.site.view
    assert view.host_cpus == {"b": 2.0}
    assert view.time == pytest.approx(b.clock.time())
    assert a.clock.time() - view.time == pytest.approx(a.consts.delta)
    # y runs on b only: a sees it active there, with the CPU b gives it.
    assert view.active[y] and view.demand[y] and view.hosts[y] == 1
    assert view.rate[y] == pytest.approx(b.table.got[b.tree.node("y")] * 2.0)
    # Nothing is written back yet, yet a's usage of z holds b's charges too.
    assert entry(engine, "z").shusage == 0.0
    own = a.table.usage[z] - a.table.stored[z]
    assert a.table.stored[z] == pytest.approx(b.table.usage[z] - b.table.stored[z], rel=1e-6)
    assert a.table.usage[z] == pytest.approx(own + a.table.stored[z])
    assert view.usage[y] == pytest.approx(b.table.usage[y], rel=1e-6)
    for d in daemons:
        d.shutdown()
    # A clean stop leaves nothing in the exchange: every increment is in the entries.
    assert stored_rows(engine) == 0
    used = tally["a"][Z] + tally["b"][Z]
    assert entry(engine, "z").cpuquotaused == pytest.approx(used)


def test_a_killed_daemons_part_is_retracted_when_its_host_starts_again(udb_url, tmp_path):
    from fairshare.sim.daemon import simulated_daemon

    scenario = slow_site(tmp_path)
    engine, daemons, _tally = site_daemons(udb_url, scenario)
    a, b = daemons
    step_all(daemons, 3)
    assert stored_rows(engine) == 2 and b.site.view.host_cpus == {"a": 2.0}
    # a is killed (no shutdown) and a new daemon starts for host a: the recovery
    # writes back a's checkpoint and removes the killed daemon's row in one go.
    again, _model, _length = simulated_daemon(engine, str(scenario), host="a", epoch=EPOCH)
    again.start()
    assert stored_rows(engine) == 1
    step_all([again, b], 1)
    assert stored_rows(engine) == 2
    assert again.site.view.host_cpus == {"b": 2.0}
    assert b.site.view.host_cpus == {"a": 2.0} and b.site.view.active[b.tree.node("x")]
