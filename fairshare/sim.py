"""The fair-share simulator: a machine of N CPUs, a simulated clock, the real cycle.

`SimMachine` shares CPU among runnable processes in proportion to their weights,
each process using at most one CPU (and at most its `demand`); processes of the
idle class run only on CPU the others leave.  The weights come from the same
mappings the daemon's enforcers use (fairshare.enforce.mapping):

- "cgroup": cgroup v2, one cgroup per lnode side by side, cpu.weight from
  `cgroup2_weights`, split equally among the lnode's runnable processes; background
  lnodes are cpu.idle cgroups (idle class).
- "nice": each process weighs NICE_TO_WEIGHT[nice + 20] with nice from `nice_values`
  (background lnodes get nice 19, as the nice enforcer sets them).
- "none": weight 1 per process (Linux without fair share).

A scenario (TOML, see man/shrsim.1) names the machine, the duration, constant
overrides, the UDB and the workloads; `run_scenario` drives `run_cycle` every
`delta` simulated seconds and measures, over the window after the warm-up, each
lnode's and group's entitled share (mean m_share) against its delivered share
(CPU it received / CPU delivered to all lnodes).
"""

from __future__ import annotations

import dataclasses
import math
import re
import tempfile
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sqlalchemy import select

from fairshare.consts import (
    GLOBALUSAGE,
    Consts,
    consts_from_mapping,
    from_user,
    load_consts,
    parse_duration,
)
from fairshare.cycle import Consumption, machine_shares, run_cycle, tree_index
from fairshare.enforce.mapping import NICE_TO_WEIGHT, cgroup2_weights, nice_values
from fairshare.lnode import (
    WriteBack,
    accrued,
    activate,
    add_usage,
    aged_usage,
    keep_finite,
    new_table,
    release,
)
from fairshare.site import SiteState, SiteView, apply_factors, refresh_usage, update_factors
from fairshare.tree import TREE_COLUMNS, ShareTree, build_tree
from udb.errors import DirectiveError, UdbError
from udb.models import Entry
from udb.session import make_engine, open_udb, read_session, upgrade

ENFORCERS = ("cgroup", "nice", "none")  # the keys of WEIGHT_MODELS
#: A scenario's limits: CPUs, processes per workload, and cycles (duration / delta).
MAX_CPUS = 100_000
MAX_PROCS = 1_000_000
MAX_CYCLES = 1_000_000
#: Series longer than this many cycles are averaged into bins for plotting.
MAX_SERIES_POINTS = 10000


class ScenarioError(DirectiveError):
    """A scenario file that cannot be loaded: ``FILE:LINE:COL: message``."""


# -- the machine -----------------------------------------------------------------------


def water_fill(capacity: float, weight: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """CPUs per entry: `capacity` shared in proportion to `weight`, no entry above `cap`.

    What a capped entry cannot use goes to the others (max-min fair by weight).
    Entries with weight 0 get nothing.  Returns CPUs per entry (sums to at most
    `capacity`).
    """
    out = np.zeros(len(weight))
    pos = (weight > 0) & (cap > 0)
    if capacity <= 0 or not pos.any():
        return out
    w, c = weight[pos], cap[pos]
    if c.sum() <= capacity:
        out[pos] = c
        return out
    share = w * (capacity / w.sum())
    if (share <= c).all():  # nobody capped: the common case
        out[pos] = share
        return out
    ratio = c / w
    order = np.argsort(ratio)
    rs, ws, cs = ratio[order], w[order], c[order]
    # lam[j]: the CPUs per unit weight if the j entries with the smallest ratio are capped.
    lam = (capacity - np.concatenate(([0.0], np.cumsum(cs)[:-1]))) / (
        ws.sum() - np.concatenate(([0.0], np.cumsum(ws)[:-1]))
    )
    j = int(np.argmax(rs >= lam))
    out[pos] = np.minimum(c, lam[j] * w)
    return out


@dataclass
class SimMachine:
    """N CPUs shared by weight; each process at most one CPU; idle class on leftovers.

    Processes come in groups of identical processes (one group per workload):
    `count` processes, each of weight `weight`, each using at most `demand` CPUs
    (<= 1), `idle` for the idle class.
    """

    cpus: float

    def run(
        self, count: np.ndarray, weight: np.ndarray, demand: np.ndarray, idle: np.ndarray
    ) -> np.ndarray:
        """CPUs each group's processes receive in total (group order; 0 for count 0).

        Normal processes share the CPUs by weight, capped at min(1, demand) each;
        idle-class processes share what is left the same way.
        """
        count = np.asarray(count, dtype=float)
        cap = count * np.minimum(np.asarray(demand, dtype=float), 1.0)
        weight = count * np.asarray(weight, dtype=float)
        return self.share(count, cap, weight, np.asarray(idle, dtype=bool))

    def share(
        self, count: np.ndarray, cap: np.ndarray, weight: np.ndarray, idle: np.ndarray
    ) -> np.ndarray:
        """`run` with each group's totals given: `cap` (CPUs its processes can use in all)
        and `weight` (the sum of its processes' weights); `idle` a boolean array."""
        if not idle.any():
            return water_fill(self.cpus, weight, cap)
        got = water_fill(self.cpus, np.where(idle, 0.0, weight), np.where(idle, 0.0, cap))
        left = self.cpus - got.sum()
        if left > 1e-12:
            # cpu.idle cgroups still share by weight among themselves: equal per process.
            got += water_fill(left, np.where(idle, count, 0.0), np.where(idle, cap, 0.0))
        return got


def cgroup_model(e_share, background, nrun) -> tuple[np.ndarray, np.ndarray]:
    """cgroup v2, one cgroup per lnode: its cpu.weight split over its runnable processes;
    background lnodes are cpu.idle cgroups.  Returns (per-process weight, idle class)."""
    w = cgroup2_weights(e_share, background).astype(float)
    return w / np.maximum(nrun, 1), np.asarray(background, dtype=bool)


def nice_model(e_share, background, nrun) -> tuple[np.ndarray, np.ndarray]:
    """Nice values: each process weighs NICE_TO_WEIGHT[nice + 20] (background: nice 19,
    still in the normal class).  Returns (per-process weight, idle class)."""
    nice = nice_values(e_share, nrun, background)
    return NICE_TO_WEIGHT[nice + 20].astype(float), np.zeros(len(nice), dtype=bool)


def none_model(e_share, background, nrun) -> tuple[np.ndarray, np.ndarray]:
    """Linux without fair share: every process weighs 1.  Returns (weight, idle class)."""
    n = len(e_share)
    return np.ones(n), np.zeros(n, dtype=bool)


#: The weight model of each enforcer the simulator knows.
WEIGHT_MODELS = {"cgroup": cgroup_model, "nice": nice_model, "none": none_model}


def enforcer_weights(
    enforcer: str,
    e_share: np.ndarray,
    background: np.ndarray,
    nrun: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(per-process weight, idle class) per lnode for `enforcer` (see WEIGHT_MODELS).

    `e_share`, `background` and `nrun` are over the lnodes that have processes.
    """
    model = WEIGHT_MODELS.get(enforcer)
    if model is None:
        raise ValueError(f"enforcer must be one of {ENFORCERS}, not {enforcer!r}")
    return model(e_share, background, nrun)


def workload_weights(
    enforcer: str,
    w_lnode: np.ndarray,
    idle_lnode: np.ndarray,
    nrun_lnode: np.ndarray,
    col: np.ndarray,
    count: np.ndarray,
    runnable: np.ndarray,
    nice: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(total weight, idle class) of each workload's `count` processes at nice `nice`.

    `w_lnode`, `idle_lnode`, `nrun_lnode` are `enforcer_weights`' per-process weight,
    idle class and runnable count per lnode; `col` is each workload's lnode, `runnable`
    how many of its processes are runnable.  A process's own nice (the one it was
    started with, or the UDB's the daemon applied) acts as on Linux: under "nice" the
    process runs at the larger of the enforcer's nice and its own (the smaller weight);
    under "cgroup" it splits its lnode's cgroup weight with the lnode's other runnable
    processes by nice weight; under "none" it weighs NICE_TO_WEIGHT[nice] / 1024.
    """
    own = NICE_TO_WEIGHT[np.asarray(nice, dtype=np.int64) + 20].astype(float)
    w = np.asarray(w_lnode, dtype=float)[col]
    if enforcer == "nice":
        per = np.minimum(w, own)
    elif enforcer == "cgroup":
        total_w = w * np.maximum(np.asarray(nrun_lnode, dtype=float)[col], 1.0)
        lnode_nw = np.bincount(col, weights=runnable * own, minlength=len(w_lnode))[col]
        per = np.where(lnode_nw > 0, total_w * own / np.where(lnode_nw > 0, lnode_nw, 1.0), w)
    else:
        per = w * own / NICE_TO_WEIGHT[20]
    return count * per, np.asarray(idle_lnode, dtype=bool)[col]


# -- scenarios -------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """`procs` processes of lnode `name` from `start` to `stop` (s), each wanting `demand`
    CPUs (1 = CPU-bound, 0 = attached but never runnable), started at nice `nice`."""

    name: str
    procs: int
    start: float
    stop: float
    demand: float = 1.0
    host: str = ""  # in a site scenario, the host it runs on
    nice: int = 0


@dataclass
class Scenario:
    """A loaded scenario: the machine, the clock, the constants, the tree, the workloads."""

    source: str
    cpus: float
    duration: float  # s
    warmup: float  # s
    consts: Consts
    tree: ShareTree
    workloads: list[Workload]
    enforcer: str = "cgroup"
    shusage: dict[int, tuple[float, float]] = field(default_factory=dict)  # node -> usage, ext
    hosts: dict[str, float] = field(default_factory=dict)  # a site: host name -> CPUs
    nice: dict[int, int] = field(default_factory=dict)  # node -> its entry's UDB nice

    @property
    def delta(self) -> float:
        return self.consts.delta


def _line_of(text: str, pattern: str, start: int = 1) -> int:
    for i, line in enumerate(text.splitlines()[start - 1 :], start):
        if re.match(pattern, line):
            return i
    return start


def _nth_table_line(text: str, name: str, n: int) -> int:
    count = -1
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*\[\[\s*{name}\s*\]\]", line):
            count += 1
            if count == n:
                return i
    return 1


def scenario_brings_udb(path: str | Path) -> bool:
    """True if the scenario at `path` names its own UDB (`udb` or `directives`); False
    when it does not or cannot be read (loading it then says what is wrong)."""
    try:
        doc = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return "udb" in doc or "directives" in doc


def load_scenario(
    path: str | Path, enforcer: str | None = None, udb: str | None = None
) -> Scenario:
    """The scenario in TOML file `path` (format in man/shrsim.1).

    A scenario naming neither `udb` nor `directives` simulates the UDB `udb` (a path or
    URL, else UDB_URL, else the default; see udb.session.resolve_url) and starts from its
    stored constants.  Raises ScenarioError ``FILE:LINE:COL: message`` for anything it
    cannot use (the UDB's own directive errors keep their file and line).
    """
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ScenarioError(source, 1, 1, f"cannot read the scenario: {err.strerror}") from None
    return parse_scenario(text, source, base=path.parent, enforcer=enforcer, udb=udb)


def parse_scenario(
    text: str,
    source: str,
    base: Path | None = None,
    enforcer: str | None = None,
    udb: str | None = None,
) -> Scenario:
    """The scenario in TOML `text` (from `source`; `udb` paths relative to `base`)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(err))
        line, col = (int(m.group(1)), int(m.group(2))) if m else (1, 1)
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(err))
        raise ScenarioError(source, line, col, f"not valid TOML: {msg}") from None

    def fail(key: str, message: str, line: int | None = None) -> ScenarioError:
        where = line or _line_of(text, rf"\s*{re.escape(key)}\s*=")
        return ScenarioError(source, where, 1, f"{key}: {message}")

    known = {"cpus", "duration", "delta", "warmup", "enforcer", "consts", "udb", "directives"}
    known |= {"workload", "hosts"}
    for key in doc:
        if key not in known:
            raise fail(key, f"unknown key; expected one of {', '.join(sorted(known))}")

    def duration(key: str, value: object, line: int | None = None) -> float:
        try:
            return parse_duration(value, key)
        except UdbError as err:
            raise fail(key, str(err).split(": ", 1)[-1], line) from None

    hosts = _site_hosts(doc, text, source, fail)
    cpus = sum(hosts.values()) if hosts else doc.get("cpus")
    if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not 0 < cpus <= MAX_CPUS:
        raise fail("cpus", f"expected a number of CPUs above 0 up to {MAX_CPUS}, got {cpus!r}")
    if "duration" not in doc:
        raise ScenarioError(source, 1, 1, 'duration: missing; expected e.g. duration = "8h"')
    total = duration("duration", doc["duration"])
    if total <= 0:
        raise fail("duration", "expected a positive duration")

    rows, shusage, stored, udb_nice = _load_udb(doc, text, source, base or Path("."), fail, udb)
    overrides = doc.get("consts", {})
    if not isinstance(overrides, dict):
        raise fail("consts", "expected a [consts] table")
    overrides = dict(overrides)
    if "delta" in doc:
        overrides["delta"] = doc["delta"]
    try:
        consts = consts_from_mapping(from_user(overrides), stored)
    except UdbError as err:
        key = str(err).split(":", 1)[0].strip()
        name = key if key in overrides else "consts"
        raise fail(name, str(err).split(": ", 1)[-1]) from None
    if total / consts.delta > MAX_CYCLES:
        raise fail(
            "duration",
            f"expected at most {MAX_CYCLES:,} cycles of delta = {consts.delta:g} s, "
            f"got {total / consts.delta:.3g}",
        )
    warmup = min(3 * consts.halflife, total / 2)
    if "warmup" in doc:
        warmup = duration("warmup", doc["warmup"])
        if warmup >= total:
            raise fail("warmup", "expected less than the duration")

    mode = consts.mode
    tree = build_tree(rows, mode)

    enforcer = enforcer or doc.get("enforcer", "cgroup")
    if enforcer not in ENFORCERS:
        raise fail("enforcer", f"expected one of {', '.join(ENFORCERS)}, got {enforcer!r}")

    items = doc.get("workload", [])
    if not isinstance(items, list) or not items:
        raise ScenarioError(source, 1, 1, "workload: expected at least one [[workload]] table")
    workloads = []
    for i, item in enumerate(items):
        line = _nth_table_line(text, "workload", i)

        def wfail(key: str, message: str, i=i, line=line) -> ScenarioError:
            where = _line_of(text, rf"\s*{re.escape(key)}\s*=", line)
            return ScenarioError(source, where, 1, f"workload {i + 1}: {key}: {message}")

        for key in item:
            if key not in ("name", "procs", "start", "stop", "demand", "host", "nice"):
                raise wfail(
                    key, "unknown key; expected name, procs, start, stop, demand, host, nice"
                )
        host = _workload_host(item, hosts, wfail)
        name = item.get("name")
        node = tree.find(name) if isinstance(name, str) else None
        if node is None or not tree.leaf_mask[node]:
            what = "users" if mode == "user" else "accounts"
            raise wfail("name", f"expected one of the UDB's {what}, got {name!r}")
        procs = item.get("procs", 1)
        if isinstance(procs, bool) or not isinstance(procs, int) or not 1 <= procs <= MAX_PROCS:
            raise wfail("procs", f"expected 1 to {MAX_PROCS:,} processes, got {procs!r}")
        start = _wduration(item, "start", 0.0, wfail)
        stop = _wduration(item, "stop", total, wfail)
        if not start < stop:
            raise wfail("stop", "expected a time after start")
        demand = item.get("demand", 1.0)
        if isinstance(demand, bool) or not isinstance(demand, int | float):
            raise wfail("demand", f"expected a number from 0 to 1, got {demand!r}")
        if not 0.0 <= demand <= 1.0:
            raise wfail("demand", f"expected a number from 0 to 1, got {demand!r}")
        nice = item.get("nice", 0)
        if isinstance(nice, bool) or not isinstance(nice, int) or not -20 <= nice <= 19:
            raise wfail("nice", f"expected a nice value from -20 to 19, got {nice!r}")
        workloads.append(
            Workload(name, procs, start, min(stop, total), float(demand), host=host, nice=nice)
        )
    shusage = {tree.node(n): v for n, v in shusage.items() if tree.find(n) is not None}
    nice = {tree.node(n): v for n, v in udb_nice.items() if tree.find(n) is not None}
    return Scenario(
        source,
        float(cpus),
        total,
        warmup,
        consts,
        tree,
        workloads,
        enforcer,
        shusage,
        hosts,
        nice,
    )


def _site_hosts(doc: dict, text: str, source: str, fail) -> dict[str, float]:
    """A site scenario's `hosts` table (name -> CPUs), {} for one machine."""
    if "hosts" not in doc:
        return {}
    if "cpus" in doc:
        raise fail("cpus", "expected either cpus (one machine) or hosts (a site), not both")
    hosts = doc["hosts"]
    if not isinstance(hosts, dict) or not hosts:
        raise fail("hosts", "expected a table of host names and CPUs, e.g. { a = 2, b = 2 }")
    start = _line_of(text, r"\s*(hosts\s*=|\[\s*hosts\s*\])")
    for name, cpus in hosts.items():
        if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not cpus > 0:
            line = start
            if not re.match(r"\s*hosts\s*=", text.splitlines()[start - 1]):
                line = _line_of(text, rf"\s*\"?{re.escape(name)}\"?\s*=", start)
            raise fail(f"hosts.{name}", f"expected a positive number of CPUs, got {cpus!r}", line)
    return {str(k): float(v) for k, v in hosts.items()}


def _workload_host(item: dict, hosts: dict[str, float], wfail) -> str:
    """The host a workload names (a site scenario needs one, a machine takes none)."""
    host = item.get("host")
    if not hosts:
        if host is not None:
            raise wfail("host", "a workload names a host only in a scenario with a hosts table")
        return ""
    if host not in hosts:
        raise wfail("host", f"expected one of the hosts {', '.join(hosts)}, got {host!r}")
    return host


def _wduration(item: dict, key: str, default: float, wfail) -> float:
    if key not in item:
        return default
    try:
        return parse_duration(item[key], key)
    except UdbError as err:
        raise wfail(key, str(err).split(": ", 1)[-1]) from None


def _read_udb(engine):
    with read_session(engine) as s:
        rows = s.execute(select(*TREE_COLUMNS)).all()
        usage = s.execute(select(Entry.name, Entry.shusage, Entry.shextime, Entry.nice)).all()
        consts = load_consts(s)
    shusage = {n: (u, x) for n, u, x, _nice in usage if u > 0}
    return rows, shusage, consts, {n: nice for n, _u, _x, nice in usage if nice}


def _load_udb(doc: dict, text: str, source: str, base: Path, fail, udb: str | None):
    """(tree rows, {name: (shusage, shextime)}, base constants, {name: UDB nice}) for
    the scenario.

    From its `udb` directives file or inline `directives` (loaded into a temporary
    SQLite UDB with udbgen's own code; base constants the defaults), else from the
    real UDB `udb` (read only; base constants its stored ones).
    """
    from udb.directives import parse, run

    if "udb" in doc and "directives" in doc:
        raise ScenarioError(source, 1, 1, "expected one of udb = FILE or directives, not both")
    if "udb" not in doc and "directives" not in doc:
        return _read_udb(open_udb(udb))
    if "udb" in doc:
        if not isinstance(doc["udb"], str):
            raise fail("udb", "expected the path of a udbgen directives file")
        udb_path = base / doc["udb"]
        try:
            body = udb_path.read_text()
        except OSError as err:
            raise fail("udb", f"cannot read {udb_path}: {err.strerror}") from None
        dsource, offset = str(udb_path), 0
    else:
        body = doc["directives"]
        if not isinstance(body, str):
            raise fail("directives", "expected a string of udbgen directives")
        # A multi-line string starts on the line after `directives = """`.
        dsource, offset = source, _line_of(text, r"\s*directives\s*=")
        if not re.search(r'directives\s*=\s*("""|\'\'\')\s*\n', text):
            offset -= 1
    try:
        directives = parse(body, dsource)
    except DirectiveError as err:
        raise ScenarioError(dsource, err.line + offset, err.col, err.message) from None
    with tempfile.TemporaryDirectory(prefix="shrsim-") as tmp:
        engine = make_engine(f"sqlite:///{tmp}/udb.sqlite")
        try:
            upgrade(engine)
            try:
                run(engine, directives)
            except DirectiveError as err:
                raise ScenarioError(dsource, err.line + offset, err.col, err.message) from None
            rows, usage, _, udb_nice = _read_udb(engine)
        finally:
            engine.dispose()
    return rows, usage, Consts(), udb_nice


# -- running ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """One lnode's or group's shares over the window (fractions of the machine)."""

    name: str
    kind: str
    entitled: float  # mean m_share
    delivered: float  # CPU it received / CPU delivered to all lnodes

    @property
    def deviation_pp(self) -> float:
        """delivered - entitled in percentage points."""
        return (self.delivered - self.entitled) * 100.0


@dataclass
class SimResult:
    """What a run measured, with the per-cycle series (binned when long) for plots.

    `times` are the end of each series point (s); the series arrays are (points, lnodes)
    in the order of `series_names`: mean m_share, mean e_share and delivered share.
    """

    scenario: str
    enforcer: str
    window: tuple[float, float]  # s
    lnodes: list[Measured]
    groups: list[Measured]
    utilisation: float  # CPU delivered / CPU available over the window
    times: np.ndarray
    series_names: list[str]
    entitled: np.ndarray
    e_share: np.ndarray
    delivered: np.ndarray
    cycles: int = 0
    hosts: dict[str, SimResult] = field(default_factory=dict)  # a site: each host's own

    @property
    def max_deviation_pp(self) -> float:
        """The largest |delivered - entitled| over lnodes and groups, in pp."""
        return max((abs(m.deviation_pp) for m in self.lnodes + self.groups), default=0.0)

    def lnode(self, name: str) -> Measured:
        return next(m for m in self.lnodes + self.groups if m.name == name)

    def series(self, name: str) -> int:
        """Column of lnode `name` in the series arrays."""
        return self.series_names.index(name)

    def as_json(self) -> dict:
        """The documented --json shape (man/shrsim.1)."""

        def block(items: list[Measured]) -> dict:
            return {
                m.name: {
                    "entitled": m.entitled,
                    "delivered": m.delivered,
                    "deviation_pp": m.deviation_pp,
                }
                for m in items
            }

        out = {
            "scenario": self.scenario,
            "enforcer": self.enforcer,
            "window": list(self.window),
            "cycles": self.cycles,
            "utilisation": self.utilisation,
            "lnodes": block(self.lnodes),
            "groups": block(self.groups),
            "max_deviation_pp": self.max_deviation_pp,
        }
        if self.hosts:
            out["hosts"] = {
                name: {
                    "utilisation": r.utilisation,
                    "lnodes": block(r.lnodes),
                    "groups": block(r.groups),
                }
                for name, r in self.hosts.items()
            }
        return out


class _Recorder:
    """Sums over the measured window and the (binned) per-cycle series of a run."""

    def __init__(self, tree: ShareTree, lnodes: list[int], nsteps: int, first: int):
        self.lnodes = np.array(lnodes, dtype=np.int64)
        groups = sorted({a for n in lnodes for a in tree.ancestors(n) if a != 0})
        self.report = np.array(lnodes + groups, dtype=np.int64)  # lnodes, then groups
        # below[r, j] = 1 if lnode j is reported node r or sits under it
        self.below = np.array(
            [[float(r == j or r in tree.ancestors(j)) for j in lnodes] for r in self.report]
        ).reshape(len(self.report), len(lnodes))
        self.first, self.nsteps = first, nsteps
        self.ent_sum = np.zeros(len(self.report))
        self.cpu_sum = np.zeros(len(self.report))
        self.cpu_total = 0.0
        self.bin = max(1, math.ceil(nsteps / MAX_SERIES_POINTS))
        points, nl = math.ceil(nsteps / self.bin), len(lnodes)
        self.times = np.zeros(points)
        self.entitled, self.e_share, self.delivered = (np.zeros((points, nl)) for _ in range(3))
        self._ent, self._esh, self._cpu = np.zeros(nl), np.zeros(nl), np.zeros(nl)

    def add(self, step: int, delta: float, m_share, e_share, cpu) -> None:
        """Record cycle `step`: m_share over all nodes, e_share and CPU s per lnode."""
        if step >= self.first:
            self.ent_sum += m_share[self.report]
            self.cpu_sum += self.below @ cpu
            self.cpu_total += cpu.sum()
        self._ent += m_share[self.lnodes]
        self._esh += e_share
        self._cpu += cpu
        if (step + 1) % self.bin == 0 or step == self.nsteps - 1:
            p, k = step // self.bin, step % self.bin + 1
            self.times[p] = (step + 1) * delta
            self.entitled[p], self.e_share[p] = self._ent / k, self._esh / k
            total = self._cpu.sum()
            self.delivered[p] = self._cpu / total if total > 0 else 0.0
            self._ent[:], self._esh[:], self._cpu[:] = 0.0, 0.0, 0.0

    def result(self, sc: Scenario, tree: ShareTree, enforcer: str) -> SimResult:
        """The measured shares over the window and the series."""
        cycles = self.nsteps - self.first
        ent = self.ent_sum / cycles
        dlv = self.cpu_sum / self.cpu_total if self.cpu_total > 0 else self.cpu_sum * 0
        measured = [
            Measured(tree.names[n], tree.kind(n).label, float(ent[i]), float(dlv[i]))
            for i, n in enumerate(self.report)
        ]
        nl = len(self.lnodes)
        return SimResult(
            scenario=sc.source,
            enforcer=enforcer,
            window=(self.first * sc.delta, self.nsteps * sc.delta),
            lnodes=measured[:nl],
            groups=measured[nl:],
            utilisation=float(self.cpu_total / (sc.cpus * sc.delta * cycles)),
            times=self.times,
            series_names=[tree.names[n] for n in self.lnodes],
            entitled=self.entitled,
            e_share=self.e_share,
            delivered=self.delivered,
            cycles=self.nsteps,
        )


def workload_nice(sc: Scenario, workloads: list[Workload], enforcer: str) -> np.ndarray:
    """The nice each workload's processes run at: its own, raised to its lnode's UDB nice
    as the daemon applies it (fairshare.enforce.renice.user_floor) unless `enforcer` is
    none, which changes nothing."""
    from fairshare.enforce.renice import user_floor

    return np.array(
        [
            w.nice
            if enforcer == "none"
            else user_floor(w.nice, sc.nice.get(sc.tree.node(w.name), 0))
            for w in workloads
        ],
        dtype=np.int64,
    )


def run_scenario(
    sc: Scenario,
    enforcer: str | None = None,
    window: float | None = None,
    steps: Callable[[Iterable[int], int], Iterable[int]] | None = None,
) -> SimResult:
    """Simulate `sc` with `enforcer` (default the scenario's) and measure the window.

    The window is the last `window` seconds, default everything after the warm-up.
    Each cycle: workloads starting create lnodes (usage = stored shusage aged) and those
    ending release them (write-back kept for a later return); the enforcer's weights
    from the last cycle's e_share decide how the machine shares CPU for `delta`
    seconds; that consumption goes through run_cycle.  As in shrdaemon, NOSCHED or
    NOSHARE (Consts.scheduling) leaves the machine to plain Linux: the enforcer is none.
    Each workload runs at its own nice, raised to its lnode's UDB nice as the daemon
    does (fairshare.enforce.renice.user_floor) unless the enforcer is none.
    `steps(range, n)`, if given, wraps the cycle numbers (shrsim's progress bar).
    """
    tree, consts, delta = sc.tree, sc.consts, sc.delta
    enforcer = (enforcer or sc.enforcer) if consts.scheduling else "none"
    if enforcer not in ENFORCERS:
        raise ValueError(f"enforcer must be one of {ENFORCERS}, not {enforcer!r}")
    if sc.hosts:
        return run_site(sc, enforcer, window)
    nsteps = max(1, math.ceil(sc.duration / delta - 1e-9))
    if window is None:
        first = min(int(round(sc.warmup / delta)), nsteps - 1)
    else:
        first = max(0, nsteps - max(1, int(round(window / delta))))

    # Workloads as arrays; an lnode's column is its index in `lnodes`.
    wl = sc.workloads
    lnodes = sorted({tree.node(w.name) for w in wl})
    lnode_arr = np.array(lnodes, dtype=np.int64)
    nl = len(lnodes)
    w_col = np.array([lnodes.index(tree.node(w.name)) for w in wl], dtype=np.int64)
    w_procs = np.array([w.procs for w in wl], dtype=float)
    w_runnable = np.array([w.procs if w.demand > 0 else 0 for w in wl], dtype=float)
    w_demand = np.array([w.demand for w in wl])
    w_nice = workload_nice(sc, wl, enforcer)
    w_start = np.array([math.ceil(w.start / delta - 1e-9) for w in wl])
    w_stop = np.array([math.ceil(w.stop / delta - 1e-9) for w in wl])
    events = sorted(set(w_start.tolist()) | set(w_stop.tolist()))

    rec = _Recorder(tree, lnodes, nsteps, first)
    machine = SimMachine(sc.cpus)
    table = new_table(tree)
    cons = Consumption.zeros(tree.size)  # reused: run_cycle keeps no reference to it
    stored: dict[int, tuple[float, float]] = dict(sc.shusage)
    present = np.zeros(nl, dtype=bool)
    nrun_l = np.zeros(nl)
    count = cap = run_w = np.zeros(len(wl))
    next_event = 0
    for step in steps(range(nsteps), nsteps) if steps else range(nsteps):
        if next_event < len(events) and step == events[next_event]:
            # Processes start or stop: lnodes come and go.
            next_event += 1
            now = step * delta
            running = (w_start <= step) & (step < w_stop)
            count = w_procs * running
            run_w = w_runnable * running
            cap = count * np.minimum(w_demand, 1.0)
            refs_l = np.bincount(w_col, weights=count, minlength=nl)
            nrun_l = np.bincount(w_col, weights=w_runnable * running, minlength=nl)
            now_present = refs_l > 0
            for j in np.flatnonzero(now_present & ~present):
                u, ext = stored.pop(lnodes[j], (0.0, 0.0))
                activate(table, lnodes[j], aged_usage(u, ext, now, consts))
            for j in np.flatnonzero(present & ~now_present):
                wb: WriteBack = release(table, lnodes[j], now)
                stored[lnodes[j]] = (wb.shusage, wb.shextime)
            cons.nrun[lnode_arr] = nrun_l
            cons.refs[lnode_arr] = refs_l
            if (now_present != present).any():
                # Re-plan at once (no time passes) so newcomers have an e_share.
                present = now_present
                cons.cpu[lnode_arr] = 0.0
                table = run_cycle(tree, table, cons, consts, 0.0)
        m_now = table.m_share
        e_now = table.e_share[lnode_arr]  # 0 for lnodes without processes
        w_lnode, idle = enforcer_weights(enforcer, e_now, table.background[lnode_arr], nrun_l)
        weight, w_idle = workload_weights(
            enforcer, w_lnode, idle, nrun_l, w_col, count, run_w, w_nice
        )
        got = machine.share(count, cap, weight, w_idle)
        cpu_l = np.bincount(w_col, weights=got, minlength=nl) * delta
        cons.cpu[lnode_arr] = cpu_l
        before, table = table, run_cycle(tree, table, cons, consts, delta)
        keep_finite(before, table)  # as the daemon does (no NaN or infinity is recorded)
        rec.add(step, delta, m_now, e_now, cpu_l)
    return rec.result(sc, tree, enforcer)


# -- a site: several hosts, one UDB ------------------------------------------------------


class _SiteHost:
    """One host of a simulated site: its machine, its workloads, its lnode table, its
    GLOBALUSAGE state; `step` is one cycle of the daemon's loop on it."""

    def __init__(self, sc: Scenario, name: str, cpus: float, enforcer: str) -> None:
        tree = sc.tree
        self.name, self.cpus, self.enforcer = name, cpus, enforcer
        self.wl = [w for w in sc.workloads if w.host == name]
        self.lnodes = sorted({tree.node(w.name) for w in self.wl})
        self.arr = np.array(self.lnodes, dtype=np.int64)
        d = sc.delta
        self.col = np.array([self.lnodes.index(tree.node(w.name)) for w in self.wl], dtype=int)
        self.procs = np.array([w.procs for w in self.wl], dtype=float)
        self.runnable = np.array([w.procs if w.demand > 0 else 0 for w in self.wl], dtype=float)
        self.demand = np.array([w.demand for w in self.wl])
        self.nice = workload_nice(sc, self.wl, enforcer)
        self.start = np.array([math.ceil(w.start / d - 1e-9) for w in self.wl], dtype=int)
        self.stop = np.array([math.ceil(w.stop / d - 1e-9) for w in self.wl], dtype=int)
        self.machine = SimMachine(cpus)
        self.table = new_table(tree)
        self.cons = Consumption.zeros(tree.size)
        self.site = SiteState.new(tree.size)
        nl = len(self.lnodes)
        self.present = np.zeros(nl, dtype=bool)
        self.nrun = np.zeros(nl)
        self.count = self.cap = self.run_w = np.zeros(len(self.wl))
        self.cpu = np.zeros(tree.size)  # CPU s per node over the last cycle

    def step(self, sc: Scenario, step: int, stored: dict, written: list) -> None:
        """One cycle of `sc.delta` s; released lnodes' increments go to `written`."""
        tree, consts, delta = sc.tree, sc.consts, sc.delta
        if len(self.wl) and ((self.start == step) | (self.stop == step)).any():
            now = step * delta
            running = (self.start <= step) & (step < self.stop)
            self.count = self.procs * running
            self.run_w = self.runnable * running
            self.cap = self.count * np.minimum(self.demand, 1.0)
            nl = len(self.lnodes)
            refs = np.bincount(self.col, weights=self.count, minlength=nl)
            self.nrun = np.bincount(self.col, weights=self.runnable * running, minlength=nl)
            here = refs > 0
            for j in np.flatnonzero(here & ~self.present):
                u, ext = stored.get(self.lnodes[j], (0.0, 0.0))
                activate(self.table, self.lnodes[j], aged_usage(u, ext, now, consts))
            for j in np.flatnonzero(self.present & ~here):
                written.append((self.lnodes[j], release(self.table, self.lnodes[j], now)))
            self.cons.nrun[self.arr] = self.nrun
            self.cons.refs[self.arr] = refs
            if (here != self.present).any():
                self.present = here
                self.cons.cpu[self.arr] = 0.0
                self._cycle(tree, consts, 0.0)
        e_now = self.table.e_share[self.arr]
        w, idle = enforcer_weights(self.enforcer, e_now, self.table.background[self.arr], self.nrun)
        weight, w_idle = workload_weights(
            self.enforcer, w, idle, self.nrun, self.col, self.count, self.run_w, self.nice
        )
        got = self.machine.share(self.count, self.cap, weight, w_idle)
        cpu_l = np.bincount(self.col, weights=got, minlength=len(self.lnodes)) * delta
        self.cons.cpu[self.arr] = cpu_l
        self.cpu[:] = 0.0
        self.cpu[self.arr] = cpu_l
        self._cycle(tree, consts, delta)
        self.site.add(self.cpu, delta)

    def _cycle(self, tree: ShareTree, consts: Consts, elapsed: float) -> None:
        before = self.table
        self.table = run_cycle(tree, before, self.cons, consts, elapsed)
        if consts.flags & GLOBALUSAGE:
            self.table.e_share = apply_factors(tree, self.table, self.site.factor)
        keep_finite(before, self.table)  # as the daemon does


def _view_of(tree: ShareTree, others: list[_SiteHost], usage: np.ndarray, delta: float):
    """The SiteView one host reads: what the `others` publish, `usage` the stored one."""
    leaf = tree.leaf_mask
    active = np.zeros(tree.size, dtype=bool)
    demand = np.zeros(tree.size, dtype=bool)
    hosts = np.zeros(tree.size, dtype=np.int64)
    rate = np.zeros(tree.size)
    for h in others:
        active |= h.table.active & leaf
        wants = h.table.active & h.table.demand & leaf
        demand |= wants
        hosts += wants
        rate += h.cpu / delta
    view = SiteView(active, demand, hosts, rate, usage * active)
    view.host_cpus = {h.name: h.cpus for h in others}
    return view


def run_site(sc: Scenario, enforcer: str, window: float | None = None) -> SimResult:
    """Simulate the site scenario `sc` (a `hosts` table): each host runs the daemon's cycle
    on its own machine and workloads; every write-back interval each writes what its
    lnodes accrued to the shared store (increments, as fairshare.store does) and, with
    GLOBALUSAGE, refreshes its site view and site factors (fairshare.site).

    The result measures the site: entitled is the mean site-wide m_share (over the
    lnodes active on any host), delivered the CPU received on all hosts over the CPU
    delivered to all lnodes; `hosts` holds each host's own measurement.
    """
    tree, consts, delta = sc.tree, sc.consts, sc.delta
    nsteps = max(1, math.ceil(sc.duration / delta - 1e-9))
    if window is None:
        first = min(int(round(sc.warmup / delta)), nsteps - 1)
    else:
        first = max(0, nsteps - max(1, int(round(window / delta))))
    hosts = [_SiteHost(sc, name, cpus, enforcer) for name, cpus in sc.hosts.items()]
    lnodes = sorted({tree.node(w.name) for w in sc.workloads})
    arr = np.array(lnodes, dtype=np.int64)
    site_rec = _Recorder(tree, lnodes, nsteps, first)
    host_recs = [_Recorder(tree, h.lnodes, nsteps, first) for h in hosts]
    stored: dict[int, tuple[float, float]] = dict(sc.shusage)
    every = max(1, int(round(consts.writeback / delta))) if consts.writeback > 0 else 1
    idx = tree_index(tree)
    total_cpus = sum(sc.hosts.values())
    for step in range(nsteps):
        m_now = [h.table.m_share.copy() for h in hosts]
        e_now = [h.table.e_share.copy() for h in hosts]
        written: list = []
        for h in hosts:
            h.step(sc, step, stored, written)
        if (step + 1) % every == 0:
            now = (step + 1) * delta
            for h in hosts:
                for n in np.flatnonzero(h.table.active & tree.leaf_mask).tolist():
                    written.append((n, accrued(h.table, n, now)))
        for n, wb in written:
            u, ext = stored.get(n, (0.0, 0.0))
            u, ext = add_usage(u, ext, wb.shusage, wb.shextime, consts.halflife)
            stored[n] = (float(u), float(ext))
        if (step + 1) % every == 0 and consts.flags & GLOBALUSAGE:
            now = (step + 1) * delta
            usage = np.zeros(tree.size)
            for n, (u, ext) in stored.items():
                usage[n] = aged_usage(u, ext, now, consts)
            for h in hosts:
                h.site.view = _view_of(tree, [o for o in hosts if o is not h], usage, delta)
                mine = np.flatnonzero(h.table.active & tree.leaf_mask)
                refresh_usage(h.table, mine, usage)
            for h in hosts:
                h.site.factor = update_factors(tree, h.table, h.site, consts, h.cpus)
        # The site's entitlement: machine shares over the lnodes active on any host.
        leaves = np.zeros(tree.size, dtype=bool)
        for h in hosts:
            leaves |= h.table.active & tree.leaf_mask & (tree.shares > 0)
        m_site = machine_shares(idx, tree.shares, idx.subtree_sum(leaves) > 0)
        cpu_site = sum(h.cpu for h in hosts)
        e_site = sum(e[arr] * h.cpus for e, h in zip(e_now, hosts, strict=True)) / total_cpus
        site_rec.add(step, delta, m_site, e_site, cpu_site[arr])
        for rec, h, m, e in zip(host_recs, hosts, m_now, e_now, strict=True):
            rec.add(step, delta, m, e[h.arr], h.cpu[h.arr])
    result = site_rec.result(sc, tree, enforcer)
    result.hosts = {
        h.name: rec.result(dataclasses.replace(sc, cpus=h.cpus), tree, enforcer)
        for h, rec in zip(hosts, host_recs, strict=True)
        if h.lnodes
    }
    return result


def plot(result: SimResult, path: str | Path) -> None:
    """Draw delivered (solid) and entitled (dashed) share over time per lnode to `path`.

    The format follows the extension (.png or .svg).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5.5))
    hours = result.times / 3600.0
    for j, name in enumerate(result.series_names):
        (line,) = ax.plot(hours, result.delivered[:, j] * 100, lw=1, label=f"{name} delivered")
        ax.plot(hours, result.entitled[:, j] * 100, ls="--", lw=1, color=line.get_color())
    ax.axvline(result.window[0] / 3600.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("share of the CPU delivered (%), entitled dashed")
    ax.set_title(f"{Path(result.scenario).name} ({result.enforcer} enforcer)")
    if len(result.series_names) <= 20:
        ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
