"""A shrsim scenario: the one loader for shrsim and `shrdaemon --simulate`.

A scenario (TOML, see man/shrsim.1) names the machine (`cpus`, or a site's `hosts`),
the duration and warm-up, constant overrides (`[consts]`, `delta`), the UDB (a
udbgen directives file `udb`, inline `directives`, or else the UDB given on the
command line) and the workloads.  `load_scenario` checks all of it before anything
is run or written and returns a `Scenario`: the tree, the constants, the workloads
(fairshare.sim.machine.Workload), the stored usage and nice of the entries, and, for
`shrdaemon --simulate` (fairshare.sim.daemon), the parsed directives and the constant
overrides as written, so the daemon's UDB is loaded from the same parse.  Anything it
cannot use is a ScenarioError ``FILE:LINE:COL: message``.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select

from fairshare.core.consts import Consts, consts_from_mapping, from_user, parse_duration
from fairshare.core.tree import ShareTree, build_tree
from fairshare.sim.machine import ENFORCERS, Workload
from fairshare.store.config import load_consts, tree_rows
from udb.errors import DirectiveError, OptionError, UdbError
from udb.models import Entry
from udb.session import make_engine, open_udb, read_session, upgrade

#: A scenario's limits: CPUs, processes per workload, and cycles (duration / delta).
MAX_CPUS = 100_000
MAX_PROCS = 1_000_000
MAX_CYCLES = 1_000_000
#: The top-level keys of a scenario and the keys of a [[workload]] table.
KEYS = ("cpus", "duration", "delta", "warmup", "enforcer", "consts", "udb", "directives")
KEYS += ("workload", "hosts")
WORKLOAD_KEYS = ("name", "procs", "start", "stop", "demand", "host", "nice")


class ScenarioError(DirectiveError):
    """A scenario file that cannot be loaded: ``FILE:LINE:COL: message``."""


@dataclass
class Scenario:
    """A loaded scenario: the machine, the clock, the constants, the tree, the workloads.

    `directives` are the udbgen directives the scenario brings (parsed; empty when it
    simulates an existing UDB) and `overrides` its [consts] and delta as written:
    `shrdaemon --simulate` loads the daemon's UDB from them."""

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
    directives: list = field(default_factory=list)  # udb.directives.Directive
    directives_source: str = ""  # the file they came from
    overrides: dict = field(default_factory=dict)  # [consts] and delta, as written

    @property
    def delta(self) -> float:
        return self.consts.delta

    def site_part(self, host: str) -> tuple[list[Workload], float]:
        """(workloads, CPUs) of host `host`: a site scenario's (its `hosts` table) for that
        host, else the whole scenario's machine.  OptionError for a host it lacks."""
        if not self.hosts:
            return self.workloads, self.cpus
        if host not in self.hosts:
            raise OptionError(
                f"{self.source}: --host {host}: expected one of the scenario's hosts "
                f"{', '.join(self.hosts)}"
            )
        return [w for w in self.workloads if w.host == host], self.hosts[host]


@dataclass(frozen=True)
class _UdbPart:
    """What a scenario takes from its UDB."""

    rows: list  # the tree's rows (fairshare.store.config.tree_rows)
    shusage: dict[str, tuple[float, float]]  # name -> (shusage, shextime)
    consts: Consts  # the base constants the overrides apply to
    nice: dict[str, int]  # name -> UDB nice, where not 0
    directives: list = field(default_factory=list)
    directives_source: str = ""


class _Text:
    """The scenario's text, to point errors at the line of a key."""

    def __init__(self, text: str, source: str) -> None:
        self.text, self.source = text, source

    def line_of(self, pattern: str, start: int = 1) -> int:
        """The first line from `start` matching `pattern` (else `start`)."""
        for i, line in enumerate(self.text.splitlines()[start - 1 :], start):
            if re.match(pattern, line):
                return i
        return start

    def table_line(self, name: str, n: int) -> int:
        """The line of the `n`th (from 0) ``[[name]]`` table."""
        count = -1
        for i, line in enumerate(self.text.splitlines(), 1):
            if re.match(rf"\s*\[\[\s*{name}\s*\]\]", line):
                count += 1
                if count == n:
                    return i
        return 1

    def error(self, message: str, line: int = 1) -> ScenarioError:
        return ScenarioError(self.source, line, 1, message)

    def fail(self, key: str, message: str, line: int | None = None) -> ScenarioError:
        """``key: message`` at `line`, else at the line that sets `key`."""
        where = line or self.line_of(rf"\s*{re.escape(key)}\s*=")
        return self.error(f"{key}: {message}", where)

    def only(self, doc: dict, keys) -> None:
        """ScenarioError at the first key of the top-level table `doc` not in `keys`."""
        for key in doc:
            if key not in keys:
                raise self.fail(key, f"unknown key; expected one of {', '.join(sorted(keys))}")

    def duration(self, key: str, value: object, line: int | None = None) -> float:
        """`value` as seconds (fairshare.core.consts.parse_duration), failing at `key`."""
        try:
            return parse_duration(value, key)
        except UdbError as err:
            raise self.fail(key, str(err).split(": ", 1)[-1], line) from None


def scenario_brings_udb(path: str | Path) -> bool:
    """True if the scenario at `path` names its own UDB (`udb` or `directives`); False
    when it does not or cannot be read (loading it then says what is wrong).
    ScenarioError when it is not UTF-8 text or not TOML, before any UDB is opened for it."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return False
    doc = _toml(_Text(utf8_text(data, str(path)), str(path)))
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
        data = path.read_bytes()
    except OSError as err:
        raise ScenarioError(source, 1, 1, f"cannot read the scenario: {err.strerror}") from None
    text = utf8_text(data, source)
    return parse_scenario(text, source, base=path.parent, enforcer=enforcer, udb=udb)


def utf8_text(data: bytes, source: str) -> str:
    """`data` decoded as UTF-8; ScenarioError at the line and column of the first byte
    that is not (a scenario or directives file written in another encoding)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        col = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ScenarioError(
            source, line, col, f"not UTF-8 text: byte 0x{data[err.start]:02x}"
        ) from None


def parse_scenario(
    text: str,
    source: str,
    base: Path | None = None,
    enforcer: str | None = None,
    udb: str | None = None,
) -> Scenario:
    """The scenario in TOML `text` (from `source`; `udb` paths relative to `base`)."""
    where = _Text(text, source)
    doc = _toml(where)
    where.only(doc, KEYS)
    hosts = _site_hosts(doc, where)
    cpus = sum(hosts.values()) if hosts else doc.get("cpus")
    if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not 0 < cpus <= MAX_CPUS:
        raise where.fail(
            "cpus", f"expected a number of CPUs above 0 up to {MAX_CPUS}, got {cpus!r}"
        )
    if "duration" not in doc:
        raise where.error('duration: missing; expected e.g. duration = "8h"')
    total = where.duration("duration", doc["duration"])
    if total <= 0:
        raise where.fail("duration", "expected a positive duration")
    part = _load_udb(doc, where, base or Path("."), udb)
    overrides, consts = _consts(doc, where, part.consts, total)
    warmup = min(3 * consts.halflife, total / 2)
    if "warmup" in doc:
        warmup = where.duration("warmup", doc["warmup"])
        if warmup >= total:
            raise where.fail("warmup", "expected less than the duration")
    tree = build_tree(part.rows, consts.mode)
    enforcer = enforcer or doc.get("enforcer", "cgroup")
    if enforcer not in ENFORCERS:
        raise where.fail("enforcer", f"expected one of {', '.join(ENFORCERS)}, got {enforcer!r}")
    workloads = _workloads(doc, where, tree, hosts, total)
    known = {n: tree.node(n) for n in {*part.shusage, *part.nice} if tree.find(n) is not None}
    return Scenario(
        source,
        float(cpus),
        total,
        warmup,
        consts,
        tree,
        workloads,
        enforcer,
        shusage={known[n]: v for n, v in part.shusage.items() if n in known},
        hosts=hosts,
        nice={known[n]: v for n, v in part.nice.items() if n in known},
        directives=part.directives,
        directives_source=part.directives_source,
        overrides=overrides,
    )


def _toml(where: _Text) -> dict:
    """The scenario's TOML document; ScenarioError at the line and column TOML names."""
    try:
        return tomllib.loads(where.text)
    except tomllib.TOMLDecodeError as err:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(err))
        line, col = (int(m.group(1)), int(m.group(2))) if m else (1, 1)
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(err))
        raise ScenarioError(where.source, line, col, f"not valid TOML: {msg}") from None


def _consts(doc: dict, where: _Text, stored: Consts, total: float) -> tuple[dict, Consts]:
    """(the overrides as written, the constants): `stored` with [consts] and delta."""
    overrides = doc.get("consts", {})
    if not isinstance(overrides, dict):
        raise where.fail("consts", "expected a [consts] table")
    overrides = dict(overrides)
    if "delta" in doc:
        overrides["delta"] = doc["delta"]
    try:
        consts = consts_from_mapping(from_user(overrides), stored)
    except UdbError as err:
        key = str(err).split(":", 1)[0].strip()
        name = key if key in overrides else "consts"
        raise where.fail(name, str(err).split(": ", 1)[-1]) from None
    if total / consts.delta > MAX_CYCLES:
        raise where.fail(
            "duration",
            f"expected at most {MAX_CYCLES:,} cycles of delta = {consts.delta:g} s, "
            f"got {total / consts.delta:.3g}",
        )
    return overrides, consts


def _workloads(
    doc: dict, where: _Text, tree: ShareTree, hosts: dict[str, float], total: float
) -> list[Workload]:
    """The [[workload]] tables, checked against the tree (its leaves) and the hosts."""
    items = doc.get("workload", [])
    if not isinstance(items, list) or not items:
        raise where.error("workload: expected at least one [[workload]] table")
    return [_workload(item, where, i, tree, hosts, total) for i, item in enumerate(items)]


def _workload(
    item: dict, where: _Text, i: int, tree: ShareTree, hosts: dict[str, float], total: float
) -> Workload:
    """Workload `i` (from 0) of the scenario."""
    line = where.table_line("workload", i)

    def wfail(key: str, message: str) -> ScenarioError:
        at = where.line_of(rf"\s*{re.escape(key)}\s*=", line)
        return where.error(f"workload {i + 1}: {key}: {message}", at)

    for key in item:
        if key not in WORKLOAD_KEYS:
            raise wfail(key, f"unknown key; expected {', '.join(WORKLOAD_KEYS)}")
    host = _workload_host(item, hosts, wfail)
    name = item.get("name")
    node = tree.find(name) if isinstance(name, str) else None
    if node is None or not tree.leaf_mask[node]:
        what = "users" if tree.mode == "user" else "accounts"
        raise wfail("name", f"expected one of the UDB's {what}, got {name!r}")
    procs = item.get("procs", 1)
    if isinstance(procs, bool) or not isinstance(procs, int) or not 1 <= procs <= MAX_PROCS:
        raise wfail("procs", f"expected 1 to {MAX_PROCS:,} processes, got {procs!r}")
    start = _wduration(item, "start", 0.0, wfail)
    stop = _wduration(item, "stop", total, wfail)
    if not start < stop:
        raise wfail("stop", "expected a time after start")
    demand = item.get("demand", 1.0)
    if isinstance(demand, bool) or not isinstance(demand, int | float) or not 0 <= demand <= 1:
        raise wfail("demand", f"expected a number from 0 to 1, got {demand!r}")
    nice = item.get("nice", 0)
    if isinstance(nice, bool) or not isinstance(nice, int) or not -20 <= nice <= 19:
        raise wfail("nice", f"expected a nice value from -20 to 19, got {nice!r}")
    return Workload(name, procs, start, min(stop, total), float(demand), host=host, nice=nice)


def _site_hosts(doc: dict, where: _Text) -> dict[str, float]:
    """A site scenario's `hosts` table (name -> CPUs), {} for one machine."""
    if "hosts" not in doc:
        return {}
    if "cpus" in doc:
        raise where.fail("cpus", "expected either cpus (one machine) or hosts (a site), not both")
    hosts = doc["hosts"]
    if not isinstance(hosts, dict) or not hosts:
        raise where.fail("hosts", "expected a table of host names and CPUs, e.g. { a = 2, b = 2 }")
    start = where.line_of(r"\s*(hosts\s*=|\[\s*hosts\s*\])")
    for name, cpus in hosts.items():
        if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not cpus > 0:
            line = start
            if not re.match(r"\s*hosts\s*=", where.text.splitlines()[start - 1]):
                line = where.line_of(rf"\s*\"?{re.escape(name)}\"?\s*=", start)
            message = f"expected a positive number of CPUs, got {cpus!r}"
            raise where.fail(f"hosts.{name}", message, line)
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


def _read_udb(engine, directives: list | None = None, source: str = "") -> _UdbPart:
    """What the scenario takes from the UDB of `engine` (`directives`: what it was loaded
    from, for shrdaemon --simulate)."""
    with read_session(engine) as s:
        rows = tree_rows(s)
        usage = s.execute(select(Entry.name, Entry.shusage, Entry.shextime, Entry.nice)).all()
        consts = load_consts(s)
    shusage = {n: (u, x) for n, u, x, _nice in usage if u > 0}
    nice = {n: nice for n, _u, _x, nice in usage if nice}
    return _UdbPart(rows, shusage, consts, nice, directives or [], source)


def _directives_text(doc: dict, where: _Text, base: Path) -> tuple[str, str, int]:
    """(directives, their source, the line offset of their first line in it)."""
    if "udb" in doc:
        if not isinstance(doc["udb"], str):
            raise where.fail("udb", "expected the path of a udbgen directives file")
        udb_path = base / doc["udb"]
        try:
            data = udb_path.read_bytes()
        except OSError as err:
            raise where.fail("udb", f"cannot read {udb_path}: {err.strerror}") from None
        return utf8_text(data, str(udb_path)), str(udb_path), 0
    body = doc["directives"]
    if not isinstance(body, str):
        raise where.fail("directives", "expected a string of udbgen directives")
    # A multi-line string starts on the line after `directives = """`.
    offset = where.line_of(r"\s*directives\s*=")
    if not re.search(r'directives\s*=\s*("""|\'\'\')\s*\n', where.text):
        offset -= 1
    return body, where.source, offset


def _load_udb(doc: dict, where: _Text, base: Path, udb: str | None) -> _UdbPart:
    """What the scenario takes from its UDB.

    From its `udb` directives file or inline `directives` (loaded into a temporary
    SQLite UDB with udbgen's own code; base constants the defaults), else from the
    real UDB `udb` (read only; base constants its stored ones).
    """
    from udb.directives import parse, run

    if "udb" in doc and "directives" in doc:
        raise where.error("expected one of udb = FILE or directives, not both")
    if "udb" not in doc and "directives" not in doc:
        return _read_udb(open_udb(udb))
    body, dsource, offset = _directives_text(doc, where, base)
    try:
        directives = parse(body, dsource)
        with tempfile.TemporaryDirectory(prefix="shrsim-") as tmp:
            engine = make_engine(f"sqlite:///{tmp}/udb.sqlite")
            try:
                upgrade(engine)
                run(engine, directives)
                part = _read_udb(engine, directives, dsource)
            finally:
                engine.dispose()
    except DirectiveError as err:
        raise ScenarioError(dsource, err.line + offset, err.col, err.message) from None
    return dataclasses.replace(part, consts=Consts())
