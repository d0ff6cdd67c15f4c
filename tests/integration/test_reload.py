"""A running daemon takes share and constant changes from the UDB: at once when a
command made them, within the periodic reload when they were made behind the commands'
back.  It learns of them from one poll a cycle (fairshare.daemon.reload.poll)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import update

from fairshare.admin.shradmin import remove_schedule, set_constants, set_schedule
from fairshare.daemon.reload import RELOAD_EVERY, poll
from fairshare.sim.daemon import simulated_daemon
from udb import directives
from udb.models import Const, Entry, SyncRequest
from udb.session import open_udb, write_session

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "02_shares_2_to_1.toml"


def m_shares(daemon) -> dict[str, float]:
    return {name: float(daemon.table.m_share[daemon.tree.node(name)]) for name in ("alice", "bob")}


@pytest.fixture
def daemon(udb_url):
    d, _model, _cycles = simulated_daemon(open_udb(udb_url), str(SCENARIO))
    d.start()
    d.step()
    assert m_shares(d) == pytest.approx({"alice": 2 / 3, "bob": 1 / 3})
    return d


def test_udbgen_swap_keeping_every_total_is_seen_at_the_next_cycle(daemon, udb_url):
    # Same entry count, same sum of shares: only the change serial tells.
    text = "update:alice:shares:1:\nupdate:bob:shares:2:\n"
    directives.run(open_udb(udb_url), directives.parse(text, "-"))
    daemon.step()
    assert m_shares(daemon) == pytest.approx({"alice": 1 / 3, "bob": 2 / 3})


def test_an_edit_behind_the_commands_back_is_seen_by_the_periodic_reload(daemon, udb_url):
    with write_session(open_udb(udb_url)) as s:  # no change serial bumped
        s.execute(update(Entry).where(Entry.name == "alice").values(shares=1))
        s.execute(update(Entry).where(Entry.name == "bob").values(shares=2))
    daemon.step()
    assert m_shares(daemon) == pytest.approx({"alice": 2 / 3, "bob": 1 / 3})  # not yet
    for _ in range(RELOAD_EVERY):
        daemon.step()
    assert m_shares(daemon) == pytest.approx({"alice": 1 / 3, "bob": 2 / 3})


def polled(udb_url, host="h1"):
    return poll(open_udb(udb_url), host)


def test_the_poll_sees_every_command_that_changes_the_constants(udb_url):
    engine = open_udb(udb_url)
    seen = [polled(udb_url).consts]
    with write_session(engine) as s:
        set_constants(s, {"halflife": 120.0}, who="root", now=0.0)
    seen.append(polled(udb_url).consts)
    with write_session(engine) as s:
        set_schedule(s, "night", days="mon-fri", hours="0-23", changes={}, who="root", now=0.0)
    seen.append(polled(udb_url).consts)
    with write_session(engine) as s:
        remove_schedule(s, "night", who="root", now=0.0)
    seen.append(polled(udb_url).consts)
    assert seen == sorted(set(seen))  # each moved it on
    fingerprint = polled(udb_url).fingerprint
    directives.run(engine, directives.parse("create:carol:uid:4321:shares:5:\n", "-"))
    assert polled(udb_url).fingerprint != fingerprint
    assert polled(udb_url).consts == seen[-1]  # entries are not constants


def test_the_poll_counts_the_hosts_waiting_shrsync_requests(udb_url):
    with write_session(open_udb(udb_url)) as s:
        s.add_all(
            [
                SyncRequest(kind="update", who="root", host="h1", requested=1.0),
                SyncRequest(kind="quota", who="root", host="h1", requested=2.0),
                SyncRequest(kind="update", who="root", host="h1", requested=0.5, done=0.6),
                SyncRequest(kind="update", who="root", host="h2", requested=1.0),
            ]
        )
    assert polled(udb_url, "h1").requests == 2
    assert polled(udb_url, "h3").requests == 0


def test_a_shradmin_change_acts_at_the_next_cycle(daemon, udb_url):
    with write_session(open_udb(udb_url)) as s:
        set_constants(s, {"halflife": 123.0}, who="root", now=0.0)
    daemon.step()
    assert daemon.consts.halflife == 123.0


def test_a_constant_changed_behind_the_commands_back_is_read_by_the_periodic_reload(
    daemon, udb_url
):
    before = daemon.consts.halflife
    with write_session(open_udb(udb_url)) as s:  # no change serial bumped
        s.merge(Const(name="halflife", value=before * 2))
    daemon.step()
    assert daemon.consts.halflife == before  # not yet: the serial did not move
    for _ in range(RELOAD_EVERY):
        daemon.step()
    assert daemon.consts.halflife == before * 2
