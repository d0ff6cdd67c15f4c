"""What a simulated run measured: entitled, fair and delivered share, and the series.

`Recorder` is told each cycle's m_share (every node), e_share, CPU seconds and fair
target (per lnode) and sums, over the measured window (after the warm-up, or the last
--window seconds), each lnode's and each group's entitled share (mean m_share), fair
share (the fair target's CPU over all the CPU the target hands out) and delivered
share (CPU it received / CPU delivered to all lnodes).  The fair target is the
hierarchical max-min allocation of the CPUs for the demand each cycle had
(fairshare.core.maxmin, worked out by fairshare.sim.run); a group's is its subtree's.
The deviation is delivered - fair.  The Recorder also keeps per-cycle series, lnodes
then groups, averaged into bins when long, for fairshare.sim.plot.  `SimResult` is
what shrsim prints (man/shrsim.1 documents its --json shape).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fairshare.core.tree import ShareTree

#: Series longer than this many cycles are averaged into bins for plotting.
MAX_SERIES_POINTS = 10000


@dataclass(frozen=True)
class Measured:
    """One lnode's or group's shares over the window (fractions of the machine)."""

    name: str
    kind: str
    entitled: float  # mean m_share
    fair: float  # the max-min target's CPU / the CPU the target hands out to all lnodes
    delivered: float  # CPU it received / CPU delivered to all lnodes

    @property
    def deviation_pp(self) -> float:
        """delivered - fair in percentage points."""
        return (self.delivered - self.fair) * 100.0


@dataclass
class SimResult:
    """What a run measured, with the per-cycle series (binned when long) for plots.

    `times` are the end of each series point (s); the series arrays are (points, nodes)
    in the order of `series_names`, the lnodes then the groups (as `lnodes` and
    `groups`): mean m_share, mean e_share (a group's: its lnodes' sum), fair share and
    delivered share.
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
    fair: np.ndarray
    cycles: int = 0
    hosts: dict[str, SimResult] = field(default_factory=dict)  # a site: each host's own

    @property
    def max_deviation_pp(self) -> float:
        """The largest |delivered - fair| over lnodes and groups, in pp."""
        return max((abs(m.deviation_pp) for m in self.lnodes + self.groups), default=0.0)

    def lnode(self, name: str) -> Measured:
        """The measurement of lnode or group `name`."""
        return next(m for m in self.lnodes + self.groups if m.name == name)

    def series(self, name: str) -> int:
        """Column of lnode or group `name` in the series arrays."""
        return self.series_names.index(name)

    def as_json(self) -> dict:
        """The documented --json shape (man/shrsim.1)."""

        def block(items: list[Measured]) -> dict:
            return {
                m.name: {
                    "entitled": m.entitled,
                    "fair": m.fair,
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
                    "max_deviation_pp": r.max_deviation_pp,
                }
                for name, r in self.hosts.items()
            }
        return out


def _ratio(part: np.ndarray, total: float) -> np.ndarray:
    """`part` / `total`, zeros where nothing was handed out."""
    return part / total if total > 0 else np.zeros_like(part)


class Recorder:
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
        nl, nr = len(lnodes), len(self.report)
        self.ent_sum = np.zeros(nr)
        self.cpu_sum, self.fair_sum = np.zeros(nl), np.zeros(nl)  # CPU s per lnode
        self.bin = max(1, math.ceil(nsteps / MAX_SERIES_POINTS))
        points = math.ceil(nsteps / self.bin)
        self.times = np.zeros(points)
        self.entitled, self.e_share, self.delivered, self.fair = (
            np.zeros((points, nr)) for _ in range(4)
        )
        self._ent = np.zeros(nr)
        self._esh, self._cpu, self._fair = np.zeros(nl), np.zeros(nl), np.zeros(nl)

    def add(self, step: int, delta: float, m_share, e_share, cpu, fair) -> None:
        """Record cycle `step`: m_share over all nodes; per lnode its e_share, the CPU s
        it received and the CPU s the fair target gives it."""
        if step >= self.first:
            self.ent_sum += m_share[self.report]
            self.cpu_sum += cpu
            self.fair_sum += fair
        self._ent += m_share[self.report]
        self._esh += e_share
        self._cpu += cpu
        self._fair += fair
        if (step + 1) % self.bin == 0 or step == self.nsteps - 1:
            p, k = step // self.bin, step % self.bin + 1
            self.times[p] = (step + 1) * delta
            self.entitled[p], self.e_share[p] = self._ent / k, self.below @ self._esh / k
            self.delivered[p] = _ratio(self.below @ self._cpu, self._cpu.sum())
            self.fair[p] = _ratio(self.below @ self._fair, self._fair.sum())
            self._ent[:], self._esh[:], self._cpu[:], self._fair[:] = 0.0, 0.0, 0.0, 0.0

    def result(
        self, source: str, cpus: float, delta: float, tree: ShareTree, enforcer: str
    ) -> SimResult:
        """The measured shares over the window and the series."""
        cycles = self.nsteps - self.first
        ent = self.ent_sum / cycles
        dlv = _ratio(self.below @ self.cpu_sum, self.cpu_sum.sum())
        fair = _ratio(self.below @ self.fair_sum, self.fair_sum.sum())
        measured = [
            Measured(tree.names[n], tree.kind(n).label, *map(float, (ent[i], fair[i], dlv[i])))
            for i, n in enumerate(self.report)
        ]
        nl = len(self.lnodes)
        return SimResult(
            scenario=source,
            enforcer=enforcer,
            window=(self.first * delta, self.nsteps * delta),
            lnodes=measured[:nl],
            groups=measured[nl:],
            utilisation=float(self.cpu_sum.sum() / (cpus * delta * cycles)),
            times=self.times,
            series_names=[tree.names[n] for n in self.report],
            entitled=self.entitled,
            e_share=self.e_share,
            delivered=self.delivered,
            fair=self.fair,
            cycles=self.nsteps,
        )
