"""The published table in columns (udb.columnar, lnode_cycles.columnar): the blob's
round trip, the columns a daemon publishes agree with its rows, and a UDB whose table
was published before the columns existed gets them from its rows when it migrates."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import create_engine, insert, text

from fairshare.core.lnode import activate, new_table
from fairshare.core.tree import build_tree
from fairshare.store.config import tree_rows
from fairshare.store.published import PUBLISHED, CycleHeader, LnodeStore
from udb.columnar import decode, encode, row_columns
from udb.models import SHF_GROUP, Entry, LnodeCycle, PublishedLnode
from udb.session import dispose_all, open_udb, read_session, upgrade, write_session

COLUMNS = [c for c in PUBLISHED if c != "host"]


def assert_same(got, want):
    assert sorted(got) == sorted(want)
    for name, values in want.items():
        if isinstance(values, list):
            assert got[name] == values, name
        else:
            assert got[name].dtype == values.dtype, name
            np.testing.assert_array_equal(got[name], values, err_msg=name)


def test_a_blob_gives_back_its_columns_nan_bools_and_text_included():
    cols = {
        "node": np.array([0, 1, 5], dtype=np.int64),
        "name": ["root", "Gé", "a,b\n"],
        "kind": ["root", "group", "user"],
        "usage": np.array([1.5, -0.0, 1e300]),
        "due": [0.25, None, 1.0],  # None: NaN
        "demand": np.array([True, False, True]),
        "refs": [1, 2, 3],
    }
    got = decode(encode(cols))
    assert got["name"] == ["root", "Gé", "a,b\n"] and got["kind"] == cols["kind"]
    assert got["node"].tolist() == [0, 1, 5] and got["refs"].dtype == np.int64
    assert np.signbit(got["usage"][1]) and got["usage"][2] == 1e300
    assert got["due"][0] == 0.25 and np.isnan(got["due"][1])
    assert got["demand"].dtype == bool and got["demand"].tolist() == [True, False, True]
    empty = decode(encode({"node": np.zeros(0, np.int64), "name": []}))
    assert empty["name"] == [] and len(empty["node"]) == 0


def test_a_blob_of_another_version_is_refused():
    blob = bytearray(encode({"node": [1]}))
    blob[-blob[::-1].index(b":") :] = b"9}"  # the header's last value: the row count
    with pytest.raises(ValueError):
        decode(bytes(blob.replace(b'"version":1', b'"version":7')))


@pytest.fixture
def engine(udb_url):
    e = open_udb(udb_url)
    with write_session(e) as s:
        s.add_all(
            [
                Entry(name="G", uid=500, shflags=SHF_GROUP, shares=1),
                Entry(name="alice", uid=1001, resgrp=500, shares=3),
                Entry(name="bob", uid=1002, resgrp=500, shares=1),
            ]
        )
    return e


def test_the_published_columns_are_the_published_rows(engine):
    with read_session(engine) as s:
        tree = build_tree(tree_rows(s))
    table = new_table(tree)
    for name, usage in (("alice", 5.0), ("bob", 7.5)):
        activate(table, tree.node(name), usage)
    table.m_share[tree.node("alice")] = 0.75
    table.demand[tree.node("bob")] = True
    store = LnodeStore(engine, host="h1")
    store.publish(tree, table, CycleHeader(1000.0, 4.0, "none", 1, 3, "user", 900.0))
    head, cols = store.read_columns()
    _head, rows = store.read_published()
    assert head.cycle == 3 and cols["name"] == ["root", "G", "alice", "bob"]
    assert_same(cols, row_columns(rows, COLUMNS))
    nothing, empty = LnodeStore(engine, host="elsewhere").read_columns()
    assert nothing is None
    assert_same(empty, row_columns((), COLUMNS))


def test_a_table_published_before_the_columns_gets_them_when_the_udb_migrates(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    old = create_engine(url)
    upgrade(old, "0010")  # the revision before the columns
    later = ("want", "target", "got", "got_minute", "flat")  # revision 0012's
    row = {c: 0 for c in PUBLISHED if c not in later}
    row |= {"host": "h", "kind": "user", "stored": None, "pri": None}
    rows = [
        row | {"node": 0, "name": "root", "kind": "root", "parent": -1, "usage": 3.5},
        row | {"node": 4, "name": "carol", "uid": 1003, "parent": 0, "level": 1, "due": 0.5},
    ]
    head = {"host": "h", "time": 10.0, "delta": 4.0, "enforcer": "none", "pid": 1, "cycle": 2}
    with old.begin() as conn:
        conn.execute(insert(PublishedLnode.__table__), rows)
        cycles = LnodeCycle.__table__
        conn.execute(insert(cycles).values(head | {"mode": "user", "started": 1.0, "running": 0}))
    old.dispose()
    engine = open_udb(url)  # migrates to head
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() >= "0012"
    head, cols = LnodeStore(engine, "h").read_columns()
    _head, read = LnodeStore(engine, "h").read_published()
    assert cols["name"] == ["root", "carol"] and np.isnan(cols["pri"]).all()
    assert all(np.isnan(cols[c]).all() for c in later)
    assert cols["due"][1] == 0.5 and cols["usage"][0] == 3.5
    assert_same(cols, row_columns(read, COLUMNS))
    dispose_all()
