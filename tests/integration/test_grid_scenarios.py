"""The grid scenarios of examples/scenarios/ (16-18): Elmroth and Gardfjall's section 5 on
six simulated sites of 100 CPUs, each running the daemon's own cycle and exchanging usage
(fairshare.sim.grid).  Global entries meet their share of the grid with the usage
exchanged and miss it, as the paper's Figure 11 shows, with local usage only; local
entries keep their share of every site either way."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from fairshare.cli.shrsim import main as shrsim
from fairshare.sim.grid import GridResult, run_grid
from fairshare.sim.grid_scenario import is_grid, load_grid, parse_grid
from fairshare.sim.scenario import ScenarioError

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
PP = 0.01  # one percentage point


@cache
def result(stem: str, usage: str = "grid") -> GridResult:
    (path,) = SCENARIOS.glob(f"{stem}_*.toml")
    return run_grid(load_grid(path, usage=usage))


def shares(r: GridResult) -> dict[str, float]:
    return {e.name: e.delivered for e in r.entries}


def test_16_imbalanced_workloads_meet_their_grid_shares_with_grid_usage():
    """Figure 12: P-A2 and P-A3 run on r1-r3 only and still get 30% and 20% of VO-A."""
    r = result("16")
    d = shares(r)
    for name, target in {"P-A1": 0.5, "P-A2": 0.3, "P-A3": 0.2, "P-B1": 0.6, "P-B2": 0.4}.items():
        assert d[name] == pytest.approx(target, abs=PP), name
        assert r.entry(name).scope == "global" and r.entry(name).target == pytest.approx(target)
    # VO-A and VO-B keep 30% and 70% of every site (local scope)
    for name, target in {"VO-A": 0.3, "VO-B": 0.7}.items():
        e = r.entry(name)
        assert e.scope == "local"
        assert all(abs(got - target) < PP for got, _t in e.sites.values()), name
    # r4-r6 give P-A1 all of VO-A, so r1-r3 give it (next to) nothing
    assert r.entry("P-A1").sites["r1"][0] < 0.02 and r.entry("P-A1").sites["r6"][0] == 1.0


def test_16_with_local_usage_only_misses_the_grid_shares():
    """Figure 11: each site fair on its own; P-A2 and P-A3 reach half their shares."""
    d = shares(result("16", "local"))
    assert d["P-A2"] == pytest.approx(0.15, abs=PP) and d["P-A3"] == pytest.approx(0.10, abs=PP)
    assert d["P-A1"] == pytest.approx(0.75, abs=PP)
    assert d["VO-A"] == pytest.approx(0.3, abs=PP)


def test_17_the_papers_scale_and_figure_1():
    r = result("17")
    d = shares(r)
    targets = {"P-A1": 0.25, "P-A2": 0.25, "P-A3": 0.25, "P-A4": 0.25, "U-A11": 0.5}
    targets |= {"P-B1": 0.6, "P-B2": 0.3, "P-B3": 0.1}
    for name, target in targets.items():
        assert d[name] == pytest.approx(target, abs=PP), name
    for name, target in {"VO-A": 0.5, "VO-B": 0.25, "Local": 0.25}.items():
        assert all(abs(got - target) < PP for got, _t in r.entry(name).sites.values()), name
    # each site's local projects: a pooled group, half each; other sites' own are theirs
    assert d["lp1a"] == pytest.approx(0.5, abs=PP) and set(r.entry("lp1a").sites) == {"r1"}


def test_18_an_idle_user_leaves_its_share_within_its_project():
    """Figures 13 and 14: U-B12 idle; U-B11 and U-B13 get 70% and 30% of P-B1 (idleshare
    even), P-B1 keeps 60% of VO-B and nothing changes outside it."""
    d = shares(result("18"))
    assert d["U-B11"] == pytest.approx(0.70, abs=PP) and d["U-B13"] == pytest.approx(0.30, abs=PP)
    assert d["P-B1"] == pytest.approx(0.6, abs=PP) and d["P-A2"] == pytest.approx(0.3, abs=PP)
    assert "U-B12" not in d or d["U-B12"] == 0.0


def test_shrsim_runs_a_grid_and_prints_json():
    (path,) = SCENARIOS.glob("16_*.toml")
    assert is_grid(path) and not is_grid(next(SCENARIOS.glob("10_*.toml")))
    out = CliRunner().invoke(shrsim, [str(path), "--usage", "local", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["usage"] == "local" and set(doc["sites"]) == {f"r{i}" for i in range(1, 7)}
    pa2 = next(e for e in doc["entries"] if e["name"] == "P-A2")
    assert pa2["scope"] == "global" and pa2["delivered"] == pytest.approx(0.15, abs=PP)
    assert set(pa2["sites"]["r1"]) == {"delivered", "target"}
    out = CliRunner().invoke(shrsim, [str(path), "--plot", "x.png"])
    assert out.exit_code == 2 and "not for a grid scenario" in out.stderr


GRID = """duration = "1h"
directives = \"\"\"
create:VO:uid:500:shflags:040000:shares:1:scope:global:
create:u1:uid:1001:resgrp:VO:shares:1:
\"\"\"
[[site]]
name = "a"
cpus = 2
directives = \"\"\"
create:L:uid:700:shflags:040000:shares:1:
create:l1:uid:2001:resgrp:Nope:shares:1:
\"\"\"
[[workload]]
name = "u1"
site = "*"
"""


def test_a_bad_grid_scenario_is_one_error_at_its_line(tmp_path):
    with pytest.raises(ScenarioError) as err:
        parse_grid(GRID, "g.toml", tmp_path)
    assert str(err.value) == "g.toml:11:27: create:l1: resgrp: no entry named Nope"
    text = GRID.replace("resgrp:Nope", "resgrp:L").replace('site = "*"', 'site = "b"')
    with pytest.raises(ScenarioError, match=r"g.toml:15:1: workload 1: site: expected one of a"):
        parse_grid(text, "g.toml", tmp_path)
    with pytest.raises(ScenarioError, match="exchange: expected at least delta"):
        parse_grid('exchange = "1s"\n' + text.replace('"b"', '"a"'), "g.toml", tmp_path)


SPEEDS = """duration = "12h"
delta = "60s"
warmup = "4h"
exchange = "5m"
directives = \"\"\"
create:VO:uid:500:shflags:040000:shares:1:scope:global:
create:x:uid:1001:resgrp:VO:shares:1:
create:z:uid:1002:resgrp:VO:shares:1:
\"\"\"
[consts]
halflife = "1h"
flags = ["ADJGROUPS"]
[[site]]
name = "a"
cpus = 10
[[site]]
name = "b"
cpus = 10
speed = SPEED
[[workload]]
name = "z"
site = "*"
procs = 20
[[workload]]
name = "x"
site = "b"
procs = 20
"""


@pytest.mark.parametrize("speed", [1.0, 2.0])
def test_a_faster_sites_cpu_seconds_count_for_more(tmp_path, speed):
    """z runs at both sites, x at b only, half of the VO each.  At speed 1 the grid has
    20 units: z takes a's 10, x b's 10.  With b twice as fast, 30 units: x is due 15,
    7.5 of b's CPUs, and z gets a's 10 and b's other 2.5 (5 units)."""
    grid = parse_grid(SPEEDS.replace("SPEED", str(speed)), "s.toml", tmp_path)
    assert grid.site("b").scenario.consts.speed == speed
    r = run_grid(grid)
    assert r.entry("x").delivered == pytest.approx(0.5, abs=PP)
    x_at_b = r.entry("x").sites["b"][0]  # of VO's CPU-seconds x speed there: all b's
    assert x_at_b == pytest.approx(1.0 if speed == 1 else 0.75, abs=2 * PP)
