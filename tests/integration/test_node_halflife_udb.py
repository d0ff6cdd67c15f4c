"""A resource group's own usage half-life through the UDB: udbgen sets it, migration 0016
adds it, udbsee lists it, shrtree and shrinfo show it (seed 004, section 2.2.2.4)."""

from __future__ import annotations

import json

from click.testing import CliRunner
from sqlalchemy import text

from fairshare.cli.shrinfo import main as shrinfo
from fairshare.cli.shrtree import main as shrtree
from udb.cli.udbgen import main as udbgen
from udb.cli.udbsee import main as udbsee
from udb.session import current_revision, head_revision, make_engine, open_udb, upgrade

NOW = 1_700_000_000.0


def cli(cmd, *args):
    return CliRunner().invoke(cmd, list(args), catch_exceptions=False)


def test_udbgen_sets_a_groups_half_life_and_udbsee_lists_it(acme):
    r = cli(udbgen, "--udb", acme, "-c", "update:Proj1:halflife:8h:")
    assert r.exit_code == 0, r.output
    assert cli(udbsee, "--udb", acme, "-f", "halflife", "Proj1").output == (
        "create:Proj1:halflife:28800.0:\n"
    )
    full = cli(udbsee, "--udb", acme, "Proj1", "Proj2").output.splitlines()
    assert ":halflife:28800.0:" in full[0] and "halflife" not in full[1]  # 0: inherited
    r = cli(udbgen, "--udb", acme, "-c", "update:Proj2:halflife:-1:")
    assert r.exit_code == 2 and "expected 0 (inherit) or a half-life from 1 s" in r.stderr


def test_shrtree_and_shrinfo_show_each_nodes_half_life(acme):
    assert cli(shrtree, "--udb", acme, "--now", str(NOW)).output.count("Half") == 0
    cli(udbgen, "--udb", acme, "-c", "update:Proj1:halflife:8h: update:Proj1B:halflife:30m:")
    lines = cli(shrtree, "--udb", acme, "--now", str(NOW), "-l").output.splitlines()
    table = lines[lines.index(next(x for x in lines if x.startswith("Lv"))) - 1 :]
    assert table[0].split()[-2:] == ["Fair", "Half"] and table[1].split()[-2:] == ["Share", "life"]
    last = {row.split()[1]: row.split()[-1] for row in table[2:]}
    assert (last["Proj1"], last["Proj1A"], last["u5"]) == ("8h", "8h", "8h")
    assert (last["Proj1B"], last["u7"], last["Proj2"], last["u9"]) == ("30m", "30m", "1h", "1h")
    doc = json.loads(cli(shrtree, "--udb", acme, "--now", str(NOW), "-l", "--json").output)
    assert {n["name"]: n["halflife"] for n in doc["nodes"]}["u7"] == 1800.0
    out = cli(shrinfo, "--udb", acme, "--now", str(NOW), "u5").output
    assert "  usage half-life 8 h (set by Proj1)\n" in out
    out = cli(shrinfo, "--udb", acme, "--now", str(NOW), "u9").output
    assert "  usage half-life 1 h (the global one, shradmin -K)\n" in out


def test_migration_0016_adds_the_column_keeping_every_row(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = make_engine(url)
    upgrade(engine, "0012")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO entries (name, uid, gids, acids, resgrp, shares, shflags, shusage,"
                " shcharge, shextime, cpuquota, cpuquotaused, nice, passwd, comment) VALUES"
                " ('Grp', 100, '[10]', '[]', 0, 7, 16384, 0, 0, 0, 0, 0, 0, '*', 'kept')"
            )
        )
    engine.dispose()
    upgraded = open_udb(url)
    assert current_revision(upgraded) == head_revision()
    with upgraded.connect() as conn:
        row = conn.execute(text("SELECT name, shares, halflife FROM entries")).one()
    assert tuple(row) == ("Grp", 7, 0.0)
    from alembic import command
    from alembic.config import Config

    from udb.session import MIGRATIONS

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = upgraded
    command.downgrade(cfg, "0012")  # and back
    with upgraded.connect() as conn:
        cols = [r[1] for r in conn.execute(text("PRAGMA table_info(entries)"))]
    assert "halflife" not in cols and current_revision(upgraded) == "0012"
