"""The pure half of the fairness benchmark (tests/bench/bench_real.py): its workloads'
share trees and demands, the hierarchical max-min target of a workload, the figures
worked out from a recorded series (deviation from the target, Jain's index, CPU left
idle while wanted, wake-up lateness), shrsim's prediction for the history workload,
the JSON document and the charts.  Nothing here needs root or touches the machine.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from types import SimpleNamespace as Row

import numpy as np

from fairshare.core.consts import Consts
from fairshare.core.maxmin import maxmin_allocation
from fairshare.core.tree import ShareTree, build_tree

#: The uid of the bench's first user (r0) and of its first resource group.
FIRST_UID = 63000
GROUP_UID = 62900
#: shflags of a resource group (udb.models.SHF_GROUP).
SHF_GROUP = 0o40000
#: Wake-up lateness is measured with this sleep (s).
PROBE_SLEEP = 0.010


@dataclass(frozen=True)
class Workload:
    """A workload: its share tree (`groups`: name -> parent group, "" at the top; every
    user r0.. sits under `parent[user]` or at the top), each user's demand (CPUs it
    would use unconstrained: processes or threads, a light user's small fraction) and
    when it starts (s after the case starts; default at once).  `light`: the user whose
    wake-up lateness is measured.  `what`: one line for the table and the docs."""

    name: str
    what: str
    demand: dict[str, float]
    groups: dict[str, str] = field(default_factory=dict)
    parent: dict[str, str] = field(default_factory=dict)
    start: dict[str, float] = field(default_factory=dict)
    light: str | None = None

    @property
    def users(self) -> list[str]:
        return list(self.demand)

    def uid(self, user: str) -> int:
        return FIRST_UID + self.users.index(user)

    def rows(self) -> list[Row]:
        """The UDB's rows for the workload (as udb.models.Entry fields): Idle and
        unknown as every UDB has them, the groups, the users, all at 1 share."""
        gid = {g: GROUP_UID + k for k, g in enumerate(self.groups)}
        out = [
            Row(name="Idle", uid=11, resgrp=0, shares=0, shflags=0),
            Row(name="unknown", uid=12, resgrp=0, shares=1, shflags=0),
        ]
        for g, up in self.groups.items():
            out.append(Row(name=g, uid=gid[g], resgrp=gid.get(up, 0), shares=1, shflags=SHF_GROUP))
        for u in self.users:
            resgrp = gid.get(self.parent.get(u, ""), 0)
            out.append(Row(name=u, uid=self.uid(u), resgrp=resgrp, shares=1, shflags=0))
        return out

    def tree(self) -> ShareTree:
        return build_tree(self.rows())

    def demand_at(self, t: float) -> dict[str, float]:
        """Each user's demand at `t` s after the case started (0 before its start)."""
        return {u: d if t >= self.start.get(u, 0.0) else 0.0 for u, d in self.demand.items()}

    def members(self, group: str) -> list[str]:
        """The users anywhere under `group`."""

        def under(u: str) -> bool:
            g = self.parent.get(u, "")
            while g:
                if g == group:
                    return True
                g = self.groups[g]
            return False

        return [u for u in self.users if under(u)]


CHURN_PROCS = (1, 2, 3, 4, 5, 6, 7, 8, 2, 6)
#: A light user's demand (CPUs): its 10 ms sleeps and small commands, about 2-3% of
#: the users' CPU on 2 CPUs.
LIGHT = 0.05

WORKLOADS = {
    w.name: w
    for w in (
        Workload("steady", "2 against 8 CPU-bound processes", {"r0": 2, "r1": 8}),
        Workload(
            "threads",
            "one process of 16 spinning threads (C, pthreads) against two single-threaded",
            {"r0": 16, "r1": 2},
        ),
        Workload(
            "build",
            "make -j8 of a generated C project (gcc) against 2 long CPU-bound processes",
            {"r0": 8, "r1": 2},
        ),
        Workload(
            "churn",
            "10 users of 1 to 8 CPU-bound processes, each replaced after 1 to 10 s",
            {f"r{i}": n for i, n in enumerate(CHURN_PROCS)},
        ),
        Workload(
            "groups",
            "Physics (8 processes; a fork loop) against Chem (1 process; a light user)",
            {"r0": 8, "r1": 1, "r2": 1, "r3": LIGHT},
            groups={"Physics": "", "Chem": ""},
            parent={"r0": "Physics", "r1": "Physics", "r2": "Chem", "r3": "Chem"},
            light="r3",
        ),
        Workload(
            "tree3",
            "three levels: A/A1/r0 (4 processes) beside idle A1/r1 and A2/r2, "
            "B/r3 and B/r4 (2 and 1), idle C/r5",
            {"r0": 4, "r1": 0, "r2": 0, "r3": 2, "r4": 1, "r5": 0},
            groups={"A": "", "A1": "A", "A2": "A", "B": "", "C": ""},
            parent={"r0": "A1", "r1": "A1", "r2": "A2", "r3": "B", "r4": "B", "r5": "C"},
        ),
        Workload(
            "history",
            "r0 runs alone (2 processes), then newcomer r1 (2 processes): against shrsim",
            {"r0": 2, "r1": 2},
            start={"r1": -1.0},  # set by the run: after the alone phase
        ),
        Workload(
            "latency",
            "a light user's 10 ms sleeps beside a user of 32 CPU-bound processes",
            {"r0": LIGHT, "r1": 32},
            light="r0",
        ),
        Workload(
            "many", "100 users of 2 CPU-bound processes each", {f"r{i}": 2 for i in range(100)}
        ),
    )
}
#: The workloads a run measures unless told (`many` is the daemon's cost at scale).
DEFAULT_WORKLOADS = ("steady", "threads", "build", "churn", "groups", "tree3", "history", "latency")


def with_start(w: Workload, user: str, start: float) -> Workload:
    """`w` with `user` starting at `start` s."""
    return Workload(w.name, w.what, w.demand, w.groups, w.parent, {**w.start, user: start}, w.light)


# -- the target ------------------------------------------------------------------------------


def target(w: Workload, demand: dict[str, float], cpus: float) -> dict[str, float]:
    """Each user's and group's hierarchical max-min target (fairshare.core.maxmin) for
    `demand`, as a fraction of the CPU the target hands out (what the users measured
    are compared with: their parts of their combined CPU)."""
    tree = w.tree()
    want = np.zeros(tree.size)
    for u, d in demand.items():
        want[tree.node(u)] = d
    alloc = maxmin_allocation(tree.index, tree.shares, want, cpus)
    total = alloc[0] or 1.0
    return {n: float(alloc[tree.node(n)] / total) for n in [*w.users, *w.groups]}


# -- a recorded series and its figures ------------------------------------------------------


@dataclass
class Series:
    """What a case recorded: at each time (s after the case started) every user's
    cumulative CPU (s, the kernel's count) and the machine's cumulative idle CPU (s,
    /proc/stat idle + iowait).  The measured window starts at `start`."""

    times: list[float]
    cpu: list[dict[str, float]]
    idle: list[float]
    start: float = 0.0


def window(s: Series) -> tuple[int, int]:
    """Indices of the first and last reading of the measured window."""
    first = next((i for i, t in enumerate(s.times) if t >= s.start - 1e-9), len(s.times) - 1)
    return first, len(s.times) - 1


def delivered(s: Series, i: int, j: int, names: list[str]) -> dict[str, float]:
    """Each user's part of the users' combined CPU between readings `i` and `j`."""
    got = {u: max(s.cpu[j][u] - s.cpu[i][u], 0.0) for u in names}
    total = sum(got.values())
    return {u: (g / total if total > 0 else 0.0) for u, g in got.items()}


def with_groups(w: Workload, shares: dict[str, float]) -> dict[str, float]:
    """`shares` of the users with each group's (its members' sum) added."""
    return {**shares, **{g: sum(shares[u] for u in w.members(g)) for g in w.groups}}


def mean_target(w: Workload, s: Series, cpus: float, i: int, j: int) -> dict[str, float]:
    """The target averaged over readings `i` to `j`, each interval by its length."""
    acc: dict[str, float] = {}
    span = s.times[j] - s.times[i]
    for k in range(i, j):
        dt = s.times[k + 1] - s.times[k]
        for n, v in target(w, w.demand_at(s.times[k]), cpus).items():
            acc[n] = acc.get(n, 0.0) + v * dt / (span or 1.0)
    return acc


def jain(x: list[float]) -> float:
    """Jain's fairness index of `x`: (sum x)^2 / (n sum x^2); 1 when all are equal, 1/n
    when one has everything; 1 for no values or all zeros."""
    v = np.asarray(x, dtype=float)
    sq = float((v**2).sum())
    return float(v.sum() ** 2 / (len(v) * sq)) if len(v) and sq > 0 else 1.0


def idle_while_wanted(dt: float, idle: float, got: float, wanted: float, cpus: float) -> float:
    """CPU seconds the machine left idle over an interval of `dt` s while the users
    wanted more than they got: the machine's idle CPU (s) up to the CPU the users wanted
    (`wanted` CPUs, at most the machine's) and did not get (`got` CPU s)."""
    short = max(min(wanted, cpus) * dt - got, 0.0)
    return min(max(idle, 0.0), short)


def figures(w: Workload, s: Series, cpus: float) -> dict[str, float]:
    """The case's figures over the measured window: the largest |delivered - target| of
    the users and of the groups (pp), Jain's index over the users' delivered / target
    (users with a target), and the CPU left idle while wanted (% of the machine)."""
    i, j = window(s)
    got = with_groups(w, delivered(s, i, j, w.users))
    fair = mean_target(w, s, cpus, i, j)
    users = [u for u in w.users if u != w.light]
    out = {
        "user_dev_pp": 100.0 * max(abs(got[u] - fair[u]) for u in users),
        "jain": jain([got[u] / fair[u] for u in users if fair[u] > 0]),
    }
    if w.groups:
        out["group_dev_pp"] = 100.0 * max(abs(got[g] - fair[g]) for g in w.groups)
    waste = 0.0
    for k in range(i, j):
        dt = s.times[k + 1] - s.times[k]
        used = sum(s.cpu[k + 1][u] - s.cpu[k][u] for u in w.users)
        wanted = sum(w.demand_at(s.times[k]).values())
        waste += idle_while_wanted(dt, s.idle[k + 1] - s.idle[k], used, wanted, cpus)
    span = s.times[j] - s.times[i]
    out["idle_pct"] = 100.0 * waste / (cpus * span) if span > 0 else 0.0
    return out


def lateness(late_ms: list[float]) -> dict[str, float]:
    """p50 and p99 of the wake-up lateness (ms)."""
    if len(late_ms) < 2:
        return {}
    q = statistics.quantiles(late_ms, n=100)
    return {"p50_ms": q[49], "p99_ms": q[98]}


def binned(w: Workload, s: Series, cpus: float, step: float) -> dict:
    """The chart's series: every `step` s from the first reading, each user's delivered
    part (None for a bin in which no user used CPU yet) and target over the bin
    (fractions), the bins' end times."""
    ends, got, fair = [], [], []
    i = 0
    for j in range(1, len(s.times)):
        if s.times[j] - s.times[i] < step - 1e-6 and j < len(s.times) - 1:
            continue
        if s.times[j] - s.times[i] < step / 2:  # a short tail: left out
            break
        ends.append(round(s.times[j], 3))
        d = delivered(s, i, j, w.users)
        t = mean_target(w, s, cpus, i, j)
        used = any(s.cpu[j][u] > s.cpu[i][u] for u in w.users)
        got.append([round(d[u], 5) for u in w.users] if used else None)
        fair.append([round(t[u], 5) for u in w.users])
        i = j
    return {"times": ends, "users": w.users, "delivered": got, "target": fair}


# -- shrsim's prediction (the history workload) ---------------------------------------------


def simulate(w: Workload, cpus: float, duration: float, consts: Consts, enforcer: str) -> dict:
    """shrsim's run (fairshare.sim) of `w` (its tree, demands and starts as workloads of
    that many CPU-bound processes; an idle user as one that never runs) for `duration`
    s under `consts`: the series of {"times", "users", "delivered"} (each user's part
    of the delivered CPU per cycle)."""
    from fairshare.sim import machine
    from fairshare.sim.run import run_scenario
    from fairshare.sim.scenario import Scenario

    # An idle user is logged in (attached, never runnable), as in the real run.
    loads = [
        machine.Workload(u, max(int(round(d)), 1), w.start.get(u, 0.0), duration, min(d, 1.0))
        for u, d in w.demand.items()
    ]
    sc = Scenario(f"bench {w.name}", float(cpus), duration, 0.0, consts, w.tree(), loads)
    r = run_scenario(sc, enforcer, window=duration)
    cols = [r.series(u) for u in w.users]
    return {
        "times": [float(t) for t in r.times],
        "users": w.users,
        "delivered": [[float(x) for x in row[cols]] for row in r.delivered],
    }


def sim_gap(measured: dict, sim: dict, after: float) -> list[float]:
    """Per bin of the measured series ending after `after` s, the largest |measured -
    shrsim| over the users (pp), shrsim's delivered CPU averaged over the same bin."""
    t = np.asarray(sim["times"], dtype=float)
    d = np.asarray(sim["delivered"], dtype=float)
    out, begin = [], 0.0
    for end, got in zip(measured["times"], measured["delivered"], strict=True):
        inside = (t > begin + 1e-9) & (t <= end + 1e-9)
        if end > after and inside.any() and got is not None:
            pred = d[inside].mean(axis=0)
            out.append(100.0 * float(np.abs(np.asarray(got) - pred).max()))
        begin = end
    return out


# -- the results: median and range, the JSON document ----------------------------------------


def summary(values: list[float]) -> dict:
    """Median, minimum and maximum of `values` (None left out; all None: {})."""
    v = [x for x in values if x is not None]
    if not v:
        return {}
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "values": v}


def document(settings: dict, runs: dict[str, dict[str, list[dict]]]) -> dict:
    """The --json document: `settings` (the machine, the run's options, the time) and
    for each workload and baseline the summaries of its figures over the repeats and
    the first repeat's series.  `runs[workload][baseline]` lists the repeats, each
    {"figures": {name: value}, "series": {...}}."""
    out: dict = {"settings": settings, "workloads": {}}
    for wname, by_base in runs.items():
        wl = out["workloads"].setdefault(
            wname, {"what": WORKLOADS[wname].what if wname in WORKLOADS else "", "baselines": {}}
        )
        for base, reps in by_base.items():
            names = sorted({k for r in reps for k in r["figures"]})
            wl["baselines"][base] = {
                "repeats": len(reps),
                "figures": {k: summary([r["figures"].get(k) for r in reps]) for k in names},
                "series": reps[0].get("series") if reps else None,
            }
    return out


# -- the charts ------------------------------------------------------------------------------


def chart(path, wname: str, baselines: dict[str, dict], note: str = "") -> None:
    """One PNG: a panel per baseline side by side, each user's delivered part of the
    users' CPU over time (solid) against its target (dashed, the same colour); shrsim's
    prediction dotted where a baseline's series carries one ("sim"); a grey line where
    the measured window starts ("start")."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    n = max(len(baselines), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), sharey=True, squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (base, ser) in zip(axes[0], baselines.items(), strict=False):
        t = ser["times"]
        for k, u in enumerate(ser["users"]):
            c = colours[k % len(colours)]
            got = [100 * row[k] if row is not None else np.nan for row in ser["delivered"]]
            ax.plot(t, got, color=c, label=u)
            ax.plot(t, [100 * row[k] for row in ser["target"]], color=c, ls="--", lw=1)
            if ser.get("sim"):
                sim = ser["sim"]
                ax.plot(sim["times"], [100 * r[k] for r in sim["delivered"]], color=c, ls=":")
        if "start" in ser:
            ax.axvline(ser["start"], color="grey", lw=0.8)
        ax.set_title(base, fontsize=10)
        ax.set_xlabel("s")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("% of the users' CPU")
    axes[0][0].legend(fontsize=7, ncol=2, loc="upper right")
    fig.suptitle(
        f"{wname}: delivered (solid) against the max-min target (dashed){note}", fontsize=11
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
