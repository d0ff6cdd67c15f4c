"""The published lnode table as the displays' rows (pure: no UDB, no clock).

`view_lnodes` turns the rows a daemon published (fairshare.store) into one `ViewLnode`
per lnode, in node order, with every column shrview, shrinfo and the statistics show.
It works column by column over numpy arrays, not lnode by lnode: `_columns` picks the
published columns (the cycle's own figures: shares, usage, due share, ...),
`_subtree_sums` adds leaves' figures into their groups bottom up.  To add a per-lnode
figure: publish it (fairshare.store.published_tuples), read it in `_columns`, or derive
it beside the others in `view_lnodes`; give `ViewLnode` a field of that name (in the
order of the `map` at the end).

`select_lnodes` orders and selects them (shrview -s and -o; `prepare` does both for a
`ViewRequest`); `statistics` is the -ds report.  Shares and rates are fractions 0..1;
usage and Muse charge units; Rate charge units per second.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from fairshare.cycle import PRIORITY_MAX
from fairshare.store import COUNTED
from udb.errors import NotFound
from udb.models import PublishedLnode

if TYPE_CHECKING:
    from fairshare.report.published import Snapshot

#: The Flags column's bits (octal), the guide's: users 10000, groups 50000, accounts
#: 1010000 (documented in shrview(1)).  Demand and background are JSON fields of their own.
FLAG_GROUP = 0o40000
FLAG_ACCOUNT = 0o1000000
FLAG_ACTIVE = 0o10000
#: Flags by kind: every shown lnode is active; groups (and the root) and accounts have a bit.
_KIND_FLAGS = {
    "group": FLAG_ACTIVE | FLAG_GROUP,
    "root": FLAG_ACTIVE | FLAG_GROUP,
    "account": FLAG_ACTIVE | FLAG_ACCOUNT,
}


@dataclass(slots=True)
class ViewLnode:
    """One lnode with every column the displays show (fractions 0..1, charge units).

    rate_share: of the decayed charge rate of all active leaves but Idle (groups: their
    subtree's); proj: of its active siblings' rate (what ADJGROUPS compares); pri: the
    cycle's Kay-Lauder near-future proportion m^2/usage over the demanding leaves
    (groups: their leaves' sum; 0 when not published); due: the cycle's due share, its
    m_share renormalised over the demanding lnodes at every level (None if it does not
    demand CPU, or was not published); muse: charges since it became active (groups:
    their leaves'); children: active child lnodes; leaves: active leaf lnodes below (1
    for a leaf); own: it is the caller's lnode; demanding: a leaf the scheduler shares
    the CPU among (it wants CPU, is not background and has a machine share), or a group
    with such a leaf below.
    """

    node: int
    name: str
    uid: int
    kind: str
    parent: int
    level: int
    shares: float
    refs: int
    nrun: int
    usage: float
    rate: float
    m_share: float
    e_share: float
    cpu: float
    adj: float
    priority: float
    background: bool
    demand: bool
    muse: float = 0.0
    rate_share: float = 0.0
    proj: float = 0.0
    pri: float = 0.0
    due: float | None = None
    children: int = 0
    leaves: int = 0
    own: bool = False
    demanding: bool = False

    @property
    def is_group(self) -> bool:
        return self.kind in ("group", "root")

    @property
    def flags(self) -> int:
        """The Flags column (see the FLAG_ constants)."""
        return _KIND_FLAGS.get(self.kind, FLAG_ACTIVE)


#: The PublishedLnode columns a ViewLnode starts from, in ViewLnode's field order.
_ROW_FIELDS = (
    "node",
    "name",
    "uid",
    "kind",
    "parent",
    "level",
    "shares",
    "refs",
    "nrun",
    "usage",
    "rate",
    "m_share",
    "e_share",
    "cpu",
    "adj",
    "priority",
    "background",
    "demand",
)


#: The published columns the report reads (`_columns`): a display reads only these.
REPORT_COLUMNS = (*_ROW_FIELDS, "charge", "due", "pri")


def _columns(rows: Sequence[PublishedLnode]) -> dict[str, tuple]:
    """The published columns a ViewLnode needs (and charge, due, pri), each a tuple of values.

    Rows of LnodeStore.read_published are read by position; ORM objects (tests build
    them) straight from their __dict__: attribute access, through the ORM's
    instrumentation or a Row's key map, costs more than everything else here on
    100,000 rows.  A column an ORM object was built without is None.
    """
    wanted = REPORT_COLUMNS
    if hasattr(rows[0], "_fields"):
        keys = rows[0]._fields
        if tuple(keys) == wanted:  # read_published(REPORT_COLUMNS): transposed as they are
            cols = zip(*rows, strict=True)
        else:
            pick = operator.itemgetter(*(keys.index(f) for f in wanted))
            cols = zip(*map(pick, rows), strict=True)
    else:
        dicts = [r.__dict__ for r in rows]
        try:
            cols = zip(*map(operator.itemgetter(*wanted), dicts), strict=True)
        except KeyError:
            cols = zip(*([d.get(f) for f in wanted] for d in dicts), strict=True)
    return dict(zip(wanted, cols, strict=True))


def demanding_leaves(leaf, demand, background, m_share) -> np.ndarray:
    """The leaves the scheduler shares the CPU among (element-wise): they wanted CPU
    last cycle, are not background, and have a machine share."""
    return leaf & demand & ~background & (m_share > 0)


def _subtree_sums(level, pos, has_parent, sums: dict[str, np.ndarray]) -> np.ndarray:
    """Add every array of `sums` (in place) into the parent rows, deepest level first,
    and return the number of child rows of each row.  Within a level children are
    added in descending node order, as the one-lnode-at-a-time definition did, so
    every figure is the same to the last bit (bincount adds in the order given, from
    0: a parent, a group with 0 of its own, gets exactly its children's sum)."""
    n = len(level)
    children = np.zeros(n, dtype=np.int64)
    for lv in np.unique(level[has_parent])[::-1].tolist():
        idx = np.flatnonzero(has_parent & (level == lv))[::-1]
        up = pos[idx]
        children += np.bincount(up, minlength=n)
        for values in sums.values():
            values += np.bincount(up, values[idx], minlength=n).astype(values.dtype)
    return children


def view_lnodes(rows: Sequence[PublishedLnode], own: Callable[[int], bool]) -> list[ViewLnode]:
    """Every published lnode with its derived columns, in node order (parents first).

    `own(uid)` says whether an lnode of that uid (leaves only) is the caller's.
    """
    if not rows:
        return []
    f = _columns(rows)
    n = len(rows)
    kind = f["kind"]
    node, parent = np.array(f["node"], dtype=np.int64), np.array(f["parent"], dtype=np.int64)
    level = np.array(f["level"], dtype=np.int64)
    rate, m_share = np.array(f["rate"], dtype=float), np.array(f["m_share"], dtype=float)
    leaf = ~np.array([k in ("group", "root") for k in kind], dtype=bool)
    idle = np.array([k == "idle" for k in kind], dtype=bool)
    demand, background = np.array(f["demand"], bool), np.array(f["background"], bool)
    pos = np.searchsorted(node, parent).clip(0, n - 1)  # each row's parent row
    has_parent = (parent >= 0) & (node[pos] == parent)
    sched = demanding_leaves(leaf, demand, background, m_share)
    sums = {
        "leaves": leaf.astype(np.int64),
        "sched": sched.astype(np.int64),
        "rate": np.where(leaf & ~idle, rate, 0.0),
        "muse": np.where(leaf, np.array(f["charge"], dtype=float), 0.0),
        "pri": np.where(leaf, np.array(f["pri"], dtype=float), 0.0),  # None: NaN, as is
    }
    total_rate = sum(sums["rate"][leaf].tolist())  # Python's left-to-right sum, as before
    children = _subtree_sums(level, pos, has_parent, sums)
    sched = sums["sched"] > 0
    leaf_rate = sums["rate"]
    _keys, sib = np.unique(parent, return_inverse=True)
    s_rate = np.bincount(sib, leaf_rate)[sib]
    proj = np.divide(leaf_rate, s_rate, out=np.zeros(n), where=s_rate > 0)
    proj[parent < 0] = 1.0 if total_rate > 0 else 0.0
    # The cycle's due share (fairshare.cycle), shown where the lnode demands CPU.
    due = [d if s_ else None for d, s_ in zip(f["due"], sched.tolist(), strict=True)]
    own_ = [bool(own(u)) if lf else False for u, lf in zip(f["uid"], leaf.tolist(), strict=True)]
    return list(
        map(
            ViewLnode,
            *(f[name] for name in _ROW_FIELDS),
            sums["muse"].tolist(),
            (leaf_rate / total_rate if total_rate > 0 else np.zeros(n)).tolist(),
            proj.tolist(),
            np.nan_to_num(sums["pri"]).tolist(),
            due,
            children.tolist(),
            sums["leaves"].tolist(),
            own_,
            sched.tolist(),
        )
    )


# -- -s and -o ---------------------------------------------------------------------------


def _sort_key(key: str) -> Callable[[ViewLnode], object]:
    return {
        "tree": lambda v: v.name,
        "name": lambda v: v.name,
        "id": lambda v: v.uid,
        "usage": lambda v: -v.usage,
        "rate": lambda v: -v.rate_share,
        "eshr": lambda v: -v.e_share,
    }[key]


def select_lnodes(lnodes: Sequence[ViewLnode], select_: str, sort: str) -> list[ViewLnode]:
    """The lnodes to show, depth first from the root's children (or the selected subtree's
    top), siblings ordered by `sort` (names break ties).  `select_` is "all", "groups",
    "users" or an lnode's name (its subtree).  Raises NotFound for an unknown name."""
    kids: dict[int, list[ViewLnode]] = {}
    for v in lnodes:
        kids.setdefault(v.parent, []).append(v)
    key = _sort_key(sort)
    for sibs in kids.values():
        sibs.sort(key=lambda v: (key(v), v.name))
    if select_ in ("all", "groups", "users"):
        tops = [v for v in lnodes if v.parent < 0]
        start = [c for t in tops for c in kids.get(t.node, [])]
    else:
        start = [v for v in lnodes if v.name == select_]
        if not start:
            raise NotFound(f"-s {select_}: no active lnode of that name")
    out: list[ViewLnode] = []
    stack = list(reversed(start))
    while stack:
        v = stack.pop()
        if select_ == "groups" and not v.is_group:
            continue
        if not (select_ == "users" and v.is_group):
            out.append(v)
        stack.extend(reversed(kids.get(v.node, [])))
    return out


# -- what a display shows ----------------------------------------------------------------


@dataclass
class ViewRequest:
    """What to show: display (a DISPLAYS value), select ("all", "groups", "users" or a
    name), sort (a SORTS value), the caller's lnode test, and the UDB's leaf count."""

    display: str = "monitor"
    select: str = "all"
    sort: str = "tree"
    own: Callable[[int], bool] = field(default=lambda uid: False)
    total_ids: int = 0


def prepare(snap: Snapshot, req: ViewRequest) -> tuple[list[ViewLnode], list[ViewLnode], int]:
    """Every lnode of `snap` (`view_lnodes`), those `req` shows (`select_lnodes`), and
    the level the shown ones start at (indentation counts from it)."""
    lnodes = view_lnodes(snap.lnodes, req.own)
    shown = select_lnodes(lnodes, req.select, req.sort) if snap.lnodes else []
    top = min((v.level for v in shown), default=1)
    return lnodes, shown, top


# -- -ds ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Statistics:
    """The -ds report.  active_ids: active leaf lnodes; total_ids: leaves of the UDB's
    share tree; usage_high: highest usage of an active leaf but Idle (charge units);
    usage_max: MAXUSAGE; priority_high: highest Kay-Lauder priority of a demanding leaf;
    charge: fraction of all charges by resource (None without counts); costs: charge
    units per unit of each resource; counts: totals since the daemon started."""

    active_ids: int
    total_ids: int
    active_groups: int
    usage_high: float
    usage_max: float
    priority_high: float
    priority_max: float
    resources: tuple[str, ...]
    charge: dict[str, float] | None
    costs: dict[str, float]
    counts: dict[str, float] | None


def statistics(snap: Snapshot, lnodes: Sequence[ViewLnode], total_ids: int) -> Statistics:
    """The -ds report of `snap` (`total_ids`: the leaves of the UDB's share tree)."""
    leaves = [v for v in lnodes if not v.is_group]
    users = [v for v in leaves if v.kind != "idle"]
    demanding = [v for v in users if v.demanding]
    names = tuple(name for name, _ in COUNTED)
    costs = {name: float(getattr(snap.consts, f"cost_{name}")) for name in names}
    charge = None
    if snap.counts is not None:
        spent = {name: costs[name] * float(snap.counts.get(name, 0.0)) for name in names}
        total = sum(spent.values())
        charge = {name: (spent[name] / total if total > 0 else 0.0) for name in names}
    return Statistics(
        active_ids=len(leaves),
        total_ids=total_ids,
        active_groups=sum(1 for v in lnodes if v.kind == "group"),
        usage_high=max((v.usage for v in users), default=0.0),
        usage_max=snap.consts.maxusage,
        priority_high=max((v.priority for v in demanding), default=0.0),
        priority_max=PRIORITY_MAX,
        resources=names,
        charge=charge,
        costs=costs,
        counts=dict(snap.counts) if snap.counts is not None else None,
    )
