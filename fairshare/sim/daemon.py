"""`shrdaemon --simulate`: the real daemon loop (fairshare.daemon.daemon.Daemon) on the simulated
machine of a scenario.

The scenario is loaded once (fairshare.sim.scenario.load_scenario, the loader shrsim
uses): an empty daemon UDB is loaded from the directives it parsed, its constant
overrides are stored, and the daemon gets the simulated collector, enforcer, clock and
OS actions (fairshare.sim.collector, fairshare.sim.enforcer, fairshare.sim.machine), so
it cannot reach a real process.
"""

from __future__ import annotations

import logging
import math
import time

from sqlalchemy import Engine, func, select

from fairshare.core.consts import consts_from_mapping, from_user
from fairshare.core.exits import SiteExit
from fairshare.daemon.accounts import AccountsOf
from fairshare.daemon.daemon import Daemon, Options
from fairshare.daemon.grid import GRID_INTERVAL
from fairshare.daemon.reload import load_lnodes
from fairshare.sim.collector import SimCollector
from fairshare.sim.enforcer import SimEnforcer
from fairshare.sim.machine import SimClock, SimOs, world_for
from fairshare.sim.scenario import Scenario, load_scenario
from fairshare.store.config import load_consts, save_consts
from fairshare.store.published import LnodeStore
from udb import directives
from udb.errors import OptionError
from udb.models import Entry
from udb.session import read_session, write_session

log = logging.getLogger("shrdaemon")

#: shrdaemon's --enforcer values and the weight model each simulates (auto: the
#: scenario's).
MODELS = {"auto": None, "cgroup1": "cgroup", "cgroup2": "cgroup", "systemd": "slices"}


def simulated_daemon(
    engine: Engine,
    scenario: str,
    enforcer: str = "auto",
    host: str = "simulator",
    epoch: float | None = None,
    cycles: int | None = None,
    site_exits: tuple[SiteExit, ...] = (),
    grid_interval: float = GRID_INTERVAL,
) -> tuple[Daemon, str, int]:
    """The daemon's loop on the simulated machine of `scenario` (a shrsim TOML file).

    The daemon's UDB gives the tree: an empty UDB is first loaded with the
    scenario's `udb` or `directives`; the scenario's [consts] and delta are stored
    in the UDB (one transaction), so shradmin can still change them mid-run.
    `enforcer` picks the weight model: auto = the scenario's, cgroup1/cgroup2 =
    cgroup, nice, none.  Simulated second 0 is `epoch` (default: early enough that a
    run of `cycles`, else of the whole scenario, ends now, so displays show a fresh
    table).  `site_exits`: the site's hooks (fairshare.core.exits), run every cycle as
    the real daemon runs them; `grid_interval`: a grid's exchange (simulated s,
    fairshare.daemon.grid).  Returns (daemon, model, cycles the scenario lasts).
    """
    model = MODELS.get(enforcer, enforcer)
    # The whole scenario is checked (TOML, ranges, its directives) before the UDB is touched.
    sc = load_scenario(scenario, model, udb=engine.url.render_as_string(hide_password=False))
    consts = _load_udb(engine, sc)
    with read_session(engine) as s:
        tree = load_lnodes(s, consts.mode).tree
    missing = [w.name for w in sc.workloads if tree.find(w.name) is None]
    if missing:
        raise OptionError(
            f"{scenario}: workloads name lnodes the UDB does not have: {', '.join(missing)}"
        )
    workloads, cpus = sc.site_part(host)
    length = max(1, math.ceil(sc.duration / consts.delta - 1e-9))
    if epoch is None:  # the run of `cycles` (or the scenario's length) ends about now
        epoch = time.time() - (cycles or length) * consts.delta
    clock = SimClock(epoch)
    world = world_for(tree, workloads, cpus, sc.enforcer, clock, end=sc.duration)
    actions = SimOs(world)  # the daemon's only way to change a process: the simulated one
    daemon = Daemon(
        engine,
        SimCollector(world),
        SimEnforcer(actions),
        LnodeStore(engine, host),
        actions,
        clock=clock,
        options=Options(
            enforce_min_uid=0, cpus=cpus, site_exits=site_exits, grid_interval=grid_interval
        ),
        account_of=AccountsOf(lambda p: p.uid) if consts.share_by_account else None,
    )
    return daemon, sc.enforcer, length


def _load_udb(engine: Engine, sc: Scenario):
    """Load an empty daemon UDB with the scenario's directives, store its constant
    overrides; returns the constants stored."""
    with read_session(engine) as s:
        empty = s.execute(select(func.count()).select_from(Entry)).scalar_one() == 0
    if empty and sc.directives:
        directives.run(engine, sc.directives)
        log.info("loaded the scenario's UDB (%s) into the empty UDB", sc.directives_source)
    with write_session(engine) as s:
        save_consts(s, consts_from_mapping(from_user(sc.overrides), load_consts(s)))
        return load_consts(s)
