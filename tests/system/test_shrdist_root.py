"""shrdist as root (who needs no auth file) and as real unprivileged uids (setuid
children, tests/asuser.py): batch and test modes, the change log, the auth file's
trust, a running daemon picking a change up.  The rest of shrdist (the auth file's
syntax, the editor): tests/integration/test_shrdist.py.

Expected shares are worked from the guide's ACME site (Tables 30 and 31): Proj2 has
250 of the 1000 top-level shares (machine share 0.25) and its users u9..u12 have
50/30/10/10 of 100; Proj1 has 0.5, split 500/500 between Proj1A and Proj1B (0.25
each), whose users u5, u6 (and u7, u8) have 50 each.
"""

from __future__ import annotations

import json
import os

import pytest
from asuser import UIDS, open_up, remove, run_as, shared_dir
from busy import BusyProcesses, RecordedOs
from click.testing import CliRunner
from conftest import ACME, load
from integration.test_shrdist import NO_AUTH, log_rows, run, shares
from sqlalchemy import func, select

from fairshare.admin.shrdist import NotAuthorised, read_auth, untrusted_reason
from fairshare.cli.shrdist import main as shrdist
from fairshare.collect import ProcessSample
from fairshare.core.consts import SHAREBYACCT, Consts
from fairshare.daemon.daemon import Daemon, Options
from fairshare.enforce.none import NoEnforcer
from fairshare.sim.daemon import simulated_daemon
from fairshare.sim.machine import SimClock
from fairshare.store.config import save_consts
from fairshare.store.published import LnodeStore
from udb.models import SHF_GROUP, Entry
from udb.session import open_udb, write_session

pytestmark = pytest.mark.requires("root")


# -- the auth file's trust ------------------------------------------------------------------


def test_auth_file_trusted_only_if_root_owned_and_not_writable_by_others(tmp_path):
    f = tmp_path / "shrdist.auth"
    f.write_text("mlb Mktg\n")
    f.chmod(0o644)
    assert untrusted_reason(f) is None
    f.chmod(0o664)
    assert "mode 0664 is writable by group or others: not trusted" in untrusted_reason(f)
    f.chmod(0o644)
    os.chown(f, UIDS[0], UIDS[0])
    assert f"owned by {UIDS[0]} (uid {UIDS[0]}), not root: not trusted" in untrusted_reason(f)
    # A symbolic link is never followed, even to a trusted file: the file is opened once,
    # and what was opened is checked (a name swapped in between: test_file_attacks.py).
    os.chown(f, 0, 0)
    assert [p.group for p in read_auth(f)] == ["Mktg"]
    (tmp_path / "link.auth").symlink_to(f)
    with pytest.raises(NotAuthorised, match=r"link.auth: is a symbolic link: not trusted$"):
        read_auth(tmp_path / "link.auth")


# -- batch and test modes, as root (who needs no auth file) -------------------------------


def test_batch_sets_several_members_and_logs_each(acme):
    r = run(acme, "-g", "Proj2", "-b", "u9=30,u10=50", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["group"] == "Proj2" and d["m_share"] == pytest.approx(0.25) and d["written"]
    got = {m["name"]: (m["old"], m["shares"], m["group_share"], m["m_share"]) for m in d["members"]}
    assert got["u9"] == (50, 30, pytest.approx(0.30), pytest.approx(0.075))
    assert got["u10"] == (30, 50, pytest.approx(0.50), pytest.approx(0.125))
    assert got["u11"] == (10, 10, pytest.approx(0.10), pytest.approx(0.025))
    assert shares(acme, "u9", "u10", "u11") == [30, 50, 10]
    who = os.environ.get("SUDO_USER") or "root"
    assert sorted(log_rows(acme)) == [
        (who, "Proj2", "u10", 30, 50),
        (who, "Proj2", "u9", 50, 30),
    ]


def test_batch_is_all_or_nothing(acme):
    r = run(acme, "-g", "Proj2", "-b", "u9=30", "-b", "u1=5")
    assert r.exit_code == 2
    assert "u1: not a member of Proj2 (members: u10, u11, u12, u9)" in r.output
    r = run(acme, "-g", "Proj2", "-b", "u9=30,u10=-4")
    assert r.exit_code == 2
    assert "item 2 'u10=-4': expected NAME=SHARES with SHARES a whole number >= 0" in r.output
    assert shares(acme, "u9", "u10") == [50, 30]
    assert log_rows(acme) == []


def test_test_mode_prints_the_result_and_writes_nothing(acme):
    r = run(acme, "-g", "Proj1A", "-p", "-b", "u5=70", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert not d["written"] and d["m_share"] == pytest.approx(0.25) and d["total"] == 120
    got = {m["name"]: m["m_share"] for m in d["members"]}
    assert got == {"u5": pytest.approx(0.25 * 70 / 120), "u6": pytest.approx(0.25 * 50 / 120)}
    assert shares(acme, "u5") == [50] and log_rows(acme) == []
    r = run(acme, "-g", "Proj1A", "-p", "-b", "u5=70")
    assert "Test mode, nothing written (machine share of Proj1A: 25.00%)" in r.output
    assert "14.58%" in r.output and "10.42%" in r.output


def test_zero_shares_draw_the_zs_warning_and_are_written(acme):
    r = run(acme, "-g", "Proj2", "-b", "u12=0")
    assert r.exit_code == 0
    assert "warning: u12: Zs user has zero shares (only Idle should)" in r.output
    assert shares(acme, "u12") == [0]


def test_root_without_group_gets_the_top_of_the_tree(acme):
    r = run(acme, "-b", "Proj1=400,Proj2=350", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    got = {m["name"]: m["m_share"] for m in d["members"]}
    assert d["group"] == "/"
    assert got["Proj1"] == pytest.approx(0.40) and got["Proj2"] == pytest.approx(0.35)
    assert got["Maint"] == pytest.approx(0.10) and got["Idle"] == 0.0


def test_a_user_is_not_a_group_and_unknown_groups_are_named(acme):
    r = run(acme, "-g", "u9", "-p")
    assert r.exit_code == 2 and "-g u9: u9 is a user, not a resource group" in r.output
    r = run(acme, "-g", "Nope", "-p")
    assert r.exit_code == 2 and "-g Nope: no such resource group in the UDB" in r.output


def test_share_by_account_members_are_the_accounts(acme_acct):
    with write_session(open_udb(acme_acct)) as s:
        save_consts(s, Consts(flags=SHAREBYACCT))
    r = run(acme_acct, "-g", "Proj1A", "-p", "--json")
    d = json.loads(r.output)
    got = {m["name"]: (m["kind"], m["m_share"]) for m in d["members"]}
    assert got == {
        "p1a-sim": ("account", pytest.approx(0.25 * 0.6)),
        "p1a-viz": ("account", pytest.approx(0.25 * 0.4)),
    }


def test_history_lists_who_when_group_member_old_new(acme):
    run(acme, "-g", "Proj2", "-b", "u9=40")
    run(acme, "-g", "Proj3", "-b", "u13=30")
    r = CliRunner().invoke(shrdist, ["--udb", acme, "--history", "--json"])
    rows = json.loads(r.output)
    assert [(x["group"], x["member"], x["old"], x["new"]) for x in rows] == [
        ("Proj2", "u9", 50, 40),
        ("Proj3", "u13", 25, 30),
    ]
    r = CliRunner().invoke(shrdist, ["--udb", acme, "--history", "-g", "Proj3"])
    assert r.output.count("\n") == 1 and r.output.rstrip().endswith("Proj3  u13  25 -> 30")


# -- a running daemon picks the change up at its next cycle ----------------------------------


def test_running_daemon_uses_the_new_shares_from_its_next_cycle(udb_url):
    engine = open_udb(udb_url)
    with write_session(engine) as s:
        s.add_all(
            [
                Entry(name="G", uid=500, shflags=SHF_GROUP, shares=1),
                Entry(name="alice", uid=1001, resgrp=500, shares=2),
                Entry(name="bob", uid=1002, resgrp=500, shares=2),
            ]
        )
    clock = SimClock(1_000_000.0)
    actions = RecordedOs()
    d = Daemon(
        engine,
        BusyProcesses(clock, [ProcessSample(7, 0.0, 1001), ProcessSample(8, 0.0, 1002)]),
        NoEnforcer(actions),
        LnodeStore(engine, "test"),
        actions,
        clock=clock,
        options=Options(),
    )
    d.start()

    def step_and_m_shares():
        clock.sleep(d.consts.delta, d.loop.wake)
        d.step()
        _head, rows = d.store.read_published()
        return {r.name: r.m_share for r in rows if r.kind == "user"}

    for _ in range(2):
        assert step_and_m_shares() == {"alice": 0.5, "bob": 0.5}
    # 2:2 -> 3:1 keeps the sum of shares: the change log tells the daemon.
    with write_session(engine) as s:
        assert s.scalar(select(func.sum(Entry.shares))) == 5
    r = CliRunner().invoke(
        shrdist, ["--udb", udb_url, "--auth", NO_AUTH, "-g", "G", "-b", "alice=3,bob=1"]
    )
    assert r.exit_code == 0, r.output
    assert step_and_m_shares() == {"alice": 0.75, "bob": 0.25}
    d.shutdown()


SCENARIO = """
cpus = 2
duration = "10m"
delta = "4s"
directives = '''
create:G:uid:500:shflags:040000:shares:1:
create:alice:uid:1001:resgrp:G:shares:2:
create:bob:uid:1002:resgrp:G:shares:2:
'''

[[workload]]
name = "alice"
procs = 3

[[workload]]
name = "bob"
procs = 1
"""


def test_shrdaemon_simulate_takes_the_new_shares_at_its_next_cycle(tmp_path, udb_url):
    path = tmp_path / "two.toml"
    path.write_text(SCENARIO)
    d, _model, _length = simulated_daemon(open_udb(udb_url), str(path), epoch=1_000_000.0)
    d.start()

    def m_shares():
        d.clock.sleep(d.consts.delta, d.loop.wake)
        d.step()
        _head, rows = d.store.read_published()
        return {r.name: r.m_share for r in rows if r.kind == "user"}

    assert m_shares() == {"alice": 0.5, "bob": 0.5}
    r = run(udb_url, "-g", "G", "-b", "alice=1,bob=3")
    assert r.exit_code == 0, r.output
    assert m_shares() == {"alice": 0.25, "bob": 0.75}
    d.shutdown()


# -- real unprivileged uids ------------------------------------------------------------------


@pytest.fixture
def shared_acme():
    """ACME in a directory every test uid can use, an auth file owned by root in it:
    62001 administers Proj1 (and so Proj1A and Proj1B), 62002 administers Proj2."""
    d = shared_dir()
    url = f"sqlite:///{d / 'udb.sqlite'}"
    load(url, ACME)
    auth = d / "shrdist.auth"
    auth.write_text(f"# login group\n{UIDS[0]} Proj1\n{UIDS[1]} Proj2 {UIDS[1]} Proj3\n")
    auth.chmod(0o644)
    open_up(d)
    yield url, auth
    remove(d)


def as_user(uid, url, auth, *args):
    return run_as(uid, shrdist, ["--udb", url, "--auth", str(auth), *args])


def test_group_admin_may_change_the_group_beneath_theirs(shared_acme):
    url, auth = shared_acme
    code, out = as_user(UIDS[0], url, auth, "-g", "Proj1A", "-b", "u5=70")
    assert code == 0, out
    assert shares(url, "u5") == [70]
    assert log_rows(url) == [(str(UIDS[0]), "Proj1A", "u5", 50, 70)]


def test_group_admin_without_g_gets_their_first_group(shared_acme):
    url, auth = shared_acme
    code, out = as_user(UIDS[1], url, auth, "-p", "--json")
    assert code == 0, out
    assert json.loads(out)["group"] == "Proj2"
    code, out = as_user(UIDS[1], url, auth, "-g", "Proj3", "-b", "u13=50")
    assert code == 0, out


def test_unauthorised_attempts_exit_2_and_write_nothing(shared_acme):
    url, auth = shared_acme
    code, out = as_user(UIDS[0], url, auth, "-g", "Proj2", "-b", "u9=1")
    assert code == 2
    assert f"{UIDS[0]} may not redistribute shares in Proj2: {auth} grants Proj1" in out
    code, out = as_user(UIDS[0], url, auth, "-g", "/", "-b", "Proj1=900")
    assert code == 2 and "may not redistribute shares in /" in out
    code, out = as_user(UIDS[2], url, auth, "-g", "Proj1A", "-b", "u5=1")
    assert code == 2 and f"{UIDS[2]} may not redistribute shares: not listed in {auth}" in out
    assert shares(url, "u9", "Proj1", "u5") == [50, 500, 50]
    assert log_rows(url) == []


def test_an_untrusted_auth_file_is_refused_and_says_why(shared_acme):
    url, auth = shared_acme
    auth.chmod(0o666)
    code, out = as_user(UIDS[0], url, auth, "-g", "Proj1A", "-b", "u5=70")
    assert code == 2 and "mode 0666 is writable by group or others: not trusted" in out
    auth.chmod(0o644)
    os.chown(auth, UIDS[0], UIDS[0])
    code, out = as_user(UIDS[0], url, auth, "-g", "Proj1A", "-b", "u5=70")
    assert code == 2 and f"owned by {UIDS[0]} (uid {UIDS[0]}), not root: not trusted" in out
    code, out = as_user(UIDS[0], url, auth.parent / "missing.auth", "-g", "Proj1A", "-p")
    assert code == 2 and "no such file: only root may redistribute shares" in out
    assert shares(url, "u5") == [50] and log_rows(url) == []
