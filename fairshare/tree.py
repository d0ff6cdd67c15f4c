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

m_share (the guide's machine share, Kay-Lauder's m_share): from the root
down over active nodes only, m = m_parent x shares / (sum of the active
siblings' shares).  A group is active when any leaf below it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

import numpy as np

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
    _by_name: dict[str, int] = field(default_factory=dict, repr=False)
    _by_id: dict[int, int] = field(default_factory=dict, repr=False)

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

    def kind(self, node: int) -> Kind:
        return Kind(int(self.kinds[node]))

    @property
    def leaf_mask(self) -> np.ndarray:
        """True for nodes that can carry processes (users, accounts, Idle, unknown)."""
        return self.kinds >= Kind.USER

    def children(self) -> list[list[int]]:
        """Children of every node, each list sorted by name."""
        kids: list[list[int]] = [[] for _ in range(self.size)]
        for node in range(1, self.size):
            kids[self.parent[node]].append(node)
        for k in kids:
            k.sort(key=self.names.__getitem__)
        return kids

    def preorder(self, top: int = 0) -> list[int]:
        """Nodes of the subtree under `top` (itself first), depth first, siblings by name."""
        kids = self.children()
        out, stack = [], [top]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(kids[node]))
        return out

    def ancestors(self, node: int) -> list[int]:
        """The chain from `node`'s parent up to the root."""
        chain = []
        node = int(self.parent[node])
        while node >= 0:
            chain.append(node)
            node = int(self.parent[node])
        return chain

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
        """Each node's value plus the values of all its descendants."""
        total = np.asarray(values, dtype=float).copy()
        for lv in reversed(self.levels[1:]):
            np.add.at(total, self.parent[lv], total[lv])
        return total

    def m_shares(self, active_leaves: np.ndarray | None = None) -> np.ndarray:
        """Machine share of every node (fractions of the machine, 0 when inactive).

        `active_leaves` is a boolean mask over nodes; None means every leaf is
        active, which gives the static entitlement shrtree shows.  Active
        leaves' m_shares sum to 1 unless every active leaf has zero shares.
        """
        if active_leaves is None:
            active_leaves = self.leaf_mask
        active = self.active_nodes(active_leaves)
        weight = np.where(active, self.shares, 0.0)
        sums = np.bincount(self.parent[1:], weights=weight[1:], minlength=self.size)
        m = np.zeros(self.size)
        m[0] = 1.0
        for lv in self.levels[1:]:
            p = self.parent[lv]
            s = sums[p]
            m[lv] = np.divide(m[p] * weight[lv], s, out=np.zeros(len(lv)), where=s > 0)
        return m

    def group_shares(self) -> np.ndarray:
        """Each node's shares as a fraction of all its siblings' shares (static)."""
        sums = np.bincount(self.parent[1:], weights=self.shares[1:], minlength=self.size)
        s = sums[self.parent]
        g = np.divide(self.shares, s, out=np.zeros(self.size), where=s > 0)
        g[0] = 1.0
        return g


def build_tree(rows: Iterable[TreeRow], mode: str = "user") -> ShareTree:
    """The share tree of `rows` (UDB entries) in Share by User or Share by Account mode.

    Entries that cannot be reached from the root (their resgrp names no entry,
    names an entry that is not a group, or they sit on a cycle) are left out
    of the tree and listed in `detached`.
    """
    names, uids, resgrps, shares, shflags = [], [], [], [], []
    for r in rows:
        names.append(r.name)
        uids.append(r.uid)
        resgrps.append(r.resgrp)
        shares.append(r.shares)
        shflags.append(r.shflags)
    return build_tree_columns(names, uids, resgrps, shares, shflags, mode)


def build_tree_columns(
    names: Sequence[str],
    uids: Sequence[int],
    resgrps: Sequence[int],
    shares: Sequence[float],
    shflags: Sequence[int],
    mode: str = "user",
) -> ShareTree:
    """`build_tree` over entry columns (one list per field, entries in the same order).

    Vectorised: a level's nodes are found with a few numpy operations per level,
    so 100,000 entries take tens of milliseconds.  Nodes are numbered breadth
    first; within a level by parent node, then by the entries' order.  Which entries
    are nodes, and why one is detached, are udb.rules' (`in_tree`, `place_entry`).
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
    node_names = ["", *(names[i] for i in entry_of_node.tolist())]
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
    tree._by_name = dict(zip(node_names[1:], range(1, len(node_names)), strict=True))
    tree._by_id = dict(zip(ids[1:].tolist(), range(1, len(node_names)), strict=True))
    return tree


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
    for i, name in enumerate(names):
        if name in UNKNOWN_NAMES:
            is_node[i] = in_tree(Kind(int(kind[i])).label, name, mode)
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
