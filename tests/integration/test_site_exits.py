"""Site exits (the guide's 4.5): policies and a per-cycle hook from a plug-in package
that the tests install (tests/data/plugin: a module and its dist-info with
entry_points.txt, put on sys.path, where importlib.metadata finds it as it finds any
installed distribution).

The guide's example, 4.5.1: "the following routine allows UID 104 to use as many CPU
resources as necessary ... This user is special, must never starve for cpu."  Here
that is a floor on UID 104's effective share; the second example caps a group.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace as Row

import numpy as np
import pytest
from busy import RecordedOs
from click.testing import CliRunner
from sqlalchemy import select

from fairshare.cli.shradmin import main as shradmin
from fairshare.cli.shrdaemon import site_exits
from fairshare.cli.shrsim import main as shrsim
from fairshare.collect import ProcessSample, Sample
from fairshare.core import policies
from fairshare.core.consts import ADJGROUPS, Consts
from fairshare.core.cycle import Consumption
from fairshare.core.exits import (
    Adjustment,
    HookError,
    SiteExit,
    apply_adjustments,
    cycle_view,
    validate,
)
from fairshare.core.lnode import new_table
from fairshare.core.plugins import load_site_hooks
from fairshare.core.policies import run_cycle
from fairshare.core.steps import advance
from fairshare.core.tree import build_tree
from fairshare.daemon.daemon import Daemon, Options
from fairshare.enforce.base import Capabilities
from fairshare.sim.machine import SimClock
from fairshare.store.config import load_consts, save_consts
from fairshare.store.published import LnodeStore
from udb.models import SHF_GROUP, Entry
from udb.session import open_udb, read_session, write_session

PLUGIN = Path(__file__).parent.parent / "data" / "plugin"
G = 0o40000


@pytest.fixture
def plugin(monkeypatch):
    """The plug-in package installed (on sys.path) for the test, and gone after it."""
    monkeypatch.syspath_prepend(str(PLUGIN))
    policies.load_plugins()
    yield
    monkeypatch.undo()
    policies.load_plugins()


def site_tree():
    """root: A (1 share: uid 104 and a2, 1 share each) and batch (1 share: b1, b2)."""
    return build_tree(
        [
            Row(name="A", uid=500, resgrp=0, shares=1, shflags=G),
            Row(name="batch", uid=501, resgrp=0, shares=1, shflags=G),
            Row(name="special", uid=104, resgrp=500, shares=1, shflags=0),
            Row(name="a2", uid=1002, resgrp=500, shares=1, shflags=0),
            Row(name="b1", uid=1003, resgrp=501, shares=1, shflags=0),
            Row(name="b2", uid=1004, resgrp=501, shares=1, shflags=0),
        ]
    )


def busy_table(tree):
    """Every user busy with equal usage, one cycle: e_shares A .5 (.25 each), batch .5."""
    c = Consumption.zeros(tree.size)
    leaves = tree.leaf_mask & (tree.ids >= 100)
    c.cpu[leaves], c.nrun[leaves], c.refs[leaves] = 1.0, 1, 1
    return run_cycle(tree, new_table(tree), c, Consts(flags=ADJGROUPS), 4.0)


def shares(tree, e_share):
    return {n: round(float(e_share[tree.node(n)]), 9) for n in tree.names[1:]}


# -- the adjustment, worked by hand --------------------------------------------------------


def test_busy_table_is_the_even_split_the_examples_start_from():
    tree = site_tree()
    t = busy_table(tree)
    assert shares(tree, t.e_share) == {
        "A": 0.5, "batch": 0.5, "special": 0.25, "a2": 0.25, "b1": 0.25, "b2": 0.25,
    }  # fmt: skip


def test_a_floor_for_uid_104_comes_from_its_siblings_then_from_other_groups():
    tree = site_tree()
    t = busy_table(tree)
    node = tree.node_of_id(104)
    # 0.4: A's half holds it; a2 keeps the rest of A's half, batch is untouched.
    e = apply_adjustments(tree, t, [Adjustment(node, floor=0.4)])
    assert shares(tree, e) == {
        "A": 0.5, "batch": 0.5, "special": 0.4, "a2": 0.1, "b1": 0.25, "b2": 0.25,
    }  # fmt: skip
    # 0.7: more than A's half; A is lifted to 0.7, batch keeps 0.3, split evenly.
    e = apply_adjustments(tree, t, [Adjustment(node, floor=0.7)])
    assert shares(tree, e) == {
        "A": 0.7, "batch": 0.3, "special": 0.7, "a2": 0.0, "b1": 0.15, "b2": 0.15,
    }  # fmt: skip


def test_a_group_capped_at_a_fraction_leaves_the_rest_to_the_others():
    tree = site_tree()
    t = busy_table(tree)
    e = apply_adjustments(tree, t, [Adjustment(tree.node("batch"), cap=0.2)])
    assert shares(tree, e) == {
        "A": 0.8, "batch": 0.2, "special": 0.4, "a2": 0.4, "b1": 0.1, "b2": 0.1,
    }  # fmt: skip
    # both at once: the floor in A, the cap on batch
    both = [Adjustment(tree.node_of_id(104), floor=0.6), Adjustment(tree.node("batch"), cap=0.2)]
    e = apply_adjustments(tree, t, both)
    assert shares(tree, e) == {
        "A": 0.8, "batch": 0.2, "special": 0.6, "a2": 0.2, "b1": 0.1, "b2": 0.1,
    }  # fmt: skip


def test_what_a_hook_returns_is_checked():
    tree = site_tree()
    t = busy_table(tree)
    view = cycle_view(tree, t, Consts())
    special = view.by_id(104)
    assert (special.name, special.kind, special.due, special.e_share) == (
        "special", "user", 0.25, 0.25,
    )  # fmt: skip
    cases = {
        "expected an iterable of Adjustment": {"uid": 104},
        "expected an Adjustment": [(special.node, 0.2)],
        "is not an active lnode": [Adjustment(999, floor=0.1)],
        "expected 0 <= floor <= cap <= 1": [Adjustment(special.node, floor=0.5, cap=0.4)],
        "finite numbers": [Adjustment(special.node, floor=float("nan"))],
        "more than the machine": [
            Adjustment(special.node, floor=0.7),
            Adjustment(view.by_id(1003).node, floor=0.6),
        ],  # fmt: skip
    }
    for message, result in cases.items():
        exit_ = SiteExit("t", lambda v, r=result: r)
        with pytest.raises(HookError, match=message):
            validate(view, exit_.hook(view))


# -- the plug-in package --------------------------------------------------------------------


def test_a_policy_plugin_is_listed_and_accepted_by_shradmin_and_shrsim(plugin, udb_url):
    assert policies.ORIGINS["example"] == "plug-in fairshare_site_example:ExamplePolicy"
    r = CliRunner().invoke(shradmin, ["--udb", udb_url, "--policy", "list"])
    assert r.exit_code == 0, r.output
    assert r.output.split() == [
        "unicos", "the", "suite's", "feedback", "the", "suite's", "slurm", "the", "suite's",
        "example", "plug-in", "fairshare_site_example:ExamplePolicy",
    ]  # fmt: skip
    r = CliRunner().invoke(shradmin, ["--udb", udb_url, "--policy", "example"])
    assert r.exit_code == 0, r.output
    with read_session(open_udb(udb_url)) as s:
        consts = load_consts(s)
    assert consts.policy == "example"
    assert policies.policy_for(consts).name == "example"
    r = CliRunner().invoke(shrsim, ["--compare", "list", "unused.toml"])
    assert r.exit_code == 0, r.output
    assert "example" in r.output.split()


def test_without_the_plugin_its_policy_is_refused(udb_url):
    r = CliRunner().invoke(shradmin, ["--udb", udb_url, "--policy", "example"])
    assert r.exit_code == 2
    assert "policy: expected one of unicos, feedback, slurm, got 'example'" in r.output


def test_hooks_load_from_the_entry_point_group(plugin):
    names = [e.name for e in load_site_hooks()]
    assert names == ["broken", "cap-batch", "never-starve", "wrong"]
    assert [e.name for e in site_exits(("never-starve", "cap-batch"))] == [
        "never-starve",
        "cap-batch",
    ]
    assert [e.name for e in site_exits(("fairshare_site_example:cap_batch",))] == [
        "fairshare_site_example:cap_batch"
    ]
    assert site_exits(("none",)) == ()


def test_the_guides_example_through_the_cycle_uid_104_never_starves(plugin):
    """uid 104 with a huge past usage would get almost nothing; the hook keeps it at 20%
    (its group at least that), the batch group at most 25%."""
    tree = site_tree()
    t = new_table(tree)
    hooks = load_site_hooks(("never-starve", "cap-batch"))
    c = Consumption.zeros(tree.size)
    leaves = tree.leaf_mask & (tree.ids >= 100)
    c.cpu[leaves], c.nrun[leaves], c.refs[leaves] = 1.0, 1, 1
    consts = Consts(flags=ADJGROUPS)
    t.usage[tree.node_of_id(104)] = 1e9  # the special user's past
    t.active[:] = True
    plain, _ = advance(tree, t, c, consts, 4.0)
    hooked, _ = advance(tree, t, c, consts, 4.0, exits=hooks)
    special, batch = tree.node_of_id(104), tree.node("batch")
    assert plain.e_share[special] < 0.01
    assert hooked.e_share[special] == pytest.approx(0.2)
    assert hooked.e_share[batch] == pytest.approx(0.25)
    assert hooked.e_share[tree.node("A")] == pytest.approx(0.75)
    assert hooked.e_share[tree.node("a2")] == pytest.approx(0.55)
    assert hooked.flat[special] > 10 * plain.flat[special]  # the flat enforcers follow


# -- in the daemon ----------------------------------------------------------------------------


EPOCH = 1_000_000.0


class Script:
    def __init__(self, clock, procs):
        self.clock, self.procs, self.last = clock, procs, None

    def sample(self, io=True, syscalls=True, mem=True, placed=False):
        now = self.clock.time()
        elapsed = 0.0 if self.last is None else now - self.last
        self.last = now
        procs = [ProcessSample(p, EPOCH, u, cpu=elapsed, runnable=True) for p, u in self.procs]
        return Sample(now, elapsed, procs if elapsed else [], 0.0)


class Recorder:
    name = "recorder"

    def __init__(self, actions):
        self.actions, self.capabilities, self.applied = actions, Capabilities(), []

    def setup(self):
        pass

    def apply(self, targets):
        self.applied = {t.name: t.e_share for t in targets}

    def teardown(self):
        pass


@pytest.fixture
def engine(udb_url):
    e = open_udb(udb_url)
    with write_session(e) as s:
        s.add_all(
            [
                Entry(name="Idle", uid=11, shares=0),
                Entry(name="unknown", uid=12, shares=1),
                Entry(name="A", uid=500, shflags=SHF_GROUP, shares=1),
                Entry(name="batch", uid=501, shflags=SHF_GROUP, shares=1),
                Entry(name="special", uid=104, resgrp=500, shares=1),
                Entry(name="a2", uid=1002, resgrp=500, shares=1),
                Entry(name="b1", uid=1003, resgrp=501, shares=1),
            ]
        )
        save_consts(s, Consts(flags=ADJGROUPS))
    return e


def run_daemon(engine, exits, cycles=3):
    clock = SimClock(EPOCH)
    actions = RecordedOs()
    enf = Recorder(actions)
    procs = [(7, 104), (8, 1002), (9, 1003)]
    d = Daemon(
        engine,
        Script(clock, procs),
        enf,
        LnodeStore(engine, host="test"),
        actions,
        clock=clock,
        options=Options(enforce_min_uid=100, site_exits=tuple(exits)),
    )
    d.start()
    for _ in range(cycles):
        clock.sleep(d.consts.delta, d.loop.wake)
        d.step()
    d.shutdown()
    return enf.applied


def test_the_daemon_runs_the_hook_before_the_enforcer(plugin, engine):
    plain = run_daemon(engine, ())
    assert plain["b1"] > 0.5  # batch's one user: half the machine or more
    capped = run_daemon(engine, load_site_hooks(("cap-batch",)))
    assert capped["b1"] == pytest.approx(0.25)
    assert capped["special"] + capped["a2"] == pytest.approx(0.75)


def test_a_hook_that_raises_or_returns_nonsense_is_logged_once_and_skipped(plugin, engine, caplog):
    with caplog.at_level(logging.WARNING, logger="fairshare.core.exits"):
        applied = run_daemon(engine, load_site_hooks(("broken", "wrong", "cap-batch")), 5)
    lines = [r.getMessage() for r in caplog.records if r.name == "fairshare.core.exits"]
    assert lines == [
        "site hook broken skipped (logged once): ZeroDivisionError: division by zero in "
        "the site's code",
        "site hook wrong skipped (logged once): HookError: expected an iterable of "
        "Adjustment, got dict",
    ]
    assert applied["b1"] == pytest.approx(0.25)  # the good hook still ran, every cycle
    with read_session(engine) as s:  # and the daemon wrote back as usual
        assert s.scalars(select(Entry.shextime).where(Entry.uid == 1003)).one() > EPOCH
    assert np.isfinite(applied["special"])


SIM_SCENARIO = '''
cpus = 2
duration = "10m"
delta = "4s"

directives = """
create:Idle:uid:11:shares:0:
create:A:uid:500:shflags:040000:shares:1:
create:batch:uid:501:shflags:040000:shares:1:
create:special:uid:104:resgrp:A:shares:1:
create:a2:uid:1002:resgrp:A:shares:1:
create:b1:uid:1003:resgrp:batch:shares:1:
create:b2:uid:1004:resgrp:batch:shares:1:
"""

[consts]
flags = ["ADJGROUPS"]

[[workload]]
name = "a2"
procs = 2

[[workload]]
name = "b1"
procs = 2

[[workload]]
name = "b2"
procs = 2
'''


def test_shrdaemon_simulate_runs_the_site_hook_and_the_machine_delivers_it(plugin, tmp_path):
    """shrdaemon --simulate with the hooks installed (by default every one: the broken
    and the wrong one are skipped, cap-batch runs): the simulated kernel (nested
    cgroups) gives the batch group a quarter of the machine, not its half as with
    --site-hook none."""
    from fairshare.cli.shrdaemon import main as shrdaemon

    scenario = tmp_path / "site.toml"
    scenario.write_text(SIM_SCENARIO)
    results = {}
    for hooks in (["--site-hook", "none"], []):
        url = f"sqlite:///{tmp_path / f'udb{len(hooks)}.sqlite'}"
        open_udb(url, create=True)  # as udbgen makes it
        args = ["--udb", url, "--simulate", str(scenario), "--cycles", "30", *hooks]
        r = CliRunner().invoke(shrdaemon, [*args, "--show", "--json"])
        assert r.exit_code == 0, r.output
        results[not hooks] = {v["name"]: v for v in json.loads(r.stdout)["lnodes"]}
    assert results[False]["batch"]["e_share"] == pytest.approx(0.5, abs=0.01)
    assert results[False]["batch"]["got"] == pytest.approx(0.5, abs=0.02)
    assert results[True]["batch"]["e_share"] == pytest.approx(0.25)
    assert results[True]["batch"]["got"] == pytest.approx(0.25, abs=0.02)
    assert results[True]["a2"]["got"] == pytest.approx(0.75, abs=0.02)
