"""The daemon's books under faults (issue "Books", 4 and 6), in-process on a real
SQLite UDB: a duplicate daemon for the same host fences the one it replaced, and what
the UDB does not take (it refuses writes) is spooled and written back exactly once,
after a stop and after a crash.  The same faults with real processes, a real
PostgreSQL restart and a real full filesystem: tests/system/test_books_store.py."""

from __future__ import annotations

import shutil

import pytest
from sqlalchemy.exc import OperationalError

from fairshare.daemon.spool import Spool
from fairshare.store.published import LnodeStore
from integration import test_daemon
from integration.test_daemon import cycle, entry, make, proc, set_consts

engine = test_daemon.engine  # the fixture: a UDB with alice and bob in group G


def test_a_duplicate_daemon_for_the_host_fences_the_one_it_replaced(engine):
    """The lock was lost (a PostgreSQL restart) and a second daemon for the same host
    started and recovered the first one's checkpoint: the first must write nothing
    more, or the checkpointed CPU is counted twice."""
    set_consts(engine, checkpoint=8.0)
    d1, clock1, *_ = make(engine, lambda i: [proc(7, 1001, 1.0)])
    d1.start()
    cycle(d1, clock1, 3)  # checkpoint at t=8 (2 CPU s), then one more CPU s
    d2, clock2, *_ = make(engine, lambda i: [])
    d2.start()  # claims the host, recovers the 2 CPU s checkpointed
    assert entry(engine, "alice").cpuquotaused == 2.0
    cycle(d1, clock1)  # its publish is refused: it stops writing
    assert d1.fenced and d1.loop.stopping
    d1.shutdown()
    cycle(d2, clock2, 2)
    d2.shutdown()
    # 4 CPU s ran under d1; 2 were checkpointed and recovered, the rest is lost with
    # the lock (as with kill -9), none counted twice.
    assert entry(engine, "alice").cpuquotaused == 2.0


def _refuse_writes(monkeypatch, store: LnodeStore) -> None:
    """The UDB answers reads but refuses every write (a full disk, a read-only file)."""

    def full(*_a, **_k):
        raise OperationalError("UPDATE", {}, Exception("database or disk is full"))

    for name in ("publish", "write_back", "checkpoint", "mark_stopped"):
        monkeypatch.setattr(store, name, full)


def test_a_stop_during_a_write_outage_spools_and_the_next_start_writes_it_once(
    engine, tmp_path, monkeypatch, caplog
):
    spool = tmp_path / "spool" / "a.spool"
    d1, clock1, *_ = make(engine, lambda i: [proc(7, 1001, 1.0)], spool=Spool(spool, "test"))
    d1.start()
    with monkeypatch.context() as m:
        _refuse_writes(m, d1.store)
        caplog.set_level("INFO", "shrdaemon")
        cycle(d1, clock1, 20)  # 80 s: a write-back failed at 60 s
        assert d1.ledger.kept() == 1 and spool.exists()
        d1.shutdown()  # SIGTERM during the outage
    last = caplog.records[-1].getMessage()
    assert "every lnode written back" not in last and f"spooled to {spool}" in last
    assert entry(engine, "alice").cpuquotaused == 0.0
    kept = tmp_path / "copy"
    shutil.copy(spool, kept)
    d2, *_ = make(engine, lambda i: [], spool=Spool(spool, "test"))
    d2.start()  # the UDB takes writes again
    assert entry(engine, "alice").cpuquotaused == 20.0 and not spool.exists()
    shutil.copy(kept, spool)  # as if the start had crashed before removing it
    d3, *_ = make(engine, lambda i: [], spool=Spool(spool, "test"))
    d3.start()
    assert entry(engine, "alice").cpuquotaused == 20.0 and not spool.exists()


def test_a_crash_during_a_write_outage_loses_no_more_than_a_checkpoint_interval(
    engine, tmp_path, monkeypatch
):
    set_consts(engine, checkpoint=40.0)
    spool = tmp_path / "a.spool"
    d1, clock1, *_ = make(engine, lambda i: [proc(7, 1001, 1.0)], spool=Spool(spool, "test"))
    d1.start()
    cycle(d1, clock1, 10)  # a checkpoint at 40 s (10 CPU s: 1 a cycle) the UDB took
    with monkeypatch.context() as m:
        _refuse_writes(m, d1.store)
        cycle(d1, clock1, 12)  # write-back at 60 s and checkpoint at 80 s refused
        # kill -9 at 88 s: no shutdown
    d2, *_ = make(engine, lambda i: [], spool=Spool(spool, "test"))
    d2.start()
    # the spool at 80 s holds all 20 CPU s to then; the checkpoint at 40 s is part of it
    assert entry(engine, "alice").cpuquotaused == 20.0


def test_when_the_udb_takes_writes_again_the_spool_is_written_with_them(
    engine, tmp_path, monkeypatch
):
    spool = tmp_path / "a.spool"
    d1, clock1, *_ = make(engine, lambda i: [proc(7, 1001, 1.0)], spool=Spool(spool, "test"))
    d1.start()
    with monkeypatch.context() as m:
        _refuse_writes(m, d1.store)
        cycle(d1, clock1, 16)
        assert spool.exists()
    cycle(d1, clock1, 1)  # the publish works: the write-back is due at once
    assert not spool.exists() and d1.ledger.kept() == 0
    assert entry(engine, "alice").cpuquotaused == 17.0
    d1.shutdown()
    assert entry(engine, "alice").cpuquotaused == 17.0
    # a start that finds no spool (or one already written) adds nothing
    d2, *_ = make(engine, lambda i: [], spool=Spool(spool, "test"))
    d2.start()
    assert entry(engine, "alice").cpuquotaused == 17.0


@pytest.mark.parametrize("mode", [0o666, 0o644])
def test_a_spool_file_others_could_write_is_never_replayed(engine, tmp_path, mode, caplog):
    spool = tmp_path / "a.spool"
    spool.write_text('{"host": "test", "serial": 5, "owed": [[1001, 0, 0, 0, 99.0]]}')
    spool.chmod(mode)
    tmp_path.chmod(0o700)
    d, *_ = make(engine, lambda i: [], spool=Spool(spool, "test"))
    d.start()
    want = 0.0 if mode & 0o022 else 99.0
    assert entry(engine, "alice").cpuquotaused == want
