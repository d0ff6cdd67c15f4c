"""A grid scenario: several sites, each its own machine and UDB, one shared policy (seed 001).

A grid scenario (TOML, man/shrsim.1) has `[[site]]` tables instead of `cpus` or `hosts`:

- `directives` (or `udb`) at the top: the policy every site holds (the mounted VO
  subtrees and whatever else is the same everywhere), loaded into each site's UDB;
- each `[[site]]`: its `name`, its `cpus`, its `speed` (how much a CPU-second there
  counts, 1 by default; SGAS's scaling of host CPU time), and its own `directives`
  (its local entries), added after the shared ones;
- `exchange`: how often the sites exchange their usage (default the write-back
  interval); `usage = "local"` runs the grid without any exchange, every site from
  its own usage alone (the paper's Figure 11), `"grid"` (the default) with it;
- `[[workload]]` tables as in a machine's scenario, each with `site` (a site's name,
  a list of them, or "*" for every site): the workload runs that many processes at
  each of those sites.

`load_grid` checks all of it before anything runs and returns a `Grid`: one
fairshare.sim.scenario.Scenario per site (its tree, its constants, its workloads), run
by fairshare.sim.grid.  Anything it cannot use is a ScenarioError ``FILE:LINE:COL:
message``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

from fairshare.core.tree import build_tree
from fairshare.sim.scenario import (
    MAX_CPUS,
    Scenario,
    ScenarioError,
    _consts,
    _directives_text,
    _load_udb,
    _Text,
    _toml,
    _workload,
    utf8_text,
)

#: The keys of a grid scenario, of a [[site]] table and what a grid [[workload]] adds.
GRID_KEYS = ("duration", "delta", "warmup", "enforcer", "consts", "udb", "directives")
GRID_KEYS += ("site", "workload", "exchange", "usage")
SITE_KEYS = ("name", "cpus", "speed", "directives")
#: The speeds a site may have (a CPU-second there counts `speed` CPU-seconds).
MAX_SPEED = 1000.0


@dataclass
class GridSite:
    """One site of a grid scenario: its name, speed and its own scenario (machine,
    tree, constants, workloads)."""

    name: str
    speed: float
    scenario: Scenario


@dataclass
class Grid:
    """A loaded grid scenario: its sites, how often they exchange usage (s), and
    whether they do at all (`exchange_usage`; False: local-only usage)."""

    source: str
    sites: list[GridSite]
    exchange: float
    exchange_usage: bool = True
    duration: float = 0.0
    warmup: float = 0.0
    delta: float = 0.0
    names: list[str] = field(default_factory=list)

    def site(self, name: str) -> GridSite:
        return next(s for s in self.sites if s.name == name)


def is_grid(path: str | Path) -> bool:
    """True if the scenario at `path` is a grid scenario (it has [[site]] tables)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return re.search(r"^\s*\[\[\s*site\s*\]\]", text, re.M) is not None


def load_grid(path: str | Path, enforcer: str | None = None, usage: str | None = None) -> Grid:
    """The grid scenario in TOML file `path`; `usage` ("grid" or "local") overrides its
    own `usage` key."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ScenarioError(str(path), 1, 1, f"cannot read the scenario: {err.strerror}") from None
    return parse_grid(utf8_text(data, str(path)), str(path), path.parent, enforcer, usage)


def parse_grid(
    text: str, source: str, base: Path, enforcer: str | None = None, usage: str | None = None
) -> Grid:
    """The grid scenario in TOML `text` (from `source`; `udb` paths relative to `base`)."""
    where = _Text(text, source)
    doc = _toml(where)
    where.only(doc, GRID_KEYS)
    if "duration" not in doc:
        raise where.error('duration: missing; expected e.g. duration = "2d"')
    total = where.duration("duration", doc["duration"])
    if total <= 0:
        raise where.fail("duration", "expected a positive duration")
    items = doc.get("site", [])
    if not isinstance(items, list) or not items:
        raise where.error("site: expected at least one [[site]] table")
    if "udb" not in doc and "directives" not in doc:
        raise where.error("directives: missing; a grid scenario brings the shared policy")
    shared = _load_udb(doc, where, base, None)
    overrides, consts = _consts(doc, where, shared.consts, total)
    sites = [_site(doc, where, base, i, item, total) for i, item in enumerate(items)]
    names = [s.name for s in sites]
    if len(set(names)) != len(names):
        raise where.error(f"site: two sites share a name ({', '.join(names)})")
    _place_workloads(doc, where, sites, total)
    warmup = min(3 * consts.halflife, total / 2)
    if "warmup" in doc:
        warmup = where.duration("warmup", doc["warmup"])
        if warmup >= total:
            raise where.fail("warmup", "expected less than the duration")
    exchange = consts.writeback
    if "exchange" in doc:
        exchange = where.duration("exchange", doc["exchange"])
    if exchange < consts.delta:
        raise where.fail("exchange", f"expected at least delta ({consts.delta:g} s)")
    mode = usage or doc.get("usage", "grid")
    if mode not in ("grid", "local"):
        raise where.fail("usage", f"expected grid or local, got {mode!r}")
    for s in sites:
        sc = s.scenario
        sc.consts, sc.warmup, sc.overrides = consts.replace(speed=s.speed), warmup, overrides
        sc.enforcer = enforcer or doc.get("enforcer", "cgroup")
    return Grid(source, sites, exchange, mode == "grid", total, warmup, consts.delta, names)


def _site(doc: dict, where: _Text, base: Path, i: int, item: dict, total: float) -> GridSite:
    """Site `i` (from 0): its name, CPUs, speed, and its tree from the shared directives
    and its own."""
    line = where.table_line("site", i)

    def sfail(key: str, message: str) -> ScenarioError:
        at = where.line_of(rf"\s*{re.escape(key)}\s*=", line)
        return where.error(f"site {i + 1}: {key}: {message}", at)

    if not isinstance(item, dict):
        raise where.error(f"site {i + 1}: expected a [[site]] table", line)
    for key in item:
        if key not in SITE_KEYS:
            raise sfail(key, f"unknown key; expected {', '.join(SITE_KEYS)}")
    name = item.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
        raise sfail("name", f"expected a site name (letters, digits, _ . -), got {name!r}")
    cpus = item.get("cpus")
    if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not 0 < cpus <= MAX_CPUS:
        raise sfail("cpus", f"expected a number of CPUs above 0 up to {MAX_CPUS}, got {cpus!r}")
    speed = item.get("speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not 0 < speed <= MAX_SPEED:
        raise sfail("speed", f"expected a speed above 0 up to {MAX_SPEED:g}, got {speed!r}")
    rows = _site_rows(doc, where, base, item, line, sfail)
    tree = build_tree(rows)
    sc = Scenario(where.source, float(cpus), total, 0.0, None, tree, [])  # type: ignore[arg-type]
    return GridSite(name, float(speed), sc)


def _site_rows(doc: dict, where: _Text, base: Path, item: dict, line: int, sfail) -> list:
    """The tree rows of a site: the shared directives, then the site's own.  An error in
    the site's own is reported at its line in the scenario."""
    own = item.get("directives", "")
    if not isinstance(own, str):
        raise sfail("directives", "expected a string of udbgen directives")
    if not own:
        return _load_udb(doc, where, base, None).rows
    if "directives" not in doc:
        raise sfail("directives", "a site adds directives only to inline shared directives")
    shared = doc["directives"].rstrip("\n")
    _body, _source, offset = _directives_text(doc, where, base)
    at = where.line_of(r"\s*directives\s*=", line)
    own_offset = (
        at
        if re.match(r'\s*directives\s*=\s*("""|\'\'\')\s*$', where.text.splitlines()[at - 1])
        else at - 1
    )
    try:
        return _load_udb({"directives": shared + "\n" + own}, where, base, None).rows
    except ScenarioError as err:
        n_shared = shared.count("\n") + 1
        if err.source != where.source or err.line - offset <= n_shared:
            raise
        site_line = own_offset + err.line - offset - n_shared
        raise ScenarioError(where.source, site_line, err.col, err.message) from None


def _place_workloads(doc: dict, where: _Text, sites: list[GridSite], total: float) -> None:
    """Each [[workload]] checked against the trees of the sites it names, and added to
    their scenarios."""
    items = doc.get("workload", [])
    if not isinstance(items, list) or not items:
        raise where.error("workload: expected at least one [[workload]] table")
    names = [s.name for s in sites]
    for i, item in enumerate(items):
        item = dict(item)
        at = item.pop("site", None)
        chosen = names if at == "*" else [at] if isinstance(at, str) else at
        if not isinstance(chosen, list) or not chosen or any(n not in names for n in chosen):
            line = where.line_of(r"\s*site\s*=", where.table_line("workload", i))
            raise where.error(
                f"workload {i + 1}: site: expected one of {', '.join(names)}, a list of them "
                f'or "*", got {at!r}',
                line,
            )
        for s in sites:
            if s.name in chosen:
                w = _workload(item, where, i, s.scenario.tree, {}, total)
                s.scenario.workloads.append(dataclasses.replace(w, host=s.name))
