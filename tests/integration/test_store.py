"""The lnode store: publish, write-back (only its four columns), checkpoint, recovery."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select, update

from fairshare.core.lnode import WriteBack, activate, new_table
from fairshare.core.tree import build_tree
from fairshare.store.config import tree_rows
from fairshare.store.published import CycleHeader, LnodeStore
from udb.models import SHF_GROUP, Entry, LnodeCheckpoint, LnodeCycle, PublishedLnode
from udb.session import open_udb, read_session, write_session


@pytest.fixture
def engine(udb_url):
    e = open_udb(udb_url)
    with write_session(e) as s:
        s.add_all(
            [
                Entry(name="G", uid=500, shflags=SHF_GROUP, shares=1),
                Entry(name="alice", uid=1001, resgrp=500, shares=3, shcharge=10.0),
                Entry(name="bob", uid=1002, resgrp=500, shares=1, cpuquotaused=2.0),
            ]
        )
    return e


def tree_and_table(engine):
    with read_session(engine) as s:
        tree = build_tree(tree_rows(s))
    table = new_table(tree)
    return tree, table


def header(cycle=1, t=1000.0):
    return CycleHeader(t, 4.0, "cgroup1", 4242, cycle, "user", 900.0)


def test_publish_replaces_the_previous_cycle_with_active_lnodes(engine):
    tree, table = tree_and_table(engine)
    store = LnodeStore(engine, host="h1")
    alice = tree.node("alice")
    activate(table, alice, 5.0)
    table.m_share[alice] = 1.0
    store.publish(tree, table, header(1))
    bob = tree.node("bob")
    activate(table, bob, 7.0)
    table.e_share[bob] = 0.25
    store.publish(tree, table, header(2, 1004.0))
    head, rows = store.read_published()
    assert head.cycle == 2 and head.time == 1004.0 and head.enforcer == "cgroup1"
    assert head.running and head.stopped is None and head.pid == 4242
    # root, G, alice, bob: every active lnode once, nothing from cycle 1 left over.
    assert [r.name for r in rows] == ["root", "G", "alice", "bob"]
    by = {r.name: r for r in rows}
    assert by["bob"].usage == 7.0 and by["bob"].e_share == 0.25 and by["bob"].kind == "user"
    assert by["G"].kind == "group" and by["alice"].parent == tree.node("G")
    # Another host's table is left alone.
    LnodeStore(engine, host="h2").publish(tree, table, header(9))
    assert len(store.read_published()[1]) == 4
    store.mark_stopped(2000.0)
    head, rows = store.read_published()
    assert not head.running and head.stopped == 2000.0 and len(rows) == 4


def test_write_back_touches_only_usage_exit_time_charge_and_quota(engine):
    store = LnodeStore(engine, host="h1")
    # An administrator changes alice's shares and resgrp while her lnode is active.
    with write_session(engine) as s:
        s.execute(update(Entry).where(Entry.name == "alice").values(shares=9, comment="x"))
    store.write_back(
        [
            (1001, WriteBack(shusage=123.0, shextime=5000.0, charge=40.0, cpu_seconds=1.5)),
            (1002, WriteBack(shusage=7.0, shextime=5001.0, charge=2.0, cpu_seconds=0.5)),
        ],
        halflife=3600.0,
    )
    with read_session(engine) as s:
        a = s.scalars(select(Entry).where(Entry.uid == 1001)).one()
        b = s.scalars(select(Entry).where(Entry.uid == 1002)).one()
    assert (a.shusage, a.shextime, a.shcharge, a.cpuquotaused) == (123.0, 5000.0, 50.0, 1.5)
    assert a.shares == 9 and a.comment == "x" and a.resgrp == 500
    assert (b.shusage, b.shcharge, b.cpuquotaused) == (7.0, 2.0, 2.5)
    # Their group G is written back with them, in the same transaction (the guide records
    # usage "for each user and resource group"): both increments, aged to the later time.
    with read_session(engine) as s:
        g = s.scalars(select(Entry).where(Entry.uid == 500)).one()
    assert g.shusage == pytest.approx(123.0 * 0.5 ** (1 / 3600) + 7.0)
    assert (g.shextime, g.shcharge, g.cpuquotaused) == (5001.0, 42.0, 0.0)


def test_write_back_adds_to_what_is_stored(engine):
    store = LnodeStore(engine, host="h1")
    store.write_back([(1001, WriteBack(100.0, 0.0, 10.0, 1.0))], halflife=3600.0)
    # Another host writes 40 of its own an hour later: 100 aged by an hour, plus 40.
    LnodeStore(engine, host="h2").write_back(
        [(1001, WriteBack(40.0, 3600.0, 5.0, 0.5))], halflife=3600.0
    )
    with read_session(engine) as s:
        a = s.scalars(select(Entry).where(Entry.uid == 1001)).one()
        g = s.scalars(select(Entry).where(Entry.uid == 500)).one()
    assert (a.shusage, a.shextime, a.shcharge, a.cpuquotaused) == (90.0, 3600.0, 25.0, 1.5)
    assert (g.shusage, g.shcharge) == (90.0, 15.0)


def test_checkpoint_then_recover_writes_back_once(engine):
    tree, table = tree_and_table(engine)
    store = LnodeStore(engine, host="h1")
    alice, bob = tree.node("alice"), tree.node("bob")
    activate(table, alice, 0.0)
    activate(table, bob, 0.0)
    table.usage[[alice, bob]] = [300.0, 30.0]
    table.charge[[alice, bob]] = [50.0, 5.0]
    table.cpu_seconds[[alice, bob]] = [3.0, 0.25]
    assert store.checkpoint(tree, table, now=7000.0) == 2  # leaves only, not G
    # bob leaves cleanly before the crash: his write-back removes his checkpoint row.
    store.write_back([(1002, WriteBack(31.0, 7001.0, 6.0, 0.3))], halflife=3600.0)
    with read_session(engine) as s:
        assert s.scalars(select(LnodeCheckpoint.name)).all() == ["alice"]
    store.publish(tree, table, header())
    recovered = store.recover(halflife=3600.0)
    assert [(r.name, r.usage, r.charge, r.cpu_seconds, r.time) for r in recovered] == [
        ("alice", 300.0, 50.0, 3.0, 7000.0)
    ]
    with read_session(engine) as s:
        a = s.scalars(select(Entry).where(Entry.uid == 1001)).one()
        b = s.scalars(select(Entry).where(Entry.uid == 1002)).one()
        assert s.scalars(select(LnodeCheckpoint)).all() == []
        assert s.scalars(select(PublishedLnode)).all() == []
        assert s.scalars(select(LnodeCycle)).all() == []
    assert (a.shusage, a.shextime, a.shcharge, a.cpuquotaused) == (300.0, 7000.0, 60.0, 3.0)
    assert (b.shusage, b.shcharge) == (31.0, 6.0)  # only its clean write-back
    # The group is recovered with its member: bob's clean increment, then alice's.
    with read_session(engine) as s:
        g = s.scalars(select(Entry).where(Entry.uid == 500)).one()
    assert g.shusage == pytest.approx(31.0 + 300.0 * 0.5 ** (1 / 3600))
    assert g.shcharge == 56.0
    assert store.recover(halflife=3600.0) == []  # nothing is recovered twice


def test_entry_states(engine):
    store = LnodeStore(engine)
    st = store.entry_states([1002, 1001, 99])
    assert sorted(st) == [1001, 1002]
    assert st[1002].cpuquotaused == 2.0 and st[1001].shusage == 0.0
    assert store.entry_states([]) == {}


def test_published_rows_are_numbers_the_table_holds(engine):
    tree, table = tree_and_table(engine)
    store = LnodeStore(engine, host="h")
    alice = tree.node("alice")
    activate(table, alice, 1.0)
    table.refs[alice], table.nrun[alice] = 3, 2
    table.priority[alice] = np.float64(12.5)
    table.background[alice] = True
    table.due[alice], table.pri[alice] = 0.25, 0.75
    store.publish(tree, table, header())
    r = {x.name: x for x in store.read_published()[1]}["alice"]
    assert (r.refs, r.nrun, r.priority, r.background, r.shares) == (3, 2, 12.5, True, 3.0)
    assert (r.due, r.pri) == (0.25, 0.75)


def test_write_back_ages_stored_usage_with_each_entrys_half_life(engine):
    """Where a group sets its own half-life (seed 004, 2.2.2.4) the stored usage it and its
    members accrue ages with it: 100 written at 0, 40 more at two hours: 100 x 0.5 + 40
    under a two-hour half-life, against 100 x 0.25 + 40 under the global hour."""
    store = LnodeStore(engine, host="h1")
    two_hours = {1001: 7200.0, 500: 7200.0}
    store.write_back([(1001, WriteBack(100.0, 0.0, 10.0, 1.0))], 3600.0, by_uid=two_hours)
    store.write_back([(1001, WriteBack(40.0, 7200.0, 5.0, 0.5))], 3600.0, by_uid=two_hours)
    store.write_back([(1002, WriteBack(100.0, 0.0, 10.0, 1.0))], 3600.0, by_uid=two_hours)
    store.write_back([(1002, WriteBack(40.0, 7200.0, 5.0, 0.5))], 3600.0, by_uid=two_hours)
    with read_session(engine) as s:
        usage = dict(s.execute(select(Entry.uid, Entry.shusage)).all())
    assert usage[1001] == pytest.approx(90.0) and usage[1002] == pytest.approx(65.0)
