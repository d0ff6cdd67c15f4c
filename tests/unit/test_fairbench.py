"""The fairness benchmark's pure half (tests/fairbench.py): Jain's index, the CPU left
idle while wanted, the targets of the workloads, the figures of a recorded series,
shrsim's prediction and its gap, the JSON document and the charts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fairbench import (
    WORKLOADS,
    Series,
    binned,
    chart,
    document,
    figures,
    idle_while_wanted,
    jain,
    lateness,
    sim_gap,
    simulate,
    target,
    with_start,
)
from machine_lock import runs_shrdaemon
from trees import maxmin_reference

from fairshare.core.consts import Consts


def test_jain_equal_is_one_and_one_taking_all_is_one_over_n():
    assert jain([1.0, 1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain([4.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    # 20/80 against a 50/50 target: normalised 0.4 and 1.6.
    assert jain([0.4, 1.6]) == pytest.approx(4.0 / (2 * (0.16 + 2.56)))


def test_jain_of_nothing_is_one():
    assert jain([]) == 1.0
    assert jain([0.0, 0.0]) == 1.0


def test_idle_while_wanted_counts_idle_cpu_only_up_to_the_unmet_demand():
    # Two users capped at a third of 2 CPUs each, wanting 10: 1.33 CPU used of 2 over
    # 1 s, the machine idle 0.67 s: all of it was wanted.
    assert idle_while_wanted(1.0, 2 / 3, 4 / 3, 10.0, 2.0) == pytest.approx(2 / 3)
    # Wanting one CPU and getting it: the other CPU's idleness is not waste.
    assert idle_while_wanted(1.0, 1.0, 1.0, 1.0, 2.0) == 0.0
    # Wanting 2, got 1.5, the machine idle 0.2 (someone else used the rest): 0.2.
    assert idle_while_wanted(1.0, 0.2, 1.5, 2.0, 2.0) == pytest.approx(0.2)
    assert idle_while_wanted(2.0, 0.0, 0.0, 2.0, 2.0) == 0.0


def test_targets_are_the_reference_max_min_of_each_workload():
    for w in WORKLOADS.values():
        tree = w.tree()
        want = np.zeros(tree.size)
        for u, d in w.demand.items():
            want[tree.node(u)] = d
        ref = maxmin_reference(tree, want, 2.0)
        got = target(w, w.demand, 2.0)
        for n, v in got.items():
            assert v == pytest.approx(ref[tree.node(n)] / ref[0], abs=1e-9), (w.name, n)


def test_tree3_target_splits_by_groups_not_users():
    t = target(WORKLOADS["tree3"], WORKLOADS["tree3"].demand, 2.0)
    assert t["r0"] == pytest.approx(0.5)  # A's whole half, its siblings idle
    assert t["r3"] == pytest.approx(0.25) and t["r4"] == pytest.approx(0.25)
    assert t["A"] == pytest.approx(0.5) and t["C"] == 0.0
    g = target(WORKLOADS["groups"], WORKLOADS["groups"].demand, 2.0)
    assert g["Physics"] == pytest.approx(0.5) and g["Chem"] == pytest.approx(0.5)


def steady_series(split: tuple[float, float], idle: float = 0.0) -> Series:
    """10 s of readings every second, r0 and r1 using `split` CPUs, the machine idle
    `idle` CPU a second; the window from 2 s."""
    times = [float(t) for t in range(11)]
    cpu = [{"r0": split[0] * t, "r1": split[1] * t} for t in times]
    return Series(times, cpu, [idle * t for t in times], start=2.0)


def test_figures_of_a_20_80_split_against_50_50():
    f = figures(WORKLOADS["steady"], steady_series((0.4, 1.6)), 2.0)
    assert f["user_dev_pp"] == pytest.approx(30.0)
    assert f["jain"] == pytest.approx(jain([0.4, 1.6]))
    assert f["idle_pct"] == 0.0
    assert "group_dev_pp" not in f


def test_figures_of_caps_count_the_idle_machine():
    f = figures(WORKLOADS["steady"], steady_series((2 / 3, 2 / 3), idle=2 / 3), 2.0)
    assert f["user_dev_pp"] == pytest.approx(0.0)
    assert f["jain"] == pytest.approx(1.0)
    assert f["idle_pct"] == pytest.approx(100 / 3)


def test_figures_of_groups_sum_the_members():
    w = WORKLOADS["groups"]
    times = [float(t) for t in range(5)]
    per = {"r0": 0.6, "r1": 0.2, "r2": 1.18, "r3": 0.02}  # Physics 40%, Chem 60%
    s = Series(times, [{u: v * t for u, v in per.items()} for t in times], [0.0] * 5)
    f = figures(w, s, 2.0)
    assert f["group_dev_pp"] == pytest.approx(10.0)
    # r1 10% against 25%; the light user r3 is left out of the users' deviation.
    assert f["user_dev_pp"] == pytest.approx(15.0)


def test_history_target_follows_the_newcomer_start():
    w = with_start(WORKLOADS["history"], "r1", 4.0)
    times = [float(t) for t in range(9)]
    cpu = [{"r0": min(t, 4) * 2 + max(t - 4, 0), "r1": max(t - 4, 0)} for t in times]
    s = Series(times, cpu, [0.0] * 9)
    ser = binned(w, s, 2.0, 2.0)
    assert ser["times"] == [2.0, 4.0, 6.0, 8.0]
    assert ser["target"][0] == [1.0, 0.0] and ser["target"][-1] == [0.5, 0.5]
    assert ser["delivered"][0] == [1.0, 0.0] and ser["delivered"][-1] == [0.5, 0.5]


def test_lateness_quantiles():
    q = lateness([float(x) for x in range(1, 101)])
    assert q["p50_ms"] == pytest.approx(50.5)
    assert 99 <= q["p99_ms"] <= 100
    assert lateness([1.0]) == {}


def test_shrsim_gives_the_newcomer_more_at_first_and_its_gap():
    w = with_start(WORKLOADS["history"], "r1", 30.0)
    sim = simulate(w, 2.0, 60.0, Consts(delta=1.0, halflife=10.0), "cgroup")
    d = np.asarray(sim["delivered"])
    t = np.asarray(sim["times"])
    assert d[t <= 30].max(axis=0)[1] == 0.0  # r1 absent while r0 is alone
    assert d[(t > 30) & (t <= 35)][:, 1].mean() > 0.7  # the newcomer catches up
    assert abs(d[-1][0] - 0.5) < 0.15  # and it closes in on 50/50
    # A measured series exactly 50/50 after the start: its gap is the sim's lead.
    measured = {"times": [30.0, 45.0, 60.0], "delivered": [[1, 0], [0.5, 0.5], [0.5, 0.5]]}
    gaps = sim_gap(measured, sim, after=30.0)
    assert len(gaps) == 2
    lead = 100 * np.abs(d[(t > 30) & (t <= 45)].mean(axis=0) - 0.5).max()
    assert gaps[0] == pytest.approx(lead)


def test_document_shape():
    reps = [
        {"figures": {"user_dev_pp": v, "jain": 0.9}, "series": {"times": [1.0]}}
        for v in (3.0, 1.0, 2.0)
    ]
    doc = document({"cpus": 2}, {"steady": {"none": reps}})
    json.dumps(doc)  # serialisable
    b = doc["workloads"]["steady"]["baselines"]["none"]
    assert doc["settings"] == {"cpus": 2}
    assert doc["workloads"]["steady"]["what"] == WORKLOADS["steady"].what
    assert b["repeats"] == 3
    assert b["figures"]["user_dev_pp"] == {
        "median": 2.0,
        "min": 1.0,
        "max": 3.0,
        "values": [3.0, 1.0, 2.0],
    }
    assert b["series"] == {"times": [1.0]}


def test_chart_draws_a_panel_per_baseline(tmp_path):
    from PIL import Image

    w = WORKLOADS["steady"]
    ser = binned(w, steady_series((0.4, 1.6)), 2.0, 2.0)
    ser["start"] = 2.0
    sim = {"times": [1.0, 2.0], "users": w.users, "delivered": [[0.5, 0.5], [0.5, 0.5]]}
    chart(tmp_path / "one.png", "steady", {"none": ser})
    chart(tmp_path / "three.png", "steady", {"none": ser, "caps": ser, "x": {**ser, "sim": sim}})
    one, three = Image.open(tmp_path / "one.png"), Image.open(tmp_path / "three.png")
    assert three.size[0] > 2.5 * one.size[0]  # side by side
    assert three.size[1] == one.size[1]


def test_a_command_naming_shrdaemon_is_not_a_daemon():
    # A grep whose pattern ended in "shrdaemon" stopped a benchmark run.
    assert not runs_shrdaemon(["grep", "-E", "charged |passed|failed|Error|shrdaemon"])
    assert not runs_shrdaemon(["tail", "-f", "/tmp/x/shrdaemon"])
    assert not runs_shrdaemon([])
    assert runs_shrdaemon(["/usr/local/bin/shrdaemon", "--enforcer", "cgroup1"])
    assert runs_shrdaemon(["/usr/bin/python3", "/usr/local/bin/shrdaemon"])
    assert runs_shrdaemon(
        ["/root/.pyenv/versions/3.11.7/bin/python", "-m", "fairshare.cli.shrdaemon"]
    )


def test_a_bin_before_anyone_ran_is_left_out_of_the_chart(tmp_path):
    w = WORKLOADS["steady"]
    times = [0.0, 2.0, 4.0, 6.0]
    cpu = [{"r0": 0.0, "r1": 0.0}, {"r0": 0.0, "r1": 0.0}, {"r0": 1.0, "r1": 1.0}]
    cpu.append({"r0": 2.0, "r1": 2.0})
    ser = binned(w, Series(times, cpu, [0.0] * 4), 2.0, 2.0)
    assert ser["delivered"] == [None, [0.5, 0.5], [0.5, 0.5]]
    chart(tmp_path / "c.png", "steady", {"none": ser})
    assert (tmp_path / "c.png").stat().st_size > 0
