"""The share tree and its normalisation into machine shares (pure: no OS, no database).

The tree is held as arrays indexed by node number so that normalising 100,000
leaves is a handful of numpy operations per level.  Node 0 is the root (uid
0, the guide's level 0); nodes are numbered breadth first, so every parent
comes before its children and `levels[k]` holds the nodes of level k.

Share by User (mode "user"): resource groups and users, linked by resgrp.
Share by Account (mode "account"): resource groups and shareholder (account)
entries, linked by resgrp; users reach their accounts through acids, so they
are not nodes, except the special Idle and unknown entries, which stay leaves
so that idle time and unknown uids have somewhere to be charged.

Which entries are nodes, and why an entry that should be one is detached (its
fault: missing-parent, parent-not-group, cycle, ancestor-detached), are the
share-tree rules of `udb.rules`, the same that `udbgen -a` and shrtree check.

m_share (the guide's machine share, Kay-Lauder's m_share): from the root
down over active nodes only, m = m_parent x shares / (sum of the active
siblings' shares).  A group is active when any leaf below it is.  `TreeIndex`
(one per tree, `tree_index`) holds the level slices that make this and the
subtree sums a few numpy operations per level; `machine_shares` is the one
normalisation, used by the cycle and by `ShareTree.m_shares` (static shares).

The rows come from the UDB through `fairshare.store.config` (`tree_rows`, `load_tree`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from itertools import compress
from typing import Protocol

import numpy as np

from fairshare.core.index import TreeIndex, build_index
from fairshare.core.split import machine_shares
from udb.rules import (
    IDLE_UID,
    MODES,
    ROOT_UID,
    SHF_ACCOUNT,
    SHF_GROUP,
    TREE_ROLES,
    UNKNOWN_NAMES,
    in_tree,
    place_entry,
    walk_groups,
)

#: A node's own usage scope (ShareTree.scope): inherited, this site's, every site's.
SCOPE_INHERIT, SCOPE_LOCAL, SCOPE_GLOBAL = 0, 1, 2
#: The UDB's scope column's values and their codes.
SCOPE_CODES = {"": SCOPE_INHERIT, "local": SCOPE_LOCAL, "global": SCOPE_GLOBAL}


class Kind(IntEnum):
    ROOT = 0
    GROUP = 1
    USER = 2
    ACCOUNT = 3
    IDLE = 4

    @property
    def label(self) -> str:
        return self.name.lower()


class TreeRow(Protocol):
    """What `build_tree` needs of an entry (an Entry, a Row of repository.TREE_COLUMNS, ...)."""

    name: str
    uid: int
    resgrp: int
    shares: int
    shflags: int


@dataclass(frozen=True)
class Detached:
    """An entry that belongs in the tree but cannot be reached from the root."""

    name: str
    uid: int
    resgrp: int
    reason: str  # a name of udb.rules.FAULT_NAMES: "missing-parent", "parent-not-group", ...


@dataclass
class ShareTree:
    """The share hierarchy as arrays over nodes 0..n-1 (0 is the root)."""

    mode: str
    names: list[str]
    ids: np.ndarray  # uid of each node (the root's is 0)
    kinds: np.ndarray  # Kind per node, int8
    parent: np.ndarray  # parent node number, -1 for the root
    shares: np.ndarray  # allocated shares, float64
    level: np.ndarray  # depth: root 0, top-level groups 1, ...
    levels: list[np.ndarray]  # node numbers of each level
    detached: list[Detached] = field(default_factory=list)
    #: Position in the input rows of each node's entry (-1 for the root) and of each
    #: detached entry (in `detached` order): how callers join their own columns.
    source: np.ndarray | None = None
    detached_source: np.ndarray | None = None
    #: Each node's own usage half-life (s; 0: its parent's), None when no entry sets one.
    halflife: np.ndarray | None = None
    #: Each node's own usage scope (SCOPE_INHERIT, SCOPE_LOCAL, SCOPE_GLOBAL; int8), None
    #: when no entry sets one; and whether each node pools its members (fair share not
    #: applied among them), None when none does (seed 001; fairshare.core.grid).
    scope: np.ndarray | None = None
    pooled: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def depth(self) -> int:
        """The deepest level in the tree (root is 0)."""
        return len(self.levels) - 1

    def node(self, name: str) -> int:
        """Node number of the entry called `name` (KeyError if not in the tree)."""
        return self._by_name[name]

    def node_of_id(self, uid: int) -> int:
        """Node number of the non-root entry with uid `uid` (KeyError if none)."""
        return self._by_id[uid]

    def find(self, name: str) -> int | None:
        return self._by_name.get(name)

    def find_id(self, uid: int) -> int | None:
        return self._by_id.get(uid)

    # Made on first use: a display that looks up no node skips 100,000 entries' maps.
    @cached_property
    def index(self) -> TreeIndex:
        """The tree's level structure (fairshare.core.index), built on first use."""
        return build_index(
            self.levels, self.parent, self.leaf_mask, self.shares, self.kinds == Kind.GROUP
        )

    @property
    def own_halflives(self) -> bool:
        """Whether any node sets its own usage half-life (else the global one rules)."""
        return self.halflife is not None and bool(np.count_nonzero(self.halflife))

    def halflives(self, default: float) -> np.ndarray:
        """Each node's usage half-life in seconds: its own, else the nearest ancestor's,
        else `default` (the global half-life, shradmin -K): seed 004's 2.2.2.4, a subtree
        decaying at its own rate (Kay and Lauder's differential decay)."""
        hit = self.__dict__.get("_halflives")
        if hit is not None and hit[0] == default:
            return hit[1]
        out = np.full(self.size, float(default))
        if self.own_halflives:
            own = self.halflife
            for nodes in self.levels[1:]:
                out[nodes] = np.where(own[nodes] > 0, own[nodes], out[self.parent[nodes]])
        self.__dict__["_halflives"] = (default, out)
        return out

    def global_scope(self, globalusage: bool = False) -> np.ndarray:
        """Per node, whether it divides its share among its children by every site's usage
        (seed 001's global scope): its own scope, else its nearest ancestor's, else the
        root's, global with `globalusage` (the GLOBALUSAGE flag: every entry global)."""
        out = np.full(self.size, bool(globalusage))
        if self.scope is not None:
            own = self.scope
            for nodes in self.levels[1:]:
                inherit = out[self.parent[nodes]]
                out[nodes] = np.where(
                    own[nodes] == SCOPE_INHERIT, inherit, own[nodes] == SCOPE_GLOBAL
                )
        return out

    def measured_globally(self, globalusage: bool = False) -> np.ndarray:
        """Per node, whether its standing among its siblings is measured from every site's
        usage: its parent divides globally (`global_scope`).  The paper's rule: an entry's
        usage is measured with the usage data source of its parent.  The root: False."""
        g = self.global_scope(globalusage)
        out = np.zeros(self.size, dtype=bool)
        out[1:] = g[self.parent[1:]]
        return out

    @cached_property
    def _by_name(self) -> dict[str, int]:
        return dict(zip(self.names[1:], range(1, self.size), strict=True))

    @cached_property
    def _by_id(self) -> dict[int, int]:
        return dict(zip(self.ids[1:].tolist(), range(1, self.size), strict=True))

    def kind(self, node: int) -> Kind:
        return Kind(int(self.kinds[node]))

    @property
    def leaf_mask(self) -> np.ndarray:
        """True for nodes that can carry processes (users, accounts, Idle, unknown)."""
        return self.kinds >= Kind.USER

    def preorder(self, top: int = 0) -> np.ndarray:
        """Nodes of the subtree under `top` (itself first), depth first, siblings by name
        (an array of node numbers).

        Vectorised level by level: a node's place is its parent's plus one plus the sizes
        of the subtrees of the siblings before it by name (100,000 nodes: ~20 ms, where
        a walk with a stack took ~200 ms).
        """
        n = self.size
        if n == 1:
            return np.zeros(1, dtype=np.int64)
        by_name = sorted(range(1, n), key=self.names.__getitem__)  # stable: ties by node
        # Each node's rank among its siblings' names, as a position within its parent's
        # run of children (nodes grouped by parent, in name order).
        grouped = np.array(by_name, dtype=np.int64)
        grouped = grouped[np.argsort(self.parent[grouped], kind="stable")]
        size = tree_index(self).subtree_sum(np.ones(n)).astype(np.int64)
        # Sizes of the earlier siblings, summed within each parent's run.
        run_sizes = size[grouped]
        before = np.cumsum(run_sizes) - run_sizes
        parents = self.parent[grouped]
        starts = np.flatnonzero(np.concatenate(([True], parents[1:] != parents[:-1])))
        first_of_run = np.repeat(before[starts], np.diff(np.append(starts, len(grouped))))
        offset = np.zeros(n, dtype=np.int64)
        offset[grouped] = before - first_of_run
        pos = np.zeros(n, dtype=np.int64)
        p = self.parent
        for s, e in tree_index(self).bounds[1:]:  # parents are placed before children
            pos[s:e] = pos[p[s:e]] + 1 + offset[s:e]
        order = np.empty(n, dtype=np.int64)
        order[pos] = np.arange(n)
        start = int(pos[top])
        return order[start : start + int(size[top])]

    def ancestors(self, node: int) -> list[int]:
        """The chain from `node`'s parent up to the root."""
        return ancestors(self.parent, node)

    # -- normalisation -----------------------------------------------------------------

    def active_nodes(self, active_leaves: np.ndarray) -> np.ndarray:
        """Boolean mask: the given active leaves plus every ancestor of one."""
        active = np.asarray(active_leaves, dtype=bool).copy()
        active[0] = True
        for lv in reversed(self.levels[1:]):
            below = lv[active[lv]]
            active[self.parent[below]] = True
        return active

    def subtree_sum(self, values: np.ndarray) -> np.ndarray:
        """Each node's value plus the values of all its descendants (`TreeIndex.subtree_sum`)."""
        return tree_index(self).subtree_sum(values)

    def m_shares(self, active_leaves: np.ndarray | None = None) -> np.ndarray:
        """Machine share of every node (fractions of the machine, 0 when inactive).

        `active_leaves` is a boolean mask over nodes; None means every leaf is
        active, which gives the static entitlement shrtree shows.  Active
        leaves' m_shares sum to 1 unless every active leaf has zero shares.
        The cycle's own normalisation (`machine_shares`) over `active_nodes`.
        """
        if active_leaves is None:
            active_leaves = self.leaf_mask
        return machine_shares(tree_index(self), self.shares, self.active_nodes(active_leaves))

    def group_shares(self) -> np.ndarray:
        """Each node's shares as a fraction of all its siblings' shares (static)."""
        s = tree_index(self).sibling_sum(self.shares)
        g = np.divide(self.shares, s, out=np.zeros(self.size), where=s > 0)
        g[0] = 1.0
        return g


# -- the level structure (computed once per tree) and the normalisation --------------------


def tree_index(tree: ShareTree) -> TreeIndex:
    """The `TreeIndex` of `tree` (`ShareTree.index`, built once: the tree never changes)."""
    return tree.index


def default_acid(acids: Sequence[int] | None) -> int | None:
    """A user's default account (Share by Account): the first of its `acids`, None when it
    has none."""
    return acids[0] if acids else None


def ancestors(parent: np.ndarray, node: int) -> list[int]:
    """The chain from `node`'s parent up to the root, given every node's parent (-1 for
    the root): a ShareTree's, or the lnode table's copy of it."""
    chain = []
    node = int(parent[node])
    while node >= 0:
        chain.append(node)
        node = int(parent[node])
    return chain


def build_tree(rows: Iterable[TreeRow], mode: str = "user") -> ShareTree:
    """The share tree of `rows` (UDB entries) in Share by User or Share by Account mode.

    Entries that cannot be reached from the root (their resgrp names no entry,
    names an entry that is not a group, or they sit on a cycle) are left out
    of the tree and listed in `detached`.
    """
    names, uids, resgrps, shares, shflags, halflives = [], [], [], [], [], []
    scopes, pooled = [], []
    for r in rows:
        names.append(r.name)
        uids.append(r.uid)
        resgrps.append(r.resgrp)
        shares.append(r.shares)
        shflags.append(r.shflags)
        halflives.append(getattr(r, "halflife", 0.0) or 0.0)
        scopes.append(getattr(r, "scope", "") or "")
        pooled.append(getattr(r, "pooled", 0) or 0)
    return build_tree_columns(
        names, uids, resgrps, shares, shflags, mode, halflives=halflives, scopes=scopes,
        pooled=pooled,
    )  # fmt: skip


def build_tree_columns(
    names: Sequence[str],
    uids: Sequence[int],
    resgrps: Sequence[int],
    shares: Sequence[float],
    shflags: Sequence[int],
    mode: str = "user",
    *,
    halflives: Sequence[float] | None = None,
    scopes: Sequence[str] | None = None,
    pooled: Sequence[int] | None = None,
) -> ShareTree:
    """`build_tree` over entry columns (one list per field, entries in the same order).

    Vectorised: a level's nodes are found with a few numpy operations per level,
    so 100,000 entries take tens of milliseconds.  Nodes are numbered breadth
    first; within a level by parent node, then by the entries' order.  Which entries
    are nodes, and why one is detached, are udb.rules' (`in_tree`, `place_entry`).
    `halflives`: each entry's own usage half-life (s; 0 or None: inherited); `scopes`:
    each entry's usage scope ('', 'local', 'global'); `pooled`: whether each pools its
    members (seed 001; fairshare.core.grid).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    uid = np.asarray(uids, dtype=np.int64).reshape(-1)
    rg = np.asarray(resgrps, dtype=np.int64).reshape(-1)
    kind = _kinds(uid, np.asarray(shflags, dtype=np.int64).reshape(-1))
    members = np.flatnonzero(_tree_nodes(kind, names, mode))
    m_uid, m_rg, m_kind = uid[members], rg[members], kind[members]
    m_parent = _parent_members(m_uid, m_rg, m_kind)
    m_node, n_parent, n_member, levels = _number_levels(m_rg == ROOT_UID, m_parent, m_kind)

    entry_of_node = members[np.concatenate(n_member)[1:]]
    node_names = ["", *map(names.__getitem__, entry_of_node.tolist())]
    ids = np.concatenate(([ROOT_UID], uid[entry_of_node]))
    kinds = np.concatenate(([Kind.ROOT], kind[entry_of_node])).astype(np.int8)
    node_shares = np.concatenate(([0.0], np.asarray(shares, dtype=float)[entry_of_node]))
    lost = members[m_node < 0]
    tree = ShareTree(
        mode=mode,
        names=node_names,
        ids=ids.astype(np.int64),
        kinds=kinds,
        parent=np.concatenate(n_parent).astype(np.int64),
        shares=node_shares,
        level=np.concatenate([np.full(len(lv), k) for k, lv in enumerate(levels)]).astype(np.int64),
        levels=levels,
        detached=_detached(lost, names, uid, rg, members[m_kind == Kind.GROUP]),
        source=np.concatenate(([-1], entry_of_node)).astype(np.int64),
        detached_source=lost.astype(np.int64),
    )
    if halflives is not None and len(entry_of_node):
        own = np.asarray(halflives, dtype=float)[entry_of_node]
        if np.count_nonzero(own):
            tree.halflife = np.concatenate(([0.0], own))
    _grid_columns(tree, entry_of_node, scopes, pooled)
    return tree


def _grid_columns(tree: ShareTree, entry_of_node: np.ndarray, scopes, pooled) -> None:
    """Set `tree.scope` and `tree.pooled` from the entries' columns, where any is set."""
    if not len(entry_of_node):
        return
    if scopes is not None:
        codes = np.array([SCOPE_CODES.get(s or "", 0) for s in scopes], dtype=np.int8)
        own = codes[entry_of_node]
        if np.count_nonzero(own):
            tree.scope = np.concatenate(([SCOPE_INHERIT], own)).astype(np.int8)
    if pooled is not None:
        flags = np.asarray([bool(p) for p in pooled], dtype=bool)[entry_of_node]
        if flags.any():
            tree.pooled = np.concatenate(([False], flags))


def _kinds(uid: np.ndarray, shflags: np.ndarray) -> np.ndarray:
    """Each entry's Kind (udb.rules.role_of, vectorised)."""
    kind = np.full(len(uid), Kind.USER, dtype=np.int8)
    kind[uid == IDLE_UID] = Kind.IDLE
    kind[(shflags & SHF_ACCOUNT) != 0] = Kind.ACCOUNT
    kind[(shflags & SHF_GROUP) != 0] = Kind.GROUP
    return kind


def _tree_nodes(kind: np.ndarray, names: Sequence[str], mode: str) -> np.ndarray:
    """Which entries are nodes in `mode` (udb.rules.in_tree, vectorised over the roles of
    TREE_ROLES; the few entries with an unknown name asked one by one)."""
    is_node = np.isin(kind, [Kind[r.upper()] for r in TREE_ROLES[mode]])
    for i in compress(range(len(names)), map(UNKNOWN_NAMES.__contains__, names)):
        is_node[i] = in_tree(Kind(int(kind[i])).label, names[i], mode)
    return is_node


def _parent_members(m_uid: np.ndarray, m_rg: np.ndarray, m_kind: np.ndarray) -> np.ndarray:
    """Each member's parent: a group member (its position in members), or -1 (the root,
    or no group has that uid)."""
    groups = np.flatnonzero(m_kind == Kind.GROUP)
    by_uid = groups[np.argsort(m_uid[groups], kind="stable")]
    sorted_uids = m_uid[by_uid]
    m_parent = np.full(len(m_uid), -1, dtype=np.int64)
    if len(by_uid):
        pos = np.minimum(np.searchsorted(sorted_uids, m_rg), len(sorted_uids) - 1)
        found = sorted_uids[pos] == m_rg
        m_parent[found] = by_uid[pos[found]]
    m_parent[m_rg == ROOT_UID] = -1
    return m_parent


def _number_levels(at_root: np.ndarray, m_parent: np.ndarray, m_kind: np.ndarray):
    """Number the members level by level, top down (a member is placed once its parent
    group is): (node of each member, -1 if never placed; each level's parent nodes; each
    level's members; each level's node numbers), the root's level first."""
    m_node = np.full(len(m_parent), -1, dtype=np.int64)
    n_parent, n_member = [np.array([-1])], [np.array([-1])]
    levels: list[np.ndarray] = [np.array([0], dtype=np.int64)]
    next_node = 1
    this = np.flatnonzero(at_root)
    parent_node = np.zeros(len(this), dtype=np.int64)
    while len(this):
        order = np.lexsort((this, parent_node))
        this, parent_node = this[order], parent_node[order]
        numbers = np.arange(next_node, next_node + len(this), dtype=np.int64)
        m_node[this] = numbers
        n_parent.append(parent_node)
        n_member.append(this)
        levels.append(numbers)
        next_node += len(this)
        # Children of this level's groups.
        placed_groups = this[m_kind[this] == Kind.GROUP]
        if not len(placed_groups):
            break
        mark = np.zeros(len(m_parent), dtype=bool)
        mark[placed_groups] = True
        cand = np.flatnonzero((m_parent >= 0) & (m_node < 0))
        this = cand[mark[m_parent[cand]]]
        parent_node = m_node[m_parent[this]]
    return m_node, n_parent, n_member, levels


def _detached(lost, names, uid, rg, group_entries) -> list[Detached]:
    """The Detached record of each entry in `lost`, its fault found by udb.rules."""
    if not len(lost):
        return []
    groups = dict(zip(uid[group_entries].tolist(), rg[group_entries].tolist(), strict=True))
    all_uids = set(uid.tolist())
    walk = walk_groups(groups, all_uids)
    out = []
    for e in lost.tolist():
        u, g = int(uid[e]), int(rg[e])
        where = place_entry(u, g, groups, walk, all_uids)
        out.append(Detached(names[e], u, g, where.fault_name))
    return out
