"""shrdaemon --metrics: the snapshot the cycle publishes for the Prometheus metrics, and
their text.  Scraped from a running daemon: tests/system/test_daemon_process.py."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from types import SimpleNamespace as Row

import numpy as np
import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from trees import G, table_one

from fairshare.cli.shrdaemon import main
from fairshare.core.lnode import activate, new_table, release
from fairshare.core.tree import build_tree
from fairshare.daemon.metrics import (
    LNODE_COUNTERS,
    LNODE_METRICS,
    CpuCounters,
    Metrics,
    Snapshot,
    lnode_text,
    parse_address,
)
from fairshare.sim.daemon import simulated_daemon
from udb.errors import OptionError
from udb.session import open_udb

ROOT_DIR = Path(__file__).resolve().parents[2]
ACME = ROOT_DIR / "examples" / "scenarios" / "06_acme.toml"
#: Scenario 14's two groups on 2 CPUs, where u4 leaves Chem (which u3 keeps alive) at
#: 40 s, its lnode released at the write-back that follows, and comes back at 120 s.
CHURN = """
cpus = 2
duration = "5m"
delta = "4s"

directives = \"\"\"
create:Physics:uid:500:shflags:040000:shares:1:
create:Chem:uid:600:shflags:040000:shares:1:
create:u1:uid:1001:resgrp:Physics:shares:1:
create:u3:uid:1003:resgrp:Chem:shares:1:
create:u4:uid:1004:resgrp:Chem:shares:1:
\"\"\"

[consts]
flags = "006"
writeback = "20s"

[[workload]]
name = "u1"
procs = 4

[[workload]]
name = "u3"
procs = 1

[[workload]]
name = "u4"
procs = 1
stop = "40s"

[[workload]]
name = "u4"
procs = 1
start = "120s"
"""


def families(text: str) -> dict:
    """name -> {labels tuple or (): value} of a text exposition (prometheus_client's parser)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = tuple(sorted(s.labels.items()))
            out.setdefault(s.name, {})[key] = s.value
    return out


def test_parse_address():
    assert parse_address("127.0.0.1:9180") == ("127.0.0.1", 9180)
    assert parse_address("[::1]:0") == ("::1", 0)
    assert parse_address(":9180") == ("0.0.0.0", 9180)
    for bad in ("9180", "host:", "host:port", "h:70000"):
        with pytest.raises(OptionError, match="expected HOST:PORT"):
            parse_address(bad)


def test_bad_metrics_address_is_exit_2(udb_url):
    r = CliRunner().invoke(main, ["--udb", udb_url, "--once", "--metrics", "localhost"])
    assert r.exit_code == 2 and "--metrics: expected HOST:PORT" in r.stderr


def test_snapshot_after_each_cycle_capped_to_the_largest_usage(tmp_path):
    url = f"sqlite:///{tmp_path / 'sim.sqlite'}"
    engine = open_udb(url, create=True)  # as shrdaemon --simulate does for its scenario
    daemon, _model, _n = simulated_daemon(engine, str(ACME), cycles=20)
    m = Metrics(("127.0.0.1", 0), max_lnodes=5)
    daemon.observers.append(m)
    daemon.start()
    for _ in range(20):
        daemon.clock.sleep(daemon.consts.delta, daemon.loop.wake)
        daemon.step()
    fam = families(m.exposition().decode())
    usage = fam["fairshare_lnode_usage"]
    assert len(usage) == 5
    assert fam["fairshare_lnodes_exported"][()] == 5
    t = daemon.table
    active = int(t.active.sum())
    assert fam["fairshare_lnodes"][()] == active > 5
    # The five exported are the five largest usages (root and the groups sum their leaves).
    assert sorted(usage.values(), reverse=True) == pytest.approx(
        sorted(t.usage[t.active])[-5:][::-1]
    )
    assert fam["fairshare_cycles_total"][()] == 20
    assert fam["fairshare_cycle_duration_seconds_count"][()] == 20
    assert fam["fairshare_enforcer_info"][(("enforcer", "sim"),)] == 1
    # Labels: name, kind and parent, as the tree has them.
    labels = {dict(k)["name"]: dict(k) for k in usage}
    assert labels["Proj2"]["kind"] == "group" and labels["Proj2"]["parent"] == "root"
    # At shutdown every active leaf (the 16 busy users, Idle) is written back and counted.
    leaves = int((t.active & daemon.tree.leaf_mask).sum())
    assert leaves >= 17
    before = daemon.writebacks
    assert fam["fairshare_writebacks_total"][()] == before
    daemon.shutdown()
    assert daemon.writebacks == before + leaves


def test_lnode_block_escapes_labels_and_non_finite_values():
    s = Snapshot(
        names=['we"ird\\name\nx', "u1"],
        kinds=["user", "user"],
        parents=["root", "root"],
        values={
            attr: np.array([float("nan"), float("inf")])
            if attr == "rate"
            else np.array([1.5, 2e-9])
            for attr, _n, _h in LNODE_METRICS + LNODE_COUNTERS
        },
        active=2,
        cycles=1,
        writebacks=0,
        checkpoints=0,
        enforcer="none",
        time=0.0,
    )
    text = lnode_text(s).decode()
    fam = families(text)
    assert set(fam) == {name for _a, name, _h in LNODE_METRICS + LNODE_COUNTERS}
    types = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert types["fairshare_lnode_cpu_seconds"] == "counter"
    assert types["fairshare_lnode_fair_share_ratio"] == "gauge"
    usage = {dict(k)["name"]: v for k, v in fam["fairshare_lnode_usage"].items()}
    assert usage == {'we"ird\\name\nx': 1.5, "u1": 2e-9}
    rate = {dict(k)["name"]: v for k, v in fam["fairshare_lnode_rate"].items()}
    assert math.isnan(rate['we"ird\\name\nx']) and rate["u1"] == float("inf")


def test_warnings_are_counted_as_errors(tmp_path):
    m = Metrics(("127.0.0.1", 0))
    m.started(None)
    try:
        logging.getLogger("shrdaemon").warning("systemd refused something")
        logging.getLogger("shrdaemon").error("lost the database")
        logging.getLogger("shrdaemon").info("fine")
    finally:
        m.stopping(None)
    fam = families(generate_latest(m.registry).decode())
    assert fam["fairshare_errors_total"][(("level", "warning"),)] == 1
    assert fam["fairshare_errors_total"][(("level", "error"),)] == 1


def by_name(series: dict) -> dict[str, float]:
    """A per-lnode family's values by the lnode's name label."""
    return {dict(k)["name"]: v for k, v in series.items()}


def scrapes(daemon, m: Metrics, cycles: int):
    """After each of `cycles` cycles of `daemon`: (its tree, a copy of its table, the
    machine's CPU seconds in the cycle, the families `m` exposes)."""
    daemon.start()
    for _ in range(cycles):
        daemon.clock.sleep(daemon.consts.delta, daemon.loop.wake)
        daemon.step()
        seconds = daemon.elapsed * daemon.cpus
        yield daemon.tree, daemon.table.copy(), seconds, families(m.exposition().decode())


def test_fair_and_delivered_gauges_are_the_tables_target_and_got_minute(tmp_path):
    engine = open_udb(f"sqlite:///{tmp_path / 'sim.sqlite'}", create=True)
    scenario = ROOT_DIR / "examples" / "scenarios" / "14_interactive_member.toml"
    daemon, _model, _n = simulated_daemon(engine, str(scenario), cycles=30)
    m = Metrics(("127.0.0.1", 0))
    daemon.observers.append(m)
    for tree, t, _seconds, fam in scrapes(daemon, m, 30):
        fair = by_name(fam["fairshare_lnode_fair_share_ratio"])
        got = by_name(fam["fairshare_lnode_delivered_share_ratio"])
        nodes = {name: tree.node(name) if name != "root" else 0 for name in fair}
        assert set(nodes) == {"root", "Physics", "Chem", "u1", "u2", "u3", "u4"}
        assert fair == {name: t.target[n] for name, n in nodes.items()}
        assert got == {name: t.got_minute[n] for name, n in nodes.items()}
        assert fam["fairshare_cpus"][()] == 2
    daemon.shutdown()
    # Physics 50, Chem 50: u4 wants 1% of a CPU, u3 takes the rest of Chem's half.
    assert fair["Physics"] == pytest.approx(0.5) and fair["Chem"] == pytest.approx(0.5)
    assert fair["u4"] == pytest.approx(0.005, rel=0.05)


def test_cpu_counter_adds_the_cpu_delivered_and_never_goes_down_in_a_life(tmp_path):
    scenario = tmp_path / "churn.toml"
    scenario.write_text(CHURN)
    engine = open_udb(f"sqlite:///{tmp_path / 'sim.sqlite'}", create=True)
    daemon, _model, _n = simulated_daemon(engine, str(scenario), cycles=60)
    m = Metrics(("127.0.0.1", 0))
    daemon.observers.append(m)
    before: dict[str, float] = {}
    u4_lives: list[list[float]] = [[]]
    for tree, t, seconds, fam in scrapes(daemon, m, 60):
        cpu = by_name(fam["fairshare_lnode_cpu_seconds_total"])
        for name, value in cpu.items():
            n = tree.node(name) if name != "root" else 0
            if tree.leaf_mask[n]:  # a leaf: the table's CPU seconds since it was created
                assert value == t.cpu_seconds[n]
            if name in before:  # the same lnode as the cycle before: what it got since
                assert value == pytest.approx(before[name] + t.got[n] * seconds)
                assert value >= before[name]
            else:  # created at this cycle (for a group, at the daemon's start)
                assert value == pytest.approx(t.got[n] * seconds)
        # A group sums its leaves': Chem's CPU is u3's and (while it lives) u4's.
        leaves = [cpu[u] - before.get(u, 0.0) for u in ("u3", "u4") if u in cpu]
        assert cpu["Chem"] - before.get("Chem", 0.0) == pytest.approx(sum(leaves))
        if "u4" in cpu:
            u4_lives[-1].append(cpu["u4"])
        elif u4_lives[-1]:
            u4_lives.append([])
        before = cpu
    daemon.shutdown()
    # u4 ran, was released while Chem lived on, and came back as a new lnode whose
    # counter started again from 0 (a reset, which Prometheus handles).
    first, second = u4_lives
    assert first and second and second[0] < first[-1]
    assert before["Chem"] > before["u3"] + first[-1]  # Chem kept u4's first life
    assert before["root"] == pytest.approx(before["Physics"] + before["Chem"])


def test_cpu_counters_by_hand_through_a_release_and_a_rebuilt_tree():
    def cycle(tree, t, got: dict[str, float], counters: CpuCounters) -> dict[str, float]:
        """One cycle of 8 CPU seconds (4 s on 2 CPUs) in which each leaf of `got` got
        that fraction of the machine: the counters of the active lnodes, by name."""
        t.got[:] = 0.0
        for name, g in got.items():
            n = tree.node(name)
            t.cpu_seconds[n] += g * 8.0  # what the cycle adds to a leaf
            t.got[n] = t.got[tree.parent[n]] = g  # one active leaf per group here
        t.got[0] = sum(got.values())
        cpu = counters.update(tree, t, 8.0)
        return {tree.names[n] or "root": cpu[n] for n in np.flatnonzero(t.active)}

    tree, counters = table_one(), CpuCounters()
    t = new_table(tree)
    for name in ("A1", "B1"):
        activate(t, tree.node(name), 0.0)
    half = {"A1": 0.25, "B1": 0.5}
    assert cycle(tree, t, half, counters) == {"root": 6, "A": 2, "B": 4, "A1": 2, "B1": 4}
    assert cycle(tree, t, half, counters) == {"root": 12, "A": 4, "B": 8, "A1": 4, "B1": 8}
    # B1 leaves and B with it; B1 comes back a cycle later: B starts again from 0.
    release(t, tree.node("B1"), 0.0)
    assert cycle(tree, t, {"A1": 0.25}, counters) == {"root": 14, "A": 6, "A1": 6}
    activate(t, tree.node("B1"), 0.0)
    assert cycle(tree, t, half, counters) == {"root": 20, "A": 8, "B": 4, "A1": 8, "B1": 4}
    # A rebuilt tree (C new, the nodes renumbered): the groups keep their counts by
    # name, as the daemon carries their lnodes over (the leaves' CPU seconds with them).
    rows = [
        Row(name="C", uid=700, resgrp=0, shares=1, shflags=G),
        Row(name="B", uid=600, resgrp=0, shares=1, shflags=G),
        Row(name="A", uid=500, resgrp=0, shares=1, shflags=G),
        Row(name="B1", uid=1002, resgrp=600, shares=9, shflags=0),
        Row(name="A1", uid=1001, resgrp=500, shares=1, shflags=0),
    ]
    rebuilt = build_tree(rows)
    assert rebuilt.node("A") != tree.node("A")
    t2 = new_table(rebuilt)
    for name in ("A1", "B1"):
        activate(t2, rebuilt.node(name), 0.0)
        t2.cpu_seconds[rebuilt.node(name)] = t.cpu_seconds[tree.node(name)]
    assert cycle(rebuilt, t2, half, counters) == {
        "root": 26, "A": 10, "B": 8, "A1": 10, "B1": 8,
    }  # fmt: skip


def test_clients_holding_half_sent_requests_get_few_threads_and_are_timed_out(monkeypatch):
    """A local user opening 60 connections that each send half a request (as the
    campaign's took the daemon to 761 threads): the server keeps at most MAX_SCRAPES
    threads, closes the rest unanswered, and drops the stalled ones at IDLE_TIMEOUT,
    after which a scrape is answered."""
    import socket
    import threading
    import time
    import urllib.request

    from fairshare.daemon import metrics as metrics_module

    monkeypatch.setattr(metrics_module, "IDLE_TIMEOUT", 1.0, raising=False)
    cap = getattr(metrics_module, "MAX_SCRAPES", 8)
    m = Metrics(("127.0.0.1", 0))
    m.serve()
    before = threading.active_count()
    held = []
    try:
        for _ in range(60):
            s = socket.create_connection(m.bound, timeout=5)
            s.sendall(b"GET /metr")
            held.append(s)
        time.sleep(0.5)
        most = threading.active_count() - before
        assert most <= cap, most
        deadline = time.monotonic() + 10
        while threading.active_count() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threading.active_count() == before  # each stalled one was timed out
        with urllib.request.urlopen(f"http://127.0.0.1:{m.bound[1]}/metrics", timeout=5) as r:
            assert r.status == 200 and b"fairshare_errors_total" in r.read()
    finally:
        for s in held:
            s.close()
        m.stopping(None)


def test_users_mistakes_on_the_socket_are_counted_apart_from_the_daemons_errors(tmp_path):
    from fairshare.server.server import Server
    from integration.test_server import _ask

    engine = open_udb(f"sqlite:///{tmp_path / 'u.sqlite'}", create=True)
    m = Metrics(("127.0.0.1", 0))
    m.started(None)
    sock = tmp_path / "s.sock"
    srv = Server(str(sock), engine, "h", None, tmp_path / "auth")
    srv.start()
    try:
        for request in ("no-such-request", "newacct", "shrviews"):  # refused: users' mistakes
            assert _ask(str(sock), request)["ok"] is False
        logging.getLogger("shrdaemon").error("lost the database")  # the daemon's own
    finally:
        srv.stop()
        m.stopping(None)
    fam = families(generate_latest(m.registry).decode())
    assert fam["fairshare_client_errors_total"][(("level", "warning"),)] == 3
    assert fam["fairshare_errors_total"][(("level", "warning"),)] == 0
    assert fam["fairshare_errors_total"][(("level", "error"),)] == 1
    assert fam["fairshare_client_errors_total"][(("level", "error"),)] == 0


#: Zero shares everywhere a user may have them, Idle's 0 shares, an empty group (no
#: member at all) and a group whose members have no shares between them.
DEGENERATE = """
cpus = 2
duration = "2m"
delta = "4s"

directives = \"\"\"
create:Idle:uid:11:shares:0:resgrp:0:
create:unknown:uid:12:shares:0:resgrp:0:
create:Zero:uid:500:shflags:040000:shares:0:
create:Empty:uid:600:shflags:040000:shares:5:
create:Nobody:uid:700:shflags:040000:shares:1:
create:z1:uid:1001:resgrp:Zero:shares:0:
create:z2:uid:1002:resgrp:Nobody:shares:0:
create:z3:uid:1003:resgrp:Nobody:shares:0:
\"\"\"

[consts]
flags = "006"

[[workload]]
name = "z1"
procs = 2

[[workload]]
name = "z2"
procs = 1
"""


@pytest.mark.parametrize("policy", ["unicos", "feedback", "slurm"])
def test_no_nan_or_inf_is_ever_exported_with_zero_shares_idle_and_empty_groups(tmp_path, policy):
    scenario = tmp_path / "zero.toml"
    scenario.write_text(DEGENERATE.replace('flags = "006"', f'flags = "006"\npolicy = "{policy}"'))
    engine = open_udb(f"sqlite:///{tmp_path / 'sim.sqlite'}", create=True)
    daemon, _model, _n = simulated_daemon(engine, str(scenario), cycles=30)
    m = Metrics(("127.0.0.1", 0))
    daemon.observers.append(m)
    seen = set()
    for _tree, _t, _seconds, fam in scrapes(daemon, m, 30):
        for name, series in fam.items():
            for labels, value in series.items():
                assert math.isfinite(value), (name, dict(labels), value)
                seen.add(dict(labels).get("name"))
    daemon.shutdown()
    assert {"z1", "z2", "Zero", "Nobody", "root"} <= seen


def test_the_grafana_dashboard_uses_only_metrics_and_labels_the_daemon_exports(tmp_path):
    import json
    import re

    engine = open_udb(f"sqlite:///{tmp_path / 'sim.sqlite'}", create=True)
    scenario = ROOT_DIR / "examples" / "scenarios" / "14_interactive_member.toml"
    daemon, _model, _n = simulated_daemon(engine, str(scenario), cycles=3)
    m = Metrics(("127.0.0.1", 0))
    m.started(None)
    daemon.observers.append(m)
    try:
        *_, (_tree, _t, _s, fam) = scrapes(daemon, m, 3)
        daemon.shutdown()
    finally:
        m.stopping(None)
    exported = set(fam)
    labels = {k for series in fam.values() for key in series for k, _v in key}
    dashboard = json.loads((ROOT_DIR / "examples" / "grafana" / "fairshare.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    used = {name for e in exprs for name in re.findall(r"\bfairshare_[a-z_]+", e)}
    assert used and used <= exported, used - exported
    matched = {lab for e in exprs for lab in re.findall(r"[{,]\s*([a-z_]+)\s*=~?", e)}
    assert matched <= labels | {"instance"}, matched - labels
    panels = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for what in ("delivered", "fair", "entitled", "cycle duration", "write-backs", "errors"):
        assert what in panels
