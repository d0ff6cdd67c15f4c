"""A running daemon takes share changes from the UDB: at once when a command made them,
within the periodic reload when they were made behind the commands' back."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import update

from fairshare.reload import RELOAD_EVERY
from fairshare.sim.daemon import simulated_daemon
from udb import directives
from udb.models import Entry
from udb.session import open_udb, write_session

SCENARIO = (
    Path(__file__).resolve().parent.parent / "examples" / "scenarios" / "02_shares_2_to_1.toml"
)


def m_shares(daemon) -> dict[str, float]:
    ln = daemon.lnodes
    return {name: float(ln.table.m_share[ln.tree.node(name)]) for name in ("alice", "bob")}


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
