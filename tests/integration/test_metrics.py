"""shrdaemon --metrics: the snapshot the cycle publishes for the Prometheus metrics, and
their text.  Scraped from a running daemon: tests/system/test_daemon_process.py."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fairshare.cli.shrdaemon import main
from fairshare.daemon.metrics import LNODE_METRICS, Metrics, Snapshot, lnode_text, parse_address
from fairshare.sim.daemon import simulated_daemon
from udb.errors import OptionError
from udb.session import open_udb

ROOT_DIR = Path(__file__).resolve().parents[2]
ACME = ROOT_DIR / "examples" / "scenarios" / "06_acme.toml"


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
            for attr, _n, _h in LNODE_METRICS
        },
        active=2,
        cycles=1,
        writebacks=0,
        checkpoints=0,
        enforcer="none",
        time=0.0,
    )
    fam = families(lnode_text(s).decode())
    assert set(fam) == {name for _a, name, _h in LNODE_METRICS}
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
