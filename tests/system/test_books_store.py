"""The books under real faults (issue "Books", 4 and 6): shrdaemon processes on this
machine (--enforcer none, the real procfs collector) charge a busy loop running as a
test uid, and what they charge is compared with the kernel's count of that uid's CPU.

- A PostgreSQL UDB (the session's throwaway server) under two daemons, hosts a and b,
  restarted with ``pg_ctl stop -m immediate``, and a duplicate daemon for host a
  started as soon as the server is back: either the duplicate is refused (host a's
  daemon took its lock again first) or host a's daemon stops writing (the duplicate
  took it); no CPU second is charged twice.
- A SQLite UDB alone on a 1 MB tmpfs: the daemon's WAL stays small; filled to the last
  byte, the daemon logs one line a minute, and SIGTERM (or kill -9) during the outage
  spools what it owes, which the next start writes back once.
- A PostgreSQL UDB stopped under a daemon, the daemon killed with -9 during the outage
  and started again once the server is back: the spool and the lnode cgroups' counters
  it covers lose nothing (within 1% of the kernel's count of the workload).

Both daemons of the PostgreSQL case watch the same machine, so each charges the busy
loop once: the uid's charges are twice its CPU.  Needs root (the test uid, mounts).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from machine_lock import cpu_by_uid
from sqlalchemy import select

from fairshare.core.consts import Consts
from fairshare.store.config import save_consts
from fairshare.store.published import LnodeStore
from system.test_daemon_real import spawn, stop_children, term_with_parent
from udb.models import Entry
from udb.session import dispose_all, open_udb, read_session, write_session

pytestmark = pytest.mark.requires("root", "real-cpu")

UID = 61001  # the test uid of tests/system/test_daemon_real.py: nothing else runs as it
ROOT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fill_udb(url: str, **consts) -> None:
    engine = open_udb(url, create=True)
    with write_session(engine) as s:
        s.add_all(
            [
                Entry(name="Idle", uid=11, shares=0),
                Entry(name="unknown", uid=12, shares=1),
                Entry(name="ta", uid=UID, shares=1),
            ]
        )
        save_consts(s, Consts(**consts))


def daemon(url: str, host: str, spool, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fairshare.cli.shrdaemon", "--udb", url, "--enforcer", "none",
         "--socket", "", "--host", host, "--spool", str(spool), *args],
        cwd=ROOT_DIR,
        env={**os.environ, "PYTHONPATH": ROOT_DIR},
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=term_with_parent,
    )  # fmt: skip


def wait_for(predicate, timeout=30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def charged(url: str) -> float:
    """The test uid's CPU seconds in the UDB (cpuquotaused)."""
    engine = open_udb(url)
    with read_session(engine) as s:
        return s.scalar(select(Entry.cpuquotaused).where(Entry.uid == UID))


def stop(procs: list[subprocess.Popen], sig=signal.SIGTERM) -> list[str]:
    """Signal every daemon still running, and return each one's log."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    logs = []
    for p in procs:
        try:
            _out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            _out, err = p.communicate()
        logs.append(err)
    return logs


def kill(procs: list[subprocess.Popen]) -> None:
    """Whatever daemon is still running (a failed test) is killed: none outlives it."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


# -- 4: a PostgreSQL restart under two daemons, and a duplicate --------------------------------


@pytest.mark.requires("postgresql")
@pytest.mark.parametrize("first", ["a", "duplicate"])
def test_a_postgresql_restart_and_a_duplicate_daemon_count_nothing_twice(
    pg_server, pg_db, tmp_path, first
):
    """`first`: which of host a's daemons takes the lock when the server is back.  "a":
    host a's daemon takes its lock again and publishes, then the duplicate starts;
    "duplicate": host a's daemon is stopped (SIGSTOP) through the
    restart until the duplicate runs, then continued, and finds the lock taken."""
    fill_udb(pg_db, delta=1.0, writeback=4.0, checkpoint=2.0)
    a = daemon(pg_db, "a", tmp_path / "a.spool")
    b = daemon(pg_db, "b", tmp_path / "b.spool")
    procs = [a, b]
    try:
        stores = [LnodeStore(open_udb(pg_db), h) for h in "ab"]
        assert wait_for(lambda: all(s.published_cycle() for s in stores)), stop(procs)
        shell = spawn(UID, 1, session=True)
        try:
            time.sleep(4)  # checkpoints taken: a duplicate would recover one
            if first == "duplicate":
                a.send_signal(signal.SIGSTOP)
            pg_server.stop()
            time.sleep(10)
            pg_server.start()
            if first == "a":
                # Host a's daemon takes its lock again (it publishes after the restart)
                # before the duplicate starts: the duplicate is then refused.
                dispose_all()
                before = stores[0].published_cycle() or 0
                assert wait_for(lambda: (stores[0].published_cycle() or 0) > before + 1), stop(
                    procs
                )
            twin = daemon(pg_db, "a", tmp_path / "a.spool")
            procs.append(twin)
            if first == "duplicate":
                dispose_all()
                gone = stores[0].published_cycle()
                wait_for(lambda: (stores[0].published_cycle() or 0) > (gone or 0) + 1)
                a.send_signal(signal.SIGCONT)
            time.sleep(8)
            used = cpu_by_uid({UID})[UID]
        finally:
            stop_children([shell])
        time.sleep(3)  # every daemon samples the reaped loop
        logs = stop(procs)
    finally:
        if procs[0].poll() is None:
            procs[0].send_signal(signal.SIGCONT)
        kill(procs)
    dispose_all()
    got = charged(pg_db)
    exits = [p.returncode for p in procs]
    print(f"\nPostgreSQL restart + duplicate ({first} first): {got:.2f} CPU s charged by two "
          f"hosts for {used:.2f} used (2 x {used:.2f} = {2 * used:.2f}, "
          f"{got / (2 * used) - 1:+.1%}); exits a={exits[0]} b={exits[1]} "
          f"duplicate={exits[2]}")  # fmt: skip
    assert exits[1] == 0, logs[1]
    # The later of host a's two daemons stopped with status 2 and a line saying why.
    assert exits[0] == (2 if first == "duplicate" else 0), logs[0]
    assert exits[2] == (0 if first == "duplicate" else 2), logs[2]
    loser = logs[0] if first == "duplicate" else logs[2]
    print(loser.strip().splitlines()[-1])
    if first == "a":
        assert "already served" in loser, loser
        # Each daemon may miss the loop's last cycle (its shell's exit): 1 s each.
        assert 2 * used - 2.5 <= got <= 2 * used + 0.5, logs
    else:
        assert "lock is held by another shrdaemon" in loser, loser
        assert "stopped after" in loser.strip().splitlines()[-2], loser
        # Nothing twice; host a loses what its stopped daemon had not checkpointed
        # before the restart and what ran until the duplicate's first sample.
        assert got <= 2 * used + 0.5, logs


@pytest.mark.requires("postgresql")
def test_kill_9_during_a_postgresql_outage_loses_nothing_once_back(pg_server, pg_db, tmp_path):
    """The Grid issue's "a host that loses the database keeps scheduling and spools what
    it owes; a kill -9 during the outage loses nothing once the host is back": the
    restarted daemon writes the spool back once and charges what ran since it (and
    while no daemon ran) from the lnode cgroups' counters the spool covers."""
    from machine_lock import remove_fairshare_cgroups

    from system.test_books_real import busy_in, gone, kernel_cgroup, usage
    from system.test_daemon_real import kill_test_uids

    fill_udb(pg_db, delta=0.5, writeback=2.0, checkpoint=1.5)
    spool = tmp_path / "a.spool"
    cg = kernel_cgroup()
    first = daemon(pg_db, "a", spool)
    procs, work = [first], None
    store = LnodeStore(open_udb(pg_db), "a")
    try:
        assert wait_for(store.published_cycle), stop(procs)
        work = busy_in(cg, UID)
        time.sleep(4.0)  # write-backs and checkpoints into the UDB
        pg_server.stop()
        dispose_all()
        time.sleep(6.0)  # the outage: what it owes is spooled
        assert first.poll() is None and spool.exists(), stop(procs)
        first.kill()  # kill -9 during the outage
        first.wait()
        time.sleep(3.0)  # the loop runs on with no daemon and no database
        pg_server.start()
        again = daemon(pg_db, "a", spool)
        procs.append(again)
        assert wait_for(lambda: (store.published_cycle() or 0) > 2), stop(procs)
        time.sleep(2.0)
        kill_test_uids()
        gone(UID)
        time.sleep(2.0)  # the daemon's last cycles see the last CPU
        (log,) = stop([again])
        truth = usage(cg)
    finally:
        kill(procs)
        if work is not None and work.poll() is None:
            work.kill()
            work.wait()
        kill_test_uids()
        remove_fairshare_cgroups()
        cg.rmdir()
    dispose_all()
    got = charged(pg_db)
    print(f"\nPostgreSQL outage + kill -9: {got:.2f} CPU s charged, the kernel counted "
          f"{truth:.2f} ({got / truth - 1:+.2%})")  # fmt: skip
    assert "wrote back the spool" in log and not spool.exists(), log
    assert "charged from its counter" in log, log
    assert got == pytest.approx(truth, rel=0.01), log


# -- 6: a small and then full filesystem -----------------------------------------------------


@pytest.fixture
def tiny_fs(tmp_path):
    """A 1 MB tmpfs of its own, unmounted afterwards."""
    where = tmp_path / "tiny"
    where.mkdir(mode=0o755)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield where
    dispose_all()
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(where) -> None:
    """Fill the filesystem at `where` to its last byte."""
    fd = os.open(where / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\1" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("fault", "stop_with"),
    [("full", signal.SIGTERM), ("full", signal.SIGKILL)],
    ids=["full-SIGTERM", "full-SIGKILL"],
)
def test_a_full_filesystem_loses_nothing_and_logs_once_a_minute(
    tiny_fs, tmp_path, fault, stop_with
):
    url = f"sqlite:///{tiny_fs / 'udb.sqlite'}"
    fill_udb(url, delta=0.5, writeback=3.0, checkpoint=2.0)
    dispose_all()
    spool = tmp_path / "state" / "a.spool"
    d = daemon(url, "a", spool)
    procs = [d]
    try:
        assert wait_for(lambda: LnodeStore(open_udb(url), "a").published_cycle()), stop(procs)
        dispose_all()
        shell = spawn(UID, 1, session=True)
        try:
            time.sleep(20)  # 40 publishes: the WAL stays short on the 1 MB filesystem
            wal = os.stat(f"{tiny_fs / 'udb.sqlite'}-wal").st_size
            print(f"\nWAL {wal} bytes, {os.statvfs(tiny_fs).f_bfree} blocks free")
            fill(tiny_fs)
            time.sleep(15)  # 30 cycles on a full disk
            used = cpu_by_uid({UID})[UID]
        finally:
            stop_children([shell])
        time.sleep(1.5)  # the daemon samples the reaped loop
        if stop_with == signal.SIGKILL:
            time.sleep(2.5)  # past a checkpoint, which is spooled
        (log,) = stop(procs, stop_with)
    finally:
        kill(procs)
    lines = log.strip().splitlines()
    outage = [line for line in lines if "unreachable" in line]
    assert wal <= 600_000, f"WAL {wal} bytes"
    assert len(outage) == 1, log  # 15 s of a full disk: one line a minute
    assert not any("reachable again" in line for line in lines), log
    assert spool.exists(), log
    if stop_with == signal.SIGTERM:
        assert "every lnode written back" not in lines[-1] and "spooled to" in lines[-1], log
    (tiny_fs / "filler").unlink()
    after = daemon(url, "a", spool, "--once")
    _out, log2 = after.communicate(timeout=60)
    assert after.returncode == 0, log2
    assert "wrote back the spool" in log2 and not spool.exists(), log2
    got = charged(url)
    print(f"\n{fault} + {signal.Signals(stop_with).name}: {got:.2f} CPU s charged for "
          f"{used:.2f} used ({got / used - 1:+.1%}); WAL {wal} bytes")  # fmt: skip
    if stop_with == signal.SIGTERM:
        # within a cycle or two: the loop's last half second ends in its shell's exit
        assert got == pytest.approx(used, abs=1.0), (log, log2)
    else:  # kill -9: what accrued since the last spooled checkpoint (2 s) is lost
        assert used - 3.0 <= got <= used + 0.5, (log, log2)


def test_a_daemon_whose_shm_file_fails_says_so_in_its_log(tiny_fs, tmp_path):
    """SQLite maps the -shm file; when it is cut short (its filesystem fails) the next
    access is SIGBUS, which no Python handler can survive: the log must say so."""
    url = f"sqlite:///{tiny_fs / 'udb.sqlite'}"
    fill_udb(url, delta=0.5)
    dispose_all()
    d = daemon(url, "a", tmp_path / "a.spool")
    try:
        assert wait_for(lambda: LnodeStore(open_udb(url), "a").published_cycle())
        dispose_all()
        os.truncate(f"{tiny_fs / 'udb.sqlite'}-shm", 0)
        try:
            d.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.skip("truncating the -shm file did not bring SIGBUS here")
        _out, log = d.communicate()
    finally:
        kill([d])
    print(f"\n{log.strip().splitlines()[-3:]}")
    assert d.returncode == -signal.SIGBUS
    assert "Fatal Python error: Bus error" in log, log
