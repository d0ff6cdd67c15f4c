"""The published lnode table as the displays' columns and rows (pure: no UDB, no clock).

`view_columns` turns the columns a daemon published (fairshare.store.published) into the
columns shrview, shrinfo and the statistics show, one numpy array per figure, in node
order: the published ones (the cycle's own figures: shares, usage, due share, ...) and
those derived from them (`_subtree_sums` adds leaves' figures into their groups bottom
up).  A display of 100,000 lnodes stays in these columns from the read to the print;
`view_lnodes` (`rows_of`) makes one `ViewLnode` per lnode for the displays that want
rows.  To add a per-lnode figure: publish it (fairshare.store.published.published_columns), or
derive it beside the others in `view_columns`; give `ViewLnode` a field of that name
(and `_DERIVED` its name).

What the machine delivered against what is fair (fairshare.core.delivery) comes as the
cycle published it (`DELIVERY`: `target`, `got`, `got_minute`, fractions of the
machine), NaN in a table published by a daemon older than those columns (a
ViewLnode's None).  An lnode that did not demand CPU last cycle has an e_share that is
what it would get if it alone started, not a share it is getting: `eshr_if_started`
marks it.

`select_rows` orders and selects them (shrview -s and -o; `prepare` does both for a
`ViewRequest`); `statistics` is the -ds report.  Shares and rates are fractions 0..1;
usage and Muse charge units; Rate charge units per second.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fairshare.store.published import COUNTED
from udb.columnar import Columns, row_columns
from udb.errors import NotFound

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
    with such a leaf below; target: its fair target, the hierarchical max-min allocation
    of the machine for what the lnodes want (fairshare.core.delivery); got, got_minute:
    the fraction of the machine it received over the last cycle, and about the last
    minute (the three None when the publishing daemon did not publish them);
    eshr_if_started: it did not demand CPU last cycle, so its e_share is what it would
    get if it alone started, not a share it is getting.
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
    target: float | None = None
    got: float | None = None
    got_minute: float | None = None
    eshr_if_started: bool = False

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
#: The columns `view_columns` derives, in ViewLnode's field order after _ROW_FIELDS.
_DERIVED = (
    "muse",
    "rate_share",
    "proj",
    "pri",
    "due",
    "children",
    "leaves",
    "own",
    "demanding",
    "target",
    "got",
    "got_minute",
    "eshr_if_started",
)
#: What the machine delivered against what is fair (fractions of the machine; NaN, a
#: ViewLnode's None, where an older daemon did not publish them).
DELIVERY = ("target", "got", "got_minute")
#: The columns a ViewLnode shows as None where they are NaN.
_NONE_IF_NAN = ("due", *DELIVERY)

#: The published columns the report reads.
REPORT_COLUMNS = (*_ROW_FIELDS, "charge", "due", "pri", *DELIVERY)


def demanding_leaves(leaf, demand, background, m_share) -> np.ndarray:
    """The leaves the scheduler shares the CPU among (element-wise): they wanted CPU
    last cycle, are not background, and have a machine share."""
    return leaf & demand & ~background & (m_share > 0)


def _levels(level: np.ndarray) -> list[int]:
    """The distinct levels among `level` (small non-negative integers), ascending."""
    return np.flatnonzero(np.bincount(level)).tolist() if len(level) else []


def _subtree_sums(level, pos, has_parent, sums: dict[str, np.ndarray]) -> np.ndarray:
    """Add every array of `sums` (in place) into the parent rows, deepest level first,
    and return the number of child rows of each row.  Within a level children are
    added in descending node order, as the one-lnode-at-a-time definition did, so
    every figure is the same to the last bit (bincount adds in the order given, from
    0: a parent, a group with 0 of its own, gets exactly its children's sum)."""
    n = len(level)
    children = np.zeros(n, dtype=np.int64)
    for lv in _levels(level[has_parent])[::-1]:
        idx = np.flatnonzero(has_parent & (level == lv))[::-1]
        up = pos[idx]
        children += np.bincount(up, minlength=n)
        for values in sums.values():
            values += np.bincount(up, values[idx], minlength=n).astype(values.dtype)
    return children


def view_columns(published: Columns | Sequence, own: Collection[int]) -> Columns:
    """Every published lnode's ViewLnode fields as columns (name: array, in node order,
    parents first; `name` and `kind` lists of str), and `flags`, `group` (a group or the
    root) and `pos` (the row of each row's parent, -1 for none).  `published`: the
    columns a daemon published (fairshare.store.published.LnodeStore.read_columns), or rows with
    those attributes.

    `own`: the uids of the caller's lnodes (leaves only are marked).  The
    due share is NaN where the lnode does not demand CPU (a ViewLnode's None); the
    `DELIVERY` columns are NaN where the publishing daemon did not publish them (a
    columns dict without them counts as such).
    """
    f = published if isinstance(published, dict) else row_columns(published, REPORT_COLUMNS)
    kind = f["kind"]
    n = len(kind)
    node = np.asarray(f["node"], dtype=np.int64)
    parent = np.asarray(f["parent"], dtype=np.int64)
    labels = sorted(set(kind))
    index = {label: i for i, label in enumerate(labels)}
    code = np.fromiter(map(index.__getitem__, kind), dtype=np.int64, count=n)
    by_label = np.array(labels, dtype=object)
    leaf = ~np.isin(by_label, ("group", "root"))[code] if n else np.zeros(0, bool)
    idle = (by_label == "idle")[code] if n else np.zeros(0, bool)
    rate, m_share = np.asarray(f["rate"], dtype=float), np.asarray(f["m_share"], dtype=float)
    demand, background = np.asarray(f["demand"], bool), np.asarray(f["background"], bool)
    pos = np.searchsorted(node, parent).clip(0, max(n - 1, 0))  # each row's parent row
    has_parent = (parent >= 0) & (node[pos] == parent) if n else np.zeros(0, bool)
    sched = demanding_leaves(leaf, demand, background, m_share)
    sums = {
        "leaves": leaf.astype(np.int64),
        "sched": sched.astype(np.int64),
        "rate": np.where(leaf & ~idle, rate, 0.0),
        "muse": np.where(leaf, np.asarray(f["charge"], dtype=float), 0.0),
        "pri": np.where(leaf, np.asarray(f["pri"], dtype=float), 0.0),  # NaN (None) as is
    }
    total_rate = sum(sums["rate"][leaf].tolist())  # Python's left-to-right sum, as before
    children = _subtree_sums(np.asarray(f["level"]), pos, has_parent, sums)
    sched = sums["sched"] > 0
    leaf_rate = sums["rate"]
    # Siblings: the rows of one parent row; rows without one (the root, an orphan)
    # grouped by their parent's node number.
    alone = np.flatnonzero(~has_parent)
    sib = pos.copy()
    sib[alone] = n + np.unique(parent[alone], return_inverse=True)[1]
    s_rate = np.bincount(sib, leaf_rate)[sib]
    proj = np.divide(leaf_rate, s_rate, out=np.zeros(n), where=s_rate > 0)
    proj[parent < 0] = 1.0 if total_rate > 0 else 0.0
    uid = np.asarray(f["uid"], dtype=np.int64)
    own_ = leaf & np.isin(uid, np.fromiter(own, dtype=np.int64, count=len(own)))
    flags = np.array([_KIND_FLAGS.get(k, FLAG_ACTIVE) for k in labels], dtype=np.int64)
    cols: Columns = {name: f[name] for name in _ROW_FIELDS}
    cols.update(
        muse=sums["muse"],
        rate_share=leaf_rate / total_rate if total_rate > 0 else np.zeros(n),
        proj=proj,
        pri=np.nan_to_num(sums["pri"]),
        # The cycle's due share (fairshare.core.cycle), shown where the lnode demands CPU.
        due=np.where(sched, np.asarray(f["due"], dtype=float), np.nan),
        children=children,
        leaves=sums["leaves"],
        own=own_,
        demanding=sched,
        **{k: np.asarray(f[k], dtype=float) if k in f else np.full(n, np.nan) for k in DELIVERY},
        eshr_if_started=~demand,
        flags=flags[code] if n else np.zeros(0, np.int64),
        group=~leaf,
        pos=np.where(has_parent, pos, -1),
    )
    return cols


def view_lnodes(published: Columns | Sequence, own: Collection[int]) -> list[ViewLnode]:
    """Every published lnode as a ViewLnode (`view_columns` row by row), in node order."""
    return rows_of(view_columns(published, own))


def rows_of(cols: Columns, rows: np.ndarray | None = None) -> list[ViewLnode]:
    """The ViewLnodes of `view_columns`' `rows` (default: all), in that order."""
    fields = [cols[name] for name in (*_ROW_FIELDS, *_DERIVED)]
    if rows is not None:
        at = rows.tolist()
        fields = [[c[i] for i in at] if isinstance(c, list) else c[rows] for c in fields]
    lists = [c.tolist() if isinstance(c, np.ndarray) else c for c in fields]
    for name in _NONE_IF_NAN:
        at = _DERIVED.index(name) + len(_ROW_FIELDS)
        lists[at] = [None if d != d else d for d in lists[at]]  # NaN: None
    return list(map(ViewLnode, *lists))


# -- -s and -o ---------------------------------------------------------------------------

#: -o: the column siblings are ordered by, and whether descending (names break ties).
_SORT_KEYS = {
    "tree": (None, False),
    "name": (None, False),
    "id": ("uid", False),
    "usage": ("usage", True),
    "rate": ("rate_share", True),
    "eshr": ("e_share", True),
}


def select_rows(cols: Columns, select_: str, sort: str) -> np.ndarray:
    """The rows of `view_columns` to show, in display order: depth first from the root's
    children (or from the selected subtree's top), siblings ordered by `sort` (names
    break ties).  `select_` is "all", "groups", "users" or an lnode's name (its
    subtree; every lnode of that name, in node order).  Raises NotFound for an unknown
    name.

    Positions, not a walk: every row's place in the depth-first order is its parent's
    place + 1 + the sizes of the subtrees of the siblings before it."""
    names = cols["name"]
    n = len(names)
    level = np.asarray(cols["level"])
    key_col, descending = _SORT_KEYS[sort]
    name_rank = np.empty(n, dtype=np.int64)  # numpy orders str by code point, as Python
    name_rank[np.argsort(np.array(names, dtype=str), kind="stable")] = np.arange(n)
    tops = np.asarray(cols["parent"]) < 0
    # A row whose parent is not published (none in a daemon's table: an active lnode's
    # groups are active) is in no subtree: -2 keeps it out of the tops' siblings.
    parent_row = np.where(tops, -1, np.where(cols["pos"] >= 0, cols["pos"], -2))
    # Sibling order: by parent row, then the key, then the name; tops by row.
    keys = [name_rank]
    if key_col is not None:
        k = np.asarray(cols[key_col], dtype=float)
        keys.append(-k if descending else k)
    keys.append(np.where(tops, np.arange(n), 0))
    keys.append(parent_row)
    order = np.lexsort(keys)
    # Subtree sizes (itself included), deepest level first; rows without a parent row
    # (orphans) and their subtrees get no place.
    size = np.ones(n, dtype=np.int64)
    linked = parent_row >= 0
    for lv in _levels(level[linked])[::-1]:
        idx = np.flatnonzero(linked & (level == lv))
        size += np.bincount(parent_row[idx], size[idx], minlength=n).astype(np.int64)
    # Before each row among its siblings: the sizes of the siblings ordered before it.
    sizes = size[order]
    ends = np.cumsum(sizes)
    first = np.r_[True, parent_row[order][1:] != parent_row[order][:-1]]
    group_start = np.maximum.accumulate(np.where(first, ends - sizes, 0))
    before = np.empty(n, dtype=np.int64)
    before[order] = ends - sizes - group_start
    place = np.full(n, -1, dtype=np.int64)
    place[tops] = before[tops]
    for lv in _levels(level[linked]):
        idx = np.flatnonzero(linked & (level == lv))
        above = place[parent_row[idx]]
        place[idx] = np.where(above >= 0, above + 1 + before[idx], -1)
    placed = np.flatnonzero(place >= 0)
    walk = placed[np.argsort(place[placed])]  # the whole forest, depth first
    if select_ in ("all", "groups", "users"):
        walk = walk[~tops[walk]]
    else:
        starts = [i for i, name in enumerate(names) if name == select_]
        if not starts:
            raise NotFound(f"-s {select_}: no active lnode of that name")
        at = np.searchsorted(place[walk], place[starts]).tolist()
        walk = np.concatenate([walk[a : a + size[s]] for a, s in zip(at, starts, strict=True)])
    if select_ == "groups":
        return walk[cols["group"][walk]]
    if select_ == "users":
        return walk[~cols["group"][walk]]
    return walk


# -- what a display shows ----------------------------------------------------------------


@dataclass
class ViewRequest:
    """What to show: display (a DISPLAYS value), select ("all", "groups", "users" or a
    name), sort (a SORTS value), the uids of the caller's lnodes, and the UDB's leaf
    count."""

    display: str = "monitor"
    select: str = "all"
    sort: str = "tree"
    own: frozenset[int] = frozenset()
    total_ids: int = 0


def prepare(snap: Snapshot, req: ViewRequest) -> tuple[Columns, np.ndarray, int]:
    """Every lnode of `snap` as columns (`view_columns`), the rows `req` shows in their
    order (`select_rows`), and the level the shown ones start at (indentation counts
    from it)."""
    cols = view_columns(snap.lnodes, req.own)
    if not len(cols["name"]):
        return cols, np.zeros(0, dtype=np.int64), 1
    shown = select_rows(cols, req.select, req.sort)
    top = int(np.asarray(cols["level"])[shown].min()) if len(shown) else 1
    return cols, shown, top


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
    from fairshare.core.cycle import PRIORITY_MAX  # the cycle's module only for -ds

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
