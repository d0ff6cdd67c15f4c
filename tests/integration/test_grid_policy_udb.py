"""The grid policy columns through the UDB: migration 0017 adds scope and
pooled, udbgen sets them (one-line errors otherwise), udbsee lists them, the daemon's
tree carries them (seed 001)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from click.testing import CliRunner
from sqlalchemy import text

from fairshare.store.config import load_tree
from udb.cli.udbgen import main as udbgen
from udb.cli.udbsee import main as udbsee
from udb.session import (
    MIGRATIONS,
    current_revision,
    head_revision,
    make_engine,
    open_udb,
    read_session,
    upgrade,
)


def cli(cmd, *args):
    return CliRunner().invoke(cmd, list(args), catch_exceptions=False)


def test_udbgen_sets_scope_and_pooled_and_udbsee_lists_them(acme):
    r = cli(udbgen, "--udb", acme, "-c", "update:Proj1:scope:global:pooled:yes:")
    assert r.exit_code == 0, r.output
    assert cli(udbsee, "--udb", acme, "-f", "scope,pooled", "Proj1").output == (
        "create:Proj1:scope:global:pooled:yes:\n"
    )
    full = cli(udbsee, "--udb", acme, "Proj1", "Proj2").output.splitlines()
    assert ":scope:global:pooled:yes:" in full[0] and "scope" not in full[1]
    with read_session(open_udb(acme)) as s:
        tree = load_tree(s)
    p1 = tree.node("Proj1")
    assert tree.global_scope()[p1] and tree.pooled[p1]
    r = cli(udbgen, "--udb", acme, "-c", "update:Proj2:scope:everywhere:")
    assert r.exit_code == 2 and "expected local, global or nothing (inherit)" in r.stderr
    assert r.stderr.count("\n") == 1
    r = cli(udbgen, "--udb", acme, "-c", "update:Proj2:pooled:maybe:")
    assert r.exit_code == 2 and "expected yes or no" in r.stderr


def test_migration_0017_adds_the_columns_keeping_every_row(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = make_engine(url)
    upgrade(engine, "0016")
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
        row = conn.execute(text("SELECT name, shares, scope, pooled FROM entries")).one()
    assert tuple(row) == ("Grp", 7, "", 0)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = upgraded
    command.downgrade(cfg, "0016")
    with upgraded.connect() as conn:
        cols = [r[1] for r in conn.execute(text("PRAGMA table_info(entries)"))]
    assert "scope" not in cols and "pooled" not in cols and current_revision(upgraded) == "0016"
