"""shradmin: setting, refusing, recording and scheduling the constants."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from fairshare.cli.shradmin import main as shradmin
from fairshare.core.consts import ADJGROUPS, LIMSHARE, Consts
from fairshare.core.schedule import (
    describe_days,
    describe_hours,
    effective_consts,
    parse_days,
    parse_hours,
)
from fairshare.store.config import history, load_consts, schedules
from udb.errors import OptionError
from udb.models import ConstChange, Schedule
from udb.session import open_udb, read_session


def run(url, *args):
    return CliRunner().invoke(shradmin, ["--udb", url, *args])


def stored(url):
    """The stored constants and the number of history rows."""
    with read_session(open_udb(url)) as s:
        return load_consts(s), s.scalar(select(func.count()).select_from(ConstChange))


def test_defaults_are_shown_in_the_guide_manner(udb_url):
    r = run(udb_url)
    assert r.exit_code == 0, r.output
    assert "Scheduling flags = (none) (000)" in r.output
    assert "Charging percentage = 100%" in r.output
    # K = 0.5 ** (4 / 3600) per 4 s cycle
    assert "Usage decay rate = 0.99923013 per 4 s cycle (half-life of 3600.0 seconds)" in r.output
    # -D 2,60: 0.5 ** (1/60) = 0.9885 per second at nice 19, as the guide's shrinfo -v shows
    assert "low priority (nice 19) 0.9885 (half-life of 60.0 seconds)" in r.output


def test_the_guides_acme_options_are_applied_and_recorded(acme, monkeypatch):
    monkeypatch.setenv("SUDO_USER", "alice")
    r = run(acme, "-t100", "-F06", "-K3600s", "-X3.0", "-Y.85", "-Z", ".002")
    assert r.exit_code == 0, r.output
    consts, n = stored(acme)
    assert consts.flags == ADJGROUPS | LIMSHARE
    assert (consts.maxushare, consts.mingshare, consts.sharemin) == (3.0, 0.85, 0.002)
    assert "Scheduling flags = ADJGROUPS, LIMSHARE (006)" in r.output
    # tick cost and half-life were already at those values: only 4 constants changed
    assert n == 4
    hist = run(acme, "--history", "--json")
    rows = json.loads(hist.output)
    assert {(h["name"], h["old"], h["new"]) for h in rows} == {
        ("flags", 0, 6),
        ("maxushare", 2.0, 3.0),
        ("mingshare", 0.75, 0.85),
        ("sharemin", 0.0, 0.002),
    }
    assert {h["who"] for h in rows} == {"alice"}


def test_flags_by_name_durations_with_units_and_percent(udb_url):
    r = run(udb_url, "-F", "ADJGROUPS,LIMSHARE", "-K", "8h", "-R", "8s", "-n", "2m", "20")
    assert r.exit_code == 0, r.output
    consts, _ = stored(udb_url)
    assert consts.flags == 0o6
    assert consts.halflife == 8 * 3600
    assert consts.delta == 8
    assert consts.writeback == 120
    assert consts.percent == 20


@pytest.mark.parametrize(
    "args, message",
    [
        (["-X", "1.0"], "maxushare"),
        (["-X", "0.5"], "maxushare"),
        (["-Y", "1.0"], "mingshare"),
        (["-Y", "1.5"], "mingshare"),
        (["-t", "-5"], "cost_tick"),
        (["-b", "-1"], "cost_bio"),
        (["-F", "ADJGROUPS,BOGUS"], "unknown flag 'BOGUS'"),
        (["-F", "0777"], "flags"),
        (["-K", "soon"], "halflife"),
        (["-D", "60"], "nice_decay"),
        (["-G", "3"], "below the UDB's deepest chain"),
        (["--days", "mon"], "go with --schedule"),
        (["-R", "1e-300"], "delta: expected a number from 0.1 to 3600 s"),
        (["-t", "1e308"], "cost_tick: expected a number from 0 to 1e+06"),
        (["-y", "1"], "Linux keeps no per-process count of tty"),
        (["-G", "9" * 300], "maxlevels: expected a whole number from 2 to 64"),
        (["-K", "nan"], "halflife"),
        (["-U", "inf"], "maxusage"),
        (["1e308"], "percent: expected a number from 0 to 10000 %"),
        (["--policy", "lottery"], "policy: expected one of unicos, feedback, slurm"),
        (["--dampening", "0.5"], "dampening: expected a number from 1 to 9999"),
        (["--dampening", "many"], "dampening: expected a number"),
        (["--idle-share", "random"], "idleshare: expected one of proportional, even"),
        (["--k5", "1"], "k5: expected a number above 1 to 1000"),
        (["--k5", "lots"], "k5: expected a number"),
        (["--quota-signal", "SIGKILL"], "quota_signal: expected none or a signal name"),
        (["--quota-signal", "SIGBOGUS"], "quota_signal: expected none or a signal name"),
    ],
)
def test_nonsense_is_refused_and_nothing_changes(acme, args, message):
    run(acme, "-X", "2.5")
    before = stored(acme)
    r = run(acme, "-t", "50", *args)  # a valid change beside the bad one is not applied either
    assert r.exit_code == 2
    assert message in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert stored(acme) == before


def test_k5_and_the_quota_signal_are_set_shown_and_recorded(udb_url):
    """The guide's 4.6.1.4: which ceiling is in force (maxushare with LIMSHARE, K5
    without) and 4.7: the quota's warning signal, none by default."""
    r = run(udb_url)
    assert "maxushare = 2 (unused: LIMSHARE off), K5 = 2," in r.output
    assert "warning signal = none" in r.output
    r = run(udb_url, "--k5", "3", "--quota-signal", "urg")
    assert r.exit_code == 0, r.output
    consts, n = stored(udb_url)
    assert (consts.k5, consts.quota_signal, n) == (3.0, "SIGURG", 2)
    assert "K5 = 3," in r.output and "warning signal = SIGURG" in r.output
    r = run(udb_url, "-F", "LIMSHARE", "-X", "8")
    assert "maxushare = 8, K5 = 3 (unused: LIMSHARE on)" in r.output
    r = run(udb_url, "--quota-signal", "none")
    assert stored(udb_url)[0].quota_signal == "none"


def test_maxlevels_at_the_trees_depth_is_accepted(acme):
    # ACME's deepest chain is root > Proj1 > Proj1A > u5: levels 0..3, so -G 4 is the least
    assert run(acme, "-G", "4").exit_code == 0
    assert run(acme, "-G", "6").exit_code == 0
    assert run(acme, "-G", "3").exit_code == 2
    assert stored(acme)[0].maxlevels == 6


def test_short_halflife_warns_but_applies(udb_url):
    r = CliRunner().invoke(shradmin, ["--udb", udb_url, "-K", "600s"])
    assert r.exit_code == 0
    assert "warning: a half-life of 600 s is under one hour" in r.output
    assert stored(udb_url)[0].halflife == 600


def test_a_bare_halflife_is_hours_as_in_the_guide(udb_url):
    # The guide's prime-time table: "-K 120  Usage decay rate of 5 days".
    assert run(udb_url, "-K", "120").exit_code == 0
    assert stored(udb_url)[0].halflife == 120 * 3600
    assert (
        "(half-life of 432000.0 seconds), shradmin -K 120 (-K takes hours)" in run(udb_url).output
    )
    assert run(udb_url, "-K", "90m").exit_code == 0  # suffixes keep their unit
    assert stored(udb_url)[0].halflife == 90 * 60
    r = run(udb_url, "--schedule", "night", "--days", "all", "--hours", "18-8", "-K", "2")
    assert r.exit_code == 0, r.output
    with read_session(open_udb(udb_url)) as s:
        assert schedules(s)[0].settings["halflife"] == 7200.0  # stored in seconds


def test_history_last_is_bounded(udb_url):
    r = run(udb_url, "--history", "--last", "9" * 25)
    assert r.exit_code == 2 and "1<=x<=1000000" in r.output


def test_a_caller_with_no_passwd_entry_is_recorded_by_uid(udb_url, monkeypatch):
    import pwd

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    for name in ("SUDO_USER", "LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    r = run(udb_url, "-X", "3")
    assert r.exit_code == 0, r.output
    with read_session(open_udb(udb_url)) as s:
        assert [c.who for c in history(s)] == [str(os.getuid())]


def test_schedules_prime_and_nonprime(udb_url):
    r = run(udb_url, "--schedule", "prime", "--days", "mon-fri", "--hours", "8-18", "-X", "2.0")
    assert r.exit_code == 0, r.output
    r = run(udb_url, "--schedule", "night", "--days", "all", "--hours", "18-8", "-X", "8", "40")
    assert r.exit_code == 0, r.output
    with read_session(open_udb(udb_url)) as s:
        rows = list(s.scalars(select(Schedule)))
        base = load_consts(s)
    monday_noon = datetime(2026, 11, 23, 12, 0)
    monday_night = datetime(2026, 11, 23, 23, 30)
    saturday_noon = datetime(2026, 11, 28, 12, 0)
    consts, name = effective_consts(base, rows, monday_noon)
    assert (name, consts.maxushare, consts.percent) == ("prime", 2.0, 100.0)
    consts, name = effective_consts(base, rows, monday_night)
    assert (name, consts.maxushare, consts.percent) == ("night", 8.0, 40.0)
    consts, name = effective_consts(base, rows, saturday_noon)
    assert (name, consts) == ("", base)
    shown = json.loads(run(udb_url, "--json").output)
    assert [s["name"] for s in shown["schedules"]] == ["night", "prime"]
    assert shown["schedules"][1] == {
        "name": "prime",
        "days": "mon-fri",
        "hours": "08-18",
        "settings": {"maxushare": 2.0},
    }
    # a schedule's overrides are validated like the base settings
    bad = run(udb_url, "--schedule", "prime", "-Y", "3")
    assert bad.exit_code == 2 and "mingshare" in bad.output
    assert run(udb_url, "--schedule", "prime", "--remove").exit_code == 0
    assert [s["name"] for s in json.loads(run(udb_url, "--json").output)["schedules"]] == ["night"]
    assert run(udb_url, "--schedule", "prime", "--remove").exit_code == 2
    new = run(udb_url, "--schedule", "weekend", "-X", "4")
    assert new.exit_code == 2 and "give both --days and --hours" in new.output


def test_days_and_hours_parse_and_describe():
    assert parse_days("mon-fri") == [0, 1, 2, 3, 4]
    assert parse_days("sat,sun") == [5, 6]
    assert parse_days("fri-mon") == [0, 4, 5, 6]
    assert parse_days("weekdays") == list(range(5))
    assert parse_hours("8-18") == list(range(8, 18))
    assert parse_hours("18-8") == [*range(8), *range(18, 24)]
    assert parse_hours("all") == list(range(24))
    assert describe_days([0, 1, 2, 3, 4]) == "mon-fri"
    assert describe_days([0, 4, 5, 6]) == "fri-mon"
    assert describe_hours([*range(18, 24), *range(8)]) == "18-08"
    for bad in ("funday", "mon-xyz", ""):
        with pytest.raises(OptionError):
            parse_days(bad)
    for bad in ("25-3", "8-8", "x"):
        with pytest.raises(OptionError):
            parse_hours(bad)


def test_json_shape(udb_url):
    data = json.loads(run(udb_url, "--json").output)
    assert set(data) == {"consts", "flags", "schedules", "in_force"}
    assert data["consts"]["halflife"] == Consts().halflife
    assert data["flags"] == [] and data["in_force"] is None


def test_a_running_daemon_follows_the_schedule_in_force(udb_url):
    from fairshare.sim.daemon import simulated_daemon

    scenario = (
        Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "01_equal_shares.toml"
    )
    monday_noon = datetime(2026, 11, 23, 12, 0).timestamp()
    daemon, _model, _cycles = simulated_daemon(open_udb(udb_url), str(scenario), epoch=monday_noon)
    daemon.start()
    daemon.step()
    assert (daemon.consts.delta, daemon.schedule) == (4.0, "")
    r = run(
        udb_url, "--schedule", "batch", "--days", "mon", "--hours", "12-13", "-R", "8", "-X", "8"
    )
    assert r.exit_code == 0, r.output
    daemon.step()  # the very next cycle uses the schedule's settings
    assert (daemon.consts.delta, daemon.consts.maxushare, daemon.schedule) == (8.0, 8.0, "batch")
    run(udb_url, "--schedule", "batch", "--remove")
    daemon.step()
    assert (daemon.consts.delta, daemon.schedule) == (4.0, "")


def test_slurm_policy_and_its_dampening_factor_are_set_shown_and_recorded(udb_url):
    r = run(udb_url)
    assert (
        "Slurm fair-share factor (--policy slurm): dampening factor = 1 (unused: another "
        "policy)" in r.output
    )
    r = run(udb_url, "--policy", "slurm", "--dampening", "5")
    assert r.exit_code == 0, r.output
    assert "Scheduling policy = slurm\n" in r.output
    assert "Slurm fair-share factor (--policy slurm): dampening factor = 5\n" in r.output
    doc = json.loads(run(udb_url, "--json").output)
    assert (doc["consts"]["policy"], doc["consts"]["dampening"]) == ("slurm", 5.0)
    rows = json.loads(run(udb_url, "--history", "--json").output)
    assert {"name": "dampening", "old": 1.0, "new": 5.0}.items() <= rows[-1].items()


def test_a_running_daemon_takes_up_a_new_policy_within_one_cycle(udb_url, monkeypatch):
    """`shradmin --policy` is stored, recorded and shown, and the daemon's next cycle runs
    the policy it names (a recording policy registered beside unicos for the test)."""
    from fairshare.core import consts as consts_module
    from fairshare.core import policies
    from fairshare.sim.daemon import simulated_daemon

    class Recording:
        name = "recording"
        cycles = 0

        def cycle(self, tree, table, consumption, consts, elapsed):
            Recording.cycles += 1
            return policies.DEFAULT_POLICY.cycle(tree, table, consumption, consts, elapsed)

    monkeypatch.setitem(policies.POLICIES, "recording", Recording())
    monkeypatch.setitem(consts_module.CHOICES, "policy", ("unicos", "recording"))
    scenario = (
        Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "01_equal_shares.toml"
    )
    daemon, _model, _cycles = simulated_daemon(open_udb(udb_url), str(scenario))
    daemon.start()
    daemon.step()
    assert daemon.consts.policy == "unicos" and Recording.cycles == 0
    r = run(udb_url, "--policy", "Recording")
    assert r.exit_code == 0, r.output
    assert "Scheduling policy = recording" in r.output
    daemon.step()
    assert daemon.consts.policy == "recording" and Recording.cycles >= 1
    rows = run(udb_url, "--history", "--json")
    assert {"name": "policy", "old": "unicos", "new": "recording"}.items() <= json.loads(
        rows.output
    )[-1].items()


def test_the_feedback_policy_and_its_constants_are_set_shown_and_recorded(udb_url):
    r = run(
        udb_url,
        "--policy",
        "feedback",
        "--feedback-kc",
        "0.2",
        "--feedback-kmu",
        "0.1,0.3",
        "--feedback-period",
        "10m",
    )
    assert r.exit_code == 0, r.output
    consts, n = stored(udb_url)
    assert (consts.policy, consts.feedback_kc) == ("feedback", 0.2)
    assert (consts.feedback_kmu, consts.feedback_period) == ((0.1, 0.3), 600.0)
    assert n == 4
    assert (
        "Feedback share nodes (--policy feedback): K_c = 0.2 per cycle, "
        "K_mu by level = 0.1,0.3, redistribution every 600 s"
    ) in r.output
    shown = json.loads(run(udb_url, "--json").output)["consts"]
    assert shown["feedback_kmu"] == [0.1, 0.3] and shown["feedback_period"] == 600.0
    rows = json.loads(run(udb_url, "--history", "--json").output)
    (kmu,) = [h for h in rows if h["name"] == "feedback_kmu"]
    assert (kmu["old"], kmu["new"]) == ([0.25, 0.5, 0.75, 1.0], [0.1, 0.3])
    assert "0.25,0.5,0.75,1" in run(udb_url, "--history").output
    # Under another policy the line says the constants are unused.
    assert "(unused: another policy)" in run(udb_url, "--policy", "unicos").output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--feedback-kc", "0"], "feedback_kc: expected a number above 0 to 1"),
        (["--feedback-kmu", "0.5,3"], "feedback_kmu: expected 1 to 64 gains by level"),
        (["--feedback-kmu", "x"], "feedback_kmu: expected gains by level like 0.25,0.5,0.75,1"),
        (["--feedback-period", "-5"], "feedback_period"),
    ],
)
def test_bad_feedback_constants_are_refused_and_nothing_changes(udb_url, args, message):
    before = stored(udb_url)
    r = run(udb_url, *args)
    assert r.exit_code == 2 and message in r.output
    assert stored(udb_url) == before


def test_idle_share_is_stored_recorded_and_shown_with_the_split(udb_url):
    r = run(udb_url)
    assert "Idle share = proportional, split flat over all lnodes" in r.output
    r = run(udb_url, "--idle-share", "EVEN", "-F", "ADJGROUPS")
    assert r.exit_code == 0, r.output
    assert "Idle share = even, split group by group (ADJGROUPS)" in r.output
    rows = json.loads(run(udb_url, "--history", "--json").output)
    assert {"name": "idleshare", "old": "proportional", "new": "even"}.items() <= next(
        row for row in rows if row["name"] == "idleshare"
    ).items()
    assert json.loads(run(udb_url, "--json").output)["consts"]["idleshare"] == "even"
