"""shrprio and the daemon's `priority` request: the target-deviation tuples and flat
priorities of the lnodes the simulated daemon of test_shrview published (seed 001)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fairshare.cli.shrprio import main as shrprio
from fairshare.server.answers import Answers, Peer
from fairshare.store.priority import published_priorities
from integration.test_shrview import published, published_rows  # noqa: F401
from udb.session import open_udb


def run(url: str, *args: str):
    return CliRunner().invoke(shrprio, ["--udb", url, "--host", "simulator", *args])


def test_json_orders_by_priority_as_the_tuples_order(published):  # noqa: F811
    r = run(published, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["host"] == "simulator" and doc["base"] == 200 and doc["depth"] == 2
    names = [p["name"] for p in doc["lnodes"]]
    assert sorted(names) == ["a2", "b1", "me", "quiet"]
    prios = [p["priority"] for p in doc["lnodes"]]
    assert prios == sorted(prios, reverse=True)
    digits = [tuple(p["digits"]) for p in doc["lnodes"]]
    assert digits == sorted(digits, reverse=True)
    for p in doc["lnodes"]:
        a, b = p["digits"]
        assert p["priority"] == a * 200 + b
        assert a == min(199, int(p["deviations"][0] + 100) // 1)


def test_deviations_are_target_minus_actual_among_present_siblings(published):  # noqa: F811
    """A (3 shares) and B (1) are both present: A's target 75%, its actual its usage over
    A's and B's; within B, b1 and quiet (1 share each) 50% each."""
    rows = published_rows(published)
    doc = published_priorities(open_udb(published), "simulator").as_json()
    by = {p["name"]: p["deviations"] for p in doc["lnodes"]}
    ua, ub = rows["A"].usage, rows["B"].usage
    assert by["me"][0] == pytest.approx(75 - 100 * ua / (ua + ub), abs=1e-4)
    assert by["b1"][0] == pytest.approx(25 - 100 * ub / (ua + ub), abs=1e-4)
    u1, u2 = rows["b1"].usage, rows["quiet"].usage
    assert by["b1"][1] == pytest.approx(50 - 100 * u1 / (u1 + u2), abs=1e-4)


def test_plain_display_and_names(published):  # noqa: F811
    r = run(published, "me", "b1")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("host simulator, cycle ") and "Deviations" in lines[1]
    assert sorted(line.split()[1] for line in lines[2:]) == ["b1", "me"]
    r = run(published, "nobody")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "nobody" in r.stderr


def test_the_socket_request_answers_anyone_the_same(published):  # noqa: F811
    answers = Answers(open_udb(published), "simulator", None, Path("/x"))
    assert "priority" in answers.handlers()
    reply = answers.handlers()["priority"](Peer(1, 65534, 65534), {})
    assert reply == published_priorities(open_udb(published), "simulator").as_json()


def test_other_sites_usage_counts_below_a_global_entry(published, tmp_path):  # noqa: F811
    """With A's scope global, me's and a2's standing within A counts what they used at
    the other sites (the daemon's grid_remote, given to the request); B's does not."""
    import shutil

    from udb.cli.udbgen import main as udbgen

    path = published.removeprefix("sqlite:///")
    copy = tmp_path / "udb.sqlite"
    shutil.copy(path, copy)
    url = f"sqlite:///{copy}"
    r = CliRunner().invoke(udbgen, ["--udb", url, "-c", "update:A:scope:global:"])
    assert r.exit_code == 0, r.output
    rows = published_rows(published)
    extra = 10 * (rows["me"].usage + rows["a2"].usage)
    answers = Answers(open_udb(url), "simulator", None, Path("/x"))
    answers.remote = lambda: {"a2": extra, "A": extra, "b1": 1e12}
    doc = answers.priority(Peer(1, 65534, 65534), {})
    by = {p["name"]: p["deviations"] for p in doc["lnodes"]}
    um, ua2 = rows["me"].usage, rows["a2"].usage + extra
    assert by["me"][1] == pytest.approx(50 - 100 * um / (um + ua2), abs=1e-4)
    local = published_priorities(open_udb(url), "simulator").as_json()
    assert {p["name"]: p["deviations"] for p in local["lnodes"]}["b1"] == by["b1"]
    assert by["me"][0] == pytest.approx(
        75 - 100 * rows["A"].usage / (rows["A"].usage + rows["B"].usage), abs=1e-4
    )
