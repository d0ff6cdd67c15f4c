"""Sites moving from Slurm: udbgen --sacctmgr reads a `sacctmgr dump` file into the UDB
(accounts as resource groups, users under them, Fairshare as shares), and udbsee
--sacctmgr writes the tree back in that format, so the two round-trip."""

from __future__ import annotations

import pwd
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from udb.cli.udbgen import main as udbgen
from udb.cli.udbsee import main as udbsee
from udb.models import Entry
from udb.session import read_session
from udb.slurm import read_dump

DUMP = """\
# sacctmgr dump hpc
Cluster - 'hpc':Fairshare=1:QOS='normal'
Parent - 'root'
User - 'root':DefaultAccount='root':AdminLevel='Administrator':Fairshare=1
Account - 'physics':Description='Physics dept':Organization='sci':Fairshare=40
Account - 'chem':Description='It''s chemistry':Fairshare=60
Parent - 'physics'
Account - 'optics':Fairshare=3
User - 'alice':DefaultAccount='chem':Fairshare=10
Parent - 'chem'
User - 'alice':DefaultAccount='chem':Fairshare=20
User - 'bob':Fairshare=parent
Parent - 'optics'
User - 'carol':Fairshare=5
"""
LOGINS = {"alice": 1001, "bob": 1002, "carol": 1003}


@pytest.fixture(autouse=True)
def logins(monkeypatch):
    def getpwnam(name):
        if name not in LOGINS:
            raise KeyError(name)
        return pwd.struct_passwd((name, "x", LOGINS[name], 100, "", "/", "/bin/sh"))

    monkeypatch.setattr(pwd, "getpwnam", getpwnam)


def entries(url):
    with read_session_of(url) as s:
        return {e.name: e for e in s.scalars(select(Entry))}


def read_session_of(url):
    from udb.session import open_udb

    return read_session(open_udb(url))


def test_a_dump_becomes_groups_and_users_with_their_fairshare(udb_url, tmp_path):
    dump = tmp_path / "hpc.dump"
    dump.write_text(DUMP)
    r = CliRunner().invoke(udbgen, ["--udb", udb_url, "-v", "--sacctmgr", str(dump)])
    assert r.exit_code == 0, r.output
    got = entries(udb_url)
    assert set(got) == {"physics", "chem", "optics", "alice", "bob", "carol"}
    assert (got["physics"].shflags, got["physics"].resgrp, got["physics"].shares) == (
        0o40000, 0, 40,
    )  # fmt: skip
    assert got["chem"].comment == "It's chemistry"
    assert got["optics"].resgrp == got["physics"].uid and got["optics"].shares == 3
    # alice's DefaultAccount chem wins over her first association (physics)
    assert (got["alice"].uid, got["alice"].resgrp, got["alice"].shares) == (
        1001, got["chem"].uid, 20,
    )  # fmt: skip
    assert got["bob"].shares == 1  # Fairshare=parent
    assert got["carol"].resgrp == got["optics"].uid


def test_the_tree_round_trips_through_sacctmgr_dump(udb_url, tmp_path):
    dump = tmp_path / "hpc.dump"
    dump.write_text(DUMP)
    assert CliRunner().invoke(udbgen, ["--udb", udb_url, "--sacctmgr", str(dump)]).exit_code == 0
    out = CliRunner().invoke(udbsee, ["--udb", udb_url, "--sacctmgr", "--cluster", "hpc"])
    assert out.exit_code == 0, out.output
    back = {(a.kind, a.name, a.parent, a.fairshare) for a in read_dump(out.output, "back")}
    assert back == {
        ("Account", "physics", "root", 40), ("Account", "chem", "root", 60),
        ("Account", "optics", "physics", 3), ("User", "alice", "chem", 20),
        ("User", "bob", "chem", 1), ("User", "carol", "optics", 5),
    }  # fmt: skip
    assert "Cluster - 'hpc'" in out.output
    # Read back in, it changes nothing.
    r = CliRunner().invoke(udbgen, ["--udb", udb_url, "-p", "--sacctmgr", "-"], input=out.output)
    assert r.exit_code == 0 and "0 created, 0 updated" in r.stderr, r.output


def test_a_changed_dump_updates_the_entries(udb_url, tmp_path):
    dump = tmp_path / "hpc.dump"
    dump.write_text(DUMP)
    CliRunner().invoke(udbgen, ["--udb", udb_url, "--sacctmgr", str(dump)])
    dump.write_text(DUMP.replace("'carol':Fairshare=5", "'carol':Fairshare=9"))
    r = CliRunner().invoke(udbgen, ["--udb", udb_url, "-v", "--sacctmgr", str(dump)])
    assert r.exit_code == 0 and "1 updated" in r.stderr, r.output
    assert entries(udb_url)["carol"].shares == 9


@pytest.mark.parametrize(
    "text, says",
    [
        ("Account - 'a':Fairshare=1\n", "no Parent line before it"),
        ("Parent - 'root'\nUser - 'zed':Fairshare=1\n", "user zed: no such login"),
        ("Parent - 'root'\nAccount - 'a':Fairshare=lots\n", "Fairshare=lots: expected"),
        ("Parent - 'root'\nbogus line\n", "expected Cluster, Parent, Account or User"),
    ],
)
def test_a_bad_dump_is_one_line_exit_2_and_writes_nothing(udb_url, tmp_path, text, says):
    dump = tmp_path / "bad.dump"
    dump.write_text(text)
    r = CliRunner().invoke(udbgen, ["--udb", udb_url, "--sacctmgr", str(dump)])
    assert r.exit_code == 2 and says in r.stderr and r.stderr.count("\n") == 1, r.output
    assert entries(udb_url) == {}


def test_shrtree_parsable_gives_sshare_s_field_names_and_the_json_values(tmp_path):
    import json

    from fairshare.cli.shrtree import main as shrtree

    classic = Path(__file__).resolve().parents[2] / "examples" / "slurm" / "classic.udb"
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    assert CliRunner().invoke(udbgen, ["--udb", url, "--create", str(classic)]).exit_code == 0
    args = ["--udb", url, "-l", "--now", "1700000000"]
    p = CliRunner().invoke(shrtree, [*args, "-P"])
    j = CliRunner().invoke(shrtree, [*args, "--json"])
    assert p.exit_code == j.exit_code == 0, p.output
    lines = p.output.splitlines()
    head = lines[0].split("|")
    assert head[:7] == [
        "Account", "User", "RawShares", "NormShares", "NormUsage", "EffectvUsage", "FairShare",
    ]  # fmt: skip
    rows = {
        tuple(line.split("|")[:2]): dict(zip(head, line.split("|"), strict=True))
        for line in lines[1:]
    }
    nodes = {n["name"]: n for n in json.loads(j.output)["nodes"]}
    user1 = rows[("B", "user1")]
    assert float(user1["FairShare"]) == nodes["user1"]["fairshare_factor"]
    assert float(user1["NormShares"]) == nodes["user1"]["normalized_shares"]
    assert float(user1["EffectvUsage"]) == nodes["user1"]["effective_usage"]
    assert int(rows[("A", "")]["RawShares"]) == 40
    assert len(lines) == 1 + len(nodes)
    r = CliRunner().invoke(shrtree, [*args, "-P", "--json"])
    assert r.exit_code == 2


def test_an_account_whose_users_all_take_its_fairshare_is_pooled(udb_url, tmp_path):
    dump = tmp_path / "lab.dump"
    dump.write_text(DUMP.replace("User - 'carol':Fairshare=5", "User - 'carol':Fairshare=parent"))
    r = CliRunner().invoke(udbgen, ["--udb", udb_url, "--sacctmgr", str(dump)])
    assert r.exit_code == 0, r.output
    got = entries(udb_url)
    assert got["optics"].pooled == 1  # carol, its only user, says Fairshare=parent
    assert got["chem"].pooled == 0 and got["physics"].pooled == 0  # alice has her own
