"""newacct: the command, the session records and the daemon charging the new account from
its next cycle (Share by Account), and as real unprivileged uids (setuid children)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from asuser import UIDS, forked, needs_root, open_up, remove, run_as, shared_dir
from busy import BusyProcesses
from click.testing import CliRunner

from fairshare.cli.newacct import main as newacct
from fairshare.collect import ProcessSample, Sample
from fairshare.collect.procfs import ProcfsCollector
from fairshare.collect.sim import SimClock
from fairshare.consts import SHAREBYACCT, TICKS_PER_SECOND, Consts, save_consts
from fairshare.daemon import Daemon, Options
from fairshare.enforce.none import NoEnforcer
from fairshare.newacct import (
    SessionAccounts,
    read_session_account,
    write_session_account,
)
from fairshare.store import LnodeStore
from udb import directives
from udb.session import open_udb, write_session

ME = os.getuid()
CHARGE_PER_CPU_S = 100.0 * TICKS_PER_SECOND  # the default cost_tick


def site(url: str, users: dict[str, tuple[int, str]]) -> None:
    """Three accounts a1..a3 in group G (Share by Account) and `users` name -> (uid, acids)."""
    text = "acid:a1:3001:\nacid:a2:3002:\nacid:a3:3003:\n"
    text += "create:G:uid:500:shflags:040000:shares:1:\n"
    for name, acid in (("a1", 3001), ("a2", 3002), ("a3", 3003)):
        text += f"create:{name}:uid:{acid}:shflags:01000000:shares:1:resgrp:G:\n"
    for name, (uid, acids) in users.items():
        text += f"create:{name}:uid:{uid}:acids:{acids}:resgrp:G:shares:1:\n"
    engine = open_udb(url)
    directives.run(engine, directives.parse(text, "site"))
    with write_session(engine) as s:
        save_consts(s, Consts(flags=SHAREBYACCT))


@pytest.fixture
def udb(udb_url):
    site(udb_url, {"me": (ME, "a1,a2")})
    return udb_url


@pytest.fixture
def spool(tmp_path):
    d = tmp_path / "accounts"
    d.mkdir()
    return d


def run(url, spool, *args):
    return CliRunner().invoke(newacct, ["--udb", url, "--spool", str(spool), *args])


def test_newacct_switches_shows_and_goes_back(udb, spool):
    forked(lambda: switch_show_and_go_back(udb, spool), new_session=True)


def switch_show_and_go_back(udb, spool):
    sid = os.getsid(0)
    r = run(udb, spool, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert (d["account"], d["acid"], d["default"], d["acids"]) == ("a1", 3001, True, [3001, 3002])
    assert d["session"] == sid and d["share_by_account"]
    r = run(udb, spool, "a2")
    assert r.exit_code == 0, r.output
    assert f"session {sid} of me: account a2 (acid 3002), set by newacct" in r.output
    rec = read_session_account(spool, sid)
    assert (rec.sid, rec.uid, rec.acid) == (sid, ME, 3002)
    assert (spool / str(sid)).read_text() == "3002\n"
    r = run(udb, spool, "3001")  # by number
    assert r.exit_code == 0 and "account a1 (acid 3001), set by newacct" in r.output
    r = run(udb, spool, "-d")
    assert r.exit_code == 0 and "account a1 (acid 3001), your default" in r.output
    assert not (spool / str(sid)).exists()


def test_an_account_outside_your_acids_is_refused_and_nothing_written(udb, spool):
    r = run(udb, spool, "a3")
    assert r.exit_code == 2
    assert "a3: not one of me's accounts (acids: a1, a2)" in r.output
    r = run(udb, spool, "nope")
    assert r.exit_code == 2 and "nope: no such account" in r.output
    assert list(spool.iterdir()) == []


def test_a_session_outside_this_pid_namespace_cannot_take_an_account(udb, spool, monkeypatch):
    """In a container that never made a session of its own, getsid gives 0 for every
    process: the daemon cannot tell those sessions apart, so newacct says so."""
    write_session_account(spool, 7, 3002)  # somebody else's session: left alone
    monkeypatch.setattr(os, "getsid", lambda pid: 0)
    for args in (["a2"], ["-d"]):
        r = run(udb, spool, *args)
        assert r.exit_code == 2, r.output
        assert "its leader is outside this PID namespace" in r.output
    assert [f.name for f in spool.iterdir()] == ["7"]
    r = run(udb, spool)  # asking is fine: the default account
    assert r.exit_code == 0 and "account a1 (acid 3001), your default" in r.output


def test_no_spool_directory_says_so(udb, tmp_path):
    r = run(udb, tmp_path / "missing", "a2")
    assert r.exit_code == 2 and "no such directory (is shrdaemon running?)" in r.output


# -- the daemon charges the session's processes to the new account ----------------------------


def charges_this_cycle(d, clock, before):
    clock.sleep(d.consts.delta, d.wake)
    d.step()
    _head, rows = d.store.read_published()
    now = {r.name: r.charge for r in rows if r.kind == "account"}
    return {k: v - before.get(k, 0.0) for k, v in now.items()}, now


def test_the_daemon_charges_the_new_account_from_its_next_cycle(udb, spool):
    engine = open_udb(udb)
    clock = SimClock(1_000_000.0)
    hook = SessionAccounts(spool, create=False)
    d = Daemon(
        engine,
        BusyProcesses(
            clock,
            [
                ProcessSample(7, 0.0, ME, runnable=True, sid=700),
                ProcessSample(8, 0.0, ME, runnable=True, sid=701),
            ],
        ),
        NoEnforcer(),
        LnodeStore(engine, "test"),
        clock=clock,
        options=Options(),
        account_of=hook,
    )
    d.start()
    per_cycle = 4.0 * CHARGE_PER_CPU_S  # one CPU for a 4 s cycle
    got, total = charges_this_cycle(d, clock, {})
    assert got == {"a1": pytest.approx(2 * per_cycle)}  # both sessions: the default account
    write_session_account(spool, 700, 3002)  # newacct a2 in session 700
    write_session_account(spool, 999, 3002)  # a session that no longer exists
    got, total = charges_this_cycle(d, clock, total)
    assert got == {"a1": pytest.approx(per_cycle), "a2": pytest.approx(per_cycle)}
    assert not (spool / "999").exists()  # the daemon removed the dead session's record
    # A record naming an account the user does not have is not trusted.
    write_session_account(spool, 701, 3003)
    got, total = charges_this_cycle(d, clock, total)
    assert got == {"a1": pytest.approx(per_cycle), "a2": pytest.approx(per_cycle)}
    assert set(hook.sessions) == {700}
    d.shutdown()


@needs_root
def test_the_daemon_ignores_a_record_owned_by_another_uid(udb, spool):
    write_session_account(spool, 700, 3002)
    os.chown(spool / "700", UIDS[0], UIDS[0])
    hook = SessionAccounts(spool, create=False)
    sample = Sample(0.0, 4.0, [ProcessSample(7, 0.0, ME, sid=700)])
    hook.refresh(sample, {ME: [3001, 3002], UIDS[0]: [3002]})
    assert hook(sample.processes[0]) is None  # ME's process: the record is UIDS[0]'s
    other = ProcessSample(9, 0.0, UIDS[0], sid=700)
    assert hook(other) == 3002


# -- real unprivileged uids ------------------------------------------------------------------


@pytest.fixture
def shared_site():
    d = shared_dir()
    url = f"sqlite:///{d / 'udb.sqlite'}"
    site(url, {"alice": (UIDS[0], "a1,a2"), "bob": (UIDS[1], "a3")})
    spool = d / "accounts"
    SessionAccounts(spool)  # as the daemon (root) makes it: sticky, world-writable
    open_up(d)
    yield url, spool
    remove(d)


@needs_root
def test_as_real_users_only_their_own_accounts(shared_site):
    url, spool = shared_site
    assert oct(spool.stat().st_mode & 0o7777) == "0o1777"
    args = ["--udb", url, "--spool", str(spool)]

    def in_one_session():  # alice and bob both work in this new session
        sid = os.getsid(0)
        refused = run_as(UIDS[0], newacct, [*args, "a3"])
        written = (spool / str(sid)).exists()
        chosen = run_as(UIDS[0], newacct, [*args, "a2"])
        taken_over = run_as(UIDS[1], newacct, [*args, "a3"])
        return sid, refused, written, chosen, taken_over

    sid, (code, out), written, chosen, (code_b, out_b) = forked(in_one_session, new_session=True)
    assert sid > 0
    assert code == 2 and "a3: not one of alice's accounts (acids: a1, a2)" in out
    assert not written
    assert chosen[0] == 0, chosen[1]
    # bob cannot take over alice's record of the session (sticky directory) ...
    assert code_b == 2 and f"belongs to uid {UIDS[0]}, not you" in out_b
    rec = read_session_account(spool, sid)
    assert (rec.uid, rec.acid) == (UIDS[0], 3002)
    # ... nor does alice's record move bob's processes.
    hook = SessionAccounts(spool, create=False)
    sample = Sample(0.0, 4.0, [ProcessSample(5, 0.0, UIDS[1], sid=sid)])
    hook.refresh(sample, {UIDS[0]: [3001, 3002], UIDS[1]: [3003]})
    assert hook(sample.processes[0]) is None
    assert hook(ProcessSample(6, 0.0, UIDS[0], sid=sid)) == 3002


def test_real_processes_are_mapped_by_their_session(spool):
    """On the real machine: a process in a session of its own (setsid), its session's
    record, the procfs collector's session ids, and the hook."""
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        write_session_account(spool, child.pid, 3002)  # its sid is its pid
        sample = ProcfsCollector().sample()
        mine = [p for p in sample.processes if p.pid == child.pid]
        assert [(p.sid, p.uid) for p in mine] == [(child.pid, ME)]
        hook = SessionAccounts(spool, create=False)
        hook.refresh(sample, {ME: [3001, 3002]})
        assert hook(mine[0]) == 3002
        ours = [p for p in sample.processes if p.pid == os.getpid()]
        assert ours[0].sid == os.getsid(0) and hook(ours[0]) is None
    finally:
        child.kill()
        child.wait()
