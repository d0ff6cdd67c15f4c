"""GLOBALUSAGE's per-cycle site exchange (fairshare.store.exchange,
fairshare.daemon.exchange): the site's sums stay the exact sum of the hosts' rows
through replacements, write-backs, retractions and concurrent hosts; each daemon's view
of the others is one cycle old and counts what they owe before they write it back.
On PostgreSQL: tests/system/test_site_postgresql.py runs the tests taking `any_udb`.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from fairshare.core.lnode import WriteBack
from fairshare.store.exchange import FIELDS, Contribution, change
from fairshare.store.published import LnodeStore
from integration.test_site import USERS, entry, site_daemons, slow_site, step_all
from udb import directives, tables
from udb.session import open_udb, read_connection

EPOCH = 1_700_000_000.0
X, Y, Z = 1001, 1002, 1003


def contribution(rows: dict[int, tuple]) -> Contribution:
    """A contribution from {uid: (present, demand, owed, rate, want)}."""
    uids = sorted(rows)
    cols = np.array([rows[u] for u in uids], dtype=float).reshape(-1, len(FIELDS)).T
    return Contribution.of(uids, **dict(zip(FIELDS, cols, strict=True)))


def stored_sums(engine) -> dict[int, tuple]:
    """site_sums as {uid: (contributors, hosts, demand, owed, rate, want)}, rows with a
    contributor only."""
    s = tables.site_sums.c
    with read_connection(engine) as conn:
        rows = conn.execute(select(s).where(s.contributors > 0).order_by(s.uid)).all()
    return {r.uid: tuple(r[1:]) for r in rows}


def rows_summed(engine) -> dict[int, tuple]:
    """What site_sums must hold: the sum of every host's stored row."""
    h = tables.site_hosts.c
    with read_connection(engine) as conn:
        blobs = conn.scalars(select(h.columnar)).all()
    out: dict[int, np.ndarray] = {}
    for blob in blobs:
        c = Contribution.decode(blob)
        for i, uid in enumerate(c.uid.tolist()):
            out[uid] = out.get(uid, np.zeros(1 + len(FIELDS))) + np.r_[1.0, c.values[:, i]]
    return {u: tuple(v) for u, v in sorted(out.items())}


def assert_exact(engine) -> None:
    got, want = stored_sums(engine), rows_summed(engine)
    assert got.keys() == want.keys()
    for uid in got:
        assert got[uid] == pytest.approx(want[uid], abs=1e-9), uid


@pytest.fixture(params=["sqlite"])
def any_udb(request, udb_url):
    """SQLite here; tests/system/test_site_postgresql.py runs these on PostgreSQL."""
    return udb_url


def site(url: str):
    engine = open_udb(url)
    directives.run(engine, directives.parse(USERS, "site"))
    return engine


# -- the sums -----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.integers(0, 6), st.tuples(*[st.floats(0, 100)] * 5), max_size=5),
    st.dictionaries(st.integers(0, 6), st.tuples(*[st.floats(0, 100)] * 5), max_size=5),
)
def test_a_change_turns_the_old_rows_sums_into_the_new_ones(old, new):
    d_uid, d = change(contribution(old), contribution(new))
    for uid in set(old) | set(new):
        before = np.r_[float(uid in old), old.get(uid, (0,) * 5)]
        after = np.r_[float(uid in new), new.get(uid, (0,) * 5)]
        at = np.flatnonzero(d_uid == uid)
        moved = d[:, at[0]] if len(at) else np.zeros(6)
        assert before + moved == pytest.approx(after, abs=1e-9)


def test_the_sums_are_the_rows_summed_through_every_change(any_udb):
    engine = site(any_udb)
    a, b, c = (LnodeStore(engine, h) for h in "abc")
    a.exchange(contribution({X: (1, 1, 10, 1.5, 2), Z: (1, 1, 5, 0.5, 2)}), EPOCH, 2, 0)
    b.exchange(contribution({Y: (1, 1, 7, 2, 2), Z: (1, 0, 3, 0, 0)}), EPOCH, 2, 0)
    sums = c.exchange(contribution({Z: (0, 0, 4, 0, 0)}), EPOCH, 4, 0)  # owes z, no lnode
    assert stored_sums(engine) == {
        X: (1, 1, 1, 10, 1.5, 2),
        Y: (1, 1, 1, 7, 2, 2),
        Z: (3, 2, 1, 12, 0.5, 2),
    }
    assert sums.host_cpus == {"a": 2.0, "b": 2.0} and sums.oldest == EPOCH
    # a's x goes, its z changes: only the difference moves the sums.
    a.exchange(contribution({Z: (1, 1, 6, 1.0, 1)}), EPOCH + 4, 2, 0)
    assert stored_sums(engine)[Z] == (3, 2, 1, 13, 1.0, 1)
    assert X not in stored_sums(engine)
    with read_connection(engine) as conn:  # no host names x: its row is zeros, exactly
        row = conn.execute(select(tables.site_sums).where(tables.site_sums.c.uid == X)).one()
    assert tuple(row[1:]) == (0, 0, 0, 0.0, 0.0, 0.0)
    # b stops cleanly: its part goes with its row.
    b.mark_stopped(EPOCH + 5)
    assert Y not in stored_sums(engine)
    assert_exact(engine)


def test_a_silent_host_is_retracted_by_the_next_live_one(any_udb):
    engine = site(any_udb)
    a, b = LnodeStore(engine, "a"), LnodeStore(engine, "b")
    a.exchange(contribution({X: (1, 1, 10, 1, 1)}), EPOCH, 2, 0)
    b.exchange(contribution({X: (1, 1, 5, 1, 1)}), EPOCH + 100, 2, EPOCH)
    assert stored_sums(engine)[X] == (2, 2, 2, 15, 2, 2)
    sums = b.exchange(contribution({X: (1, 1, 6, 1, 1)}), EPOCH + 200, 2, EPOCH + 50)
    assert sums.host_cpus == {} and sums.oldest is None  # a was silent since EPOCH
    assert stored_sums(engine) == {X: (1, 1, 1, 6, 1, 1)}
    # a comes back: its row was gone, so all it has is added again.
    a.exchange(contribution({X: (1, 1, 11, 1, 1)}), EPOCH + 201, 2, EPOCH + 50)
    assert stored_sums(engine) == {X: (2, 2, 2, 17, 2, 2)}
    assert_exact(engine)


def test_a_write_back_moves_what_it_wrote_from_the_sums_to_the_entries(any_udb):
    engine = site(any_udb)
    a, b = LnodeStore(engine, "a"), LnodeStore(engine, "b")
    a.exchange(contribution({X: (1, 1, 10, 1, 1), Z: (1, 1, 4, 1, 1)}), EPOCH, 2, 0)
    b.exchange(contribution({Z: (0, 0, 3, 0, 0)}), EPOCH, 2, 0)  # b owes z only

    def site_usage(uid):  # stored + every host's owed (half-life 1e12 s: no decay)
        owed = stored_sums(engine).get(uid, (0, 0, 0, 0.0))[3]
        return entry(engine, {X: "x", Z: "z"}[uid]).shusage + owed

    before = {u: site_usage(u) for u in (X, Z)}
    a.write_back([(X, WriteBack(10.0, EPOCH, 1.0, 0.1))], halflife=1e12)
    assert {u: site_usage(u) for u in (X, Z)} == pytest.approx(before)
    assert stored_sums(engine)[X] == (1, 1, 1, 0.0, 1, 1)  # its lnode stays
    b.write_back([(Z, WriteBack(3.0, EPOCH, 1.0, 0.1))], halflife=1e12)
    assert stored_sums(engine)[Z] == (1, 1, 1, 4.0, 1, 1)  # b's row named z for owed only
    assert {u: site_usage(u) for u in (X, Z)} == pytest.approx(before)
    assert_exact(engine)


def test_concurrent_hosts_keep_the_sums_exact(any_udb):
    engine = site(any_udb)
    hosts, rounds = 12, 15
    start = threading.Barrier(hosts)
    errors = []

    def host(i: int) -> None:
        store = LnodeStore(engine, f"h{i}")
        rng = np.random.default_rng(i)
        try:
            start.wait(30)
            for r in range(rounds):
                uids = [u for u in (X, Y, Z) if rng.random() < 0.7]
                rows = {u: (1, 1, *rng.uniform(0, 10, 3)) for u in uids}
                store.exchange(contribution(rows), EPOCH + r, 2, 0)
                if r % 5 == 4:
                    store.write_back([(u, WriteBack(1.0, EPOCH + r, 1, 0)) for u in uids], 1e12)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=host, args=(i,)) for i in range(hosts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert_exact(engine)
    with read_connection(engine) as conn:
        assert conn.scalar(select(func.count()).select_from(tables.site_hosts)) == hosts


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
    assert stored_sums(engine) == {}
    used = tally["a"][Z] + tally["b"][Z]
    assert entry(engine, "z").cpuquotaused == pytest.approx(used)


def test_a_killed_daemons_part_is_retracted_when_its_host_starts_again(udb_url, tmp_path):
    from fairshare.sim.daemon import simulated_daemon

    scenario = slow_site(tmp_path)
    engine, daemons, _tally = site_daemons(udb_url, scenario)
    a, b = daemons
    step_all(daemons, 3)
    assert stored_sums(engine)[Z][:2] == (2, 2)
    # a is killed (no shutdown) and a new daemon starts for host a: the recovery
    # writes back a's checkpoint and retracts the killed daemon's part in one go.
    again, _model, _length = simulated_daemon(engine, str(scenario), host="a", epoch=EPOCH)
    again.start()
    assert stored_sums(engine)[Z][:2] == (1, 1)  # b's only
    assert_exact(engine)
    step_all([again, b], 1)
    assert stored_sums(engine)[Z][:2] == (2, 2)
    assert_exact(engine)
