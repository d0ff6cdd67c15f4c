"""Prometheus metrics for shrdaemon --metrics HOST:PORT (prometheus_client).

The cycle never waits for a scrape: after each cycle the daemon's `Metrics`
observer copies what the exposition needs into an immutable `Snapshot` (a few
numpy fancy-index copies, milliseconds at 100,000 lnodes) and swaps one
reference; the HTTP server's thread renders the latest snapshot when scraped.
The daemon's own metrics go through prometheus_client's registry (a custom
collector over the snapshot, and a Histogram); the per-lnode block, eight series
per lnode, is rendered in the same text format by `lnode_text`, once per snapshot
and kept for the scrapes that follow: prometheus_client builds a dict and formats
each sample one by one, about ten times slower at 100,000 lnodes
(tests/bench/bench_metrics.py), and every second the scrape thread holds the GIL
slows the cycle.

Per lnode (labels name, kind = user|account|group|idle|root, parent; the root is
named "root", as shrview shows it, with parent ""), active lnodes only:
  fairshare_lnode_usage               decayed usage, charge units
  fairshare_lnode_rate                decayed charge rate, charge units per second
  fairshare_lnode_entitled_share_ratio  m_share (Rshr), fraction of the machine
  fairshare_lnode_effective_share_ratio e_share (Eshr), fraction of the machine
  fairshare_lnode_processes           processes attached (refs)
  fairshare_lnode_fair_share_ratio    the fair target (target: the hierarchical
                                      max-min allocation for what every lnode
                                      wants, fairshare.core.delivery), fraction
                                      of the machine
  fairshare_lnode_delivered_share_ratio what it received over about the last
                                      minute (got_minute), fraction of the machine
  fairshare_lnode_cpu_seconds_total   counter: CPU seconds it received since its
                                      lnode was created (`CpuCounters`)
The last two say the same thing two ways: the gauge compares with the fair target as
it is (an alert needs no rate() and no CPU count), the counter gives any window
exactly (rate over fairshare_cpus).
Per daemon:
  fairshare_cycle_duration_seconds    histogram of the wall-clock time of a cycle
  fairshare_cycles_total, fairshare_writebacks_total (lnodes written back),
  fairshare_checkpoints_total, fairshare_errors_total{level} (the daemon's own
  log records at warning and worse: what an alert should watch),
  fairshare_client_errors_total{level} (requests on the socket refused or dropped:
  users' mistakes, such as a refused shrdist or a mistyped newacct; the records logged
  with ``extra=fairshare.daemon.service.CLIENT_FAULT``),
  fairshare_enforcer_info{enforcer} (1 for the one in force),
  fairshare_lnodes (active), fairshare_lnodes_exported, fairshare_cpus (the
  machine's CPUs, which the ratios are fractions of),
  fairshare_last_cycle_timestamp_seconds.

The HTTP server answers at most MAX_SCRAPES connections at once, each on a thread
of its own, and closes a connection that stalls IDLE_TIMEOUT s (`BoundedHTTPServer`).

Cardinality: one series per exported lnode and metric, lnodes exist only while
active, and `max_lnodes` caps how many are exported (the ones with the largest
usage; groups count like any lnode).
"""

from __future__ import annotations

import logging
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fairshare.core.tree import Kind, ShareTree
from udb.errors import OptionError

if TYPE_CHECKING:
    from fairshare.core.lnode import LnodeTable
    from fairshare.daemon.daemon import DaemonView

log = logging.getLogger("shrdaemon")

#: Scrapes served at once (Prometheus servers scraping this daemon), and how long one
#: may stall sending its request or taking the reply (s) before its connection is closed.
MAX_SCRAPES = 8
IDLE_TIMEOUT = 10.0
#: Cycle durations (s): from a small site's milliseconds to a slow database's seconds.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
KINDS = np.array([k.label for k in Kind])
LNODE_METRICS = (
    ("usage", "fairshare_lnode_usage", "Decayed usage of the lnode, in charge units."),
    ("rate", "fairshare_lnode_rate", "Decayed charge rate, charge units per second."),
    (
        "m_share",
        "fairshare_lnode_entitled_share_ratio",
        "Entitled share among the active lnodes (m_share, Rshr), fraction of the machine.",
    ),
    (
        "e_share",
        "fairshare_lnode_effective_share_ratio",
        "Effective share the enforcer delivers next (e_share, Eshr), fraction of the machine.",
    ),
    ("refs", "fairshare_lnode_processes", "Processes attached to the lnode."),
    (
        "target",
        "fairshare_lnode_fair_share_ratio",
        "Fair target: the hierarchical max-min allocation of the CPUs by the tree's shares "
        "for what every lnode wants, fraction of the machine.",
    ),
    (
        "got_minute",
        "fairshare_lnode_delivered_share_ratio",
        "CPU the lnode received over about the last minute (exponential average, "
        "time constant 60 s), fraction of the machine.",
    ),
)
#: Per-lnode counters: (key of Snapshot.values, name, help); the values come from the
#: `Metrics` observer's `CpuCounters`, not from one lnode table.
LNODE_COUNTERS = (
    (
        "cpu_seconds",
        "fairshare_lnode_cpu_seconds_total",
        "CPU seconds the lnode received since it was created (a group: its leaves' "
        "during the group's life).",
    ),
)


def parse_address(text: str) -> tuple[str, int]:
    """(host, port) of --metrics HOST:PORT ("[::1]:9180", ":9180" = every address)."""
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise OptionError(f"--metrics: expected HOST:PORT (e.g. 127.0.0.1:9180), not {text!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


@dataclass(frozen=True)
class Snapshot:
    """What one scrape shows, copied after a cycle: per exported lnode its labels and
    values (arrays in the same order), and the daemon's counters."""

    names: list[str]
    kinds: list[str]
    parents: list[str]
    values: dict[str, np.ndarray]
    active: int
    cycles: int
    writebacks: int
    checkpoints: int
    enforcer: str
    time: float
    cpus: float = 0.0


class CpuCounters:
    """The values of fairshare_lnode_cpu_seconds_total: the CPU seconds each lnode
    received since it was created, never lower during one lnode's life.

    A leaf's is the lnode table's cpu_seconds.  The table keeps none for the groups,
    and a sum over a group's leaves would drop whenever one of them is released while
    the group lives on; so a group's (and the root's) is added up here, cycle by cycle:
    the fraction of the machine it got (`got`, its leaves' sum, those released after
    the cycle included) times the cycle's CPU seconds (elapsed x CPUs), from 0 when its
    lnode is created.  A group active at the cycle before and at this one is the same
    lnode: lnodes are created before a cycle and released after it, so one released
    and created again is seen inactive after the cycle that released it.  Across a
    rebuilt tree a group keeps its count by name, as the daemon carries its lnode over
    (fairshare.daemon.state.carry_over).
    """

    def __init__(self) -> None:
        self._tree: ShareTree | None = None
        self._groups = np.zeros(0)  # per node of _tree: an active group's count, else 0

    def update(self, tree: ShareTree, table: LnodeTable, seconds: float) -> np.ndarray:
        """Each node's count after a cycle of `seconds` CPU seconds (elapsed x CPUs) that
        left `table` over `tree`: CPU seconds, 0 where there is no lnode."""
        groups = table.active & ~tree.leaf_mask
        got = np.where(groups & (table.got > 0), table.got, 0.0)  # never less than 0
        self._groups = self._before(tree, groups) + got * max(seconds, 0.0)
        self._tree = tree
        return np.where(groups, self._groups, table.cpu_seconds)

    def _before(self, tree: ShareTree, groups: np.ndarray) -> np.ndarray:
        """The count of each group of `groups` before this cycle (0: a new lnode)."""
        old = self._tree
        if old is None:
            return np.zeros(tree.size)
        if tree is old:
            return np.where(groups, self._groups, 0.0)
        before = np.zeros(tree.size)
        for m in np.flatnonzero(groups).tolist():  # a rebuilt tree: by name
            n = 0 if m == 0 else old.find(tree.names[m])
            if n is not None and not old.leaf_mask[n]:
                before[m] = self._groups[n]
        return before


def take_snapshot(
    daemon: DaemonView, max_lnodes: int | None, cpu_seconds: np.ndarray | None = None
) -> Snapshot:
    """The lnode table and counters of `daemon` as they are now (after a cycle), with
    `cpu_seconds` (`CpuCounters.update`; None: the table's, groups 0)."""
    tree, t = daemon.tree, daemon.table
    idx = np.flatnonzero(t.active)
    active = len(idx)
    if max_lnodes is not None and active > max_lnodes:
        top = np.argpartition(-t.usage[idx], max_lnodes - 1)[:max_lnodes]
        idx = np.sort(idx[top])
    names = tree.names
    parent = tree.parent[idx].tolist()
    # Counts stay integers: repr() of an int is three times as fast as of a float.
    values = {attr: _numbers(getattr(t, attr)[idx]) for attr, _n, _h in LNODE_METRICS}
    cpu = t.cpu_seconds if cpu_seconds is None else cpu_seconds
    values["cpu_seconds"] = cpu[idx].astype(float)
    return Snapshot(
        names=[names[i] or "root" for i in idx.tolist()],
        kinds=KINDS[tree.kinds[idx]].tolist(),
        parents=[(names[p] or "root") if p >= 0 else "" for p in parent],
        values=values,
        active=active,
        cycles=daemon.cycle,
        writebacks=daemon.writebacks,
        checkpoints=daemon.checkpoints,
        enforcer=daemon.enforcer_name,
        time=daemon.clock.time(),
        cpus=float(daemon.cpus),
    )


def _numbers(a: np.ndarray) -> np.ndarray:
    """`a` as floats, or as it is when it holds integers (a fancy-indexed copy)."""
    return a if a.dtype.kind in "iu" else a.astype(float)


class ErrorCount(logging.Handler):
    """Counts the log records at warning and worse, by level: the daemon's own
    (`counts`) apart from its clients' mistakes (`client`, records marked CLIENT_FAULT)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts = {"warning": 0, "error": 0, "critical": 0}
        self.client = {"warning": 0, "error": 0, "critical": 0}

    def emit(self, record: logging.LogRecord) -> None:
        level = record.levelname.lower()
        counts = self.client if getattr(record, "fault", None) == "client" else self.counts
        counts[level] = counts.get(level, 0) + 1


def _escape(value: str) -> str:
    """A label value as the text format wants it (backslash, quote, newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(v: float) -> str:
    if v == v and abs(v) != float("inf"):
        return repr(v)
    return "NaN" if v != v else ("+Inf" if v > 0 else "-Inf")


def lnode_text(s: Snapshot) -> bytes:
    """The per-lnode gauges and counters of `s` in Prometheus' text format (HELP, TYPE,
    samples; a counter's family named with its _total, as prometheus_client writes it)."""
    labels = [
        f'{{name="{_escape(n)}",kind="{k}",parent="{_escape(p)}"}} '
        for n, k, p in zip(s.names, s.kinds, s.parents, strict=True)
    ]
    out = []
    for kind, metrics in (("gauge", LNODE_METRICS), ("counter", LNODE_COUNTERS)):
        for key, name, doc in metrics:
            out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
            values = s.values[key].tolist()
            number = repr if np.isfinite(s.values[key]).all() else _number
            out.append("".join([f"{name}{lab}{number(v)}\n" for lab, v in zip(labels, values)]))  # noqa: B905
    return "".join(out).encode()


class SnapshotCollector(Collector):
    """prometheus_client collector of the daemon's metrics in the latest `Snapshot`;
    `lnodes_text` renders its per-lnode block (once per snapshot)."""

    def __init__(self, errors: ErrorCount) -> None:
        self.snapshot: Snapshot | None = None
        self.errors = errors
        self._lock = threading.Lock()
        self._rendered: tuple[Snapshot | None, bytes] = (None, b"")

    def lnodes_text(self) -> bytes:
        """The per-lnode block of the latest snapshot (rendered at its first scrape)."""
        s = self.snapshot
        if s is None:
            return b""
        with self._lock:
            if self._rendered[0] is not s:
                self._rendered = (s, lnode_text(s))
            return self._rendered[1]

    def collect(self):
        s = self.snapshot  # one reference read: the cycle may swap it meanwhile
        for name, doc, counts in (
            ("fairshare_errors", "The daemon's own log records at warning and worse.",
             self.errors.counts),
            ("fairshare_client_errors",
             "Requests on the socket refused or dropped (users' mistakes), by log level.",
             self.errors.client),
        ):  # fmt: skip
            family = CounterMetricFamily(name, doc, labels=["level"])
            for level, n in counts.items():
                family.add_metric([level], n)
            yield family
        if s is None:
            return
        for name, doc, value in (
            ("fairshare_cycles", "Cycles run since the daemon started.", s.cycles),
            ("fairshare_writebacks", "Lnodes written back to the UDB.", s.writebacks),
            ("fairshare_checkpoints", "Checkpoints of the active lnodes.", s.checkpoints),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        info = GaugeMetricFamily(
            "fairshare_enforcer_info", "The enforcer in force (value 1).", labels=["enforcer"]
        )
        info.add_metric([s.enforcer], 1)
        yield info
        yield GaugeMetricFamily("fairshare_lnodes", "Active lnodes.", value=s.active)
        yield GaugeMetricFamily(
            "fairshare_lnodes_exported",
            "Lnodes exported here (see --metrics-lnodes).",
            len(s.names),
        )
        yield GaugeMetricFamily(
            "fairshare_cpus", "The machine's CPUs, which the share ratios divide.", s.cpus
        )
        yield GaugeMetricFamily(
            "fairshare_last_cycle_timestamp_seconds", "When the last cycle ran (epoch s).", s.time
        )


class BoundedHTTPServer(ThreadingHTTPServer):
    """prometheus' scrapes, a thread each, at most `MAX_SCRAPES` at once: a connection
    past them is closed unanswered, so no client can make the daemon start threads
    (which take PIDs) without bound; with the handler's `IDLE_TIMEOUT`, one that
    stalls mid-request gives its thread back."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, *args, **kw) -> None:
        self.slots = threading.BoundedSemaphore(MAX_SCRAPES)
        super().__init__(*args, **kw)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class Metrics:
    """The daemon observer behind --metrics: publishes a snapshot after every cycle and
    serves it over HTTP at `address` from prometheus_client's server thread."""

    def __init__(self, address: tuple[str, int], max_lnodes: int | None = None) -> None:
        self.address = address
        self.max_lnodes = max_lnodes
        self.registry = CollectorRegistry(auto_describe=False)
        self.errors = ErrorCount()
        self.collector = SnapshotCollector(self.errors)
        self.registry.register(self.collector)
        self.cpu = CpuCounters()
        self.duration = Histogram(
            "fairshare_cycle_duration_seconds",
            "Wall-clock time of one cycle.",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.server = None
        self.bound: tuple[str, int] | None = None

    def exposition(self) -> bytes:
        """What a scrape returns: the daemon's metrics, then the per-lnode block."""
        return generate_latest(self.registry) + self.collector.lnodes_text()

    def serve(self) -> None:
        """Start serving at `address` from a thread (port 0: any free port; `bound`
        says which); OptionError when the address cannot be bound."""
        host, port = self.address
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = metrics.exposition()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # scrapes are not worth a log line
                pass

        Handler.timeout = IDLE_TIMEOUT  # the socket's: a client that stalls is dropped
        server_class = BoundedHTTPServer
        if ":" in host:
            server_class = type("V6", (BoundedHTTPServer,), {"address_family": socket.AF_INET6})
        try:
            self.server = server_class((host, port), Handler)
        except OSError as err:
            raise OptionError(f"--metrics {host}:{port}: {err.strerror or err}") from None
        threading.Thread(target=self.server.serve_forever, name="metrics", daemon=True).start()
        self.bound = self.server.server_address[:2]
        log.info("metrics on http://%s:%d/metrics", *self.bound)

    def started(self, daemon: DaemonView) -> None:
        """Count the daemon's warnings and errors from now on."""
        log.addHandler(self.errors)

    def cycled(self, daemon: DaemonView, seconds: float) -> None:
        self.duration.observe(seconds)
        cpu = self.cpu.update(daemon.tree, daemon.table, daemon.elapsed * daemon.cpus)
        self.collector.snapshot = take_snapshot(daemon, self.max_lnodes, cpu)

    def stopping(self, daemon: DaemonView) -> None:
        log.removeHandler(self.errors)
        if self.server is not None:
            threading.Thread(target=self.server.shutdown, daemon=True).start()
            self.server.server_close()
            self.server = None
