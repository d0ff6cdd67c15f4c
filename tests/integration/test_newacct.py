"""newacct: the command through a socket server, the daemon's session records, and the
daemon charging the new account from its next cycle (Share by Account).  As real
unprivileged uids against a running shrdaemon: tests/system/test_access.py."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from asuser import UIDS, forked
from busy import BusyProcesses, RecordedOs
from click.testing import CliRunner

from fairshare.cli.newacct import main as newacct
from fairshare.collect import ProcessSample, Sample
from fairshare.collect.procfs import ProcfsCollector
from fairshare.core.consts import SHAREBYACCT, TICKS_PER_SECOND, Consts
from fairshare.daemon.daemon import Daemon, Options
from fairshare.daemon.sessions import SessionAccounts, session_request
from fairshare.enforce.none import NoEnforcer
from fairshare.server.server import Server
from fairshare.sim.machine import SimClock
from fairshare.store.config import save_consts
from fairshare.store.published import LnodeStore
from udb import directives
from udb.errors import UdbError
from udb.session import open_udb, read_session, write_session

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
    engine = open_udb(url, create=True)  # as udbgen does
    directives.run(engine, directives.parse(text, "site"))
    with write_session(engine) as s:
        save_consts(s, Consts(flags=SHAREBYACCT))


@pytest.fixture
def udb(udb_url):
    site(udb_url, {"me": (ME, "a1,a2")})
    return udb_url


@pytest.fixture
def server(udb, tmp_path):
    """A socket server for the UDB (as shrdaemon runs one) and its session accounts."""
    accounts = SessionAccounts()
    srv = Server(str(tmp_path / "s.sock"), open_udb(udb), "test", accounts, tmp_path / "auth")
    srv.start()
    yield srv
    srv.stop()


def run(srv, *args):
    return CliRunner().invoke(newacct, ["--socket", srv.path, *args])


def test_newacct_switches_shows_and_goes_back(server):
    sid = forked(lambda: switch_show_and_go_back(server), new_session=True)
    assert sid > 0 and server.accounts.sessions == {}  # -d dropped the record


def switch_show_and_go_back(srv):
    sid = os.getsid(0)
    r = run(srv, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert (d["account"], d["acid"], d["default"], d["acids"]) == ("a1", 3001, True, [3001, 3002])
    assert d["session"] == sid and d["share_by_account"]
    r = run(srv, "a2")
    assert r.exit_code == 0, r.output
    assert f"session {sid} of me: account a2 (acid 3002), set by newacct" in r.output
    d = json.loads(run(srv, "--json").output)
    assert (d["acid"], d["default"], d["session"]) == (3002, False, sid)
    r = run(srv, "3001")  # by number
    assert r.exit_code == 0 and "account a1 (acid 3001), set by newacct" in r.output
    r = run(srv, "-d")
    assert r.exit_code == 0 and "account a1 (acid 3001), your default" in r.output
    return sid


def test_an_account_outside_your_acids_is_refused_and_nothing_recorded(server):
    r = run(server, "a3")
    assert r.exit_code == 2
    assert "a3: not one of me's accounts (acids: a1, a2)" in r.output
    r = run(server, "nope")
    assert r.exit_code == 2 and "nope: no such account" in r.output
    assert server.accounts.sessions == {}


def test_a_session_outside_this_pid_namespace_cannot_take_an_account(udb):
    """In a container that never made a session of its own, getsid gives 0 for every
    process: the daemon cannot tell those sessions apart, so newacct says so."""
    accounts = SessionAccounts()
    with read_session(open_udb(udb)) as s, pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "getsid", lambda pid: 0)
        for fields in ({"account": "a2"}, {"to_default": True}):
            with pytest.raises(UdbError, match="its leader is outside this PID namespace"):
                session_request(s, accounts, ME, os.getpid(), **fields)
    assert accounts.sessions == {}


def test_a_session_someone_else_leads_is_refused(udb_url):
    site(udb_url, {"me": (ME, "a1,a2"), "other": (ME + 1, "a1,a2")})
    udb = udb_url
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        accounts = SessionAccounts()
        with read_session(open_udb(udb)) as s:
            # Our own uid leads it: ours to name.
            reply = session_request(
                s, accounts, ME, os.getpid(), account="a2", session_id=child.pid
            )
            assert reply["session"] == child.pid and accounts.sessions[child.pid, ME].acid == 3002
            with pytest.raises(UdbError, match=f"session {child.pid} is not yours"):
                session_request(
                    s, accounts, ME + 1, os.getpid(), account="a2", session_id=child.pid
                )
            with pytest.raises(UdbError, match="no such session"):
                session_request(s, accounts, ME, os.getpid(), account="a2", session_id=2**22 + 7)
    finally:
        child.kill()
        child.wait()


def test_no_daemon_says_so(tmp_path):
    r = CliRunner().invoke(newacct, ["--socket", str(tmp_path / "none.sock"), "a2"])
    assert r.exit_code == 2 and "no such socket: is shrdaemon running?" in r.output
    assert len(r.output.strip().splitlines()) == 1


# -- the daemon charges the session's processes to the new account ----------------------------


def charges_this_cycle(d, clock, before):
    clock.sleep(d.consts.delta, d.loop.wake)
    d.step()
    _head, rows = d.store.read_published()
    now = {r.name: r.charge for r in rows if r.kind == "account"}
    return {k: v - before.get(k, 0.0) for k, v in now.items()}, now


def test_the_daemon_charges_the_new_account_from_its_next_cycle(udb):
    engine = open_udb(udb)
    clock = SimClock(1_000_000.0)
    hook = SessionAccounts()
    actions = RecordedOs()
    d = Daemon(
        engine,
        BusyProcesses(
            clock,
            [
                ProcessSample(7, 0.0, ME, runnable=True, sid=700),
                ProcessSample(8, 0.0, ME, runnable=True, sid=701),
            ],
        ),
        NoEnforcer(actions),
        LnodeStore(engine, "test"),
        actions,
        clock=clock,
        options=Options(),
        account_of=hook,
    )
    d.start()
    per_cycle = 4.0 * CHARGE_PER_CPU_S  # one CPU for a 4 s cycle
    got, total = charges_this_cycle(d, clock, {})
    assert got == {"a1": pytest.approx(2 * per_cycle)}  # both sessions: the default account
    hook.choose(700, ME, 3002)  # newacct a2 in session 700
    hook.choose(999, ME, 3002)  # a session that no longer exists
    got, total = charges_this_cycle(d, clock, total)
    assert got == {"a1": pytest.approx(per_cycle), "a2": pytest.approx(per_cycle)}
    assert (999, ME) not in hook.sessions  # the daemon forgot the dead session
    # A record naming an account the user no longer has is dropped.
    hook.choose(701, ME, 3003)
    got, total = charges_this_cycle(d, clock, total)
    assert got == {"a1": pytest.approx(per_cycle), "a2": pytest.approx(per_cycle)}
    assert set(hook.sessions) == {(700, ME)}
    d.shutdown()


def test_a_record_moves_only_the_processes_of_the_uid_that_made_it():
    hook = SessionAccounts()
    hook.choose(700, UIDS[0], 3002)
    sample = Sample(0.0, 4.0, [ProcessSample(7, 0.0, ME, sid=700)])
    hook.refresh(sample, {ME: [3001, 3002], UIDS[0]: [3002]})
    assert hook(sample.processes[0]) is None  # ME's process: the record is UIDS[0]'s
    assert hook(ProcessSample(9, 0.0, UIDS[0], sid=700)) == 3002
    assert not hook.clear(700, ME)  # nor may ME clear it
    hook.refresh(sample, {})  # Share by User mode: no acids known, the choice is kept
    assert hook.sessions[700, UIDS[0]].acid == 3002
    assert hook.clear(700, UIDS[0])


def test_users_sharing_a_session_keep_their_own_choices():
    """Guard: in a session several users share (su, sudo -u), each one's newacct used
    to replace the session's one record, resetting the others' choice."""
    hook = SessionAccounts()
    alice, bob = UIDS[0], UIDS[1]
    hook.choose(700, alice, 3002)
    hook.choose(700, bob, 3001)  # bob, su'd into alice's session
    assert hook.current(700, alice, [3001, 3002]) == (3002, True)
    assert hook.current(700, bob, [3001, 3002]) == (3001, True)
    assert hook(ProcessSample(7, 0.0, alice, sid=700)) == 3002
    assert hook(ProcessSample(8, 0.0, bob, sid=700)) == 3001
    assert hook.clear(700, bob) and not hook.clear(700, bob)  # bob clears his own only
    assert hook.current(700, alice, [3001, 3002]) == (3002, True)
    assert set(hook.sessions) == {(700, alice)}


def test_real_processes_are_mapped_by_their_session():
    """On the real machine: a process in a session of its own (setsid), its session's
    record, the procfs collector's session ids, and the hook."""
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        hook = SessionAccounts()
        hook.choose(child.pid, ME, 3002)  # its sid is its pid
        sample = ProcfsCollector().sample()
        mine = [p for p in sample.processes if p.pid == child.pid]
        assert [(p.sid, p.uid) for p in mine] == [(child.pid, ME)]
        hook.refresh(sample, {ME: [3001, 3002]})
        assert hook(mine[0]) == 3002
        ours = [p for p in sample.processes if p.pid == os.getpid()]
        assert ours[0].sid == os.getsid(0) and hook(ours[0]) is None
    finally:
        child.kill()
        child.wait()


def test_in_share_by_user_mode_newacct_says_accounts_change_nobodys_share(udb, tmp_path):
    """newacct(1): "In Share by User mode the account is recorded but does not change
    anyone's share; newacct says so" -- when it shows the account too."""
    with write_session(open_udb(udb)) as s:
        save_consts(s, Consts(flags=0))
    srv = Server(str(tmp_path / "u.sock"), open_udb(udb), "test", SessionAccounts(), tmp_path / "a")
    srv.start()
    try:
        notes = forked(lambda: [run(srv, *a).stderr for a in ((), ("a2",), ("-d",))],
                       new_session=True)  # fmt: skip
    finally:
        srv.stop()
    note = "accounts change nobody's share there"
    assert all(note in n for n in notes), notes
