"""sh_consts: defaults from the guide, flag and duration parsing, storage in the UDB."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from fairshare.core.consts import (
    ADJGROUPS,
    LIMSHARE,
    NOSCHED,
    NOSHARE,
    SHAREBYACCT,
    USRLEVLFSS,
    Consts,
    consts_from_mapping,
    flag_names,
    parse_duration,
    parse_flags,
    validate,
)
from fairshare.store.config import load_consts, save_consts
from udb.check import configured_maxlevels
from udb.errors import OptionError
from udb.models import Const
from udb.session import make_engine, open_udb, read_session, upgrade, write_session


def test_flag_bits_are_the_guides():
    assert (NOSHARE, ADJGROUPS, LIMSHARE, SHAREBYACCT, NOSCHED, USRLEVLFSS) == (
        0o1,
        0o2,
        0o4,
        0o10,
        0o20,
        0o100,
    )


def test_defaults_are_the_guides():
    c = Consts()
    assert c.halflife == 3600 and c.delta == 4
    assert (c.maxushare, c.mingshare, c.sharemin, c.maxusage) == (2.0, 0.75, 0.0, 1e12)
    assert c.maxlevels == 4 and c.nice_decay == (2.0, 60.0) and c.percent == 100
    assert c.flags == 0 and c.mode == "user"


def test_decay_factor_matches_shrinfo_example():
    # shrinfo -v in the guide (4.6.1.3): "Usage decay rate = 0.95484160 (half-life of 60.0
    # seconds)" with the default 4-second cycle.
    assert Consts(halflife=60.0).K == pytest.approx(0.95484160, abs=5e-9)
    assert Consts(halflife=4.0).K == 0.5


def test_share_by_account_flag():
    assert Consts(flags=SHAREBYACCT).share_by_account
    assert Consts(flags=SHAREBYACCT).mode == "account"
    assert not Consts(flags=ADJGROUPS).share_by_account


@pytest.mark.parametrize(
    "text, flags",
    [
        ("006", ADJGROUPS | LIMSHARE),
        ("0o6", ADJGROUPS | LIMSHARE),
        ("ADJGROUPS,LIMSHARE", ADJGROUPS | LIMSHARE),
        ("limshare sharebyacct", LIMSHARE | SHAREBYACCT),
        (["NOSHARE", "NOSCHED"], NOSHARE | NOSCHED),
        (0o100, USRLEVLFSS),
        ("0", 0),
    ],
)
def test_parse_flags(text, flags):
    assert parse_flags(text) == flags


@pytest.mark.parametrize("bad", ["ADJGROUP", "0o400", 0o1000, "9", True, 1.5])
def test_parse_flags_rejects(bad):
    with pytest.raises(OptionError, match="flags"):
        parse_flags(bad)


def test_flag_names():
    assert flag_names(0o6) == ["ADJGROUPS", "LIMSHARE"]
    assert parse_flags("GLOBALUSAGE") == 0o200 and flag_names(0o206)[-1] == "GLOBALUSAGE"
    assert flag_names(0) == []


@pytest.mark.parametrize(
    "text, seconds",
    [(4, 4.0), ("4", 4.0), ("3600s", 3600.0), ("90m", 5400.0), ("2h", 7200.0), ("7d", 604800.0),
     ("1w", 604800.0), ("0.5h", 1800.0), ("1h30m", 5400.0), ("1d 12h", 129600.0)],
)  # fmt: skip
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["2 hours", "h", "-3s", -1, "", True, "1h30", "1x"])
def test_parse_duration_rejects(bad):
    with pytest.raises(OptionError, match="halflife"):
        parse_duration(bad, "halflife")


@pytest.mark.parametrize(
    "change, name",
    [
        ({"mingshare": 1.0}, "mingshare"),
        ({"maxushare": 1.0}, "maxushare"),
        ({"sharemin": 1.0}, "sharemin"),
        ({"halflife": 0.0}, "halflife"),
        ({"cost_tick": -1.0}, "cost_tick"),
        ({"nice_decay": (60.0, 2.0)}, "nice_decay"),
    ],
)
def test_validate_names_the_bad_constant(change, name):
    with pytest.raises(OptionError, match=f"^{name}: expected"):
        validate(Consts().replace(**change))


def test_consts_from_mapping_coerces_user_values():
    c = consts_from_mapping(
        {"halflife": "2h", "flags": ["ADJGROUPS"], "nice_decay": "1,30", "maxlevels": "6"}
    )
    assert (c.halflife, c.flags, c.nice_decay, c.maxlevels) == (7200.0, ADJGROUPS, (1.0, 30.0), 6)
    with pytest.raises(OptionError, match="unknown constant 'halflfe'"):
        consts_from_mapping({"halflfe": 3})
    with pytest.raises(OptionError, match="maxushare: expected a number"):
        consts_from_mapping({"maxushare": "lots"})


def test_absent_rows_mean_defaults(udb_url):
    with read_session(open_udb(udb_url)) as s:
        assert load_consts(s) == Consts()


def test_save_and_load_round_trip(udb_url):
    engine = open_udb(udb_url)
    wanted = Consts(flags=ADJGROUPS | LIMSHARE, halflife=7200.0, sharemin=0.002, maxlevels=6)
    with write_session(engine) as s:
        save_consts(s, wanted)
    with read_session(engine) as s:
        assert load_consts(s) == wanted
        # udb.check reads the same row for the tree depth limit.
        assert configured_maxlevels(s) == 6
        stored = dict(s.execute(sa.select(Const.name, Const.value)).all())
    assert stored["nice_decay"] == [2.0, 60.0] and stored["flags"] == 6


def test_load_ignores_unknown_rows(udb_url):
    engine = open_udb(udb_url)
    with write_session(engine) as s:
        s.add(Const(name="from_the_future", value=3))
        s.add(Const(name="delta", value=8))
    with read_session(engine) as s:
        assert load_consts(s) == Consts(delta=8.0)


def test_migration_0002_keeps_entries(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = make_engine(url)
    upgrade(engine, "0001")
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO entries (name, uid, gids, acids, resgrp, shares, shflags, shusage,"
                " shcharge, shextime, cpuquota, cpuquotaused, nice, passwd, comment) VALUES"
                " ('u1', 1001, '[]', '[]', 0, 5, 0, 0, 0, 0, 0, 0, 0, '', '')"
            )
        )
    upgrade(engine, "0002")
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT name FROM entries")).scalar() == "u1"
    # save_consts bumps the constants' change serial (migration 0010): the rest of the
    # way to the head first.
    upgrade(engine)
    with write_session(engine) as s:
        save_consts(s, Consts(halflife=60.0))
    with read_session(engine) as s:
        assert load_consts(s).halflife == 60.0
        assert s.execute(sa.text("SELECT name FROM entries")).scalar() == "u1"
    engine.dispose()


def test_every_constant_has_a_documented_range():
    from pathlib import Path

    from fairshare.core.consts import CHOICES, FIELDS, RANGES

    # flags: the known bits (parse_flags); a choice: its names
    assert set(FIELDS) - set(RANGES) == {"flags", "quota_signal", *CHOICES}  # a signal name
    assert not set(CHOICES) & set(RANGES)
    page = (Path(__file__).resolve().parents[2] / "man" / "shradmin.8").read_text()
    assert ".SH RANGES" in page
    for name, rng in RANGES.items():
        if name not in ("cost_tty", "nice_decay", "maxlevels"):
            assert rng.smallest in rng and rng.largest in rng
            assert float("nan") not in rng and float("inf") not in rng
