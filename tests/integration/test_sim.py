"""The simulated machine, the enforcer models, scenario loading and the shrsim command."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fairshare.cli.shrsim import main as shrsim
from fairshare.core.consts import ADJGROUPS, Consts
from fairshare.enforce.mapping import NICE_TO_WEIGHT
from fairshare.sim.machine import SimMachine, enforcer_weights, water_fill
from fairshare.sim.run import run_scenario
from fairshare.sim.scenario import ScenarioError, parse_scenario
from fairshare.store.config import save_consts
from udb.session import open_udb, write_session

ROOT = Path(__file__).resolve().parents[2]

TWO_USERS = """
cpus = 2
duration = "40m"
warmup = "20m"
directives = \"\"\"
create:alice:uid:1001:shares:1:
create:bob:uid:1002:shares:1:
\"\"\"
[consts]
halflife = "5m"
[[workload]]
name = "alice"
procs = 2
[[workload]]
name = "bob"
procs = 8
"""


# -- the machine -----------------------------------------------------------------------


def test_water_fill_by_weight():
    np.testing.assert_allclose(water_fill(2.0, np.ones(3), np.ones(3)), [2 / 3] * 3)
    # weight 4:1:1 would give the first 4/3 CPU; capped at 1, the rest goes to the others
    np.testing.assert_allclose(water_fill(2.0, np.array([4.0, 1, 1]), np.ones(3)), [1, 0.5, 0.5])
    # more CPUs than anyone can use: everyone at its cap
    np.testing.assert_allclose(water_fill(8.0, np.array([1.0, 5]), np.array([1.0, 2])), [1, 2])
    # zero weight gets nothing
    np.testing.assert_allclose(water_fill(1.0, np.array([0.0, 1]), np.ones(2)), [0, 1])


def test_machine_one_cpu_per_process_and_demand():
    m = SimMachine(cpus=4)
    # 1 process of weight 100 and 6 of weight 1: the first is capped at one CPU
    got = m.run(np.array([1, 6]), np.array([100.0, 1.0]), np.ones(2), np.zeros(2, bool))
    np.testing.assert_allclose(got, [1.0, 3.0])
    # partly idle processes use at most their demand; the rest goes to the others
    got = m.run(np.array([2, 2]), np.ones(2), np.array([0.25, 1.0]), np.zeros(2, bool))
    np.testing.assert_allclose(got, [0.5, 2.0])


def test_machine_idle_class_only_on_leftover_cpu():
    m = SimMachine(cpus=2)
    idle = np.array([False, True])
    got = m.run(np.array([1, 3]), np.array([1.0, 1000.0]), np.ones(2), idle)
    np.testing.assert_allclose(got, [1.0, 1.0])  # one CPU left over
    got = m.run(np.array([4, 3]), np.array([1.0, 1000.0]), np.ones(2), idle)
    np.testing.assert_allclose(got, [2.0, 0.0])  # nothing left over


def test_enforcer_weights():
    e, bg, nrun = np.array([0.5, 0.5, 0.2]), np.array([False, False, True]), np.array([2, 8, 1])
    w, idle = enforcer_weights("cgroup", e, bg, nrun)
    np.testing.assert_allclose(w, [5000, 1250, 1])  # lnode weight split over its processes
    assert idle.tolist() == [False, False, True]
    w, idle = enforcer_weights("nice", e, bg, nrun)
    np.testing.assert_allclose(w, NICE_TO_WEIGHT[[20, 26, 39]])  # nice 0, 6, 19
    assert not idle.any()
    w, idle = enforcer_weights("none", e, bg, nrun)
    assert w.tolist() == [1, 1, 1] and not idle.any()


# -- scenarios -------------------------------------------------------------------------


def test_parse_scenario():
    sc = parse_scenario(TWO_USERS, "two.toml")
    assert (sc.cpus, sc.duration, sc.warmup, sc.delta) == (2.0, 2400.0, 1200.0, 4.0)
    assert sc.consts == Consts(halflife=300.0)
    assert [(w.name, w.procs, w.start, w.stop) for w in sc.workloads] == [
        ("alice", 2, 0.0, 2400.0),
        ("bob", 8, 0.0, 2400.0),
    ]
    assert sc.enforcer == "cgroup"


def test_default_warmup_is_three_halflives_at_most_half():
    sc = parse_scenario(TWO_USERS.replace('warmup = "20m"\n', ""), "two.toml")
    assert sc.warmup == 900.0  # 3 x 5 min
    sc = parse_scenario(TWO_USERS.replace('warmup = "20m"\n', "").replace("5m", "1h"), "t")
    assert sc.warmup == 1200.0  # half of 40 min


@pytest.mark.parametrize(
    "change, where",
    [
        (
            ("cpus = 2", "cpus = 0"),
            "two.toml:2:1: cpus: expected a number of CPUs above 0 up to 100000",
        ),
        (('name = "bob"', 'name = "carol"'), "two.toml:15:1: workload 2: name: expected one of"),
        (
            ("procs = 8", "procs = -1"),
            "two.toml:16:1: workload 2: procs: expected 1 to 1,000,000 processes",
        ),
        (('halflife = "5m"', 'halflife = "5 mins"'), "two.toml:10:1: halflife: expected a"),
        (("create:bob:uid:1002", "create:bob:uid:x"), "two.toml:7:16: create:bob: uid: expected"),
        (("cpus = 2", "cpus = [2"), "two.toml:3:1: not valid TOML: Unclosed array"),
        (("cpus = 2", "cpus = 2\nwarmup2 = 1"), "two.toml:3:1: warmup2: unknown key"),
        (('duration = "40m"', 'duration = "40m"\nenforcer = "cfs"'), "two.toml:4:1: enforcer:"),
    ],
)
def test_scenario_errors_name_file_line_and_expectation(change, where):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(TWO_USERS.replace(*change), "two.toml")
    assert str(err.value).startswith(where)


def test_workload_stop_before_start_rejected():
    text = TWO_USERS.replace("procs = 2", 'procs = 2\nstart = "30m"\nstop = "10m"')
    with pytest.raises(ScenarioError, match="workload 1: stop: expected a time after start"):
        parse_scenario(text, "two.toml")


def test_lnodes_come_and_go_with_usage_aged():
    # alice leaves at 10m and returns at 20m: her usage comes back aged by two half-lives,
    # so during her first cycle back she has a quarter of what she left with.
    text = TWO_USERS.replace(
        'name = "alice"\nprocs = 2',
        'name = "alice"\nprocs = 2\nstop = "10m"\n[[workload]]\nname = "alice"\n'
        'procs = 2\nstart = "20m"',
    )
    sc = parse_scenario(text, "two.toml")
    r = run_scenario(sc)
    j = r.series("alice")
    away = (r.times > 600) & (r.times <= 1200)
    assert (r.delivered[away, j] == 0).all() and (r.entitled[away, j] == 0).all()
    assert r.entitled[r.times > 1204, j] == pytest.approx(0.5)
    # the fair target counts the processes that run: bob's 8 fairly get it all meanwhile
    assert (r.fair[away, j] == 0).all() and (r.fair[away, r.series("bob")] == 1).all()
    assert r.fair[r.times > 1200, j] == pytest.approx(0.5)
    # bob, who stayed, has far more usage than alice on her return: she gets more than half
    assert r.delivered[(r.times > 1204) & (r.times < 1300), j].mean() > 0.5


def test_a_returning_lnode_comes_back_with_all_it_used(monkeypatch):
    # alice leaves twice.  As in the daemon, each release adds her increment to her stored
    # usage (fairshare.core.lnode.add_usage), so each return starts from all the usage she
    # left with, aged: not from her last session's increment alone.
    import fairshare.sim.run as run

    text = TWO_USERS.replace(
        'name = "alice"\nprocs = 2',
        'name = "alice"\nprocs = 2\nstop = "10m"\n[[workload]]\nname = "alice"\n'
        'procs = 2\nstart = "15m"\nstop = "25m"\n[[workload]]\nname = "alice"\n'
        'procs = 2\nstart = "30m"',
    )
    sc = parse_scenario(text, "two.toml")
    alice = sc.tree.node("alice")
    left, back = [], []
    real_release, real_activate = run.release, run.activate_stored

    def release(table, node, now):
        if node == alice:
            left.append((float(table.usage[node]), now))
        return real_release(table, node, now)

    def activate_stored(table, node, u, ext, now, consts):
        usage = real_activate(table, node, u, ext, now, consts)
        if node == alice:
            back.append(usage)
        return usage

    monkeypatch.setattr(run, "release", release)
    monkeypatch.setattr(run, "activate_stored", activate_stored)
    run_scenario(sc)
    assert len(left) == 2 and len(back) == 3 and back[0] == 0.0
    halflife = sc.consts.halflife
    for (usage, when), returned, at in zip(left, back[1:], (900.0, 1800.0), strict=True):
        assert usage > 0
        assert returned == pytest.approx(usage * 0.5 ** ((at - when) / halflife), rel=1e-9)


def test_account_mode_scenario():
    text = """
cpus = 1
duration = "20m"
directives = \"\"\"
acid:p1:2001:
acid:p2:2002:
create:p1:uid:2001:shflags:01000000:shares:3:
create:p2:uid:2002:shflags:01000000:shares:1:
\"\"\"
[consts]
halflife = "2m"
flags = "SHAREBYACCT"
[[workload]]
name = "p1"
procs = 1
[[workload]]
name = "p2"
procs = 3
"""
    r = run_scenario(parse_scenario(text, "acct.toml"))
    assert {m.name: m.kind for m in r.lnodes} == {"p1": "account", "p2": "account"}
    assert r.lnode("p1").delivered == pytest.approx(0.75, abs=0.01)


# -- shrsim ----------------------------------------------------------------------------


@pytest.fixture
def two(tmp_path) -> Path:
    p = tmp_path / "two.toml"
    p.write_text(TWO_USERS)
    return p


def test_shrsim_json(two):
    out = CliRunner().invoke(shrsim, [str(two), "--json"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert set(d) >= {"lnodes", "groups", "max_deviation_pp"}
    assert set(d["lnodes"]["alice"]) == {"entitled", "fair", "delivered", "deviation_pp"}
    assert d["lnodes"]["alice"]["entitled"] == 0.5
    assert d["lnodes"]["alice"]["fair"] == pytest.approx(0.5)
    assert d["lnodes"]["alice"]["delivered"] == pytest.approx(0.5, abs=0.01)
    assert d["max_deviation_pp"] < 1.0 and d["groups"] == {}
    assert d["enforcer"] == "cgroup" and d["window"] == [1200.0, 2400.0]


def test_shrsim_table_enforcer_and_window(two):
    out = CliRunner().invoke(shrsim, [str(two), "--enforcer", "none", "--window", "10m"])
    assert out.exit_code == 0, out.output
    assert "enforcer none, window 1800s..2400s" in out.output
    header = next(line for line in out.output.splitlines() if "Entitled" in line)
    assert header.replace("┃", " ").split() == [
        "Name", "Kind", "Entitled", "%", "Fair", "%", "Delivered", "%", "Deviation", "pp",
    ]  # fmt: skip
    row = next(line for line in out.output.splitlines() if "alice" in line)
    # entitled and fair 50% (alice's 2 processes could use her whole half), delivered 20%
    assert row.replace("│", " ").split() == ["alice", "user", "50.00", "50.00", "20.00", "-30.00"]
    assert "Largest deviation from the fair share: 30.00 pp" in out.output


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_shrsim_plot(two, tmp_path, ext):
    target = tmp_path / f"plot.{ext}"
    out = CliRunner().invoke(shrsim, [str(two), "--json", "--plot", str(target)])
    assert out.exit_code == 0, out.output
    head = target.read_bytes()[:200]
    assert head.startswith(b"\x89PNG") if ext == "png" else b"<svg" in head or b"<?xml" in head


def test_shrsim_plot_draws_the_groups_in_a_second_panel(tmp_path):
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    for stem, target in (("01_equal_shares", one), ("05_table_one", two)):
        scenario = ROOT / "examples" / "scenarios" / f"{stem}.toml"
        out = CliRunner().invoke(shrsim, [str(scenario), "--plot", str(target)])
        assert out.exit_code == 0, out.output
    # 4.5 inches per panel plus one, at 100 dpi: 01 has no groups, 05 has A and B
    assert png_size(one) == (1000, 550) and png_size(two) == (1000, 1000)


def png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def test_shrsim_stored_rendering(monkeypatch):
    """Table I (scenario 05): B1 logged in but idle is entitled to 45% and fairly gets
    nothing; B2 is entitled to 5% and fairly gets B's half; every deviation 0."""
    monkeypatch.chdir(ROOT / "examples" / "scenarios")
    out = CliRunner().invoke(shrsim, ["05_table_one.toml"])
    assert out.exit_code == 0, out.output
    assert out.stdout == (ROOT / "tests" / "data" / "shrsim_table_one.txt").read_text()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--plot", "x.pdf"], "--plot: expected a file name ending in .png or .svg"),
        (["--window", "2h"], "--window: expected a duration up to the scenario's"),
        (["--window", "soon"], "--window: expected a duration"),
    ],
)
def test_shrsim_bad_options_exit_2(two, args, message):
    out = CliRunner().invoke(shrsim, [str(two), *args])
    assert out.exit_code == 2
    assert message in out.output and out.output.count("\n") == 1


def test_shrsim_bad_scenario_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(TWO_USERS.replace('name = "bob"', 'name = "carol"'))
    out = CliRunner().invoke(shrsim, [str(bad)])
    assert out.exit_code == 2
    assert out.output == (
        f"shrsim: {bad}:15:1: workload 2: name: expected one of the UDB's users, got 'carol'\n"
    )
    out = CliRunner().invoke(shrsim, [str(tmp_path / "missing.toml")])
    assert out.exit_code == 2 and "cannot read the scenario" in out.output


def test_shrsim_simulates_the_udb_when_the_scenario_names_none(acme, tmp_path):
    with write_session(open_udb(acme)) as s:
        save_consts(s, Consts(halflife=300.0, flags=ADJGROUPS))
    sc = tmp_path / "site.toml"
    sc.write_text(
        'cpus = 4\nduration = "30m"\n'
        '[[workload]]\nname = "u9"\nprocs = 4\n[[workload]]\nname = "u1"\nprocs = 4\n'
    )
    out = CliRunner().invoke(shrsim, [str(sc), "--json", "--udb", acme])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    # u9 (Proj2) and u1 (Maint) alone: Proj2 250 vs Maint 100 shares at the top
    assert d["groups"]["Proj2"]["entitled"] == pytest.approx(250 / 350)
    assert d["lnodes"]["u9"]["delivered"] == pytest.approx(250 / 350, abs=0.01)


def test_more_processes_for_a_present_lnode_are_counted():
    # alice starts a second workload while her lnode exists: cgroup weights are split
    # over all her runnable processes, so she still gets half (and plain Linux 4/5).
    text = """
cpus = 1
duration = "40m"
warmup = "20m"
directives = \"\"\"
create:alice:uid:1001:shares:1:
create:bob:uid:1002:shares:1:
\"\"\"
[consts]
halflife = "2m"
[[workload]]
name = "alice"
procs = 1
[[workload]]
name = "alice"
procs = 3
start = "10m"
[[workload]]
name = "bob"
procs = 1
"""
    sc = parse_scenario(text, "more.toml")
    r = run_scenario(sc)
    assert r.lnode("alice").delivered == pytest.approx(0.5, abs=0.01)
    # at once, not only after the feedback has corrected a wrong per-process weight
    j = r.series("alice")
    just_after = (r.times > 600) & (r.times <= 720)
    assert r.delivered[just_after, j] == pytest.approx(0.5, abs=0.02)
    assert run_scenario(sc, "none").lnode("alice").delivered == pytest.approx(0.8, abs=0.01)


# -- NOSCHED and NOSHARE: plain Linux, in shrsim as in shrdaemon --simulate -------------------


def _scenario_01(tmp_path, flag: str) -> Path:
    """Scenario 01 (alice 2 processes, bob 8, on 2 CPUs) with `flag` set, 20 minutes."""
    text = (ROOT / "examples" / "scenarios" / "01_equal_shares.toml").read_text()
    text = text.replace('duration = "2h"', 'duration = "20m"').replace('warmup = "1h"', "")
    text = text.replace('halflife = "15m"', f'halflife = "15m"\nflags = "{flag}"')
    path = tmp_path / f"01_{flag}.toml"
    path.write_text(text)
    return path


def _daemon_split(path: Path, url: str, enforcer: str) -> dict[str, float]:
    """Delivered share per lnode when shrdaemon --simulate runs `path` to its end."""
    from fairshare.sim.daemon import simulated_daemon

    engine = open_udb(url, create=True)  # as shrdaemon --simulate does for its scenario
    d, _model, length = simulated_daemon(engine, str(path), enforcer, epoch=0.0)
    d.start()
    for _ in range(length):
        d.clock.sleep(d.consts.delta, d.loop.wake)
        d.step()
    t, tree = d.table, d.tree
    cpu = {n: float(t.cpu_seconds[tree.node(n)]) for n in ("alice", "bob")}
    return {n: v / sum(cpu.values()) for n, v in cpu.items()}


@pytest.mark.parametrize("flag", ["NOSCHED", "NOSHARE"])
@pytest.mark.parametrize("enforcer", ["cgroup", "nice"])
def test_nosched_and_noshare_give_plain_linux_in_shrsim_and_the_daemon(tmp_path, flag, enforcer):
    path = _scenario_01(tmp_path, flag)
    result = run_scenario(parse_scenario(path.read_text(), str(path)), enforcer)
    assert result.enforcer == "none"
    assert result.lnode("alice").delivered == pytest.approx(0.2, abs=1e-9)
    assert result.lnode("bob").delivered == pytest.approx(0.8, abs=1e-9)
    url = f"sqlite:///{tmp_path / 'udb.sqlite'}"
    split = _daemon_split(path, url, "nice" if enforcer == "nice" else "cgroup2")
    assert split["alice"] == pytest.approx(0.2, abs=1e-9)
    assert split["bob"] == pytest.approx(0.8, abs=1e-9)


def test_shrsim_nosched_reports_enforcer_none(tmp_path):
    r = CliRunner().invoke(shrsim, [str(_scenario_01(tmp_path, "NOSCHED")), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["enforcer"] == "none"
    assert out["lnodes"]["alice"]["delivered"] == pytest.approx(0.2)


# -- a workload's nice and the UDB's --------------------------------------------------------

NICED = """
cpus = 1
duration = "20m"
warmup = "10m"
enforcer = "none"
directives = \"\"\"
create:alice:uid:1001:shares:1:nice:5:
create:bob:uid:1002:shares:1:
\"\"\"
[[workload]]
name = "alice"
procs = 1
[[workload]]
name = "bob"
procs = 1
nice = 3
"""


def test_plain_linux_weighs_a_workloads_nice_and_ignores_the_udbs():
    sc = parse_scenario(NICED, "niced.toml")
    assert [w.nice for w in sc.workloads] == [0, 3]
    result = run_scenario(sc)
    # none changes nothing: alice stays at nice 0 (1024), bob runs at his own 3 (526)
    assert result.lnode("alice").delivered == pytest.approx(1024 / (1024 + 526))


def test_a_nice_value_ranks_processes_not_shares_under_every_enforcer():
    """alice's UDB nice of 5 and bob's own nice of 3 are floors for their processes' nice,
    but not what they get: under cgroup enforcement nice only ranks processes inside an
    lnode's cgroup, and under the nice enforcer the cycle's trim (fairshare.core.delivery)
    weighs each lnode until it receives its allocation, so both get their due 50/50,
    with or without alice's floor, under every policy.  (Before the trim, the nice
    enforcer gave alice what nice 5 against nice 3 gives, 335 / (335 + 526).)"""

    def alice(model, text=NICED, policy="unicos"):
        sc = parse_scenario(text.replace('"none"', f'"{model}"'), "niced.toml")
        return run_scenario(sc, consts=sc.consts.replace(policy=policy)).lnode("alice").delivered

    for policy in ("unicos", "slurm", "feedback"):
        assert alice("nice", policy=policy) == pytest.approx(0.5, abs=0.01)
    assert alice("nice", NICED.replace(":nice:5:", ":")) == pytest.approx(0.5, abs=0.01)
    assert alice("cgroup") == pytest.approx(0.5, abs=1e-6)


def test_workload_nice_errors():
    bad = NICED.replace("nice = 3", "nice = 25")
    with pytest.raises(ScenarioError, match="nice: expected a nice value from -20 to 19"):
        parse_scenario(bad, "bad.toml")


def test_a_bare_halflife_in_a_scenario_is_hours():
    # As shradmin -K (issue 11.2): the guide's "-K 120" is five days.
    hours = parse_scenario(TWO_USERS.replace('halflife = "5m"', "halflife = 2"), "two.toml")
    assert hours.consts.halflife == 7200.0
    unit = parse_scenario(TWO_USERS.replace('halflife = "5m"', 'halflife = "2s"'), "two.toml")
    assert unit.consts.halflife == 2.0


def test_nested_cgroups_hand_unused_share_to_siblings_first():
    """u4 (1% of a CPU) leaves its group's share to u3, not to the other group."""
    from fairshare.enforce.mapping import CgroupTree
    from fairshare.sim.machine import cgroup_tree_share

    t = CgroupTree.of([("+P", "u1"), ("+P", "u2"), ("+C", "u3"), ("+C", "u4")])
    pos = np.array([t.position[k] for k in [("+P", "u1"), ("+P", "u2"), ("+C", "u3")]])
    pos = np.append(pos, t.position[("+C", "u4")])
    w = np.full(t.index.n, 100.0)
    count = np.array([8.0, 1.0, 1.0, 1.0])
    cap = np.array([8.0, 1.0, 1.0, 0.01])
    got = cgroup_tree_share(2, t, w, pos, count, cap, count * 1024, np.zeros(4, dtype=bool))
    assert got == pytest.approx([0.5, 0.5, 0.99, 0.01])
    # An idle-class lnode runs only on what the tree leaves.
    idle = np.array([False, False, False, True])
    got = cgroup_tree_share(2, t, w, pos, count, cap, count * 1024, idle)
    assert got == pytest.approx([0.5, 0.5, 1.0, 0.0])
    cap = np.array([0.2, 0.2, 0.2, 1.0])
    got = cgroup_tree_share(2, t, w, pos, count, cap, count * 1024, idle)
    assert got == pytest.approx([0.2, 0.2, 0.2, 1.0])
